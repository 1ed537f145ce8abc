/* icd.h: what the files of the vgpud OpenCL ICD share. Nothing here is
 * exported from libvgpud-icd.so: the library is built with
 * -fvisibility=hidden and exports only the symbols ICD loaders look up,
 * clIcdGetPlatformIDsKHR, clGetExtensionFunctionAddress and
 * clGetPlatformInfo (platform.c). See docs/icd.md. */
#ifndef VGPUD_ICD_H
#define VGPUD_ICD_H

/* The dispatch table of cl_icd.h lists every entry up to OpenCL 3.0, and
 * the loader calls any of them, so the ICD is compiled against the 3.0
 * declarations to fill every entry with a function of the right type. The
 * platform and device report OpenCL 3.0, with the optional features a
 * vGPU offers. The deprecated 1.x entries are part of 3.0 and implemented
 * (or refused) like the others. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_0_APIS
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl_icd.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vgpu_abi.h"
#include "vgpu_icdproto.h"

#define VGPU_EXPORT __attribute__((visibility("default")))
#define VGPU_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* The platform: one per process, listed only when at least one device
 * passed discovery. Every ICD object starts with the dispatch pointer. */
struct _cl_platform_id {
	struct _cl_icd_dispatch *dispatch;
};

/* A vGPU, with what the queries need read once at discovery: from the
 * daemon's Hello reply (its device record), or, when no daemon answers,
 * from the registers of the PCI function in sysfs (root only; such a
 * device answers queries but cannot run anything: CL_DEVICE_AVAILABLE is
 * CL_FALSE and contexts on it fail with CL_DEVICE_NOT_AVAILABLE). */
struct _cl_device_id {
	struct _cl_icd_dispatch *dispatch;
	int daemon;        /* found through vgpu-icdd: usable */
	uint32_t index;    /* the daemon's device index */
	char sysfs[512];   /* the device's sysfs directory (sysfs discovery) */
	char bdf[64];      /* its PCI address, the directory's name */
	uint32_t version;  /* RegVersion, or the record's abi_version */
	uint32_t features;
	uint64_t mem_size;  /* RegMemSize */
	uint64_t max_alloc; /* RegMaxAlloc */
	uint32_t compute_units;
	uint32_t max_work_group;
	uint32_t max_ring_slots;
	char profile[VGPU_PROFILE_NAME_LEN + 1];
	char name[VGPU_DEVICE_NAME_LEN + 1];
};

/* Most vGPU functions one guest can see; more are ignored with a message. */
#define VGPU_MAX_DEVICES 64

/* dispatch.c */
extern struct _cl_icd_dispatch vgpu_dispatch;

/* platform.c */
extern struct _cl_platform_id vgpu_platform;
int vgpu_platform_valid(cl_platform_id p);

/* discover.c: the devices found, in order (the daemon's, or bus-address
 * order); the list is built once per process, on first use, and never
 * changes afterwards. */
cl_uint vgpu_devices(struct _cl_device_id **list);
int vgpu_device_valid(cl_device_id d);
/* device.c: how many of the devices *list holds a device_type selects
 * (clGetDeviceIDs, clCreateContextFromType), or CL_INVALID_DEVICE_TYPE.
 * A value with every bit of CL_DEVICE_TYPE_ALL set is ALL, so a 64-bit
 * all-ones value ((cl_device_type)-1, what OpenCV's ":ALL:" passes) is
 * accepted as PoCL accepts it. */
/* device.c: whether d reports double precision (its device-information
 * blob's CL_DEVICE_DOUBLE_FP_CONFIG is nonzero). */
int vgpu_device_has_fp64(const struct _cl_device_id *d);
cl_int vgpu_devices_of_type(cl_device_type device_type, struct _cl_device_id **list, cl_uint *n);
/* The socket path: VGPUD_ICD_SOCKET (secure_getenv) or the default. */
const char *vgpu_socket_path(void);

/* util.c: one line on stderr, prefixed "vgpud ICD: ". */
void vgpu_log(const char *fmt, ...) VGPU_PRINTF(1, 2);

/* util.c: query answers; copy n bytes from src to value as the OpenCL *Info
 * functions do (CL_INVALID_VALUE when value is not NULL and size < n). */
cl_int vgpu_info(const void *src, size_t n, size_t size, void *value, size_t *size_ret);
cl_int vgpu_info_str(const char *s, size_t size, void *value, size_t *size_ret);
uint64_t vgpu_now_ns(void); /* CLOCK_MONOTONIC, the clock of the daemon's timestamps */

/* ---- Objects (obj.c) ------------------------------------------------
 *
 * Every object an application can name starts with struct vgpu_obj, whose
 * first member is the loader's dispatch pointer. A handle is trusted only
 * after it is found in the registry (a set of the live objects' addresses
 * with their kind), so a made-up, foreign or released handle is refused
 * without being dereferenced.
 *
 * Two counts: refs is the application's (clRetain*, clRelease*, the
 * *_REFERENCE_COUNT queries); the handle leaves the registry when it
 * reaches 0. iref counts every holder, the application's refs together
 * counting as one; the object is destroyed when it reaches 0. A call
 * holds an iref on each object it uses, taken by vgpu_obj_get.
 *
 * Lock order: the registry lock is a leaf (nothing is called under it).
 * Each context has one lock, ctx->mu, that guards the connection and the
 * mutable state of every object of that context; it is re-entrant (an
 * owner and a depth) so that releasing an object under it may destroy
 * others. A thread that takes ctx->mu holds an iref on the context, so
 * the context itself is never destroyed under its own lock. Application
 * callbacks are never called with ctx->mu held: they are queued and run
 * when the outermost ctx_unlock releases the lock. */
enum vgpu_kind {
	VGPU_CONTEXT = 1,
	VGPU_QUEUE,
	VGPU_MEM,
	VGPU_PROGRAM,
	VGPU_KERNEL,
	VGPU_EVENT,
	VGPU_SAMPLER,
};

struct vgpu_obj {
	struct _cl_icd_dispatch *dispatch;
	enum vgpu_kind kind;
	cl_uint refs;          /* guarded by the registry lock */
	_Atomic unsigned iref; /* atomic */
};

void vgpu_obj_init(struct vgpu_obj *o, enum vgpu_kind kind);
/* Publish makes the handle valid (refs 1). */
void vgpu_obj_publish(struct vgpu_obj *o);
/* Get: the object behind handle if it is a live object of kind, with an
 * iref taken; NULL otherwise. */
void *vgpu_obj_get(const void *handle, enum vgpu_kind kind);
/* Retain: refs++ of a live handle; -1 if it is none. */
int vgpu_obj_retain(const void *handle, enum vgpu_kind kind);
/* Release: refs-- of a live handle; returns the object (with the iref the
 * application's refs held, which the caller must put) when refs reached
 * 0, the handle itself cast when it did not, NULL when it is no live
 * handle. *last says which. */
void *vgpu_obj_release(const void *handle, enum vgpu_kind kind, int *last);
cl_uint vgpu_obj_refs(const struct vgpu_obj *o);
static inline void vgpu_iref(struct vgpu_obj *o)
{
	o->iref++;
}
/* Put drops an iref and destroys the object at 0. Objects of a context
 * other than the context itself may be put with or without ctx->mu. */
void vgpu_put(struct vgpu_obj *o);
/* The clRetain* and clRelease* entries of every kind: CL_SUCCESS, or
 * invalid (the kind's CL_INVALID_* error) when handle is no live object
 * of kind. When the application's last reference goes, vgpu_release
 * hands the object (with the iref those references held) to last, which
 * must put it: vgpu_put, vgpu_put_locked or a kind's own. */
cl_int vgpu_retain(const void *handle, enum vgpu_kind kind, cl_int invalid);
cl_int vgpu_release(const void *handle, enum vgpu_kind kind, cl_int invalid, void (*last)(struct vgpu_obj *));
/* Put an object of a context (not a context) with the context's lock
 * held: ENTER, put, LEAVE. */
void vgpu_put_locked(struct vgpu_obj *o);
#define GET(h, k) vgpu_obj_get((h), (k))
#define PUT(p) vgpu_put(&(p)->obj)
#define IREF(p) vgpu_iref(&(p)->obj)

/* An arena range: the arena's protocol id (its index + 1: ids are
 * nonzero) and offset; len 0 means none. */
struct vgpu_range {
	uint32_t arena;
	uint64_t off;
	uint64_t len;
};

struct vgpu_arena {
	uint8_t *base;
	uint64_t size;
	struct vgpu_free *free; /* free blocks, by offset */
};

/* A deferred application callback (run when ctx->mu is released). */
struct vgpu_deferred {
	struct vgpu_deferred *next;
	int what; /* DEFER_EVENT, DEFER_MEM */
	void *obj; /* an iref is held */
	void (*fn)(void);
	void *data;
	cl_int status;
};

#define VGPU_EVENT_BUCKETS 4096

/* A context's destructor callback (clSetContextDestructorCallback). */
struct vgpu_ctxcb {
	struct vgpu_ctxcb *next;
	void(CL_CALLBACK *fn)(cl_context, void *);
	void *data;
};

struct _cl_context {
	struct vgpu_obj obj;
	cl_device_id dev;
	cl_context_properties props[5]; /* as given: at most two pairs and the 0 */
	size_t nprops; /* entries in props, the 0 included; 0 when none given */
	void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *);
	void *notify_data;

	pthread_mutex_t mu;
	pthread_t owner; /* holder of mu, while depth > 0 */
	int depth;
	pthread_cond_t cv; /* commands submitted or completed, user events set */

	/* The connection (conn.c), all guarded by mu. */
	int fd;
	pid_t pid; /* the process that connected: after fork the child does not use it */
	int lost;  /* the connection failed; everything fails with CL_OUT_OF_RESOURCES */
	int need_flush;
	uint64_t next_req;
	uint64_t next_event;
	uint32_t next_buffer;
	uint32_t next_program;
	uint32_t null_buffer; /* the stand-in for NULL buffer arguments, 0 until made */
	uint32_t printf_buffer; /* where kernels' printf output lands (kernel.c), 0 until made */
	uint8_t *rbuf; /* VGPU_ICDP_MAX_MESSAGE bytes for replies */
	uint32_t proto;  /* the protocol version the daemon answered */
	uint8_t *queue;  /* the submission queue's mapping, or NULL (conn.c) */
	uint64_t qsize;  /* its data area's bytes */
	uint64_t qtail;  /* bytes written into it, in all */
	unsigned narenas;
	struct vgpu_arena arenas[16];
	uint64_t arena_mapped; /* arena bytes that mappings hold (mem.c) */
	struct _cl_event *pend_head, *pend_tail; /* sent, not reported, in order */
	unsigned npending;
	unsigned sends_since_poll;
	struct _cl_event *bucket[VGPU_EVENT_BUCKETS]; /* pending, by event id */
	struct _cl_command_queue *queues;
	struct vgpu_deferred *deferred, **deferred_tail;
	struct vgpu_ctxcb *dtors; /* last registered first: the order they run in */
	int progress_running; /* the callback progress thread (event.c) */
	unsigned ncallback_events;
};

struct _cl_command_queue {
	struct vgpu_obj obj;
	cl_context ctx;
	cl_device_id dev;
	cl_command_queue_properties props;
	cl_queue_properties props_array[3]; /* clCreateCommandQueueWithProperties' list, 0-terminated */
	size_t nprops_array;                /* its entries, the 0 included; 0 when none was given */
	struct _cl_event *held_head, *held_tail; /* commands held back in the ICD */
	struct _cl_command_queue *next;          /* in ctx->queues */
};

/* A mapping of a buffer (clEnqueueMapBuffer) or of an image's region
 * (clEnqueueMapImage: rect set, its rows at ptr with the pitches given). */
struct vgpu_map {
	struct vgpu_map *next;
	void *ptr;
	size_t offset, size;
	cl_map_flags flags;
	struct vgpu_range r; /* where the mapping lives in the arena (len 0 when not there) */
	struct vgpu_hostmem *hm; /* else its own host memory (NULL with USE_HOST_PTR) */
	int rect;
	size_t origin[3], region[3]; /* in pixels */
	size_t row_pitch, slice_pitch;
};

/* An image (image.c): its pixels live packed in the buffer of its
 * _cl_mem, rows of width pixels without padding (docs/ABI.md "Images"). */
struct vgpu_image {
	cl_mem_object_type type;
	cl_image_format format;
	cl_image_desc desc; /* as created; pitches are the host's (0 without a host pointer) */
	size_t elem;        /* bytes per pixel */
	size_t extent[3];   /* width, rows (height or layers of a 1D array), slices (depth or layers) */
	size_t row, slice;  /* the packed pitches in the buffer */
};

struct vgpu_memcb {
	struct vgpu_memcb *next;
	void(CL_CALLBACK *fn)(cl_mem, void *);
	void *data;
};

struct _cl_mem {
	struct vgpu_obj obj;
	cl_context ctx;
	cl_mem_flags flags;
	size_t size;
	void *host_ptr;
	uint32_t id;   /* the daemon's buffer (the parent's for a sub-buffer) */
	cl_mem parent; /* a sub-buffer's buffer (an iref is held) */
	size_t origin; /* a sub-buffer's offset in it */
	cl_uint map_count;
	struct vgpu_map *maps;
	struct vgpu_memcb *dtors;
	int with_props; /* made by clCreateBufferWithProperties with an empty list */
	struct vgpu_image *image; /* an image's description (&image_of); NULL for a buffer */
	struct vgpu_image image_of;
};

/* A sampler (image.c): its properties, which a launch passes by value. */
struct _cl_sampler {
	struct vgpu_obj obj;
	cl_context ctx;
	cl_bool normalized;
	cl_addressing_mode addressing;
	cl_filter_mode filter;
	cl_sampler_properties props[7]; /* as given to clCreateSamplerWithProperties, 0-terminated */
	size_t nprops;                  /* its entries, the 0 included; 0 when none was given */
};

/* What the program-information blob says of one kernel. */
struct vgpu_karg_info {
	cl_uint address, access;
	cl_bitfield type_qual;
	char type_name[VGPU_ARG_INFO_NAME_LEN];
	char name[VGPU_ARG_INFO_NAME_LEN];
	size_t scalar_size; /* the size of a scalar argument's type, 0 when unknown */
};

struct vgpu_kinfo {
	char name[VGPU_KERNEL_NAME_LEN];
	cl_uint num_args;
	size_t work_group_size, preferred_multiple;
	cl_ulong local_mem, private_mem;
	size_t compile_wg[3];
	struct vgpu_karg_info *args;
};

/* A specialization constant of a SPIR-V program: its SpecId and value. */
struct vgpu_spec {
	uint32_t id;
	uint32_t size;
	uint64_t value;
};

struct _cl_program {
	struct vgpu_obj obj;
	cl_context ctx;
	char *source; /* as given, NUL-terminated; NULL for a binary; a SPIR-V module's bytes where il */
	int il;       /* made from a SPIR-V module (clCreateProgramWithIL): source and built_src hold it */
	struct vgpu_spec *specs; /* specialization constants set (clSetProgramSpecializationConstant) */
	cl_uint nspecs;
	size_t source_len;
	int from_binary;
	char *built_src; /* what the device compiles: includes inlined (a binary's source) */
	size_t built_len;
	char *built_opts; /* options passed to the device */
	char *options;    /* the options of the last build, as given */
	cl_build_status status;
	cl_program_binary_type bintype;
	char *log;
	uint32_t id; /* the daemon's program, 0 when none */
	struct vgpu_kinfo *kernels;
	cl_uint nkernels;
	cl_uint nkernel_objs; /* kernels created from it that are alive */
	char *kernel_names;   /* "a;b;c" */
	const char *printf_src; /* the built_src prints was computed for */
	int prints;             /* built_src calls printf (kernel.c) */
};

#define VGPU_MAX_SCALAR VGPU_MAX_SCALAR_SIZE

struct vgpu_karg {
	int set;
	uint32_t kind; /* VGPU_ARG_* */
	uint32_t size;
	cl_mem mem; /* a buffer or image argument (no reference: OpenCL's clSetKernelArg does not retain) */
	uint8_t bytes[VGPU_MAX_SCALAR]; /* a scalar's; a sampler's packed value (8 bytes) */
};

struct _cl_kernel {
	struct vgpu_obj obj;
	cl_context ctx;
	cl_program prog; /* an iref is held */
	const struct vgpu_kinfo *ki;
	struct vgpu_karg *args;
};

/* Bounded arenas. Every byte a transfer moves between the application's
 * memory and a buffer is staged in the context's arena, in chunks of at
 * most VGPU_CHUNK bytes, one Write or Read request (or one per row of a
 * rectangle) each; a chunk's range is reused once its request completes.
 * The arena is VGPU_ARENA_CAP bytes, the most arena memory a context ever
 * has: the bound on the memory the ICD adds to a process's own for data.
 * A larger transfer waits for its earlier chunks to complete (an enqueue
 * may block for that). See docs/icd.md "How it works". */
#define VGPU_ARENA_CAP (64ull << 20)
#define VGPU_CHUNK (8ull << 20)
/* The first VGPU_ARENA_KEEP bytes of the arena stay resident once touched:
 * the allocator is first fit, so a program that moves the same sizes over
 * and over reuses them, and neither it nor the daemon takes a page fault
 * (and a zeroed page) per page per transfer. Freed pages beyond it are
 * given back. */
#define VGPU_ARENA_KEEP (16ull << 20)

/* A contiguous piece of a transfer: bytes at dev_off of the daemon's
 * buffer and at host in the application's memory. */
struct vgpu_seg {
	uint64_t dev_off;
	uint8_t *host;
	uint64_t len;
};

/* A transfer staged through the arena when its command is sent (event.c):
 * the pieces in order, and how far sending has come. */
struct vgpu_xfer {
	int write; /* host to buffer (Write), else Read */
	uint32_t buffer;
	struct vgpu_seg *segs;
	size_t nsegs;
	size_t seg;    /* the piece being sent */
	uint64_t pos;  /* bytes of it sent */
	uint64_t left; /* bytes not sent, all pieces */
};

/* Host memory of a mapping that does not live in the arena (mem.c),
 * unmapped when the last holder (the mapping, the commands that copy into
 * or out of it) lets go. Guarded by ctx->mu. */
struct vgpu_hostmem {
	void *p;
	size_t len;
	unsigned refs;
};
void vgpu_hostmem_put(struct vgpu_hostmem *h);
/* A mapping's host memory of len bytes (refs 1), or NULL. */
struct vgpu_hostmem *vgpu_hostmem_new(size_t len);

struct vgpu_evcb {
	struct vgpu_evcb *next;
	cl_int type;
	void(CL_CALLBACK *fn)(cl_event, cl_int, void *);
	void *data;
};

struct _cl_event {
	struct vgpu_obj obj;
	cl_context ctx;         /* an iref is held */
	cl_command_queue queue; /* an iref is held; NULL for a user event */
	cl_command_type type;
	cl_int status; /* CL_QUEUED, CL_SUBMITTED, CL_COMPLETE or an error */
	int sent;      /* the request went to the daemon */
	uint64_t id;   /* the daemon's event id */
	uint64_t t_queued, t_submit, t_start, t_end;

	/* A command held back: its request and what it waits for. */
	uint8_t *msg;
	size_t msg_len;
	cl_event *wait;
	cl_uint nwait;
	struct _cl_event *held_next;
	cl_mem *mems; /* objects the request names, kept until it is sent */
	cl_uint nmems;

	/* In ctx's pending list and hash while sent and not reported. */
	struct _cl_event *pnext, *pprev, *hnext;
	int pending;

	/* On completion: copy out of the arena (a read: copy_src's bytes to
	 * the pieces of out, in order), free ranges. */
	struct vgpu_seg *out;
	size_t nout;
	struct vgpu_range copy_src;
	struct vgpu_range free1, free2;
	struct vgpu_hostmem *hm; /* host memory the command uses, a reference held */

	/* A staged transfer (sent in chunks when the command is sent). Every
	 * chunk but the last is an internal event of its own (parent: the
	 * command, an iref held), on the command's list chunks until it
	 * completes; the last chunk is the command's own request. The
	 * command completes after its chunks, with the first error of one,
	 * and its profiling start is the first chunk's. */
	struct vgpu_xfer *xfer;
	struct _cl_event *parent, *chunks, *chunk_next;
	cl_int chunk_err;
	int have_first;
	uint64_t t_first_submit, t_first_start;

	struct vgpu_evcb *cbs;
	int in_progress_list;
	int printout; /* a read of the printf buffer: copy_src is printed on completion */
};

/* ---- conn.c: the connection to vgpu-icdd --------------------------- */
/* Connect, Hello, attach the first arena. 0, or a CL error. */
cl_int vgpu_conn_open(cl_context ctx);
void vgpu_conn_close(cl_context ctx);
/* Hello on a fresh connection for discovery: fills devices, returns the
 * count, or -1 when there is no daemon. */
int vgpu_conn_discover(struct _cl_device_id *devs, int max);
/* A new connection to vgpu-icdd (close-on-exec), whose sends and receives
 * give up after timeout_s seconds when it is positive; -1 with errno. */
int vgpu_dial(int timeout_s);
/* One request and its reply on a connection of the caller's own (not a
 * context's): reads the reply into buf (VGPU_ICDP_MAX_MESSAGE bytes) and
 * returns its length once it is msg's (op | reply bit, the same id), -2
 * when the daemon answered with an Error, or -1. */
long vgpu_call_fd(int fd, const void *msg, size_t len, uint8_t *buf);
/* Hello on such a connection: 0 with the reply (at least its head) in buf
 * and its length in *n, or -1. */
int vgpu_hello(int fd, uint8_t *buf, long *n);
/* Hello at the newest version, else (an older daemon) on a new connection
 * in *fd at the oldest: 0 as vgpu_hello, or -1 (*fd may then be -1). */
int vgpu_hello_newest(int *fd, int timeout_s, uint8_t *buf, long *n);
void ctx_lock(cl_context ctx);
void ctx_unlock(cl_context ctx);
void ctx_wait(cl_context ctx); /* on ctx->cv; only at depth 1 */
/* Enter and leave a context's lock in an entry, holding an iref on the
 * context in between (so it outlives its own lock; see "Objects"). */
#define ENTER(ctx)                                                                                           \
	do {                                                                                                 \
		IREF(ctx);                                                                                   \
		ctx_lock(ctx);                                                                               \
	} while (0)
#define LEAVE(ctx)                                                                                           \
	do {                                                                                                 \
		ctx_unlock(ctx);                                                                             \
		PUT(ctx);                                                                                    \
	} while (0)
/* ENTER_OBJ is an entry's prologue: var (of type T) is handle h's object
 * of kind k, or the entry returns invalid; ctx is var's context, entered.
 * The entry ends with PUT(var) and LEAVE(ctx). */
#define ENTER_OBJ(T, var, h, k, invalid)                                                                     \
	T var = GET(h, k);                                                                                   \
	if (var == NULL)                                                                                     \
		return invalid;                                                                              \
	cl_context ctx = var->ctx;                                                                           \
	ENTER(ctx)
/* Usable: locked, not lost, the process that connected. */
int conn_ok(cl_context ctx);
/* Send a request without a reply; 0, or -1 (the connection is lost). */
int conn_send(cl_context ctx, void *msg, size_t len);
/* Send a request with a reply and receive it; reply gets at most cap bytes.
 * Returns the reply's length, or -1. */
long conn_call(cl_context ctx, void *msg, size_t len, void *reply, size_t cap);
uint64_t conn_req_id(cl_context ctx);
void conn_hdr(cl_context ctx, void *msg, uint16_t op, size_t len);
/* Arena memory. 0, or CL_OUT_OF_HOST_MEMORY / CL_OUT_OF_RESOURCES. */
cl_int arena_alloc(cl_context ctx, uint64_t n, struct vgpu_range *r);
void arena_free(cl_context ctx, struct vgpu_range *r);
static inline void *arena_ptr(cl_context ctx, const struct vgpu_range *r)
{
	return ctx->arenas[r->arena - 1].base + r->off;
}
void conn_lost(cl_context ctx, const char *why);

/* ---- event.c ------------------------------------------------------- */
/* A new command event (not published) for q; the caller fills the request. */
struct _cl_event *vgpu_event_new(cl_context ctx, cl_command_queue q, cl_command_type type);
/* Check an event wait list (OpenCL's rules); CL_SUCCESS or the error. */
cl_int vgpu_check_wait_list(cl_context ctx, cl_uint n, const cl_event *list);
/* Submit ev: send it, or hold it back behind the wait list and the queue.
 * Takes ownership of ev's msg. The command's own reference to ev is kept
 * until it completes. Then, when blocking, wait for it; when out is not
 * NULL, publish ev there. Returns CL_SUCCESS or the error of a blocking
 * command (CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST...). */
cl_int vgpu_submit(struct _cl_event *ev, cl_uint nwait, const cl_event *wait, int blocking, cl_event *out);
/* Wait until every event is complete (ctx locked, depth 1). */
cl_int vgpu_wait_events(cl_context ctx, cl_uint n, struct _cl_event *const *evs);
/* Ask the daemon about events (Wait or Poll) and complete what it reports. */
int vgpu_ask(cl_context ctx, uint16_t op, cl_uint n, struct _cl_event *const *evs);
/* Complete ev with a daemon status (or a CL error when cl_err). */
void vgpu_event_done(struct _cl_event *ev, cl_int cl_status, const void *rec);
void vgpu_release_held(cl_context ctx);
void vgpu_fail_all(cl_context ctx);
cl_int vgpu_queue_finish(cl_command_queue q);
void vgpu_defer(cl_context ctx, int what, void *obj, void (*fn)(void), void *data, cl_int status);
void vgpu_run_deferred(cl_context ctx);
#define DEFER_EVENT 1
#define DEFER_MEM 2
#define DEFER_FREE 3

uint32_t vgpu_null_buffer(cl_context ctx);
/* kernel.c: printf output (docs/icd.md "printf"). The printf buffer's
 * size: OpenCL's minimum CL_DEVICE_PRINTF_BUFFER_SIZE for a full profile,
 * after the device's header. */
#define VGPU_PRINTF_BYTES (1u << 20)
uint32_t vgpu_printf_buffer(cl_context ctx);
int vgpu_printf_ok(const struct _cl_device_id *dev);
void vgpu_printout(const uint8_t *b, uint64_t n);

/* ---- mem.c's enqueue helpers, shared with image.c ------------------ */

/* An enqueue in progress: the queue, its context, locked. */
struct enq {
	cl_command_queue q;
	cl_context ctx;
};
cl_int enq_begin(struct enq *e, cl_command_queue queue, cl_uint nwait, const cl_event *wait);
cl_int enq_end(struct enq *e, cl_int err);
/* A memory object of the queue's context, with a reference: a buffer
 * (get_mem), an image (get_image), either (get_any_mem). */
cl_int get_mem(struct enq *e, cl_mem h, cl_mem *out);
cl_int get_image(struct enq *e, cl_mem h, cl_mem *out);
cl_int get_any_mem(struct enq *e, cl_mem h, cl_mem *out);
cl_int enq_marker(struct enq *e, cl_command_type type, cl_uint nwait, const cl_event *wait, int blocking,
		  cl_event *event);
/* A staged transfer of nseg pieces between the application's memory and
 * m (to m when write); each piece set with xfer_seg. */
struct _cl_event *new_xfer(cl_context ctx, cl_command_queue q, cl_command_type type, cl_mem m, int write,
			   size_t nseg);
void xfer_seg(struct _cl_event *ev, size_t i, uint64_t dev_off, const void *host, uint64_t len);
cl_int mem_check_flags(cl_mem_flags f);
/* mem.c: a memory object on buffer m (which it holds an iref of) at
 * origin, of size bytes: a sub-buffer, or an image made from a buffer
 * once the caller sets its image. Its flags inherit m's as OpenCL says
 * for both; NULL with *err set (CL_INVALID_VALUE for flags m forbids).
 * Not yet published. */
cl_mem vgpu_mem_derive(cl_mem m, cl_mem_flags flags, size_t origin, size_t size, cl_int *err);
cl_int map_check(const struct _cl_mem *m, cl_map_flags flags);
cl_mem mem_create(cl_context context, int with_props, cl_int props_err, cl_mem_flags flags, size_t size,
		  void *host_ptr, cl_int *errcode_ret);
/* One side of a copy or fill by rows: a buffer's bytes from base, with
 * row and slice strides. */
struct vgpu_side {
	cl_mem m;
	size_t base, row, slice;
};
/* A command event whose message is one request (op, one bytes with its
 * header) per row of region (rowlen bytes, rows by slices), made by req,
 * or fewer where the rows lie contiguous on every side (d may be NULL);
 * only the last request carries the event's id. */
cl_int vgpu_rows_cmd(struct enq *e, cl_command_type type, uint16_t op, size_t one, const struct vgpu_side *s,
		     const struct vgpu_side *d, size_t rowlen, const size_t *region,
		     void (*req)(void *body, const struct vgpu_side *s, const struct vgpu_side *d, size_t so, size_t dof,
				 size_t len, uint64_t event, const void *arg),
		     const void *arg, cl_uint n, const cl_event *wl, cl_event *event);
cl_int vgpu_copy_rows(struct enq *e, cl_command_type type, const struct vgpu_side *s, const struct vgpu_side *d,
		      size_t rowlen, const size_t *region, cl_uint n, const cl_event *wl, cl_event *event);
/* image.c: the write that an unmap of an image mapping sends. */
cl_int vgpu_image_unmap(struct enq *e, cl_mem m, struct vgpu_map *map, cl_uint nwait, const cl_event *wait,
			cl_event *event);
/* image.c: a launch's image descriptor, its buffer the daemon's id. */
void vgpu_image_desc(const struct _cl_mem *m, struct vgpu_image_desc *d);
/* device.c: the device's image section and formats, NULL without images. */
const struct vgpu_image_info *vgpu_device_images(const struct _cl_device_id *d, const struct vgpu_image_format **formats);
/* device.c: the widest image made from a buffer (pixels) and, where
 * formats and count are not NULL, the formats of such images (version-4
 * blob, abi 1.10); 0 without them. */
uint64_t vgpu_device_image_buffers(const struct _cl_device_id *d, const struct vgpu_image_format **formats,
				   uint32_t *count);
/* vgpu_device_il: whether d builds SPIR-V modules of versions 1.0 to 1.2
 * (abi 1.9: its device-information blob's il word, through vgpu-icdd of
 * protocol 5). */
int vgpu_device_il(const struct _cl_device_id *d);
/* Images' parameter types (image.c): VGPU_PARAM_IMAGE for an image type
 * other than image1d_buffer_t (VGPU_PARAM_IMAGE_BUFFER), VGPU_PARAM_SAMPLER
 * for sampler_t, 0 otherwise. */
int vgpu_image_type_name(const char *type_name);
enum { VGPU_PARAM_IMAGE = 1, VGPU_PARAM_SAMPLER = 2, VGPU_PARAM_IMAGE_BUFFER = 3 };

/* Destructors, by kind (obj.c calls them). */
void vgpu_context_destroy(cl_context ctx);
void vgpu_queue_destroy(cl_command_queue q);
void vgpu_mem_destroy(cl_mem m);
void vgpu_program_destroy(cl_program p);
void vgpu_kernel_destroy(cl_kernel k);
void vgpu_event_destroy(cl_event e);
void vgpu_sampler_destroy(cl_sampler s);

/* Errors of the daemon's statuses. */
cl_int vgpu_status_error(uint32_t status, cl_command_type type);
void vgpu_context_notify(cl_context ctx, const char *fmt, ...) VGPU_PRINTF(2, 3);

/* util.c: the n bytes at s as a NUL-terminated string (malloc), or NULL. */
char *vgpu_strndup(const char *s, size_t n);

/* The entries, declared with the dispatch table's own types (cl_icd.h), so
 * that each definition is checked against it. */
#define VGPU_ENTRY(name) extern __typeof__(*(cl_api_##name)0) vgpu_##name;
#define VGPU_ENTRIES(X)                                                                                      \
	X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetExtensionFunctionAddressForPlatform)                 \
	X(clUnloadCompiler) X(clUnloadPlatformCompiler) X(clGetDeviceIDs) X(clGetDeviceInfo)                 \
	X(clRetainDevice) X(clReleaseDevice) X(clCreateSubDevices)                                           \
	X(clCreateContext) X(clCreateContextFromType) X(clRetainContext) X(clReleaseContext)                 \
	X(clGetContextInfo) X(clCreateCommandQueue) X(clRetainCommandQueue) X(clReleaseCommandQueue)         \
	X(clGetCommandQueueInfo) X(clSetCommandQueueProperty) X(clFlush) X(clFinish)                         \
	X(clCreateBuffer) X(clCreateSubBuffer) X(clRetainMemObject) X(clReleaseMemObject)                    \
	X(clGetMemObjectInfo) X(clSetMemObjectDestructorCallback) X(clEnqueueReadBuffer)                     \
	X(clEnqueueWriteBuffer) X(clEnqueueCopyBuffer) X(clEnqueueFillBuffer) X(clEnqueueMapBuffer)          \
	X(clEnqueueUnmapMemObject) X(clEnqueueMigrateMemObjects) X(clEnqueueReadBufferRect)                  \
	X(clEnqueueWriteBufferRect) X(clEnqueueCopyBufferRect)                                               \
	X(clCreateImage) X(clCreateImage2D) X(clCreateImage3D) X(clGetSupportedImageFormats)                 \
	X(clGetImageInfo) X(clEnqueueReadImage) X(clEnqueueWriteImage) X(clEnqueueCopyImage)                 \
	X(clEnqueueCopyImageToBuffer) X(clEnqueueCopyBufferToImage) X(clEnqueueMapImage)                     \
	X(clEnqueueFillImage) X(clCreateSampler) X(clRetainSampler) X(clReleaseSampler) X(clGetSamplerInfo)  \
	X(clCreateProgramWithSource) X(clCreateProgramWithBinary) X(clCreateProgramWithBuiltInKernels)       \
	X(clRetainProgram) X(clReleaseProgram) X(clBuildProgram) X(clCompileProgram) X(clLinkProgram)        \
	X(clGetProgramInfo) X(clGetProgramBuildInfo)                                                         \
	X(clCreateKernel) X(clCreateKernelsInProgram) X(clRetainKernel) X(clReleaseKernel)                   \
	X(clSetKernelArg) X(clGetKernelInfo) X(clGetKernelArgInfo) X(clGetKernelWorkGroupInfo)               \
	X(clEnqueueNDRangeKernel) X(clEnqueueTask) X(clEnqueueNativeKernel)                                  \
	X(clWaitForEvents) X(clGetEventInfo) X(clRetainEvent) X(clReleaseEvent)                              \
	X(clGetEventProfilingInfo) X(clSetEventCallback) X(clCreateUserEvent) X(clSetUserEventStatus)        \
	X(clEnqueueMarker) X(clEnqueueWaitForEvents) X(clEnqueueBarrier) X(clEnqueueMarkerWithWaitList)      \
	X(clEnqueueBarrierWithWaitList) X(clCreateCommandQueueWithProperties) X(clSetContextDestructorCallback) \
	X(clCreateBufferWithProperties) X(clCloneKernel) X(clCreateSamplerWithProperties)                    \
	X(clCreateImageWithProperties) X(clCreateProgramWithIL) X(clSetProgramSpecializationConstant)
VGPU_ENTRIES(VGPU_ENTRY)

#endif /* VGPUD_ICD_H */

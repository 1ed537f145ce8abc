/* mem.c: buffers, sub-buffers, transfers, maps; and the image and sampler
 * entries, which the device does not support (CL_DEVICE_IMAGE_SUPPORT is
 * CL_FALSE), answered as OpenCL 1.2 says for such a device.
 *
 * A buffer is a daemon buffer on the context's device. Data moves through
 * the context's arena (at most VGPU_ARENA_CAP bytes), in chunks of at most
 * VGPU_CHUNK bytes, when the command is sent (event.c, send_xfer): a write
 * copies the application's bytes into arena ranges as it sends them (a
 * command sent at once has copied everything when the call returns, so a
 * blocking one without an event returns then, not waiting for the device
 * (event.c, vgpu_submit); one
 * held back reads the application's memory when it is sent, which 1.2
 * allows: the memory of a non-blocking write is the command's until it
 * completes), a read lands in arena ranges and each chunk is copied to the
 * application's memory when the ICD learns it completed (the last before
 * clWaitForEvents, clFinish or a blocking read returns, and before a
 * callback or status query reports CL_COMPLETE). A small mapping lives in
 * the arena; a large one (more than VGPU_CHUNK bytes, or when mappings
 * hold a quarter of the arena already) in host memory of its own, read
 * into and written from in chunks; with CL_MEM_USE_HOST_PTR, it is the
 * application's memory: read back there on map and written from there on
 * unmap, as 1.2 requires.
 *
 * A sub-buffer is its buffer's daemon buffer at an offset: reads, writes,
 * copies, fills and maps of it work. As a kernel argument it needs a
 * device address at that offset, which the device ABI cannot express; see
 * kernel.c. */
#define _GNU_SOURCE
#include "icd.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ACCESS_FLAGS (CL_MEM_READ_WRITE | CL_MEM_WRITE_ONLY | CL_MEM_READ_ONLY)
#define HOSTPTR_FLAGS (CL_MEM_USE_HOST_PTR | CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR)
#define HOSTACC_FLAGS (CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS)
#define ALL_FLAGS (ACCESS_FLAGS | HOSTPTR_FLAGS | HOSTACC_FLAGS)

/* Sub-buffer origins must be multiples of CL_DEVICE_MEM_BASE_ADDR_ALIGN
 * (device.c reports 1024 bits). */
#define BASE_ALIGN 128

static int one_bit_at_most(cl_mem_flags f)
{
	return (f & (f - 1)) == 0;
}

cl_int mem_check_flags(cl_mem_flags f)
{
	if ((f & ~(cl_mem_flags)ALL_FLAGS) != 0 || !one_bit_at_most(f & ACCESS_FLAGS) ||
	    !one_bit_at_most(f & HOSTACC_FLAGS) ||
	    ((f & CL_MEM_USE_HOST_PTR) && (f & (CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR))))
		return CL_INVALID_VALUE;
	return CL_SUCCESS;
}

struct vgpu_hostmem *vgpu_hostmem_new(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vgpu_hostmem *h = p != MAP_FAILED ? calloc(1, sizeof *h) : NULL;
	if (h == NULL) {
		if (p != MAP_FAILED)
			munmap(p, len);
		return NULL;
	}
	*h = (struct vgpu_hostmem){.p = p, .len = len, .refs = 1};
	return h;
}

/* map_check checks a mapping's flags against m's: CL_INVALID_VALUE for
 * unknown or contradictory flags, CL_INVALID_OPERATION where m's host
 * access forbids the read or write they ask for. */
cl_int map_check(const struct _cl_mem *m, cl_map_flags flags)
{
	const cl_map_flags all = CL_MAP_READ | CL_MAP_WRITE | CL_MAP_WRITE_INVALIDATE_REGION;
	if ((flags & ~all) != 0 || ((flags & CL_MAP_WRITE_INVALIDATE_REGION) && (flags & (CL_MAP_READ | CL_MAP_WRITE))))
		return CL_INVALID_VALUE;
	if (((flags & CL_MAP_READ) && (m->flags & (CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_NO_ACCESS))) ||
	    ((flags & (CL_MAP_WRITE | CL_MAP_WRITE_INVALIDATE_REGION)) &&
	     (m->flags & (CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS))))
		return CL_INVALID_OPERATION;
	return CL_SUCCESS;
}

void vgpu_hostmem_put(struct vgpu_hostmem *h)
{
	if (--h->refs > 0)
		return;
	munmap(h->p, h->len);
	free(h);
}

/* new_xfer: a command event for a transfer of nsegs pieces (xfer_seg
 * fills them), staged through the arena when it is sent; the buffer is
 * kept alive until then. */
struct _cl_event *new_xfer(cl_context ctx, cl_command_queue q, cl_command_type type, cl_mem m, int write,
			   size_t nsegs)
{
	struct _cl_event *ev = vgpu_event_new(ctx, q, type);
	if (ev == NULL)
		return NULL;
	ev->xfer = calloc(1, sizeof *ev->xfer);
	ev->mems = calloc(1, sizeof *ev->mems);
	if (ev->xfer == NULL || ev->mems == NULL || (ev->xfer->segs = calloc(nsegs, sizeof *ev->xfer->segs)) == NULL) {
		vgpu_event_done(ev, CL_OUT_OF_HOST_MEMORY, NULL);
		return NULL;
	}
	ev->xfer->write = write;
	ev->xfer->buffer = m->id;
	ev->xfer->nsegs = nsegs;
	IREF(m);
	ev->mems[ev->nmems++] = m;
	return ev;
}

void xfer_seg(struct _cl_event *ev, size_t i, uint64_t dev_off, const void *host, uint64_t len)
{
	ev->xfer->segs[i] = (struct vgpu_seg){.dev_off = dev_off, .host = (uint8_t *)host, .len = len};
	ev->xfer->left += len;
}

/* create_device_buffer sends BufferCreate for id and waits for it, so that
 * a failure is the caller's error and no later request names a buffer the
 * daemon refused. */
static cl_int create_device_buffer(cl_context ctx, uint32_t id, size_t size, cl_mem_flags flags)
{
	struct {
		struct vgpu_icdp_header h;
		struct vgpu_icdp_buffer_create b;
	} *c = calloc(1, sizeof *c);
	struct _cl_event *ev = c != NULL ? vgpu_event_new(ctx, NULL, 0) : NULL;
	if (ev == NULL) {
		free(c);
		return CL_OUT_OF_HOST_MEMORY;
	}
	conn_hdr(ctx, c, VGPU_ICDP_OP_BUFFER_CREATE, sizeof *c);
	c->b.device = ctx->dev->index;
	c->b.buffer = id;
	c->b.size = size;
	c->b.flags = (flags & CL_MEM_READ_ONLY) ? VGPU_BUFFER_READ_ONLY
		     : (flags & CL_MEM_WRITE_ONLY) ? VGPU_BUFFER_WRITE_ONLY
						    : 0;
	c->b.event = ev->id;
	ev->msg = (uint8_t *)c;
	ev->msg_len = sizeof *c;
	IREF(ev);
	vgpu_submit(ev, 0, NULL, 1, NULL);
	cl_int st = ev->status;
	PUT(ev);
	if (st == CL_COMPLETE)
		return CL_SUCCESS;
	return st == CL_OUT_OF_RESOURCES && !conn_ok(ctx) ? CL_OUT_OF_RESOURCES : CL_MEM_OBJECT_ALLOCATION_FAILURE;
}

/* own_buffer returns *slot, a daemon buffer of size bytes that belongs to
 * the context itself (no cl_mem names it; it goes with the connection),
 * creating it on first use. 0 if it cannot be made. */
static uint32_t own_buffer(cl_context ctx, uint32_t *slot, size_t size)
{
	if (*slot != 0 || !conn_ok(ctx))
		return *slot;
	if (++ctx->next_buffer == 0)
		++ctx->next_buffer;
	uint32_t id = ctx->next_buffer;
	if (create_device_buffer(ctx, id, size, CL_MEM_READ_WRITE) == CL_SUCCESS)
		*slot = id;
	return *slot;
}

/* The stand-in for a NULL buffer argument (kernel.c): the device ABI has
 * no null buffer, so such an argument names a small buffer of the
 * context's own. */
uint32_t vgpu_null_buffer(cl_context ctx)
{
	return own_buffer(ctx, &ctx->null_buffer, 4096);
}

/* mem_create is clCreateBuffer; with_props: made by
 * clCreateBufferWithProperties with an empty list (CL_MEM_PROPERTIES
 * returns {0} rather than nothing); props_err: that list's verdict,
 * reported once the context is checked. image.c makes an image's buffer
 * with it. */
cl_mem mem_create(cl_context context, int with_props, cl_int props_err, cl_mem_flags flags, size_t size,
		  void *host_ptr, cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_mem m = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (props_err != CL_SUCCESS) {
		err = props_err;
		goto put;
	}
	if ((err = mem_check_flags(flags)) != CL_SUCCESS)
		goto put;
	if (size == 0 || size > ctx->dev->max_alloc) {
		err = CL_INVALID_BUFFER_SIZE;
		goto put;
	}
	if ((host_ptr == NULL) != ((flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR)) == 0)) {
		err = CL_INVALID_HOST_PTR;
		goto put;
	}
	if ((flags & ACCESS_FLAGS) == 0)
		flags |= CL_MEM_READ_WRITE;
	ctx_lock(ctx);
	if (!conn_ok(ctx)) {
		err = CL_OUT_OF_RESOURCES;
		goto unlock;
	}
	if ((m = calloc(1, sizeof *m)) == NULL) {
		err = CL_OUT_OF_HOST_MEMORY;
		goto unlock;
	}
	vgpu_obj_init(&m->obj, VGPU_MEM);
	m->ctx = ctx;
	m->flags = flags;
	m->size = size;
	m->host_ptr = (flags & CL_MEM_USE_HOST_PTR) ? host_ptr : NULL;
	m->with_props = with_props;
	if (++ctx->next_buffer == 0)
		++ctx->next_buffer;
	uint32_t id = ctx->next_buffer;

	/* A refused create leaves the id live in the daemon until freed
	 * (docs/icd-protocol.md "Creation failures"); fail frees it. */
	m->id = id;
	if ((err = create_device_buffer(ctx, id, size, flags)) != CL_SUCCESS)
		goto fail;
	if (flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR)) {
		/* The host bytes, in chunks, all staged before this returns (the
		 * command is sent at once). */
		struct _cl_event *wev = new_xfer(ctx, NULL, 0, m, 1, 1);
		if (wev == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
			goto fail;
		}
		xfer_seg(wev, 0, 0, host_ptr, size);
		IREF(wev);
		vgpu_submit(wev, 0, NULL, 0, NULL);
		cl_int st = wev->status;
		PUT(wev);
		if (st < 0) {
			err = st == CL_OUT_OF_HOST_MEMORY ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES;
			goto fail;
		}
	}
	IREF(ctx); /* the buffer's */
	vgpu_obj_publish(&m->obj);
	goto unlock;
fail:
	if (m->id != 0 && conn_ok(ctx)) {
		struct {
			struct vgpu_icdp_header h;
			struct vgpu_icdp_buffer_free b;
		} f = {.b = {.buffer = m->id}};
		conn_hdr(ctx, &f, VGPU_ICDP_OP_BUFFER_FREE, sizeof f);
		conn_send(ctx, &f, sizeof f);
	}
	free(m);
	m = NULL;
unlock:
	ctx_unlock(ctx);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return m;
}

/* derived_flags checks the flags of an object made on buffer m (a
 * sub-buffer, an image made from a buffer) and fills in what it inherits:
 * access and host access when not given, and the host pointer flags,
 * which it may not give. CL_SUCCESS or CL_INVALID_VALUE. */
static cl_int derived_flags(cl_mem m, cl_mem_flags *flags)
{
	cl_mem_flags f = *flags;
	if ((f & HOSTPTR_FLAGS) != 0 ||
	    ((m->flags & CL_MEM_WRITE_ONLY) && (f & (CL_MEM_READ_WRITE | CL_MEM_READ_ONLY))) ||
	    ((m->flags & CL_MEM_READ_ONLY) && (f & (CL_MEM_READ_WRITE | CL_MEM_WRITE_ONLY))) ||
	    ((m->flags & CL_MEM_HOST_WRITE_ONLY) && (f & CL_MEM_HOST_READ_ONLY)) ||
	    ((m->flags & CL_MEM_HOST_READ_ONLY) && (f & CL_MEM_HOST_WRITE_ONLY)) ||
	    ((m->flags & CL_MEM_HOST_NO_ACCESS) && (f & (CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_WRITE_ONLY))))
		return CL_INVALID_VALUE;
	if ((f & ACCESS_FLAGS) == 0)
		f |= m->flags & ACCESS_FLAGS;
	if ((f & HOSTACC_FLAGS) == 0)
		f |= m->flags & HOSTACC_FLAGS;
	*flags = f | (m->flags & HOSTPTR_FLAGS);
	return CL_SUCCESS;
}

cl_mem vgpu_mem_derive(cl_mem m, cl_mem_flags flags, size_t origin, size_t size, cl_int *err)
{
	if ((*err = mem_check_flags(flags)) != CL_SUCCESS || (*err = derived_flags(m, &flags)) != CL_SUCCESS)
		return NULL;
	cl_mem s = calloc(1, sizeof *s);
	if (s == NULL) {
		*err = CL_OUT_OF_HOST_MEMORY;
		return NULL;
	}
	vgpu_obj_init(&s->obj, VGPU_MEM);
	s->ctx = m->ctx;
	IREF(s->ctx);
	s->flags = flags;
	s->size = size;
	s->host_ptr = m->host_ptr != NULL ? (char *)m->host_ptr + origin : NULL;
	s->id = m->id;
	s->parent = m;
	IREF(m);
	s->origin = origin;
	return s;
}

cl_mem CL_API_CALL vgpu_clCreateSubBuffer(cl_mem buffer, cl_mem_flags flags, cl_buffer_create_type create_type,
					  const void *info, cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_mem s = NULL;
	cl_mem m = GET(buffer, VGPU_MEM);
	if (m == NULL) {
		err = CL_INVALID_MEM_OBJECT;
		goto out;
	}
	if (m->parent != NULL || m->image != NULL) {
		err = CL_INVALID_MEM_OBJECT;
		goto put;
	}
	cl_mem_flags derived = flags;
	if ((err = mem_check_flags(flags)) != CL_SUCCESS || (err = derived_flags(m, &derived)) != CL_SUCCESS)
		goto put;
	if (create_type != CL_BUFFER_CREATE_TYPE_REGION || info == NULL) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	const cl_buffer_region *reg = info;
	if (reg->origin > m->size || reg->size > m->size - reg->origin) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	if (reg->size == 0) {
		err = CL_INVALID_BUFFER_SIZE;
		goto put;
	}
	if (reg->origin % BASE_ALIGN != 0) {
		err = CL_MISALIGNED_SUB_BUFFER_OFFSET;
		goto put;
	}
	if ((s = vgpu_mem_derive(m, flags, reg->origin, reg->size, &err)) != NULL)
		vgpu_obj_publish(&s->obj);
put:
	PUT(m);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return s;
}

/* unmap_free frees a mapping's memory at once (nothing uses it). */
static void unmap_free(cl_context ctx, struct vgpu_map *map)
{
	ctx->arena_mapped -= map->r.len;
	arena_free(ctx, &map->r);
	if (map->hm != NULL)
		vgpu_hostmem_put(map->hm);
	free(map);
}

void vgpu_mem_destroy(cl_mem m)
{
	cl_context ctx = m->ctx;
	ctx_lock(ctx);
	while (m->maps != NULL) {
		struct vgpu_map *n = m->maps->next;
		unmap_free(ctx, m->maps);
		m->maps = n;
	}
	if (m->parent == NULL && m->id != 0 && conn_ok(ctx)) {
		/* Every command that names the buffer was sent before (held
		 * commands keep the buffer alive), and the daemon runs them in
		 * order: freeing now is safe. */
		struct {
			struct vgpu_icdp_header h;
			struct vgpu_icdp_buffer_free b;
		} f = {.b = {.buffer = m->id}};
		conn_hdr(ctx, &f, VGPU_ICDP_OP_BUFFER_FREE, sizeof f);
		conn_send(ctx, &f, sizeof f);
	}
	cl_mem parent = m->parent;
	/* Destructor callbacks, most recently registered first, after the
	 * lock is released; the memory stays until they have run. */
	struct vgpu_memcb *cb = m->dtors;
	m->dtors = NULL;
	while (cb != NULL) {
		struct vgpu_memcb *n = cb->next;
		vgpu_defer(ctx, DEFER_MEM, m, (void (*)(void))cb->fn, cb->data, 0);
		free(cb);
		cb = n;
	}
	vgpu_defer(ctx, DEFER_FREE, m, NULL, NULL, 0);
	if (parent != NULL)
		PUT(parent);
	ctx_unlock(ctx);
	PUT(ctx);
}

cl_mem CL_API_CALL vgpu_clCreateBuffer(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr,
				       cl_int *errcode_ret)
{
	return mem_create(context, 0, CL_SUCCESS, flags, size, host_ptr, errcode_ret);
}

/* The context's printf buffer (kernel.c), a buffer of its own like the
 * NULL stand-in. */
uint32_t vgpu_printf_buffer(cl_context ctx)
{
	return own_buffer(ctx, &ctx->printf_buffer, VGPU_PRINTF_HEADER_SIZE + VGPU_PRINTF_BYTES);
}

/* OpenCL 3.0 defines no buffer property of its own (they come with
 * extensions this device does not report), so the list must be NULL or
 * empty; anything in it is CL_INVALID_PROPERTY. */
cl_mem CL_API_CALL vgpu_clCreateBufferWithProperties(cl_context context, const cl_mem_properties *properties,
						     cl_mem_flags flags, size_t size, void *host_ptr,
						     cl_int *errcode_ret)
{
	cl_int err = properties != NULL && properties[0] != 0 ? CL_INVALID_PROPERTY : CL_SUCCESS;
	return mem_create(context, properties != NULL, err, flags, size, host_ptr, errcode_ret);
}

cl_int CL_API_CALL vgpu_clRetainMemObject(cl_mem memobj)
{
	return vgpu_retain(memobj, VGPU_MEM, CL_INVALID_MEM_OBJECT);
}

cl_int CL_API_CALL vgpu_clReleaseMemObject(cl_mem memobj)
{
	return vgpu_release(memobj, VGPU_MEM, CL_INVALID_MEM_OBJECT, vgpu_put_locked);
}

cl_int CL_API_CALL vgpu_clSetMemObjectDestructorCallback(cl_mem memobj, void(CL_CALLBACK *fn)(cl_mem, void *),
							 void *user_data)
{
	cl_mem m = GET(memobj, VGPU_MEM);
	if (m == NULL)
		return CL_INVALID_MEM_OBJECT;
	cl_int err = CL_SUCCESS;
	if (fn == NULL) {
		err = CL_INVALID_VALUE;
	} else {
		struct vgpu_memcb *cb = calloc(1, sizeof *cb);
		if (cb == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
		} else {
			cl_context ctx = m->ctx;
			ENTER(ctx);
			cb->fn = fn;
			cb->data = user_data;
			cb->next = m->dtors;
			m->dtors = cb;
			LEAVE(ctx);
		}
	}
	cl_context ctx = m->ctx;
	ENTER(ctx);
	PUT(m);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clGetMemObjectInfo(cl_mem memobj, cl_mem_info param_name, size_t param_value_size,
					   void *param_value, size_t *param_value_size_ret)
{
	cl_mem m = GET(memobj, VGPU_MEM);
	if (m == NULL)
		return CL_INVALID_MEM_OBJECT;
	union {
		cl_mem_object_type t;
		cl_mem_flags f;
		size_t sz;
		void *p;
		cl_uint u;
		cl_context c;
		cl_mem m;
		cl_bool b;
		cl_mem_properties props;
	} v;
	size_t n;
	cl_int err = CL_SUCCESS;
	switch (param_name) {
	case CL_MEM_TYPE: v.t = m->image != NULL ? m->image->type : CL_MEM_OBJECT_BUFFER; n = sizeof v.t; break;
	case CL_MEM_FLAGS: v.f = m->flags; n = sizeof v.f; break;
	case CL_MEM_SIZE: v.sz = m->size; n = sizeof v.sz; break;
	case CL_MEM_HOST_PTR: v.p = m->host_ptr; n = sizeof v.p; break;
	case CL_MEM_MAP_COUNT: v.u = m->map_count; n = sizeof v.u; break;
	case CL_MEM_REFERENCE_COUNT: v.u = vgpu_obj_refs(&m->obj); n = sizeof v.u; break;
	case CL_MEM_CONTEXT: v.c = m->ctx; n = sizeof v.c; break;
	case CL_MEM_ASSOCIATED_MEMOBJECT: v.m = m->parent; n = sizeof v.m; break;
	case CL_MEM_OFFSET: v.sz = m->origin; n = sizeof v.sz; break;
	case CL_MEM_USES_SVM_POINTER: v.b = CL_FALSE; n = sizeof v.b; break;
	case CL_MEM_PROPERTIES:
		/* What clCreateBufferWithProperties was given: nothing, or
		 * the empty list (a sub-buffer has none of its own). */
		v.props = 0;
		n = m->with_props ? sizeof v.props : 0;
		break;
	default: err = CL_INVALID_VALUE; n = 0; break;
	}
	if (err == CL_SUCCESS)
		err = vgpu_info(&v, n, param_value_size, param_value, param_value_size_ret);
	cl_context ctx = m->ctx;
	ENTER(ctx);
	PUT(m);
	LEAVE(ctx);
	return err;
}

/* ---- Transfers ------------------------------------------------------ */

cl_int enq_begin(struct enq *e, cl_command_queue queue, cl_uint nwait, const cl_event *wait)
{
	e->q = GET(queue, VGPU_QUEUE);
	if (e->q == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	e->ctx = e->q->ctx;
	ENTER(e->ctx);
	cl_int err = vgpu_check_wait_list(e->ctx, nwait, wait);
	if (err == CL_SUCCESS && !conn_ok(e->ctx))
		err = CL_OUT_OF_RESOURCES;
	return err;
}

cl_int enq_end(struct enq *e, cl_int err)
{
	if (e->q == NULL)
		return err;
	cl_context ctx = e->ctx;
	PUT(e->q);
	LEAVE(ctx);
	return err;
}

/* get_mem_of: a memory object of the queue's context, with a reference:
 * a buffer (want 0), an image (1) or either (2). */
static cl_int get_mem_of(struct enq *e, cl_mem h, cl_mem *out, int want)
{
	*out = GET(h, VGPU_MEM);
	if (*out == NULL)
		return CL_INVALID_MEM_OBJECT;
	cl_int err = CL_SUCCESS;
	if ((*out)->ctx != e->ctx)
		err = CL_INVALID_CONTEXT;
	else if (want != 2 && ((*out)->image != NULL) != (want == 1))
		err = CL_INVALID_MEM_OBJECT;
	if (err != CL_SUCCESS) {
		PUT(*out);
		*out = NULL;
	}
	return err;
}

cl_int get_mem(struct enq *e, cl_mem h, cl_mem *out)
{
	return get_mem_of(e, h, out, 0);
}

cl_int get_image(struct enq *e, cl_mem h, cl_mem *out)
{
	return get_mem_of(e, h, out, 1);
}

cl_int get_any_mem(struct enq *e, cl_mem h, cl_mem *out)
{
	return get_mem_of(e, h, out, 2);
}

static int out_of(const struct _cl_mem *m, size_t off, size_t n)
{
	return off > m->size || n > m->size - off;
}

/* new_cmd: a command event with a request of len bytes (zeroed, header
 * written), and the buffers it names kept alive until it is sent. */
static struct _cl_event *new_cmd(struct enq *e, cl_command_type type, uint16_t op, size_t len, cl_mem a, cl_mem b)
{
	struct _cl_event *ev = vgpu_event_new(e->ctx, e->q, type);
	if (ev == NULL)
		return NULL;
	ev->msg = calloc(1, len);
	ev->mems = calloc(2, sizeof *ev->mems);
	if (ev->msg == NULL || ev->mems == NULL) {
		vgpu_event_done(ev, CL_OUT_OF_HOST_MEMORY, NULL);
		return NULL;
	}
	ev->msg_len = len;
	conn_hdr(e->ctx, ev->msg, op, len);
	if (a != NULL) {
		IREF(a);
		ev->mems[ev->nmems++] = a;
	}
	if (b != NULL) {
		IREF(b);
		ev->mems[ev->nmems++] = b;
	}
	return ev;
}

static void *body(struct _cl_event *ev)
{
	return ev->msg + sizeof(struct vgpu_icdp_header);
}

/* A marker standing for a command that moves no data. */
cl_int enq_marker(struct enq *e, cl_command_type type, cl_uint nwait, const cl_event *wait, int blocking,
			 cl_event *event)
{
	struct _cl_event *ev =
		new_cmd(e, type, VGPU_ICDP_OP_MARKER, sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_marker),
			NULL, NULL);
	if (ev == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	((struct vgpu_icdp_marker *)body(ev))->event = ev->id;
	return vgpu_submit(ev, nwait, wait, blocking, event);
}

/* submit_xfer submits a transfer of n bytes between host (the application's
 * memory, or hm's) and m at off, through the arena: to m when write, from
 * it otherwise. */
static cl_int submit_xfer(struct enq *e, cl_mem m, cl_command_type type, int write, size_t off, size_t n,
			  const void *host, struct vgpu_hostmem *hm, cl_uint nwait, const cl_event *wait, int blocking,
			  cl_event *event)
{
	struct _cl_event *ev = new_xfer(e->ctx, e->q, type, m, write, 1);
	if (ev == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	xfer_seg(ev, 0, m->origin + off, host, n);
	if (hm != NULL) {
		ev->hm = hm;
		hm->refs++;
	}
	return vgpu_submit(ev, nwait, wait, blocking, event);
}

/* enq_read reads n bytes at off of m into dst (the application's memory,
 * or hm's), through the arena. */
static cl_int enq_read(struct enq *e, cl_mem m, cl_command_type type, size_t off, size_t n, void *dst,
		       struct vgpu_hostmem *hm, cl_uint nwait, const cl_event *wait, int blocking, cl_event *event)
{
	return submit_xfer(e, m, type, 0, off, n, dst, hm, nwait, wait, blocking, event);
}

/* enq_write writes n bytes from src (the application's memory, or hm's)
 * to m at off, through the arena. When have is given, the bytes are in
 * that arena range already (a mapping's; freed on completion). */
static cl_int enq_write(struct enq *e, cl_mem m, cl_command_type type, size_t off, size_t n, const void *src,
			const struct vgpu_range *have, struct vgpu_hostmem *hm, cl_uint nwait, const cl_event *wait,
			int blocking, cl_event *event)
{
	if (have == NULL)
		return submit_xfer(e, m, type, 1, off, n, src, hm, nwait, wait, blocking, event);
	struct _cl_event *ev = new_cmd(e, type, VGPU_ICDP_OP_WRITE,
				       sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_transfer), m, NULL);
	if (ev == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	struct vgpu_icdp_transfer *t = body(ev);
	t->buffer = m->id;
	t->arena = have->arena;
	t->offset = m->origin + off;
	t->arena_offset = have->off;
	t->length = n;
	t->event = ev->id;
	ev->free1 = *have;
	return vgpu_submit(ev, nwait, wait, blocking, event);
}

/* begin_buffer_rw begins a read or write of size bytes of buffer at offset
 * through ptr: the queue, the wait list and the buffer (in *m, to PUT)
 * checked, and the range; denied are the host access flags that forbid
 * the transfer (CL_INVALID_OPERATION). */
static cl_int begin_buffer_rw(struct enq *e, cl_command_queue queue, cl_mem buffer, cl_mem *m, size_t offset,
			      size_t size, const void *ptr, cl_uint num_events, const cl_event *wait_list,
			      cl_mem_flags denied)
{
	cl_int err = enq_begin(e, queue, num_events, wait_list);
	if (err == CL_SUCCESS)
		err = get_mem(e, buffer, m);
	if (err == CL_SUCCESS && (ptr == NULL || size == 0 || out_of(*m, offset, size)))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && ((*m)->flags & denied))
		err = CL_INVALID_OPERATION;
	return err;
}

cl_int CL_API_CALL vgpu_clEnqueueReadBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset,
					    size_t size, void *ptr, cl_uint num_events, const cl_event *wait_list,
					    cl_event *event)
{
	struct enq e;
	cl_mem m = NULL;
	cl_int err = begin_buffer_rw(&e, queue, buffer, &m, offset, size, ptr, num_events, wait_list,
				     CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_NO_ACCESS);
	if (err == CL_SUCCESS)
		err = enq_read(&e, m, CL_COMMAND_READ_BUFFER, offset, size, ptr, NULL, num_events, wait_list, blocking,
			       event);
	if (m != NULL)
		PUT(m);
	return enq_end(&e, err);
}

cl_int CL_API_CALL vgpu_clEnqueueWriteBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset,
					     size_t size, const void *ptr, cl_uint num_events,
					     const cl_event *wait_list, cl_event *event)
{
	struct enq e;
	cl_mem m = NULL;
	cl_int err = begin_buffer_rw(&e, queue, buffer, &m, offset, size, ptr, num_events, wait_list,
				     CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS);
	if (err == CL_SUCCESS)
		err = enq_write(&e, m, CL_COMMAND_WRITE_BUFFER, offset, size, ptr, NULL, NULL, num_events, wait_list,
				blocking, event);
	if (m != NULL)
		PUT(m);
	return enq_end(&e, err);
}

cl_int CL_API_CALL vgpu_clEnqueueCopyBuffer(cl_command_queue queue, cl_mem src_buffer, cl_mem dst_buffer,
					    size_t src_offset, size_t dst_offset, size_t size, cl_uint num_events,
					    const cl_event *wait_list, cl_event *event)
{
	struct enq e;
	cl_mem s = NULL, d = NULL;
	cl_int err = enq_begin(&e, queue, num_events, wait_list);
	if (err == CL_SUCCESS)
		err = get_mem(&e, src_buffer, &s);
	if (err == CL_SUCCESS)
		err = get_mem(&e, dst_buffer, &d);
	if (err == CL_SUCCESS && (size == 0 || out_of(s, src_offset, size) || out_of(d, dst_offset, size)))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && s->id == d->id) {
		size_t a = s->origin + src_offset, b = d->origin + dst_offset;
		if (a < b + size && b < a + size)
			err = CL_MEM_COPY_OVERLAP;
	}
	if (err == CL_SUCCESS) {
		struct _cl_event *ev = new_cmd(&e, CL_COMMAND_COPY_BUFFER, VGPU_ICDP_OP_COPY,
					       sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_copy), s, d);
		if (ev == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
		} else {
			struct vgpu_icdp_copy *c = body(ev);
			c->src = s->id;
			c->dst = d->id;
			c->src_offset = s->origin + src_offset;
			c->dst_offset = d->origin + dst_offset;
			c->length = size;
			c->event = ev->id;
			err = vgpu_submit(ev, num_events, wait_list, 0, event);
		}
	}
	if (s != NULL)
		PUT(s);
	if (d != NULL)
		PUT(d);
	return enq_end(&e, err);
}

cl_int CL_API_CALL vgpu_clEnqueueFillBuffer(cl_command_queue queue, cl_mem buffer, const void *pattern,
					    size_t pattern_size, size_t offset, size_t size, cl_uint num_events,
					    const cl_event *wait_list, cl_event *event)
{
	struct enq e;
	cl_mem m = NULL;
	cl_int err = enq_begin(&e, queue, num_events, wait_list);
	if (err == CL_SUCCESS)
		err = get_mem(&e, buffer, &m);
	if (err == CL_SUCCESS &&
	    (pattern == NULL || pattern_size == 0 || pattern_size > VGPU_ICDP_MAX_PATTERN ||
	     (pattern_size & (pattern_size - 1)) != 0 || offset % pattern_size != 0 || size % pattern_size != 0 ||
	     out_of(m, offset, size)))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && size == 0) {
		err = enq_marker(&e, CL_COMMAND_FILL_BUFFER, num_events, wait_list, 0, event);
	} else if (err == CL_SUCCESS) {
		struct _cl_event *ev = new_cmd(&e, CL_COMMAND_FILL_BUFFER, VGPU_ICDP_OP_FILL,
					       sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_fill), m, NULL);
		if (ev == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
		} else {
			struct vgpu_icdp_fill *f = body(ev);
			f->buffer = m->id;
			f->pattern_len = (uint32_t)pattern_size;
			f->offset = m->origin + offset;
			f->length = size;
			f->event = ev->id;
			memcpy(f->pattern, pattern, pattern_size);
			err = vgpu_submit(ev, num_events, wait_list, 0, event);
		}
	}
	if (m != NULL)
		PUT(m);
	return enq_end(&e, err);
}

/* ---- Rows ----------------------------------------------------------- */

/* vgpu_rows_cmd makes a command event whose message is one request per row of
 * region (rowlen bytes, rows by slices), made by req, or fewer where the
 * rows lie contiguous on every side: req gets the byte offsets of the
 * piece on each side and its length. Only the last request carries the
 * event's id (the daemon runs them in order). */
cl_int vgpu_rows_cmd(struct enq *e, cl_command_type type, uint16_t op, size_t one, const struct vgpu_side *s,
		       const struct vgpu_side *d, size_t rowlen, const size_t *region,
		       void (*req)(void *body, const struct vgpu_side *s, const struct vgpu_side *d, size_t so, size_t dof,
				   size_t len, uint64_t event, const void *arg),
		       const void *arg, cl_uint n, const cl_event *wl, cl_event *event)
{
	int whole_rows = s->row == rowlen && (d == NULL || d->row == rowlen);
	int whole = whole_rows && s->slice == rowlen * region[1] && (d == NULL || d->slice == rowlen * region[1]);
	size_t count = whole ? 1 : whole_rows ? region[2] : region[1] * region[2];
	if (count > (1u << 20))
		return CL_OUT_OF_RESOURCES;
	struct _cl_event *ev = vgpu_event_new(e->ctx, e->q, type);
	uint8_t *msg = ev != NULL ? calloc(count, one) : NULL;
	cl_mem *mems = ev != NULL ? calloc(2, sizeof *mems) : NULL;
	if (msg == NULL || mems == NULL) {
		free(msg);
		free(mems);
		if (ev != NULL)
			vgpu_event_done(ev, CL_OUT_OF_HOST_MEMORY, NULL);
		return CL_OUT_OF_HOST_MEMORY;
	}
	ev->msg = msg;
	ev->msg_len = count * one;
	ev->mems = mems;
	IREF(s->m);
	ev->mems[ev->nmems++] = s->m;
	if (d != NULL) {
		IREF(d->m);
		ev->mems[ev->nmems++] = d->m;
	}
	size_t len = whole ? rowlen * region[1] * region[2] : whole_rows ? rowlen * region[1] : rowlen;
	size_t i = 0;
	for (size_t z = 0; z < region[2] && i < count; z++) {
		for (size_t y = 0; y < region[1] && i < count; y++, i++) {
			uint8_t *p = msg + i * one;
			conn_hdr(e->ctx, p, op, one);
			size_t so = s->base + z * s->slice + y * s->row;
			size_t dof = d != NULL ? d->base + z * d->slice + y * d->row : 0;
			/* The last request completes the event. */
			req(p + sizeof(struct vgpu_icdp_header), s, d, so, dof, len, i + 1 == count ? ev->id : 0, arg);
			if (whole_rows) {
				i++;
				break; /* one request per slice */
			}
		}
	}
	return vgpu_submit(ev, n, wl, 0, event);
}

static void copy_req(void *body, const struct vgpu_side *s, const struct vgpu_side *d, size_t so, size_t dof, size_t len,
		     uint64_t event, const void *arg)
{
	(void)arg;
	struct vgpu_icdp_copy *c = body;
	*c = (struct vgpu_icdp_copy){
		.src = s->m->id, .dst = d->m->id, .src_offset = so, .dst_offset = dof, .length = len, .event = event};
}

/* vgpu_copy_rows copies region (rowlen bytes a row) from one side to the
 * other: one request per row, or fewer where rows are contiguous. */
cl_int vgpu_copy_rows(struct enq *e, cl_command_type type, const struct vgpu_side *s, const struct vgpu_side *d,
		      size_t rowlen, const size_t *region, cl_uint n, const cl_event *wl, cl_event *event)
{
	return vgpu_rows_cmd(e, type, VGPU_ICDP_OP_COPY, sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_copy),
			     s, d, rowlen, region, copy_req, NULL, n, wl, event);
}

/* ---- Rectangles ----------------------------------------------------- */

/* rect_check applies clEnqueue*BufferRect's rules to one side: pitches
 * default to tight ones, must be at least the region's row and slice, and
 * the rectangle must lie in a buffer of size bytes (size 0: host memory,
 * unchecked). Returns 0, or -1 for CL_INVALID_VALUE. */
static int rect_check(const size_t *origin, const size_t *region, size_t *row_pitch, size_t *slice_pitch,
		      size_t size)
{
	if (region[0] == 0 || region[1] == 0 || region[2] == 0)
		return -1;
	if (*row_pitch == 0)
		*row_pitch = region[0];
	if (*slice_pitch == 0)
		*slice_pitch = region[1] * *row_pitch;
	if (*row_pitch < region[0] || *slice_pitch < region[1] * *row_pitch)
		return -1;
	if (*slice_pitch % *row_pitch != 0)
		return -1;
	if (size == 0)
		return 0;
	/* The last byte: (origin + region - 1) in each dimension. */
	size_t last = (origin[2] + region[2] - 1) * *slice_pitch + (origin[1] + region[1] - 1) * *row_pitch +
		      origin[0] + region[0];
	return last > size ? -1 : 0;
}

static size_t rect_off(const size_t *origin, size_t row_pitch, size_t slice_pitch, size_t y, size_t z)
{
	return (origin[2] + z) * slice_pitch + (origin[1] + y) * row_pitch + origin[0];
}

/* The rows of a rectangle travel in one event. A read or write is a
 * staged transfer whose pieces are the rows (a chunk holds as many rows as
 * fit, a row longer than a chunk is split). A copy is a request per row
 * (vgpu_copy_rows: one per slice, or one in all, where rows lie contiguous
 * on both sides), concatenated in the event's message (send_now sends
 * them one by one); only the last carries the event id, and the daemon
 * runs them in order. */
cl_int CL_API_CALL vgpu_clEnqueueReadBufferRect(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
						const size_t *buffer_origin, const size_t *host_origin,
						const size_t *region, size_t buffer_row_pitch,
						size_t buffer_slice_pitch, size_t host_row_pitch,
						size_t host_slice_pitch, void *ptr, cl_uint num_events,
						const cl_event *wait_list, cl_event *event);
cl_int CL_API_CALL vgpu_clEnqueueWriteBufferRect(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
						 const size_t *buffer_origin, const size_t *host_origin,
						 const size_t *region, size_t buffer_row_pitch,
						 size_t buffer_slice_pitch, size_t host_row_pitch,
						 size_t host_slice_pitch, const void *ptr, cl_uint num_events,
						 const cl_event *wait_list, cl_event *event);

static cl_int rect(cl_command_queue queue, cl_mem buffer, cl_mem dst_buffer, cl_command_type type, int blocking,
		   const size_t *bo, const size_t *ho, const size_t *region, size_t brp, size_t bsp, size_t hrp,
		   size_t hsp, void *ptr, cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
	struct enq e;
	cl_mem m = NULL, d = NULL;
	cl_int err = enq_begin(&e, queue, num_events, wait_list);
	if (err == CL_SUCCESS)
		err = get_mem(&e, buffer, &m);
	if (err == CL_SUCCESS && dst_buffer != NULL)
		err = get_mem(&e, dst_buffer, &d);
	if (err != CL_SUCCESS)
		goto out;
	if (bo == NULL || ho == NULL || region == NULL || (d == NULL && ptr == NULL) ||
	    rect_check(bo, region, &brp, &bsp, m->size) != 0 ||
	    rect_check(ho, region, &hrp, &hsp, d != NULL ? d->size : 0) != 0) {
		err = CL_INVALID_VALUE;
		goto out;
	}
	if (type == CL_COMMAND_READ_BUFFER_RECT && (m->flags & (CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_NO_ACCESS)))
		err = CL_INVALID_OPERATION;
	if (type == CL_COMMAND_WRITE_BUFFER_RECT && (m->flags & (CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS)))
		err = CL_INVALID_OPERATION;
	if (err != CL_SUCCESS)
		goto out;
	if (d != NULL && m->id == d->id) {
		/* Overlap of two rectangles in one buffer: compare the spans,
		 * as a conservative test (OpenCL's overlap rule for rects). */
		size_t a0 = m->origin + rect_off(bo, brp, bsp, 0, 0);
		size_t a1 = m->origin + rect_off(bo, brp, bsp, region[1] - 1, region[2] - 1) + region[0];
		size_t b0 = d->origin + rect_off(ho, hrp, hsp, 0, 0);
		size_t b1 = d->origin + rect_off(ho, hrp, hsp, region[1] - 1, region[2] - 1) + region[0];
		if (a0 < b1 && b0 < a1) {
			err = CL_MEM_COPY_OVERLAP;
			goto out;
		}
	}
	size_t rows = region[1] * region[2];
	if (rows > (1u << 20)) {
		err = CL_OUT_OF_RESOURCES;
		goto out;
	}
	struct _cl_event *ev;
	if (d == NULL) {
		/* A read or write: its rows are the pieces of a staged transfer. */
		ev = new_xfer(e.ctx, e.q, type, m, type == CL_COMMAND_WRITE_BUFFER_RECT, rows);
		if (ev == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
			goto out;
		}
		size_t i = 0;
		for (size_t z = 0; z < region[2]; z++)
			for (size_t y = 0; y < region[1]; y++, i++)
				xfer_seg(ev, i, m->origin + rect_off(bo, brp, bsp, y, z),
					 (uint8_t *)ptr + rect_off(ho, hrp, hsp, y, z), region[0]);
		err = vgpu_submit(ev, num_events, wait_list, blocking, event);
		goto out;
	}
	struct vgpu_side s = {m, m->origin + rect_off(bo, brp, bsp, 0, 0), brp, bsp};
	struct vgpu_side dd = {d, d->origin + rect_off(ho, hrp, hsp, 0, 0), hrp, hsp};
	err = vgpu_copy_rows(&e, type, &s, &dd, region[0], region, num_events, wait_list, event);
out:
	if (m != NULL)
		PUT(m);
	if (d != NULL)
		PUT(d);
	return enq_end(&e, err);
}

cl_int CL_API_CALL vgpu_clEnqueueReadBufferRect(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
						const size_t *buffer_origin, const size_t *host_origin,
						const size_t *region, size_t buffer_row_pitch,
						size_t buffer_slice_pitch, size_t host_row_pitch,
						size_t host_slice_pitch, void *ptr, cl_uint num_events,
						const cl_event *wait_list, cl_event *event)
{
	return rect(queue, buffer, NULL, CL_COMMAND_READ_BUFFER_RECT, blocking, buffer_origin, host_origin, region,
		    buffer_row_pitch, buffer_slice_pitch, host_row_pitch, host_slice_pitch, ptr, num_events,
		    wait_list, event);
}

cl_int CL_API_CALL vgpu_clEnqueueWriteBufferRect(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
						 const size_t *buffer_origin, const size_t *host_origin,
						 const size_t *region, size_t buffer_row_pitch,
						 size_t buffer_slice_pitch, size_t host_row_pitch,
						 size_t host_slice_pitch, const void *ptr, cl_uint num_events,
						 const cl_event *wait_list, cl_event *event)
{
	return rect(queue, buffer, NULL, CL_COMMAND_WRITE_BUFFER_RECT, blocking, buffer_origin, host_origin, region,
		    buffer_row_pitch, buffer_slice_pitch, host_row_pitch, host_slice_pitch, (void *)ptr, num_events,
		    wait_list, event);
}

cl_int CL_API_CALL vgpu_clEnqueueCopyBufferRect(cl_command_queue queue, cl_mem src_buffer, cl_mem dst_buffer,
						const size_t *src_origin, const size_t *dst_origin,
						const size_t *region, size_t src_row_pitch, size_t src_slice_pitch,
						size_t dst_row_pitch, size_t dst_slice_pitch, cl_uint num_events,
						const cl_event *wait_list, cl_event *event)
{
	if (dst_buffer == NULL) {
		/* rect() reads a NULL destination as a host transfer. */
		cl_command_queue q = GET(queue, VGPU_QUEUE);
		if (q == NULL)
			return CL_INVALID_COMMAND_QUEUE;
		PUT(q);
		return CL_INVALID_MEM_OBJECT;
	}
	return rect(queue, src_buffer, dst_buffer, CL_COMMAND_COPY_BUFFER_RECT, 0, src_origin, dst_origin, region,
		    src_row_pitch, src_slice_pitch, dst_row_pitch, dst_slice_pitch, NULL, num_events, wait_list,
		    event);
}

/* ---- Maps ----------------------------------------------------------- */

void *CL_API_CALL vgpu_clEnqueueMapBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
					  cl_map_flags flags, size_t offset, size_t size, cl_uint num_events,
					  const cl_event *wait_list, cl_event *event, cl_int *errcode_ret)
{
	struct enq e;
	cl_mem m = NULL;
	void *ptr = NULL;
	cl_int err = enq_begin(&e, queue, num_events, wait_list);
	if (err == CL_SUCCESS)
		err = get_mem(&e, buffer, &m);
	if (err == CL_SUCCESS && (size == 0 || out_of(m, offset, size)))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS)
		err = map_check(m, flags);
	struct vgpu_map *map = NULL;
	if (err == CL_SUCCESS && (map = calloc(1, sizeof *map)) == NULL)
		err = CL_OUT_OF_HOST_MEMORY;
	if (err != CL_SUCCESS)
		goto out;
	int need_read = (flags & CL_MAP_WRITE_INVALIDATE_REGION) == 0;
	map->offset = offset;
	map->size = size;
	map->flags = flags;
	if (m->flags & CL_MEM_USE_HOST_PTR) {
		/* The mapping is the application's own memory, brought up to
		 * date. */
		map->ptr = (char *)m->host_ptr + offset;
		if (need_read)
			err = enq_read(&e, m, CL_COMMAND_MAP_BUFFER, offset, size, map->ptr, NULL, num_events,
				       wait_list, blocking, event);
		else
			err = enq_marker(&e, CL_COMMAND_MAP_BUFFER, num_events, wait_list, blocking, event);
	} else {
		/* A small mapping lives in the arena, read into directly; a
		 * large one (or one that would make mappings hold more than a
		 * quarter of the arena) in host memory of its own, staged. */
		if (size <= VGPU_CHUNK && e.ctx->arena_mapped + size <= VGPU_ARENA_CAP / 4 &&
		    arena_alloc(e.ctx, size, &map->r) == CL_SUCCESS) {
			e.ctx->arena_mapped += map->r.len;
			map->ptr = arena_ptr(e.ctx, &map->r);
		} else if (conn_ok(e.ctx)) {
			if ((map->hm = vgpu_hostmem_new(size)) == NULL) {
				free(map);
				err = CL_OUT_OF_HOST_MEMORY;
				goto out;
			}
			map->ptr = map->hm->p;
		} else {
			free(map);
			err = CL_OUT_OF_RESOURCES;
			goto out;
		}
		if (need_read && map->hm != NULL) {
			err = enq_read(&e, m, CL_COMMAND_MAP_BUFFER, offset, size, map->ptr, map->hm, num_events,
				       wait_list, blocking, event);
		} else if (need_read) {
			/* A read into the mapping itself: nothing to copy out. */
			struct _cl_event *ev = new_cmd(
				&e, CL_COMMAND_MAP_BUFFER, VGPU_ICDP_OP_READ,
				sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_transfer), m, NULL);
			if (ev == NULL) {
				err = CL_OUT_OF_HOST_MEMORY;
			} else {
				struct vgpu_icdp_transfer *t = body(ev);
				t->buffer = m->id;
				t->arena = map->r.arena;
				t->offset = m->origin + offset;
				t->arena_offset = map->r.off;
				t->length = size;
				t->event = ev->id;
				err = vgpu_submit(ev, num_events, wait_list, blocking, event);
			}
		} else {
			err = enq_marker(&e, CL_COMMAND_MAP_BUFFER, num_events, wait_list, blocking, event);
		}
	}
	if (err == CL_SUCCESS) {
		map->next = m->maps;
		m->maps = map;
		m->map_count++;
		ptr = map->ptr;
	} else {
		unmap_free(e.ctx, map);
	}
out:
	if (m != NULL)
		PUT(m);
	err = enq_end(&e, err);
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return ptr;
}

cl_int CL_API_CALL vgpu_clEnqueueUnmapMemObject(cl_command_queue queue, cl_mem memobj, void *mapped_ptr,
						cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
	struct enq e;
	cl_mem m = NULL;
	cl_int err = enq_begin(&e, queue, num_events, wait_list);
	if (err == CL_SUCCESS)
		err = get_any_mem(&e, memobj, &m);
	struct vgpu_map *map = NULL, **pp = NULL;
	if (err == CL_SUCCESS) {
		for (pp = &m->maps; *pp != NULL; pp = &(*pp)->next)
			if ((*pp)->ptr == mapped_ptr)
				break;
		map = *pp;
		if (map == NULL)
			err = CL_INVALID_VALUE;
	}
	if (err != CL_SUCCESS)
		goto out;
	int written = (map->flags & (CL_MAP_WRITE | CL_MAP_WRITE_INVALIDATE_REGION)) != 0;
	if (written && map->rect) {
		err = vgpu_image_unmap(&e, m, map, num_events, wait_list, event);
	} else if (written) {
		/* From the arena range itself, freed when the write completes;
		 * else staged from the mapping's memory (host memory of its own,
		 * kept until the write has read it, or the application's with
		 * USE_HOST_PTR). */
		err = enq_write(&e, m, CL_COMMAND_UNMAP_MEM_OBJECT, map->offset, map->size, map->ptr,
				map->r.len > 0 ? &map->r : NULL, map->hm, num_events, wait_list, 0, event);
	} else {
		struct _cl_event *ev =
			new_cmd(&e, CL_COMMAND_UNMAP_MEM_OBJECT, VGPU_ICDP_OP_MARKER,
				sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_marker), NULL, NULL);
		if (ev == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
		} else {
			((struct vgpu_icdp_marker *)body(ev))->event = ev->id;
			/* The mapping's memory, once everything before is done. */
			ev->free1 = map->r;
			if (map->hm != NULL) {
				ev->hm = map->hm;
				map->hm->refs++;
			}
			err = vgpu_submit(ev, num_events, wait_list, 0, event);
		}
	}
	if (err == CL_SUCCESS) {
		*pp = map->next;
		m->map_count--;
		/* The command owns the arena range now; the host memory is
		 * unmapped when the commands that use it are done. */
		e.ctx->arena_mapped -= map->r.len;
		if (map->hm != NULL)
			vgpu_hostmem_put(map->hm);
		free(map);
	}
out:
	if (m != NULL)
		PUT(m);
	return enq_end(&e, err);
}

cl_int CL_API_CALL vgpu_clEnqueueMigrateMemObjects(cl_command_queue queue, cl_uint num_mem_objects,
						   const cl_mem *mem_objects, cl_mem_migration_flags flags,
						   cl_uint num_events, const cl_event *wait_list, cl_event *event)
{
	struct enq e;
	cl_int err = enq_begin(&e, queue, num_events, wait_list);
	if (err == CL_SUCCESS && (num_mem_objects == 0 || mem_objects == NULL ||
				  (flags & ~(cl_mem_migration_flags)(CL_MIGRATE_MEM_OBJECT_HOST |
								     CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED))))
		err = CL_INVALID_VALUE;
	for (cl_uint i = 0; err == CL_SUCCESS && i < num_mem_objects; i++) {
		cl_mem m;
		err = get_any_mem(&e, mem_objects[i], &m);
		if (err == CL_SUCCESS)
			PUT(m);
	}
	/* One device: buffers never move. */
	if (err == CL_SUCCESS)
		err = enq_marker(&e, CL_COMMAND_MIGRATE_MEM_OBJECTS, num_events, wait_list, 0, event);
	return enq_end(&e, err);
}

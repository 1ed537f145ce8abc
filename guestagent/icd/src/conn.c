/* conn.c: the connection of a context to vgpu-icdd (docs/icd-protocol.md).
 *
 * Each context has its own connection: a SOCK_SEQPACKET socket to the
 * daemon (VGPUD_ICD_SOCKET, read with secure_getenv, or
 * /run/vgpud/icd.sock) and its arenas, memfds shared with the daemon that
 * carry every byte of data. The daemon executes one connection's requests
 * in order, so every queue of a context is in order with every other; an
 * OpenCL in-order queue needs nothing more. Releasing the context closes
 * the socket, and the daemon frees whatever the connection held.
 *
 * A connection that fails (the daemon answers a request with an Error,
 * closes, or sends something this ICD cannot parse) is lost: every command
 * in flight completes with CL_OUT_OF_RESOURCES, and so does every later
 * call that needs the daemon. Nothing aborts the process: sends use
 * MSG_NOSIGNAL. After fork the child does not use its parent's connection
 * (the pid is checked): the parent's contexts fail in the child, which may
 * create its own. */
#define _GNU_SOURCE
#include "icd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define ARENA_ALIGN 64

/* ---- Locks ---------------------------------------------------------- */

/* The contexts this thread holds locked, with their depth: ctx->mu is
 * re-entrant for its holder. */
static _Thread_local struct {
	cl_context ctx;
	int depth;
} held[8];

static int *depth_of(cl_context ctx)
{
	for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
		if (held[i].ctx == ctx && held[i].depth > 0)
			return &held[i].depth;
	return NULL;
}

void ctx_lock(cl_context ctx)
{
	int *d = depth_of(ctx);
	if (d != NULL) {
		(*d)++;
		return;
	}
	pthread_mutex_lock(&ctx->mu);
	for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) {
		if (held[i].depth == 0) {
			held[i].ctx = ctx;
			held[i].depth = 1;
			return;
		}
	}
	/* More than eight contexts locked at once by one thread cannot happen:
	 * no call locks more than two. */
	vgpu_log("internal error: too many contexts locked by one thread");
	abort();
}

void ctx_unlock(cl_context ctx)
{
	int *d = depth_of(ctx);
	if (d == NULL || --*d > 0)
		return;
	/* Outermost: run the application's callbacks without the lock. */
	while (ctx->deferred != NULL) {
		struct vgpu_deferred *list = ctx->deferred;
		ctx->deferred = NULL;
		ctx->deferred_tail = &ctx->deferred;
		pthread_mutex_unlock(&ctx->mu);
		while (list != NULL) {
			struct vgpu_deferred *n = list->next;
			switch (list->what) {
			case DEFER_EVENT:
				((void(CL_CALLBACK *)(cl_event, cl_int, void *))list->fn)(list->obj, list->status,
											     list->data);
				vgpu_put(list->obj);
				break;
			case DEFER_MEM:
				((void(CL_CALLBACK *)(cl_mem, void *))list->fn)(list->obj, list->data);
				break;
			case DEFER_FREE:
				free(list->obj); /* a destroyed buffer, kept for its callbacks */
				break;
			}
			free(list);
			list = n;
		}
		pthread_mutex_lock(&ctx->mu);
	}
	pthread_mutex_unlock(&ctx->mu);
}

void ctx_wait(cl_context ctx)
{
	int *d = depth_of(ctx);
	if (d == NULL || *d != 1) {
		/* Waiting under a nested lock would keep the lock held. */
		pthread_mutex_unlock(&ctx->mu);
		sched_yield();
		pthread_mutex_lock(&ctx->mu);
		return;
	}
	pthread_cond_wait(&ctx->cv, &ctx->mu);
}

void vgpu_defer(cl_context ctx, int what, void *obj, void (*fn)(void), void *data, cl_int status)
{
	struct vgpu_deferred *d = calloc(1, sizeof *d);
	if (d == NULL) {
		if (what == DEFER_EVENT)
			vgpu_put(obj);
		return;
	}
	d->what = what;
	d->obj = obj;
	d->fn = fn;
	d->data = data;
	d->status = status;
	*ctx->deferred_tail = d;
	ctx->deferred_tail = &d->next;
}

/* ---- Fork ----------------------------------------------------------- */

static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static cl_context all_ctx[1024];
static size_t nall;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* Hold every context's lock across fork, so that the child never inherits
 * one held by a thread that does not exist there. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&all_mu);
	for (size_t i = 0; i < nall; i++)
		pthread_mutex_lock(&all_ctx[i]->mu);
}

static void fork_after(void)
{
	for (size_t i = nall; i-- > 0;)
		pthread_mutex_unlock(&all_ctx[i]->mu);
	pthread_mutex_unlock(&all_mu);
}

static void fork_init(void)
{
	pthread_atfork(fork_prepare, fork_after, fork_after);
}

static void track(cl_context ctx, int add)
{
	pthread_once(&fork_once, fork_init);
	pthread_mutex_lock(&all_mu);
	if (add) {
		if (nall < sizeof all_ctx / sizeof all_ctx[0])
			all_ctx[nall++] = ctx;
	} else {
		for (size_t i = 0; i < nall; i++) {
			if (all_ctx[i] == ctx) {
				all_ctx[i] = all_ctx[--nall];
				break;
			}
		}
	}
	pthread_mutex_unlock(&all_mu);
}

/* ---- Messages ------------------------------------------------------- */

const char *vgpu_socket_path(void)
{
	const char *p = secure_getenv("VGPUD_ICD_SOCKET");
	return p != NULL && p[0] != '\0' ? p : VGPU_ICDP_DEFAULT_SOCKET;
}

int vgpu_dial(int timeout_s)
{
	const char *path = vgpu_socket_path();
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct timeval tv = {.tv_sec = timeout_s};
	if ((timeout_s > 0 && (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
			       setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0)) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static int send_fd(int fd, const void *msg, size_t len, int pass)
{
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	if (pass >= 0) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof u.buf;
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass, sizeof pass);
	}
	for (;;) {
		ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n == (ssize_t)len)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return -1;
	}
}

/* recv_msg receives one datagram into buf (VGPU_ICDP_MAX_MESSAGE bytes);
 * its length, or -1 (closed, truncated, failed). */
static long recv_msg(int fd, uint8_t *buf)
{
	for (;;) {
		ssize_t n = recv(fd, buf, VGPU_ICDP_MAX_MESSAGE, MSG_TRUNC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || n > VGPU_ICDP_MAX_MESSAGE)
			return -1;
		return n;
	}
}

void conn_hdr(cl_context ctx, void *msg, uint16_t op, size_t len)
{
	struct vgpu_icdp_header *h = msg;
	h->op = op;
	h->flags = 0;
	h->len = (uint32_t)len;
	h->id = ++ctx->next_req;
}

uint64_t conn_req_id(cl_context ctx)
{
	return ++ctx->next_req;
}

int conn_ok(cl_context ctx)
{
	if (!ctx->lost && ctx->pid != getpid()) {
		/* A forked child: the socket and arenas are the parent's. */
		ctx->lost = 1;
		ctx->fd = -1;
		vgpu_fail_all(ctx);
	}
	return !ctx->lost;
}

void conn_lost(cl_context ctx, const char *why)
{
	if (ctx->lost)
		return;
	vgpu_log("connection to vgpu-icdd lost: %s", why);
	vgpu_context_notify(ctx, "vgpud: connection to vgpu-icdd lost: %s", why);
	ctx->lost = 1;
	if (ctx->fd >= 0)
		close(ctx->fd);
	ctx->fd = -1;
	vgpu_fail_all(ctx);
	pthread_cond_broadcast(&ctx->cv);
}

static long take_reply(cl_context ctx, const struct vgpu_icdp_header *h, void *reply, size_t cap);

/* ---- The submission queue (docs/icd-protocol.md "Submission queue") -- */

#define QUEUE_DATA(ctx) ((ctx)->queue + VGPU_ICDP_QUEUE_HEADER_SIZE)
#define QUEUE_WORD(ctx, t, off) ((t *)(void *)((ctx)->queue + (off)))

/* queue_put writes msg into the queue and publishes it: 0, or -1 when
 * there is no room (nothing written). */
static int queue_put(cl_context ctx, const void *msg, size_t len)
{
	uint64_t size = ctx->qsize, span = (len + VGPU_ICDP_QUEUE_ALIGN - 1) & ~(uint64_t)(VGPU_ICDP_QUEUE_ALIGN - 1);
	uint64_t off = ctx->qtail & (size - 1), to_end = size - off, need = span;
	if (span > to_end)
		need += to_end;
	uint64_t head = __atomic_load_n(QUEUE_WORD(ctx, uint64_t, VGPU_ICDP_QUEUE_HEAD_OFFSET), __ATOMIC_ACQUIRE);
	if (need > size - (ctx->qtail - head))
		return -1;
	if (span > to_end) {
		struct vgpu_icdp_header pad = {.op = VGPU_ICDP_OP_PAD, .len = (uint32_t)to_end};
		memcpy(QUEUE_DATA(ctx) + off, &pad, sizeof pad);
		ctx->qtail += to_end;
		off = 0;
	}
	memcpy(QUEUE_DATA(ctx) + off, msg, len);
	ctx->qtail += span;
	__atomic_store_n(QUEUE_WORD(ctx, uint64_t, VGPU_ICDP_QUEUE_TAIL_OFFSET), ctx->qtail, __ATOMIC_SEQ_CST);
	return 0;
}

/* queue_kick sends Kick when the daemon said it sleeps and this call is
 * the one that cleared its word: 0, or -1 (the send failed). */
static int queue_kick(cl_context ctx)
{
	uint32_t *sleep = QUEUE_WORD(ctx, uint32_t, VGPU_ICDP_QUEUE_SLEEP_OFFSET);
	if (__atomic_load_n(sleep, __ATOMIC_SEQ_CST) == 0 || __atomic_exchange_n(sleep, 0, __ATOMIC_SEQ_CST) != 1)
		return 0;
	struct vgpu_icdp_header h;
	conn_hdr(ctx, &h, VGPU_ICDP_OP_KICK, sizeof h);
	return send_fd(ctx->fd, &h, sizeof h, -1);
}

/* queue_send writes msg into the queue, waiting for the daemon to empty
 * it (Drain) when it is full, and kicks: 0, or -1 (the connection is
 * lost). */
static int queue_send(cl_context ctx, void *msg, size_t len)
{
	if (queue_put(ctx, msg, len) != 0) {
		struct vgpu_icdp_header d;
		conn_hdr(ctx, &d, VGPU_ICDP_OP_DRAIN, sizeof d);
		/* A daemon looking at the queue stops looking and reads the
		 * socket once the queue is empty. */
		__atomic_store_n(QUEUE_WORD(ctx, uint32_t, VGPU_ICDP_QUEUE_SOCKET_OFFSET), 1, __ATOMIC_SEQ_CST);
		if (queue_kick(ctx) != 0 || send_fd(ctx->fd, &d, sizeof d, -1) != 0) {
			conn_lost(ctx, "send Drain");
			return -1;
		}
		if (take_reply(ctx, &d, NULL, 0) < 0)
			return -1;
		if (queue_put(ctx, msg, len) != 0) {
			conn_lost(ctx, "no room in the submission queue after Drain");
			return -1;
		}
	}
	if (queue_kick(ctx) != 0) {
		conn_lost(ctx, "send Kick");
		return -1;
	}
	return 0;
}

int conn_send(cl_context ctx, void *msg, size_t len)
{
	if (!conn_ok(ctx))
		return -1;
	if (ctx->queue != NULL) {
		if (queue_send(ctx, msg, len) != 0)
			return -1;
		ctx->need_flush = 1;
		return 0;
	}
	if (send_fd(ctx->fd, msg, len, -1) != 0) {
		char why[128];
		snprintf(why, sizeof why, "send: %s", strerror(errno));
		conn_lost(ctx, why);
		return -1;
	}
	ctx->need_flush = 1;
	return 0;
}

/* take_reply receives the reply to the request with header h. */
static long take_reply(cl_context ctx, const struct vgpu_icdp_header *h, void *reply, size_t cap)
{
	long n = recv_msg(ctx->fd, ctx->rbuf);
	if (n < 0) {
		conn_lost(ctx, "the daemon closed the connection");
		return -1;
	}
	const struct vgpu_icdp_header *r = (const void *)ctx->rbuf;
	if ((size_t)n < sizeof *r || r->len != (uint32_t)n) {
		conn_lost(ctx, "malformed message from the daemon");
		return -1;
	}
	if (r->op == VGPU_ICDP_OP_ERROR) {
		char why[300];
		const struct vgpu_icdp_error_head *e = (const void *)(ctx->rbuf + sizeof *r);
		if ((size_t)n >= sizeof *r + sizeof *e) {
			int ml = (int)((size_t)n - sizeof *r - sizeof *e);
			snprintf(why, sizeof why, "daemon error %u: %.*s", e->code, ml > 200 ? 200 : ml,
				 (const char *)(e + 1));
		} else {
			snprintf(why, sizeof why, "daemon error");
		}
		conn_lost(ctx, why);
		return -1;
	}
	if (r->op != (h->op | VGPU_ICDP_REPLY_BIT) || r->id != h->id) {
		conn_lost(ctx, "reply out of order");
		return -1;
	}
	size_t body = (size_t)n - sizeof *r;
	if (cap > 0)
		memmove(reply, ctx->rbuf + sizeof *r, body < cap ? body : cap);
	return (long)body;
}

long conn_call(cl_context ctx, void *msg, size_t len, void *reply, size_t cap)
{
	if (conn_send(ctx, msg, len) != 0)
		return -1;
	return take_reply(ctx, msg, reply, cap);
}

long vgpu_call_fd(int fd, const void *msg, size_t len, uint8_t *buf)
{
	const struct vgpu_icdp_header *q = msg;
	if (send_fd(fd, msg, len, -1) != 0)
		return -1;
	long n = recv_msg(fd, buf);
	const struct vgpu_icdp_header *r = (const void *)buf;
	if (n < (long)sizeof *r || r->len != (uint32_t)n)
		return -1;
	if (r->op == VGPU_ICDP_OP_ERROR)
		return -2;
	if (r->op != (q->op | VGPU_ICDP_REPLY_BIT) || r->id != q->id)
		return -1;
	return n;
}

/* hello_version says Hello with version v: 0, -2 when the daemon answered
 * with an Error (a daemon that does not speak v), or -1. */
static int hello_version(int fd, uint32_t v, uint8_t *buf, long *n)
{
	struct {
		struct vgpu_icdp_header h;
		struct vgpu_icdp_hello b;
	} m = {.h = {.op = VGPU_ICDP_OP_HELLO, .len = sizeof m, .id = 1}, .b = {.version = v}};
	*n = vgpu_call_fd(fd, &m, sizeof m, buf);
	if (*n == -2)
		return -2;
	if (*n < (long)(sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_hello_reply_head)))
		return -1;
	return 0;
}

/* Discovery and device information need nothing of version 2: version 1
 * is answered by every daemon. */
int vgpu_hello(int fd, uint8_t *buf, long *n)
{
	return hello_version(fd, VGPU_ICDP_MIN_VERSION, buf, n) == 0 ? 0 : -1;
}

int vgpu_hello_newest(int *fd, int timeout_s, uint8_t *buf, long *n)
{
	int hr = hello_version(*fd, VGPU_ICDP_VERSION, buf, n);
	for (uint32_t v = VGPU_ICDP_VERSION - 1; hr == -2 && v >= VGPU_ICDP_MIN_VERSION; v--) {
		/* An older daemon answered an Error and closed: dial again and
		 * say the version before (a daemon of protocol 4 still gives
		 * the image section). */
		close(*fd);
		*fd = vgpu_dial(timeout_s);
		hr = *fd < 0 ? -1 : hello_version(*fd, v, buf, n);
	}
	return hr == 0 ? 0 : -1;
}

static void copy_name(const uint8_t *src, size_t len, char *out)
{
	memcpy(out, src, len);
	out[len] = '\0';
	for (char *p = out; *p != '\0'; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
			*p = '?';
}

int vgpu_conn_discover(struct _cl_device_id *devs, int max)
{
	int fd = vgpu_dial(0);
	if (fd < 0) {
		if (errno != ENOENT && errno != ECONNREFUSED)
			vgpu_log("connect %s: %s", vgpu_socket_path(), strerror(errno));
		return -1;
	}
	uint8_t *buf = malloc(VGPU_ICDP_MAX_MESSAGE);
	long n = 0;
	int count = -1;
	if (buf == NULL || vgpu_hello(fd, buf, &n) != 0) {
		vgpu_log("%s: no Hello reply from vgpu-icdd", vgpu_socket_path());
		goto out;
	}
	const struct vgpu_icdp_hello_reply_head *hr = (const void *)(buf + sizeof(struct vgpu_icdp_header));
	const struct vgpu_icdp_device_record *rec = (const void *)(hr + 1);
	size_t room = ((size_t)n - sizeof(struct vgpu_icdp_header) - sizeof *hr) / sizeof *rec;
	if (hr->version != VGPU_ICDP_MIN_VERSION || hr->device_count > room) {
		vgpu_log("%s: vgpu-icdd speaks protocol %u with %u devices, asked %d", vgpu_socket_path(),
			 hr->version, hr->device_count, VGPU_ICDP_MIN_VERSION);
		goto out;
	}
	count = 0;
	for (uint32_t i = 0; i < hr->device_count && count < max; i++) {
		if (rec[i].abi_version >> 16 != VGPU_VERSION_MAJOR) {
			vgpu_log("skipping device %u: ABI version %u.%u, this ICD drives %u.x", rec[i].index,
				 rec[i].abi_version >> 16, rec[i].abi_version & 0xffff, VGPU_VERSION_MAJOR);
			continue;
		}
		struct _cl_device_id *d = &devs[count++];
		memset(d, 0, sizeof *d);
		d->dispatch = &vgpu_dispatch;
		d->daemon = 1;
		d->index = rec[i].index;
		snprintf(d->bdf, sizeof d->bdf, "vgpu-icdd device %u", rec[i].index);
		d->version = rec[i].abi_version;
		d->features = rec[i].features;
		d->mem_size = rec[i].mem_size;
		d->max_alloc = rec[i].max_alloc;
		d->compute_units = rec[i].compute_units;
		d->max_work_group = rec[i].max_work_group;
		copy_name(rec[i].profile, VGPU_PROFILE_NAME_LEN, d->profile);
		copy_name(rec[i].name, VGPU_DEVICE_NAME_LEN, d->name);
	}
out:
	free(buf);
	close(fd);
	return count;
}

/* ---- Arenas --------------------------------------------------------- */

struct vgpu_free {
	struct vgpu_free *next;
	uint64_t off, len;
};

/* shared_memfd makes a memfd of size bytes sealed against shrinking, as
 * the daemon wants an arena or a queue, and maps it shared at *base: the
 * fd, or -1 with errno (nothing left open). */
static int shared_memfd(const char *name, uint64_t size, void **base)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	*base = MAP_FAILED;
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 ||
	    (*base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* call_fd sends msg (a request with a reply) passing fd, which it closes,
 * and receives the reply: its length, or -1 (the connection is lost). */
static long call_fd(cl_context ctx, void *msg, size_t len, int fd, void *reply, size_t cap)
{
	long n = -1;
	if (conn_ok(ctx)) {
		if (send_fd(ctx->fd, msg, len, fd) != 0) {
			char why[64];
			snprintf(why, sizeof why, "send %s", vgpu_icdp_op_name(((struct vgpu_icdp_header *)msg)->op));
			conn_lost(ctx, why);
		} else {
			n = take_reply(ctx, msg, reply, cap);
		}
	}
	close(fd);
	return n;
}

static cl_int attach(cl_context ctx, uint64_t size)
{
	if (ctx->narenas >= VGPU_ICDP_MAX_ARENAS)
		return CL_OUT_OF_HOST_MEMORY;
	struct vgpu_free *f = malloc(sizeof *f);
	if (f == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	void *base;
	int fd = shared_memfd("vgpud-icd-arena", size, &base);
	if (fd < 0) {
		vgpu_log("arena of %llu bytes: %s", (unsigned long long)size, strerror(errno));
		free(f);
		return CL_OUT_OF_HOST_MEMORY;
	}
	struct {
		struct vgpu_icdp_header h;
		struct vgpu_icdp_attach b;
	} m = {.b = {.arena = ctx->narenas + 1, .size = size}};
	conn_hdr(ctx, &m, VGPU_ICDP_OP_ATTACH, sizeof m);
	struct vgpu_icdp_attach_reply r = {0};
	long n = call_fd(ctx, &m, sizeof m, fd, &r, sizeof r);
	if (n < (long)sizeof r || r.status != 0) {
		if (n >= (long)sizeof r)
			vgpu_log("vgpu-icdd refused an arena of %llu bytes: status %u", (unsigned long long)size,
				 r.status);
		munmap(base, size);
		free(f);
		return CL_OUT_OF_RESOURCES;
	}
	struct vgpu_arena *a = &ctx->arenas[ctx->narenas++];
	a->base = base;
	a->size = size;
	f->next = NULL;
	f->off = 0;
	f->len = size;
	a->free = f;
	return CL_SUCCESS;
}

static int take(struct vgpu_arena *a, uint64_t n, uint64_t *off)
{
	for (struct vgpu_free **pp = &a->free; *pp != NULL; pp = &(*pp)->next) {
		struct vgpu_free *f = *pp;
		if (f->len < n)
			continue;
		*off = f->off;
		f->off += n;
		f->len -= n;
		if (f->len == 0) {
			*pp = f->next;
			free(f);
		}
		return 0;
	}
	return -1;
}

static int try_alloc(cl_context ctx, uint64_t n, struct vgpu_range *r)
{
	for (unsigned i = 0; i < ctx->narenas; i++) {
		if (take(&ctx->arenas[i], n, &r->off) == 0) {
			r->arena = i + 1;
			r->len = n;
			return 0;
		}
	}
	return -1;
}

cl_int arena_alloc(cl_context ctx, uint64_t n, struct vgpu_range *r)
{
	r->len = 0;
	if (!conn_ok(ctx))
		return CL_OUT_OF_RESOURCES;
	if (n == 0)
		n = 1;
	if (n > VGPU_ARENA_CAP)
		return CL_OUT_OF_HOST_MEMORY; /* transfers come in chunks: nothing asks for this much */
	n = (n + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
	if (try_alloc(ctx, n, r) == 0)
		return CL_SUCCESS;
	/* Collect what has completed, without waiting. */
	if (ctx->pend_head != NULL) {
		struct _cl_event *evs[VGPU_ICDP_MAX_WAIT_EVENTS];
		cl_uint k = 0;
		for (struct _cl_event *e = ctx->pend_head; e != NULL && k < VGPU_ICDP_MAX_WAIT_EVENTS; e = e->pnext)
			evs[k++] = e;
		vgpu_ask(ctx, VGPU_ICDP_OP_POLL, k, evs);
		if (try_alloc(ctx, n, r) == 0)
			return CL_SUCCESS;
	}
	/* The arena is all a context gets (VGPU_ARENA_CAP): wait for the
	 * oldest commands to finish and free their ranges. */
	while (conn_ok(ctx) && ctx->pend_head != NULL) {
		struct _cl_event *evs[64];
		cl_uint k = 0;
		for (struct _cl_event *e = ctx->pend_head; e != NULL && k < 64; e = e->pnext)
			evs[k++] = e;
		vgpu_ask(ctx, VGPU_ICDP_OP_WAIT, k, evs);
		if (try_alloc(ctx, n, r) == 0)
			return CL_SUCCESS;
	}
	return conn_ok(ctx) ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES;
}

void arena_free(cl_context ctx, struct vgpu_range *r)
{
	if (r->len == 0)
		return;
	uint64_t n = r->len;
	if (r->arena == 0 || r->arena > ctx->narenas)
		return;
	struct vgpu_arena *a = &ctx->arenas[r->arena - 1];
	r->len = 0;
	/* Give the pages of a large range beyond VGPU_ARENA_KEEP back (both
	 * sides map the memfd). */
	if (n >= (1ull << 20) && r->off + n > VGPU_ARENA_KEEP) {
		uint64_t lo = (r->off + 4095) & ~4095ull, hi = (r->off + n) & ~4095ull;
		if (lo < VGPU_ARENA_KEEP)
			lo = VGPU_ARENA_KEEP;
		if (hi > lo)
			madvise(a->base + lo, hi - lo, MADV_REMOVE);
	}
	struct vgpu_free **pp = &a->free, *prev = NULL;
	while (*pp != NULL && (*pp)->off < r->off) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	struct vgpu_free *next = *pp;
	if (prev != NULL && prev->off + prev->len == r->off) {
		prev->len += n;
		if (next != NULL && prev->off + prev->len == next->off) {
			prev->len += next->len;
			prev->next = next->next;
			free(next);
		}
		return;
	}
	if (next != NULL && r->off + n == next->off) {
		next->off = r->off;
		next->len += n;
		return;
	}
	struct vgpu_free *f = malloc(sizeof *f);
	if (f == NULL)
		return; /* the range is lost to this connection, nothing worse */
	f->off = r->off;
	f->len = n;
	f->next = next;
	*pp = f;
}

/* queue_attach makes the context's submission queue and passes it to the
 * daemon; on any failure the context goes on without one (its requests
 * travel as datagrams, as in version 1). VGPUD_ICD_QUEUE=0 turns it off. */
static void queue_attach(cl_context ctx)
{
	const char *env = secure_getenv("VGPUD_ICD_QUEUE");
	if (ctx->proto < 2 || (env != NULL && strcmp(env, "0") == 0))
		return;
	uint64_t size = VGPU_ICDP_QUEUE_HEADER_SIZE + VGPU_ICDP_DEFAULT_QUEUE_DATA;
	void *base;
	int fd = shared_memfd("vgpud-icd-queue", size, &base);
	if (fd < 0) {
		vgpu_log("submission queue of %llu bytes: %s", (unsigned long long)size, strerror(errno));
		return;
	}
	/* A forked child must not write its parent's queue: it does not
	 * even inherit it. */
	madvise(base, size, MADV_DONTFORK);
	struct {
		struct vgpu_icdp_header h;
		struct vgpu_icdp_queue b;
	} m = {.b = {.size = size}};
	conn_hdr(ctx, &m, VGPU_ICDP_OP_QUEUE, sizeof m);
	struct vgpu_icdp_queue_reply r = {0};
	long n = call_fd(ctx, &m, sizeof m, fd, &r, sizeof r);
	if (n < (long)sizeof r || r.status != 0) {
		if (n >= (long)sizeof r)
			vgpu_log("vgpu-icdd refused a submission queue: status %u", r.status);
		munmap(base, size);
		return;
	}
	ctx->queue = base;
	ctx->qsize = VGPU_ICDP_DEFAULT_QUEUE_DATA;
	ctx->qtail = 0;
}

/* ---- Open and close ------------------------------------------------- */

cl_int vgpu_conn_open(cl_context ctx)
{
	ctx->fd = -1;
	ctx->pid = getpid();
	ctx->deferred_tail = &ctx->deferred;
	ctx->rbuf = malloc(VGPU_ICDP_MAX_MESSAGE);
	if (ctx->rbuf == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	ctx->fd = vgpu_dial(0);
	if (ctx->fd < 0) {
		vgpu_log("connect %s: %s", vgpu_socket_path(), strerror(errno));
		ctx->lost = 1;
		return CL_DEVICE_NOT_AVAILABLE;
	}
	long n = 0;
	int hr = hello_version(ctx->fd, VGPU_ICDP_VERSION, ctx->rbuf, &n);
	for (uint32_t v = VGPU_ICDP_VERSION - 1; hr == -2 && v >= VGPU_ICDP_MIN_VERSION; v--) {
		/* An older daemon answers an Error and closes: dial again and
		 * say the version before. */
		close(ctx->fd);
		ctx->fd = vgpu_dial(0);
		hr = ctx->fd < 0 ? -1 : hello_version(ctx->fd, v, ctx->rbuf, &n);
	}
	if (hr == 0) {
		const struct vgpu_icdp_hello_reply_head *h = (const void *)(ctx->rbuf + sizeof(struct vgpu_icdp_header));
		ctx->proto = h->version;
	}
	if (hr != 0) {
		vgpu_log("%s: no Hello reply from vgpu-icdd", vgpu_socket_path());
		if (ctx->fd >= 0)
			close(ctx->fd);
		ctx->fd = -1;
		ctx->lost = 1;
		return CL_DEVICE_NOT_AVAILABLE;
	}
	ctx->next_req = 1;
	/* One arena of VGPU_ARENA_CAP bytes: pages are allocated as they are
	 * touched, and large ranges given back when freed. */
	cl_int err = attach(ctx, VGPU_ARENA_CAP);
	if (err != CL_SUCCESS) {
		if (ctx->fd >= 0)
			close(ctx->fd);
		ctx->fd = -1;
		ctx->lost = 1;
		return err;
	}
	queue_attach(ctx);
	if (ctx->lost)
		return CL_DEVICE_NOT_AVAILABLE;
	track(ctx, 1);
	return CL_SUCCESS;
}

void vgpu_conn_close(cl_context ctx)
{
	track(ctx, 0);
	if (ctx->queue != NULL && ctx->pid == getpid())
		/* The daemon stops looking at the queue and reads the socket's
		 * end at once. */
		__atomic_store_n(QUEUE_WORD(ctx, uint32_t, VGPU_ICDP_QUEUE_SOCKET_OFFSET), 1, __ATOMIC_SEQ_CST);
	if (ctx->fd >= 0 && ctx->pid == getpid())
		close(ctx->fd);
	ctx->fd = -1;
	for (unsigned i = 0; i < ctx->narenas; i++) {
		struct vgpu_arena *a = &ctx->arenas[i];
		munmap(a->base, a->size);
		while (a->free != NULL) {
			struct vgpu_free *n = a->free->next;
			free(a->free);
			a->free = n;
		}
	}
	ctx->narenas = 0;
	if (ctx->queue != NULL)
		munmap(ctx->queue, VGPU_ICDP_QUEUE_HEADER_SIZE + ctx->qsize);
	ctx->queue = NULL;
	free(ctx->rbuf);
	ctx->rbuf = NULL;
}

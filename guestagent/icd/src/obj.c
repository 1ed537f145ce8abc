/* obj.c: the registry of live objects, their reference counts and the
 * retain and release entries every kind shares.
 *
 * An application may pass any pointer as a handle: a made-up one, one of
 * another ICD (the loader forwards anything whose first word is our
 * dispatch table), or one it already released. The registry is a hash set
 * of the addresses of live handles with their kind; a handle is
 * dereferenced only after it is found there. A released handle leaves the
 * set when its application count reaches 0, before anything frees it. */
#include "icd.h"

#include <stdlib.h>

struct slot {
	uintptr_t addr; /* 0 empty, 1 deleted */
	enum vgpu_kind kind;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot *slots;
static size_t cap, used, live; /* used counts deleted slots too */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A fork while another thread holds the registry lock would leave it held
 * forever in the child: hold it across fork. */
static void reg_prepare(void)
{
	pthread_mutex_lock(&reg_mu);
}

static void reg_after(void)
{
	pthread_mutex_unlock(&reg_mu);
}

static void atfork_init(void)
{
	pthread_atfork(reg_prepare, reg_after, reg_after);
}

static size_t hash(uintptr_t a)
{
	uint64_t x = (uint64_t)a;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x;
}

static struct slot *find(uintptr_t a)
{
	if (cap == 0)
		return NULL;
	for (size_t i = hash(a) & (cap - 1), n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
		if (slots[i].addr == a)
			return &slots[i];
		if (slots[i].addr == 0)
			return NULL;
	}
	return NULL;
}

static int grow(void)
{
	size_t ncap = cap ? cap : 256;
	while (live * 2 + 2 > ncap)
		ncap *= 2;
	struct slot *n = calloc(ncap, sizeof *n);
	if (n == NULL)
		return -1;
	for (size_t i = 0; i < cap; i++) {
		if (slots[i].addr <= 1)
			continue;
		size_t j = hash(slots[i].addr) & (ncap - 1);
		while (n[j].addr != 0)
			j = (j + 1) & (ncap - 1);
		n[j] = slots[i];
	}
	free(slots);
	slots = n;
	cap = ncap;
	used = live;
	return 0;
}

void vgpu_obj_init(struct vgpu_obj *o, enum vgpu_kind kind)
{
	pthread_once(&atfork_once, atfork_init);
	o->dispatch = &vgpu_dispatch;
	o->kind = kind;
	o->refs = 0;
	atomic_init(&o->iref, 1);
}

void vgpu_obj_publish(struct vgpu_obj *o)
{
	pthread_mutex_lock(&reg_mu);
	/* Keep the table at most half full; a failed grow only makes probing
	 * longer until the table is full, where the object stays unpublished
	 * (and so unusable, never unsafe). */
	if ((used + 1) * 2 > cap)
		grow();
	if (used + 1 < cap) {
		size_t i = hash((uintptr_t)o) & (cap - 1);
		while (slots[i].addr > 1)
			i = (i + 1) & (cap - 1);
		if (slots[i].addr == 0)
			used++;
		slots[i].addr = (uintptr_t)o;
		slots[i].kind = o->kind;
		live++;
		o->refs = 1;
	}
	pthread_mutex_unlock(&reg_mu);
}

void *vgpu_obj_get(const void *handle, enum vgpu_kind kind)
{
	if (handle == NULL)
		return NULL;
	pthread_mutex_lock(&reg_mu);
	struct slot *s = find((uintptr_t)handle);
	struct vgpu_obj *o = NULL;
	if (s != NULL && s->kind == kind) {
		o = (struct vgpu_obj *)(uintptr_t)handle;
		o->iref++;
	}
	pthread_mutex_unlock(&reg_mu);
	return o;
}

int vgpu_obj_retain(const void *handle, enum vgpu_kind kind)
{
	if (handle == NULL)
		return -1;
	pthread_mutex_lock(&reg_mu);
	struct slot *s = find((uintptr_t)handle);
	int ok = s != NULL && s->kind == kind;
	if (ok)
		((struct vgpu_obj *)(uintptr_t)handle)->refs++;
	pthread_mutex_unlock(&reg_mu);
	return ok ? 0 : -1;
}

void *vgpu_obj_release(const void *handle, enum vgpu_kind kind, int *last)
{
	*last = 0;
	if (handle == NULL)
		return NULL;
	pthread_mutex_lock(&reg_mu);
	struct slot *s = find((uintptr_t)handle);
	struct vgpu_obj *o = NULL;
	if (s != NULL && s->kind == kind) {
		o = (struct vgpu_obj *)(uintptr_t)handle;
		if (--o->refs == 0) {
			s->addr = 1;
			live--;
			*last = 1;
		}
	}
	pthread_mutex_unlock(&reg_mu);
	return o;
}

cl_uint vgpu_obj_refs(const struct vgpu_obj *o)
{
	pthread_mutex_lock(&reg_mu);
	cl_uint r = o->refs;
	pthread_mutex_unlock(&reg_mu);
	return r;
}

void vgpu_put(struct vgpu_obj *o)
{
	if (o == NULL || --o->iref != 0)
		return;
	switch (o->kind) {
	case VGPU_CONTEXT: vgpu_context_destroy((cl_context)o); break;
	case VGPU_QUEUE: vgpu_queue_destroy((cl_command_queue)o); break;
	case VGPU_MEM: vgpu_mem_destroy((cl_mem)o); break;
	case VGPU_PROGRAM: vgpu_program_destroy((cl_program)o); break;
	case VGPU_KERNEL: vgpu_kernel_destroy((cl_kernel)o); break;
	case VGPU_EVENT: vgpu_event_destroy((cl_event)o); break;
	case VGPU_SAMPLER: vgpu_sampler_destroy((cl_sampler)o); break;
	}
}

cl_int vgpu_retain(const void *handle, enum vgpu_kind kind, cl_int invalid)
{
	return vgpu_obj_retain(handle, kind) == 0 ? CL_SUCCESS : invalid;
}

cl_int vgpu_release(const void *handle, enum vgpu_kind kind, cl_int invalid, void (*last)(struct vgpu_obj *))
{
	int is_last;
	struct vgpu_obj *o = vgpu_obj_release(handle, kind, &is_last);
	if (o == NULL)
		return invalid;
	if (is_last)
		last(o);
	return CL_SUCCESS;
}

void vgpu_put_locked(struct vgpu_obj *o)
{
	cl_context ctx = NULL;
	switch (o->kind) {
	case VGPU_CONTEXT: break;
	case VGPU_QUEUE: ctx = ((cl_command_queue)o)->ctx; break;
	case VGPU_MEM: ctx = ((cl_mem)o)->ctx; break;
	case VGPU_PROGRAM: ctx = ((cl_program)o)->ctx; break;
	case VGPU_KERNEL: ctx = ((cl_kernel)o)->ctx; break;
	case VGPU_EVENT: ctx = ((cl_event)o)->ctx; break;
	case VGPU_SAMPLER: ctx = ((cl_sampler)o)->ctx; break;
	}
	if (ctx == NULL) { /* a context has no context to lock */
		vgpu_put(o);
		return;
	}
	ENTER(ctx);
	vgpu_put(o);
	LEAVE(ctx);
}

/* context.c: contexts and command queues.
 *
 * A context is one connection to vgpu-icdd (conn.c) and one device: the
 * daemon places a buffer on one device, and the ICD does not move buffers
 * between devices, so a context of several distinct devices is refused
 * (CL_OUT_OF_RESOURCES, with a message). Queues are in order: a request
 * for an out-of-order queue gets one whose commands run in order, which
 * OpenCL allows (out-of-order execution is permitted, never required). */
#include "icd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void vgpu_context_notify(cl_context ctx, const char *fmt, ...)
{
	/* The message goes to stderr (vgpu_log) already; pfn_notify is
	 * optional ("may be called"), and calling it here, under the
	 * context's lock, could deadlock an application that calls back. */
	(void)ctx;
	(void)fmt;
}

/* check_props checks a property list: the platform, if named, must be
 * ours; CL_CONTEXT_INTEROP_USER_SYNC is accepted; nothing twice. */
static cl_int check_props(const cl_context_properties *props)
{
	if (props == NULL)
		return CL_SUCCESS;
	int seen_platform = 0, seen_sync = 0;
	for (const cl_context_properties *p = props; *p != 0; p += 2) {
		switch (p[0]) {
		case CL_CONTEXT_PLATFORM:
			if (seen_platform++)
				return CL_INVALID_PROPERTY;
			if ((cl_platform_id)p[1] != &vgpu_platform)
				return CL_INVALID_PLATFORM;
			break;
		case CL_CONTEXT_INTEROP_USER_SYNC:
			if (seen_sync++)
				return CL_INVALID_PROPERTY;
			if (p[1] != CL_TRUE && p[1] != CL_FALSE)
				return CL_INVALID_PROPERTY;
			break;
		default: return CL_INVALID_PROPERTY;
		}
	}
	return CL_SUCCESS;
}

static cl_context create(const cl_context_properties *props, cl_device_id dev,
			 void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *data,
			 cl_int *err)
{
	if (!dev->daemon) {
		vgpu_log("%s: no vgpu-icdd at %s; the device answers queries only", dev->bdf, vgpu_socket_path());
		*err = CL_DEVICE_NOT_AVAILABLE;
		return NULL;
	}
	cl_context ctx = calloc(1, sizeof *ctx);
	if (ctx == NULL) {
		*err = CL_OUT_OF_HOST_MEMORY;
		return NULL;
	}
	vgpu_obj_init(&ctx->obj, VGPU_CONTEXT);
	ctx->dev = dev;
	ctx->notify = notify;
	ctx->notify_data = data;
	/* CL_CONTEXT_PROPERTIES returns the list as given (checked: at most
	 * two pairs). */
	if (props != NULL) {
		size_t n = 0;
		while (props[n] != 0 && n < 4)
			n += 2;
		memcpy(ctx->props, props, n * sizeof *props);
		ctx->props[n] = 0;
		ctx->nprops = n + 1;
	}
	pthread_mutex_init(&ctx->mu, NULL);
	pthread_cond_init(&ctx->cv, NULL);
	*err = vgpu_conn_open(ctx);
	if (*err != CL_SUCCESS) {
		vgpu_conn_close(ctx);
		pthread_mutex_destroy(&ctx->mu);
		pthread_cond_destroy(&ctx->cv);
		free(ctx);
		return NULL;
	}
	vgpu_obj_publish(&ctx->obj);
	return ctx;
}

/* The loader reads a handle's dispatch pointer before the ICD can check
 * the handle, so a released context's memory is kept (its first word
 * intact) for the next few releases: a call on a context just released
 * reaches the registry and fails with CL_INVALID_CONTEXT instead of
 * jumping through freed memory. */
#define CTX_QUARANTINE 8
static pthread_mutex_t quarantine_mu = PTHREAD_MUTEX_INITIALIZER;
static cl_context quarantine[CTX_QUARANTINE];
static unsigned quarantine_next;

void vgpu_context_destroy(cl_context ctx)
{
	vgpu_conn_close(ctx);
	/* "called ... in the reverse order they were registered", once
	 * everything of the context is released (this is the last iref). */
	while (ctx->dtors != NULL) {
		struct vgpu_ctxcb *cb = ctx->dtors;
		ctx->dtors = cb->next;
		cb->fn(ctx, cb->data);
		free(cb);
	}
	pthread_mutex_destroy(&ctx->mu);
	pthread_cond_destroy(&ctx->cv);
	pthread_mutex_lock(&quarantine_mu);
	cl_context old = quarantine[quarantine_next];
	quarantine[quarantine_next] = ctx;
	quarantine_next = (quarantine_next + 1) % CTX_QUARANTINE;
	pthread_mutex_unlock(&quarantine_mu);
	free(old);
}

cl_context CL_API_CALL vgpu_clCreateContext(const cl_context_properties *properties, cl_uint num_devices,
					    const cl_device_id *devices,
					    void(CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *),
					    void *user_data, cl_int *errcode_ret)
{
	cl_int err;
	cl_context ctx = NULL;
	if ((err = check_props(properties)) != CL_SUCCESS)
		goto out;
	if (devices == NULL || num_devices == 0 || (pfn_notify == NULL && user_data != NULL)) {
		err = CL_INVALID_VALUE;
		goto out;
	}
	for (cl_uint i = 0; i < num_devices; i++) {
		if (!vgpu_device_valid(devices[i])) {
			err = CL_INVALID_DEVICE;
			goto out;
		}
	}
	for (cl_uint i = 1; i < num_devices; i++) {
		if (devices[i] != devices[0]) {
			vgpu_log("a context of several vGPUs is not supported: a buffer lives on one device");
			err = CL_OUT_OF_RESOURCES;
			goto out;
		}
	}
	ctx = create(properties, devices[0], pfn_notify, user_data, &err);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return ctx;
}

cl_context CL_API_CALL vgpu_clCreateContextFromType(const cl_context_properties *properties,
						    cl_device_type device_type,
						    void(CL_CALLBACK *pfn_notify)(const char *, const void *, size_t,
										 void *),
						    void *user_data, cl_int *errcode_ret)
{
	cl_int err;
	cl_context ctx = NULL;
	if ((err = check_props(properties)) != CL_SUCCESS)
		goto out;
	if (pfn_notify == NULL && user_data != NULL) {
		err = CL_INVALID_VALUE;
		goto out;
	}
	struct _cl_device_id *list;
	cl_uint n;
	if ((err = vgpu_devices_of_type(device_type, &list, &n)) != CL_SUCCESS)
		goto out;
	if (n == 0) {
		err = CL_DEVICE_NOT_FOUND;
		goto out;
	}
	if (n > 1) {
		vgpu_log("a context of several vGPUs is not supported: a buffer lives on one device");
		err = CL_OUT_OF_RESOURCES;
		goto out;
	}
	ctx = create(properties, &list[0], pfn_notify, user_data, &err);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return ctx;
}

cl_int CL_API_CALL vgpu_clRetainContext(cl_context context)
{
	return vgpu_retain(context, VGPU_CONTEXT, CL_INVALID_CONTEXT);
}

cl_int CL_API_CALL vgpu_clReleaseContext(cl_context context)
{
	return vgpu_release(context, VGPU_CONTEXT, CL_INVALID_CONTEXT, vgpu_put);
}

cl_int CL_API_CALL vgpu_clSetContextDestructorCallback(cl_context context,
							void(CL_CALLBACK *fn)(cl_context, void *), void *user_data)
{
	if (fn == NULL) {
		cl_context c = GET(context, VGPU_CONTEXT);
		if (c == NULL)
			return CL_INVALID_CONTEXT;
		PUT(c);
		return CL_INVALID_VALUE;
	}
	struct vgpu_ctxcb *cb = calloc(1, sizeof *cb);
	if (cb == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		free(cb);
		return CL_INVALID_CONTEXT;
	}
	ENTER(ctx);
	cb->fn = fn;
	cb->data = user_data;
	cb->next = ctx->dtors;
	ctx->dtors = cb;
	PUT(ctx);
	LEAVE(ctx);
	return CL_SUCCESS;
}

cl_int CL_API_CALL vgpu_clGetContextInfo(cl_context context, cl_context_info param_name, size_t param_value_size,
					 void *param_value, size_t *param_value_size_ret)
{
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL)
		return CL_INVALID_CONTEXT;
	cl_int err;
	cl_uint u;
	switch (param_name) {
	case CL_CONTEXT_REFERENCE_COUNT:
		u = vgpu_obj_refs(&ctx->obj);
		err = vgpu_info(&u, sizeof u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_CONTEXT_NUM_DEVICES:
		u = 1;
		err = vgpu_info(&u, sizeof u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_CONTEXT_DEVICES:
		err = vgpu_info(&ctx->dev, sizeof ctx->dev, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_CONTEXT_PROPERTIES:
		err = vgpu_info(ctx->props, ctx->nprops * sizeof ctx->props[0], param_value_size, param_value,
				param_value_size_ret);
		break;
	default: err = CL_INVALID_VALUE; break;
	}
	PUT(ctx);
	return err;
}

/* ---- Queues --------------------------------------------------------- */

#define QUEUE_PROPS (CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE)

/* The properties OpenCL defines for a queue on the host, and those of a
 * queue on the device, which a vGPU does not offer. */
#define QUEUE_PROPS_KNOWN (QUEUE_PROPS | CL_QUEUE_ON_DEVICE | CL_QUEUE_ON_DEVICE_DEFAULT)

/* check_queue_props checks clCreateCommandQueueWithProperties' list and
 * returns its CL_QUEUE_PROPERTIES in *bits: a property named twice, one
 * OpenCL does not define (the priority and throttle extensions are not
 * reported), or CL_QUEUE_SIZE (a device queue's) is CL_INVALID_VALUE;
 * a device queue is CL_INVALID_QUEUE_PROPERTIES (valid, not supported). */
static cl_int check_queue_props(const cl_queue_properties *props, cl_command_queue_properties *bits)
{
	*bits = 0;
	int seen = 0;
	for (const cl_queue_properties *p = props; p != NULL && *p != 0; p += 2) {
		if (p[0] != CL_QUEUE_PROPERTIES || seen++)
			return CL_INVALID_VALUE;
		if ((p[1] & ~(cl_queue_properties)QUEUE_PROPS_KNOWN) != 0)
			return CL_INVALID_VALUE;
		if ((p[1] & (CL_QUEUE_ON_DEVICE | CL_QUEUE_ON_DEVICE_DEFAULT)) != 0)
			return CL_INVALID_QUEUE_PROPERTIES;
		*bits = (cl_command_queue_properties)p[1];
	}
	return CL_SUCCESS;
}

/* create_queue makes a queue; props_err is the verdict on a property list
 * (clCreateCommandQueueWithProperties), reported after the context and
 * the device are checked, as clCreateCommandQueue checks its bits. */
static cl_command_queue create_queue(cl_context context, cl_device_id device, cl_command_queue_properties properties,
				     const cl_queue_properties *list, cl_int props_err, cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_command_queue q = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (!vgpu_device_valid(device) || device != ctx->dev) {
		err = CL_INVALID_DEVICE;
		goto put;
	}
	if (props_err != CL_SUCCESS || (properties & ~(cl_command_queue_properties)QUEUE_PROPS) != 0) {
		err = props_err != CL_SUCCESS ? props_err : CL_INVALID_VALUE;
		goto put;
	}
	ctx_lock(ctx);
	if (!conn_ok(ctx)) {
		err = CL_OUT_OF_RESOURCES;
	} else if ((q = calloc(1, sizeof *q)) == NULL) {
		err = CL_OUT_OF_HOST_MEMORY;
	} else {
		vgpu_obj_init(&q->obj, VGPU_QUEUE);
		q->ctx = ctx;
		IREF(ctx);
		q->dev = device;
		q->props = properties;
		if (list != NULL) {
			/* Checked: at most one pair. */
			size_t n = list[0] != 0 ? 2 : 0;
			memcpy(q->props_array, list, n * sizeof *list);
			q->props_array[n] = 0;
			q->nprops_array = n + 1;
		}
		q->next = ctx->queues;
		ctx->queues = q;
		vgpu_obj_publish(&q->obj);
	}
	ctx_unlock(ctx);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return q;
}

cl_command_queue CL_API_CALL vgpu_clCreateCommandQueue(cl_context context, cl_device_id device,
						       cl_command_queue_properties properties,
						       cl_int *errcode_ret)
{
	return create_queue(context, device, properties, NULL, CL_SUCCESS, errcode_ret);
}

cl_command_queue CL_API_CALL vgpu_clCreateCommandQueueWithProperties(cl_context context, cl_device_id device,
								     const cl_queue_properties *properties,
								     cl_int *errcode_ret)
{
	cl_command_queue_properties bits;
	cl_int err = check_queue_props(properties, &bits);
	/* NULL: CL_QUEUE_PROPERTIES_ARRAY returns nothing, as for
	 * clCreateCommandQueue; an empty list returns {0}. */
	return create_queue(context, device, bits, properties, err, errcode_ret);
}

void vgpu_queue_destroy(cl_command_queue q)
{
	cl_context ctx = q->ctx;
	ctx_lock(ctx);
	for (cl_command_queue *pp = &ctx->queues; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	}
	ctx_unlock(ctx);
	free(q);
	PUT(ctx);
}

static void flush(cl_context ctx)
{
	vgpu_release_held(ctx);
	if (ctx->need_flush && conn_ok(ctx)) {
		struct vgpu_icdp_header h;
		conn_hdr(ctx, &h, VGPU_ICDP_OP_FLUSH, sizeof h);
		if (conn_send(ctx, &h, sizeof h) == 0)
			ctx->need_flush = 0;
	}
}

/* "clReleaseCommandQueue performs an implicit flush." The last release
 * also waits for the queue's sent commands, as PoCL's does: a pending
 * event holds its context, and nothing else would ever collect the
 * reports of a queue nobody names any more, so without the wait a
 * context released with commands in flight would never be destroyed
 * (its connection, arena and destructor callbacks with it). Commands
 * held back behind a user event are not waited for: the application may
 * set the event after releasing the queue. */
static void queue_last(struct vgpu_obj *o)
{
	cl_command_queue q = (cl_command_queue)o;
	cl_context ctx = q->ctx;
	ENTER(ctx);
	flush(ctx);
	if (q->held_head == NULL)
		vgpu_queue_finish(q);
	PUT(q);
	LEAVE(ctx);
}

cl_int CL_API_CALL vgpu_clRetainCommandQueue(cl_command_queue queue)
{
	return vgpu_retain(queue, VGPU_QUEUE, CL_INVALID_COMMAND_QUEUE);
}

cl_int CL_API_CALL vgpu_clReleaseCommandQueue(cl_command_queue queue)
{
	return vgpu_release(queue, VGPU_QUEUE, CL_INVALID_COMMAND_QUEUE, queue_last);
}

cl_int CL_API_CALL vgpu_clGetCommandQueueInfo(cl_command_queue queue, cl_command_queue_info param_name,
					      size_t param_value_size, void *param_value,
					      size_t *param_value_size_ret)
{
	cl_command_queue q = GET(queue, VGPU_QUEUE);
	if (q == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	cl_int err;
	cl_uint u;
	switch (param_name) {
	case CL_QUEUE_CONTEXT:
		err = vgpu_info(&q->ctx, sizeof q->ctx, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_QUEUE_DEVICE:
		err = vgpu_info(&q->dev, sizeof q->dev, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_QUEUE_REFERENCE_COUNT:
		u = vgpu_obj_refs(&q->obj);
		err = vgpu_info(&u, sizeof u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_QUEUE_PROPERTIES:
		err = vgpu_info(&q->props, sizeof q->props, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_QUEUE_PROPERTIES_ARRAY:
		err = vgpu_info(q->props_array, q->nprops_array * sizeof q->props_array[0], param_value_size,
				param_value, param_value_size_ret);
		break;
	case CL_QUEUE_DEVICE_DEFAULT: {
		/* No device queues: NULL. */
		cl_command_queue none = NULL;
		err = vgpu_info(&none, sizeof none, param_value_size, param_value, param_value_size_ret);
		break;
	}
	case CL_QUEUE_SIZE:
		/* A device queue's: "not a valid command-queue for param_name". */
		err = CL_INVALID_COMMAND_QUEUE;
		break;
	default: err = CL_INVALID_VALUE; break;
	}
	PUT(q);
	return err;
}

cl_int CL_API_CALL vgpu_clSetCommandQueueProperty(cl_command_queue queue, cl_command_queue_properties properties,
						  cl_bool enable, cl_command_queue_properties *old_properties)
{
	cl_command_queue q = GET(queue, VGPU_QUEUE);
	if (q == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	cl_int err = CL_SUCCESS;
	if ((properties & ~(cl_command_queue_properties)QUEUE_PROPS) != 0) {
		err = CL_INVALID_VALUE;
	} else {
		cl_context ctx = q->ctx;
		ENTER(ctx);
		if (old_properties != NULL)
			*old_properties = q->props;
		if (enable)
			q->props |= properties;
		else
			q->props &= ~properties;
		LEAVE(ctx);
	}
	PUT(q);
	return err;
}

cl_int CL_API_CALL vgpu_clFlush(cl_command_queue queue)
{
	ENTER_OBJ(cl_command_queue, q, queue, VGPU_QUEUE, CL_INVALID_COMMAND_QUEUE);
	flush(ctx);
	cl_int err = conn_ok(ctx) ? CL_SUCCESS : CL_OUT_OF_RESOURCES;
	PUT(q);
	LEAVE(ctx);
	return err;
}

cl_int vgpu_queue_finish(cl_command_queue q)
{
	cl_context ctx = q->ctx;
	for (;;) {
		vgpu_release_held(ctx);
		if (q->held_head != NULL) {
			ctx_wait(ctx);
			continue;
		}
		struct _cl_event *evs[VGPU_ICDP_MAX_WAIT_EVENTS];
		cl_uint k = 0;
		for (struct _cl_event *e = ctx->pend_head; e != NULL && k < VGPU_ICDP_MAX_WAIT_EVENTS; e = e->pnext)
			if (e->queue == q)
				evs[k++] = e;
		if (k == 0)
			break;
		if (vgpu_ask(ctx, VGPU_ICDP_OP_WAIT, k, evs) != 0)
			break;
	}
	return conn_ok(ctx) ? CL_SUCCESS : CL_OUT_OF_RESOURCES;
}

cl_int CL_API_CALL vgpu_clFinish(cl_command_queue queue)
{
	ENTER_OBJ(cl_command_queue, q, queue, VGPU_QUEUE, CL_INVALID_COMMAND_QUEUE);
	cl_int err = vgpu_queue_finish(q);
	PUT(q);
	LEAVE(ctx);
	return err;
}

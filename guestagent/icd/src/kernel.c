/* kernel.c: kernels, their arguments and queries, and launches.
 *
 * Everything a kernel query answers comes from the program-information
 * blob the device returned with the build (docs/ABI.md
 * "Program-information blob"): names, argument qualifiers and types,
 * work-group sizes, local and private memory. An argument's kind follows
 * its address qualifier: __global and __constant pointers are buffers,
 * __local pointers local memory, the rest scalars (whose size is checked
 * against the type when the type is a built-in scalar or vector).
 *
 * An argument the device ABI cannot carry is refused at launch with the
 * error OpenCL 1.2 gives for it: a sub-buffer whose origin is not 0 (the
 * device names buffers by handle, with no offset:
 * CL_MISALIGNED_SUB_BUFFER_OFFSET). A NULL buffer argument names a small
 * buffer of the context instead (the ABI has no null buffer; pyopencl
 * passes NULL for empty arrays), so a kernel that compares the pointer
 * with NULL sees it non-NULL. A scalar of more than 256 bytes (the ABI's
 * limit) is refused by clSetKernelArg with CL_INVALID_ARG_SIZE. */
#include "icd.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int built(const struct _cl_program *p)
{
	return p->status == CL_BUILD_SUCCESS && p->bintype == CL_PROGRAM_BINARY_TYPE_EXECUTABLE && p->id != 0;
}

/* ---- printf --------------------------------------------------------
 *
 * A kernel's printf output is written by the physical device's runtime on
 * the host. Where the vGPU delivers it (ABI 1.7, VGPU_FEATURE_PRINTF) and
 * vgpu-icdd passes printf buffers on (protocol version 3), a launch of a
 * program whose source calls printf names the context's printf buffer,
 * and a read of that buffer follows it on the queue; when the read
 * completes, the output goes to this process's standard output (and what
 * did not fit is counted on stderr). docs/icd.md "printf". */

int vgpu_printf_ok(const struct _cl_device_id *dev)
{
	return dev->daemon && (dev->features & VGPU_FEATURE_PRINTF) != 0;
}

/* spirv_prints reports whether a SPIR-V module (len bytes) calls
 * OpenCL.std's printf: an OpExtInst (12) of instruction 184 on the set an
 * OpExtInstImport (11) named "OpenCL.std" gave. A module that is cut or
 * malformed is read as far as it goes (the device refuses it anyway). */
static int spirv_prints(const char *m, size_t len)
{
	size_t n = len / 4;
	uint32_t std = 0;
	for (size_t i = 5; i < n;) {
		uint32_t w0;
		memcpy(&w0, m + 4 * i, 4);
		size_t wc = w0 >> 16;
		uint32_t op = w0 & 0xffff;
		if (wc == 0 || wc > n - i)
			return 0;
		uint32_t a[4] = {0};
		memcpy(a, m + 4 * (i + 1), 4 * (wc - 1 < 4 ? wc - 1 : 4));
		if (op == 11 && wc >= 3 && 4 * (wc - 2) >= sizeof "OpenCL.std" &&
		    memcmp(m + 4 * (i + 2), "OpenCL.std", sizeof "OpenCL.std") == 0)
			std = a[0];
		if (op == 12 && wc >= 5 && std != 0 && a[2] == std && a[3] == 184)
			return 1;
		i += wc;
	}
	return 0;
}

/* prints reports whether p's source calls printf (textually: a false
 * positive costs a read of the printf buffer, never output; a SPIR-V
 * module's by its instructions). Cached per built source. ctx locked. */
static int prints(struct _cl_program *p)
{
	if (p->printf_src != p->built_src) {
		p->printf_src = p->built_src;
		if (p->il)
			p->prints = p->built_src != NULL && spirv_prints(p->built_src, p->built_len);
		else
			p->prints = p->built_src != NULL && strstr(p->built_src, "printf") != NULL;
	}
	return p->prints;
}

/* vgpu_printout writes what a launch printed, given the printf buffer's
 * first n bytes as the device wrote them (read back into the arena): the
 * header is checked as abi.UnmarshalPrintfHeader checks it (a guest
 * trusts the device no further), the output goes to stdout through the
 * C library (after what the application itself printed and has not
 * flushed). */
void vgpu_printout(const uint8_t *b, uint64_t n)
{
	struct vgpu_printf_header h;
	if (b == NULL || n < sizeof h)
		return;
	memcpy(&h, b, sizeof h);
	int captured = (h.flags & VGPU_PRINTF_CAPTURED) != 0;
	if ((h.flags & ~(uint32_t)VGPU_PRINTF_CAPTURED) != 0 || h.length > n - sizeof h ||
	    (!captured && (h.length != 0 || h.dropped != 0))) {
		vgpu_log("a kernel's printf output: the device wrote a bad header (flags %#x, %llu bytes)", h.flags,
			 (unsigned long long)h.length);
		return;
	}
	if (!captured) {
		static atomic_flag logged = ATOMIC_FLAG_INIT;
		if (!atomic_flag_test_and_set(&logged))
			vgpu_log("this vGPU's host does not capture kernels' printf output: it is lost");
		return;
	}
	if (h.length > 0) {
		fwrite(b + sizeof h, 1, h.length, stdout);
		fflush(stdout);
	}
	if (h.dropped != 0)
		vgpu_log("a kernel's printf output: %u more bytes were dropped (the printf buffer holds %u)", h.dropped,
			 VGPU_PRINTF_BYTES);
}

/* printf_trail makes ev, a launch naming the printf buffer, print what
 * the kernel printed when it completes: the launch request goes under an
 * internal event (a chunk of ev, whose failure is ev's), and a read of the
 * printf buffer into the arena follows it in ev's own message, carrying
 * ev's id: ev completes when the output is in the arena, and
 * vgpu_event_done prints it first. So a wait on the launch's event, not
 * only clFinish, finds its output printed (Khronos' printf tests wait on
 * the event alone). The launch's profiling start is the kernel's; its end
 * includes the read. 0, or a CL error. */
static cl_int printf_trail(struct _cl_event *ev, uint32_t printf_buf)
{
	cl_context ctx = ev->ctx;
	const uint64_t n = VGPU_PRINTF_HEADER_SIZE + VGPU_PRINTF_BYTES;
	struct _cl_event *c = vgpu_event_new(ctx, ev->queue, ev->type);
	if (c == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	struct {
		struct vgpu_icdp_header h;
		struct vgpu_icdp_transfer b;
	} m;
	uint8_t *msg = realloc(ev->msg, ev->msg_len + sizeof m);
	if (msg == NULL) {
		vgpu_event_done(c, CL_OUT_OF_HOST_MEMORY, NULL);
		return CL_OUT_OF_HOST_MEMORY;
	}
	ev->msg = msg;
	cl_int err = arena_alloc(ctx, n, &ev->copy_src);
	if (err != CL_SUCCESS) {
		vgpu_event_done(c, err, NULL);
		return err;
	}
	struct vgpu_icdp_launch_head *h = (void *)(ev->msg + sizeof(struct vgpu_icdp_header));
	h->event = c->id;
	conn_hdr(ctx, &m, VGPU_ICDP_OP_READ, sizeof m);
	m.b = (struct vgpu_icdp_transfer){.buffer = printf_buf,
					  .arena = ev->copy_src.arena,
					  .arena_offset = ev->copy_src.off,
					  .length = n,
					  .event = ev->id};
	memcpy(ev->msg + ev->msg_len, &m, sizeof m);
	ev->msg_len += sizeof m;
	ev->printout = 1;
	c->parent = ev;
	IREF(ev);
	c->chunk_next = ev->chunks;
	ev->chunks = c;
	return CL_SUCCESS;
}

static cl_kernel new_kernel(cl_program p, const struct vgpu_kinfo *ki, cl_int *err)
{
	cl_kernel k = calloc(1, sizeof *k);
	if (k != NULL && (k->args = calloc(ki->num_args + 1, sizeof *k->args)) == NULL) {
		free(k);
		k = NULL;
	}
	if (k == NULL) {
		*err = CL_OUT_OF_HOST_MEMORY;
		return NULL;
	}
	vgpu_obj_init(&k->obj, VGPU_KERNEL);
	k->ctx = p->ctx;
	IREF(k->ctx);
	k->prog = p;
	IREF(p);
	p->nkernel_objs++;
	k->ki = ki;
	vgpu_obj_publish(&k->obj);
	*err = CL_SUCCESS;
	return k;
}

void vgpu_kernel_destroy(cl_kernel k)
{
	cl_context ctx = k->ctx;
	ctx_lock(ctx);
	k->prog->nkernel_objs--;
	PUT(k->prog);
	ctx_unlock(ctx);
	free(k->args);
	free(k);
	PUT(ctx);
}

cl_kernel CL_API_CALL vgpu_clCreateKernel(cl_program program, const char *kernel_name, cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_kernel k = NULL;
	cl_program p = GET(program, VGPU_PROGRAM);
	if (p == NULL) {
		err = CL_INVALID_PROGRAM;
		goto out;
	}
	cl_context ctx = p->ctx;
	ENTER(ctx);
	if (!built(p)) {
		err = CL_INVALID_PROGRAM_EXECUTABLE;
	} else if (kernel_name == NULL) {
		err = CL_INVALID_VALUE;
	} else {
		err = CL_INVALID_KERNEL_NAME;
		for (cl_uint i = 0; i < p->nkernels; i++)
			if (strcmp(p->kernels[i].name, kernel_name) == 0)
				k = new_kernel(p, &p->kernels[i], &err);
	}
	PUT(p);
	LEAVE(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return k;
}

/* clCloneKernel: a kernel of the same program and function whose
 * arguments are the source's as set now (a buffer argument names the same
 * buffer, unreferenced, as clSetKernelArg leaves it). */
cl_kernel CL_API_CALL vgpu_clCloneKernel(cl_kernel source_kernel, cl_int *errcode_ret)
{
	cl_int err = CL_INVALID_KERNEL;
	cl_kernel k = NULL;
	cl_kernel src = GET(source_kernel, VGPU_KERNEL);
	if (src != NULL) {
		cl_context ctx = src->ctx;
		ENTER(ctx);
		k = new_kernel(src->prog, src->ki, &err);
		if (k != NULL)
			memcpy(k->args, src->args, src->ki->num_args * sizeof *k->args);
		PUT(src);
		LEAVE(ctx);
	}
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return k;
}

cl_int CL_API_CALL vgpu_clCreateKernelsInProgram(cl_program program, cl_uint num_kernels, cl_kernel *kernels,
						 cl_uint *num_kernels_ret)
{
	ENTER_OBJ(cl_program, p, program, VGPU_PROGRAM, CL_INVALID_PROGRAM);
	cl_int err = CL_SUCCESS;
	if (!built(p)) {
		err = CL_INVALID_PROGRAM_EXECUTABLE;
	} else if (kernels != NULL && num_kernels < p->nkernels) {
		err = CL_INVALID_VALUE;
	} else {
		for (cl_uint i = 0; kernels != NULL && i < p->nkernels && err == CL_SUCCESS; i++) {
			kernels[i] = new_kernel(p, &p->kernels[i], &err);
			if (err != CL_SUCCESS) {
				for (cl_uint j = 0; j < i; j++) {
					/* ctx is locked already: a plain put */
					vgpu_release(kernels[j], VGPU_KERNEL, CL_INVALID_KERNEL, vgpu_put);
					kernels[j] = NULL;
				}
			}
		}
		if (err == CL_SUCCESS && num_kernels_ret != NULL)
			*num_kernels_ret = p->nkernels;
	}
	PUT(p);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clRetainKernel(cl_kernel kernel)
{
	return vgpu_retain(kernel, VGPU_KERNEL, CL_INVALID_KERNEL);
}

cl_int CL_API_CALL vgpu_clReleaseKernel(cl_kernel kernel)
{
	return vgpu_release(kernel, VGPU_KERNEL, CL_INVALID_KERNEL, vgpu_put_locked);
}

/* set_image_arg sets an image argument (a cl_mem that is an image of the
 * context) or, sampler, a sampler argument (a cl_sampler of the context,
 * kept by value: its properties packed as the ABI carries them). */
static cl_int set_image_arg(cl_context ctx, struct vgpu_karg *a, int param, size_t arg_size, const void *arg_value)
{
	if (param == VGPU_PARAM_SAMPLER) {
		if (arg_size != sizeof(cl_sampler))
			return CL_INVALID_ARG_SIZE;
		cl_sampler s = arg_value != NULL ? GET(*(const cl_sampler *)arg_value, VGPU_SAMPLER) : NULL;
		if (s == NULL || s->ctx != ctx) {
			if (s != NULL)
				PUT(s);
			return CL_INVALID_SAMPLER;
		}
		uint64_t v = (uint64_t)(s->addressing & 0xffff) | (uint64_t)(s->filter & 0xffff) << 16 |
			     (uint64_t)(s->normalized ? 1 : 0) << 32;
		PUT(s);
		a->kind = VGPU_ARG_SAMPLER;
		a->size = 0;
		a->mem = NULL;
		memcpy(a->bytes, &v, sizeof v);
		a->set = 1;
		return CL_SUCCESS;
	}
	if (arg_size != sizeof(cl_mem))
		return CL_INVALID_ARG_SIZE;
	cl_mem m = arg_value != NULL ? GET(*(const cl_mem *)arg_value, VGPU_MEM) : NULL;
	cl_int err = m == NULL || m->ctx != ctx || m->image == NULL ? CL_INVALID_MEM_OBJECT : CL_SUCCESS;
	/* An image1d_buffer_t takes an image made from a buffer, and only
	 * it: the device makes the one on the buffer, the others apart. */
	if (err == CL_SUCCESS && (m->image->type == CL_MEM_OBJECT_IMAGE1D_BUFFER) != (param == VGPU_PARAM_IMAGE_BUFFER))
		err = CL_INVALID_ARG_VALUE;
	if (m != NULL)
		PUT(m);
	if (err != CL_SUCCESS)
		return err;
	a->kind = VGPU_ARG_IMAGE;
	a->size = VGPU_IMAGE_DESC_SIZE;
	a->mem = *(const cl_mem *)arg_value;
	a->set = 1;
	return CL_SUCCESS;
}

cl_int CL_API_CALL vgpu_clSetKernelArg(cl_kernel kernel, cl_uint arg_index, size_t arg_size, const void *arg_value)
{
	ENTER_OBJ(cl_kernel, k, kernel, VGPU_KERNEL, CL_INVALID_KERNEL);
	cl_int err = CL_SUCCESS;
	if (arg_index >= k->ki->num_args) {
		err = CL_INVALID_ARG_INDEX;
		goto out;
	}
	const struct vgpu_karg_info *ai = &k->ki->args[arg_index];
	struct vgpu_karg *a = &k->args[arg_index];
	int image = vgpu_image_type_name(ai->type_name);
	if (image != 0) {
		err = set_image_arg(ctx, a, image, arg_size, arg_value);
		goto out;
	}
	switch (ai->address) {
	case VGPU_ARG_ADDRESS_GLOBAL:
	case VGPU_ARG_ADDRESS_CONSTANT: {
		if (arg_size != sizeof(cl_mem)) {
			err = CL_INVALID_ARG_SIZE;
			break;
		}
		cl_mem m = arg_value != NULL ? *(const cl_mem *)arg_value : NULL;
		if (m != NULL) {
			cl_mem g = GET(m, VGPU_MEM);
			if (g == NULL || g->ctx != ctx || g->image != NULL)
				err = CL_INVALID_MEM_OBJECT;
			if (g != NULL)
				PUT(g);
			if (err != CL_SUCCESS)
				break;
		}
		a->kind = VGPU_ARG_BUFFER;
		a->size = 0;
		a->mem = m;
		a->set = 1;
		break;
	}
	case VGPU_ARG_ADDRESS_LOCAL:
		if (arg_value != NULL) {
			err = CL_INVALID_ARG_VALUE;
		} else if (arg_size == 0 || arg_size > 0xffffffffu) {
			err = CL_INVALID_ARG_SIZE;
		} else {
			a->kind = VGPU_ARG_LOCAL;
			a->size = (uint32_t)arg_size;
			a->mem = NULL;
			a->set = 1;
		}
		break;
	default:
		if (arg_value == NULL) {
			err = CL_INVALID_ARG_VALUE;
		} else if (arg_size == 0 || arg_size > VGPU_MAX_SCALAR ||
			   (ai->scalar_size != 0 && arg_size != ai->scalar_size)) {
			err = CL_INVALID_ARG_SIZE;
		} else {
			a->kind = VGPU_ARG_SCALAR;
			a->size = (uint32_t)arg_size;
			a->mem = NULL;
			memcpy(a->bytes, arg_value, arg_size);
			a->set = 1;
		}
		break;
	}
out:
	PUT(k);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clGetKernelInfo(cl_kernel kernel, cl_kernel_info param_name, size_t param_value_size,
					void *param_value, size_t *param_value_size_ret)
{
	ENTER_OBJ(cl_kernel, k, kernel, VGPU_KERNEL, CL_INVALID_KERNEL);
	cl_int err;
	union {
		cl_uint u;
		cl_context c;
		cl_program p;
	} v;
	switch (param_name) {
	case CL_KERNEL_FUNCTION_NAME:
		err = vgpu_info_str(k->ki->name, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_KERNEL_NUM_ARGS:
		v.u = k->ki->num_args;
		err = vgpu_info(&v, sizeof v.u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_KERNEL_REFERENCE_COUNT:
		v.u = vgpu_obj_refs(&k->obj);
		err = vgpu_info(&v, sizeof v.u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_KERNEL_CONTEXT:
		v.c = ctx;
		err = vgpu_info(&v, sizeof v.c, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_KERNEL_PROGRAM:
		v.p = k->prog;
		err = vgpu_info(&v, sizeof v.p, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_KERNEL_ATTRIBUTES:
		/* The blob does not carry the attributes. */
		err = vgpu_info_str("", param_value_size, param_value, param_value_size_ret);
		break;
	default: err = CL_INVALID_VALUE; break;
	}
	PUT(k);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clGetKernelArgInfo(cl_kernel kernel, cl_uint arg_index, cl_kernel_arg_info param_name,
					   size_t param_value_size, void *param_value, size_t *param_value_size_ret)
{
	ENTER_OBJ(cl_kernel, k, kernel, VGPU_KERNEL, CL_INVALID_KERNEL);
	cl_int err;
	if (arg_index >= k->ki->num_args) {
		err = CL_INVALID_ARG_INDEX;
	} else {
		const struct vgpu_karg_info *a = &k->ki->args[arg_index];
		union {
			cl_kernel_arg_address_qualifier addr;
			cl_kernel_arg_access_qualifier acc;
			cl_kernel_arg_type_qualifier tq;
		} v;
		switch (param_name) {
		case CL_KERNEL_ARG_ADDRESS_QUALIFIER:
			v.addr = a->address;
			err = vgpu_info(&v, sizeof v.addr, param_value_size, param_value, param_value_size_ret);
			break;
		case CL_KERNEL_ARG_ACCESS_QUALIFIER:
			v.acc = a->access;
			err = vgpu_info(&v, sizeof v.acc, param_value_size, param_value, param_value_size_ret);
			break;
		case CL_KERNEL_ARG_TYPE_NAME:
			err = vgpu_info_str(a->type_name, param_value_size, param_value, param_value_size_ret);
			break;
		case CL_KERNEL_ARG_TYPE_QUALIFIER:
			v.tq = a->type_qual;
			err = vgpu_info(&v, sizeof v.tq, param_value_size, param_value, param_value_size_ret);
			break;
		case CL_KERNEL_ARG_NAME:
			err = vgpu_info_str(a->name, param_value_size, param_value, param_value_size_ret);
			break;
		default: err = CL_INVALID_VALUE; break;
		}
	}
	PUT(k);
	LEAVE(ctx);
	return err;
}

static size_t kernel_wg(const struct _cl_kernel *k)
{
	size_t wg = k->ki->work_group_size, dev = k->ctx->dev->max_work_group;
	return wg == 0 || wg > dev ? dev : wg;
}

cl_int CL_API_CALL vgpu_clGetKernelWorkGroupInfo(cl_kernel kernel, cl_device_id device,
						 cl_kernel_work_group_info param_name, size_t param_value_size,
						 void *param_value, size_t *param_value_size_ret)
{
	ENTER_OBJ(cl_kernel, k, kernel, VGPU_KERNEL, CL_INVALID_KERNEL);
	cl_int err;
	if (device != NULL && device != ctx->dev) {
		err = CL_INVALID_DEVICE;
	} else {
		union {
			size_t sz;
			size_t s3[3];
			cl_ulong ul;
		} v;
		size_t n = 0;
		err = CL_SUCCESS;
		switch (param_name) {
		case CL_KERNEL_WORK_GROUP_SIZE: v.sz = kernel_wg(k); n = sizeof v.sz; break;
		case CL_KERNEL_COMPILE_WORK_GROUP_SIZE:
			memcpy(v.s3, k->ki->compile_wg, sizeof v.s3);
			n = sizeof v.s3;
			break;
		case CL_KERNEL_LOCAL_MEM_SIZE: v.ul = k->ki->local_mem; n = sizeof v.ul; break;
		case CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE:
			v.sz = k->ki->preferred_multiple != 0 ? k->ki->preferred_multiple : 1;
			n = sizeof v.sz;
			break;
		case CL_KERNEL_PRIVATE_MEM_SIZE: v.ul = k->ki->private_mem; n = sizeof v.ul; break;
		default:
			/* CL_KERNEL_GLOBAL_WORK_SIZE is for custom devices and
			 * built-in kernels only. */
			err = CL_INVALID_VALUE;
			break;
		}
		if (err == CL_SUCCESS)
			err = vgpu_info(&v, n, param_value_size, param_value, param_value_size_ret);
	}
	PUT(k);
	LEAVE(ctx);
	return err;
}

/* ---- Launches ------------------------------------------------------- */

static cl_int launch(cl_command_queue queue, cl_kernel kernel, cl_command_type type, cl_uint work_dim,
		     const size_t *offset, const size_t *global, const size_t *local, cl_uint nwait,
		     const cl_event *wait, cl_event *event)
{
	cl_command_queue q = GET(queue, VGPU_QUEUE);
	if (q == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	cl_kernel k = GET(kernel, VGPU_KERNEL);
	if (k == NULL) {
		PUT(q);
		return CL_INVALID_KERNEL;
	}
	cl_context ctx = q->ctx;
	ENTER(ctx);
	cl_int err = CL_SUCCESS;
	const struct vgpu_kinfo *ki = k->ki;
	cl_mem *mems = NULL;
	struct _cl_event *ev = NULL;
	if (k->ctx != ctx) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (!built(k->prog)) {
		err = CL_INVALID_PROGRAM_EXECUTABLE;
		goto out;
	}
	for (cl_uint i = 0; i < ki->num_args; i++) {
		if (!k->args[i].set) {
			err = CL_INVALID_KERNEL_ARGS;
			goto out;
		}
	}
	if (work_dim < 1 || work_dim > 3) {
		err = CL_INVALID_WORK_DIMENSION;
		goto out;
	}
	/* OpenCL 2.1 and later: a NULL global size, or 0 in a dimension, is
	 * a launch that runs nothing and completes once its wait list has,
	 * as a marker does (with the launch's command type). */
	int zero = global == NULL;
	for (cl_uint d = 0; !zero && d < work_dim; d++)
		zero = global[d] == 0;
	if (zero) {
		err = vgpu_clEnqueueMarkerWithWaitList(queue, nwait, wait, event);
		if (err == CL_SUCCESS && event != NULL && *event != NULL)
			(*event)->type = type;
		goto out;
	}
	uint64_t items = 1;
	for (cl_uint d = 0; d < work_dim; d++) {
		items *= global[d];
		/* The device runs at most 2^32 work items in one launch (a kernel
		 * cannot be preempted); reported as a global size it cannot run. */
		if (items > (1ull << 32)) {
			err = CL_INVALID_GLOBAL_WORK_SIZE;
			goto out;
		}
		if (offset != NULL && global[d] > SIZE_MAX - offset[d]) {
			err = CL_INVALID_GLOBAL_OFFSET;
			goto out;
		}
	}
	const struct _cl_device_id *dev = ctx->dev;
	int reqd = ki->compile_wg[0] != 0;
	if (local != NULL) {
		size_t total = 1;
		for (cl_uint d = 0; d < work_dim; d++) {
			if (local[d] == 0 || global[d] % local[d] != 0) {
				err = CL_INVALID_WORK_GROUP_SIZE;
				goto out;
			}
			if (reqd && local[d] != ki->compile_wg[d]) {
				err = CL_INVALID_WORK_GROUP_SIZE;
				goto out;
			}
			if (local[d] > dev->max_work_group) {
				err = CL_INVALID_WORK_ITEM_SIZE;
				goto out;
			}
			total *= local[d];
		}
		if (total > kernel_wg(k)) {
			err = CL_INVALID_WORK_GROUP_SIZE;
			goto out;
		}
	} else if (reqd) {
		err = CL_INVALID_WORK_GROUP_SIZE;
		goto out;
	}
	/* Arguments the device cannot carry. */
	size_t scalars = 0;
	mems = calloc(ki->num_args + 1, sizeof *mems);
	if (mems == NULL) {
		err = CL_OUT_OF_HOST_MEMORY;
		goto out;
	}
	cl_uint nmems = 0;
	for (cl_uint i = 0; i < ki->num_args; i++) {
		const struct vgpu_karg *a = &k->args[i];
		if (a->kind == VGPU_ARG_IMAGE || a->kind == VGPU_ARG_SAMPLER) {
			if (ctx->proto < 4) {
				err = CL_INVALID_OPERATION; /* a daemon of before images */
				goto out;
			}
		}
		if (a->kind == VGPU_ARG_IMAGE) {
			cl_mem m = GET(a->mem, VGPU_MEM);
			if (m == NULL || m->ctx != ctx || m->image == NULL) {
				if (m != NULL)
					PUT(m);
				err = CL_INVALID_KERNEL_ARGS; /* released since */
				goto out;
			}
			mems[nmems++] = m;
			scalars = (scalars + 7) & ~(size_t)7;
			scalars += VGPU_IMAGE_DESC_SIZE;
		} else if (a->kind == VGPU_ARG_BUFFER) {
			if (a->mem == NULL) {
				if (vgpu_null_buffer(ctx) == 0) {
					err = CL_OUT_OF_RESOURCES;
					goto out;
				}
				continue;
			}
			cl_mem m = GET(a->mem, VGPU_MEM);
			if (m == NULL || m->ctx != ctx) {
				if (m != NULL)
					PUT(m);
				err = CL_INVALID_KERNEL_ARGS; /* released since */
				goto out;
			}
			mems[nmems++] = m;
			if (m->origin != 0) {
				err = CL_MISALIGNED_SUB_BUFFER_OFFSET;
				goto out;
			}
		} else if (a->kind == VGPU_ARG_SCALAR && a->size > 8) {
			scalars = (scalars + 7) & ~(size_t)7;
			scalars += a->size;
		}
	}
	if ((err = vgpu_check_wait_list(ctx, nwait, wait)) != CL_SUCCESS)
		goto out;
	if (!conn_ok(ctx)) {
		err = CL_OUT_OF_RESOURCES;
		goto out;
	}
	/* A program that prints gets the context's printf buffer. */
	uint32_t printf_buf = 0;
	if (ctx->proto >= 3 && vgpu_printf_ok(ctx->dev) && prints(k->prog))
		printf_buf = vgpu_printf_buffer(ctx);
	cl_uint nentries = ki->num_args + (printf_buf != 0);
	size_t hlen = sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_launch_head);
	size_t len = hlen + nentries * sizeof(struct vgpu_icdp_launch_arg) + scalars;
	if (len > VGPU_ICDP_MAX_MESSAGE) {
		err = CL_OUT_OF_RESOURCES;
		goto out;
	}
	if ((ev = vgpu_event_new(ctx, q, type)) == NULL || (ev->msg = calloc(1, len)) == NULL) {
		err = CL_OUT_OF_HOST_MEMORY;
		goto out;
	}
	ev->msg_len = len;
	conn_hdr(ctx, ev->msg, VGPU_ICDP_OP_LAUNCH, len);
	struct vgpu_icdp_launch_head *h = (void *)(ev->msg + sizeof(struct vgpu_icdp_header));
	h->program = k->prog->id;
	h->flags = printf_buf != 0 ? VGPU_ICDP_LAUNCH_PRINTF : 0;
	h->work_dim = work_dim;
	h->num_args = nentries;
	for (cl_uint d = 0; d < work_dim; d++) {
		h->global_offset[d] = offset != NULL ? offset[d] : 0;
		h->global_size[d] = global[d];
		h->local_size[d] = local != NULL ? local[d] : 0;
	}
	memcpy(h->kernel, ki->name, strlen(ki->name));
	h->event = ev->id;
	struct vgpu_icdp_launch_arg *args = (void *)(h + 1);
	uint8_t *area = (uint8_t *)(args + nentries);
	if (printf_buf != 0)
		args[ki->num_args] = (struct vgpu_icdp_launch_arg){.kind = VGPU_ARG_BUFFER, .value = printf_buf};
	size_t at = 0;
	cl_uint mi = 0;
	for (cl_uint i = 0; i < ki->num_args; i++) {
		const struct vgpu_karg *a = &k->args[i];
		args[i].kind = a->kind;
		switch (a->kind) {
		case VGPU_ARG_BUFFER:
			args[i].size = 0;
			args[i].value = a->mem != NULL ? mems[mi++]->id : ctx->null_buffer;
			break;
		case VGPU_ARG_LOCAL:
			args[i].size = a->size;
			args[i].value = 0;
			break;
		case VGPU_ARG_IMAGE: {
			struct vgpu_image_desc d;
			vgpu_image_desc(mems[mi++], &d);
			at = (at + 7) & ~(size_t)7;
			memcpy(area + at, &d, sizeof d);
			args[i].size = sizeof d;
			args[i].value = at;
			at += sizeof d;
			break;
		}
		case VGPU_ARG_SAMPLER:
			args[i].size = 0;
			memcpy(&args[i].value, a->bytes, sizeof args[i].value);
			break;
		default:
			args[i].size = a->size;
			if (a->size <= 8) {
				uint64_t v = 0;
				memcpy(&v, a->bytes, a->size);
				args[i].value = v;
			} else {
				at = (at + 7) & ~(size_t)7;
				memcpy(area + at, a->bytes, a->size);
				args[i].value = at;
				at += a->size;
			}
			break;
		}
	}
	if (printf_buf != 0 && (err = printf_trail(ev, printf_buf)) != CL_SUCCESS)
		goto out;
	/* The buffers stay alive until the request is sent. */
	ev->mems = mems;
	ev->nmems = nmems;
	mems = NULL;
	nmems = 0;
	err = vgpu_submit(ev, nwait, wait, 0, event);
	ev = NULL;
out:
	if (ev != NULL)
		vgpu_event_done(ev, CL_OUT_OF_HOST_MEMORY, NULL);
	if (mems != NULL) {
		for (cl_uint i = 0; mems[i] != NULL; i++)
			PUT(mems[i]);
		free(mems);
	}
	PUT(k);
	PUT(q);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
					       const size_t *global_work_offset, const size_t *global_work_size,
					       const size_t *local_work_size, cl_uint num_events,
					       const cl_event *wait_list, cl_event *event)
{
	return launch(queue, kernel, CL_COMMAND_NDRANGE_KERNEL, work_dim, global_work_offset, global_work_size,
		      local_work_size, num_events, wait_list, event);
}

cl_int CL_API_CALL vgpu_clEnqueueTask(cl_command_queue queue, cl_kernel kernel, cl_uint num_events,
				      const cl_event *wait_list, cl_event *event)
{
	static const size_t one[1] = {1};
	return launch(queue, kernel, CL_COMMAND_TASK, 1, NULL, one, one, num_events, wait_list, event);
}

cl_int CL_API_CALL vgpu_clEnqueueNativeKernel(cl_command_queue queue, void(CL_CALLBACK *fn)(void *), void *args,
					      size_t cb_args, cl_uint num_mem_objects, const cl_mem *mem_list,
					      const void **args_mem_loc, cl_uint num_events, const cl_event *wait_list,
					      cl_event *event)
{
	(void)fn, (void)args, (void)cb_args, (void)num_mem_objects, (void)mem_list, (void)args_mem_loc,
		(void)num_events, (void)wait_list, (void)event;
	cl_command_queue q = GET(queue, VGPU_QUEUE);
	if (q == NULL)
		return CL_INVALID_COMMAND_QUEUE;
	PUT(q);
	/* CL_DEVICE_EXECUTION_CAPABILITIES has no CL_EXEC_NATIVE_KERNEL. */
	return CL_INVALID_OPERATION;
}

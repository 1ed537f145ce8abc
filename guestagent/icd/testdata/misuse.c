/* misuse: malformed OpenCL use through the loader and the vgpud ICD, against
 * a vgpu-icdd (the test harness): NULL pointers, made-up and released
 * handles, wrong sizes, bad kernel names, invalid work sizes, wrong
 * contexts. Each call must get the error OpenCL 1.2 lists for it, and the
 * process must survive. Then a fake daemon in a thread of this process
 * answers Hello and Attach and dies with an Error: every later call of
 * that context must fail with CL_OUT_OF_RESOURCES, nothing abort.
 *
 *   misuse      (VGPUD_ICD_SOCKET names the harness's socket)
 *
 * It prints one line per failed check and exits with the number of them. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_0_APIS
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl_icd.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "vgpu_icdproto.h"
#include "check.h"

/* CHECK_NULL: a creating call returns NULL and the error. */
#define CHECK_NULL(call, want)                                                                               \
	do {                                                                                                 \
		cl_int e_ = 1;                                                                               \
		void *r_ = (void *)(call);                                                                   \
		CHECK(r_ == NULL && e_ == (want), "returned %p, error %d, want %d (%s)", r_, e_, (want),      \
		      #want);                                                                                \
	} while (0)

struct fake {
	struct _cl_icd_dispatch *dispatch;
	char junk[64];
};

static cl_platform_id platform;
static cl_device_id dev;
static const struct _cl_icd_dispatch *T; /* the ICD's table, to call it directly */

static void find(void)
{
	cl_platform_id ps[8];
	cl_uint n = 0;
	clGetPlatformIDs(8, ps, &n);
	for (cl_uint i = 0; i < n && i < 8; i++) {
		char name[64] = "";
		clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
		if (strcmp(name, "vgpud") == 0)
			platform = ps[i];
	}
	if (platform == NULL) {
		printf("no vgpud platform\n");
		exit(1);
	}
	clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
	T = *(struct _cl_icd_dispatch **)dev;
}

static void context_misuse(void)
{
	struct fake fake = {.dispatch = *(struct _cl_icd_dispatch **)dev};
	cl_device_id fake_dev = (cl_device_id)(void *)&fake;
	cl_context_properties bad_prop[] = {0x7777, 1, 0};
	cl_context_properties bad_plat[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)(void *)&fake, 0};
	cl_context_properties twice[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, CL_CONTEXT_PLATFORM,
					 (cl_context_properties)platform, 0};
	int data;
	CHECK_NULL(clCreateContext(NULL, 1, NULL, NULL, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateContext(NULL, 0, &dev, NULL, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateContext(NULL, 1, &dev, NULL, &data, &e_), CL_INVALID_VALUE);
	CHECK_NULL(T->clCreateContext(NULL, 1, &fake_dev, NULL, NULL, &e_), CL_INVALID_DEVICE);
	CHECK_NULL(T->clCreateContext(bad_prop, 1, &dev, NULL, NULL, &e_), CL_INVALID_PROPERTY);
	CHECK_NULL(T->clCreateContext(bad_plat, 1, &dev, NULL, NULL, &e_), CL_INVALID_PLATFORM);
	CHECK_NULL(T->clCreateContext(twice, 1, &dev, NULL, NULL, &e_), CL_INVALID_PROPERTY);
	cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
	CHECK_NULL(clCreateContextFromType(props, CL_DEVICE_TYPE_CPU, NULL, NULL, &e_), CL_DEVICE_NOT_FOUND);
	CHECK_NULL(clCreateContextFromType(props, 0, NULL, NULL, &e_), CL_INVALID_DEVICE_TYPE);

	cl_context fake_ctx = (cl_context)(void *)&fake;
	cl_uint u;
	CHECK_ERR(T->clGetContextInfo(fake_ctx, CL_CONTEXT_NUM_DEVICES, sizeof u, &u, NULL),
		  CL_INVALID_CONTEXT);
	CHECK_ERR(T->clRetainContext(fake_ctx), CL_INVALID_CONTEXT);
	CHECK_ERR(T->clReleaseContext((cl_context)(void *)dev), CL_INVALID_CONTEXT);

	cl_int err;
	cl_context ctx = clCreateContextFromType(props, CL_DEVICE_TYPE_GPU, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && ctx != NULL, "context from type: %d", err);
	CHECK_ERR(clGetContextInfo(ctx, 0x7777, sizeof u, &u, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clGetContextInfo(ctx, CL_CONTEXT_NUM_DEVICES, 2, &u, NULL), CL_INVALID_VALUE);
	OK(clRetainContext(ctx));
	OK(clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof u, &u, NULL));
	CHECK(u == 2, "references %u", u);
	OK(clReleaseContext(ctx));
	OK(clReleaseContext(ctx));
	/* Released: the loader still calls the ICD through the stale pointer
	 * (its first word may still be the dispatch table). */
	CHECK_ERR(T->clGetContextInfo(ctx, CL_CONTEXT_NUM_DEVICES, sizeof u, &u, NULL), CL_INVALID_CONTEXT);
	CHECK_ERR(T->clReleaseContext(ctx), CL_INVALID_CONTEXT);
}

static const char *src = "__kernel void k(__global int *o, int v, __local int *t)\n"
			 "{ t[get_local_id(0)] = v; o[get_global_id(0)] = t[get_local_id(0)]; }\n"
			 "__kernel __attribute__((reqd_work_group_size(4, 1, 1))) void r(__global int *o)\n"
			 "{ o[get_global_id(0)] = 1; }\n";

static void object_misuse(void)
{
	cl_int err;
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS, "clCreateContext: %d", err);
	cl_context ctx2 = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	struct fake fake = {.dispatch = *(struct _cl_icd_dispatch **)dev};
	const struct _cl_icd_dispatch *t = fake.dispatch;

	/* Queues. */
	CHECK_NULL(t->clCreateCommandQueue((cl_context)(void *)&fake, dev, 0, &e_), CL_INVALID_CONTEXT);
	CHECK_NULL(clCreateCommandQueue(ctx, (cl_device_id)(void *)&fake, 0, &e_), CL_INVALID_DEVICE);
	CHECK_NULL(clCreateCommandQueue(ctx, dev, (cl_command_queue_properties)1 << 20, &e_), CL_INVALID_VALUE);
	cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
	cl_command_queue q2 = clCreateCommandQueue(ctx2, dev, 0, &err);
	cl_command_queue_properties qp;
	CHECK_ERR(clGetCommandQueueInfo(q, 0x7777, sizeof qp, &qp, NULL), CL_INVALID_VALUE);
	CHECK_ERR(t->clFlush((cl_command_queue)(void *)&fake), CL_INVALID_COMMAND_QUEUE);
	CHECK_ERR(t->clFinish((cl_command_queue)(void *)ctx), CL_INVALID_COMMAND_QUEUE);

	/* Buffers. */
	int host[64] = {0};
	cl_ulong max = 0;
	clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max, &max, NULL);
	CHECK_NULL(clCreateBuffer(ctx, 0, 0, NULL, &e_), CL_INVALID_BUFFER_SIZE);
	CHECK_NULL(clCreateBuffer(ctx, 0, (size_t)max + 1, NULL, &e_), CL_INVALID_BUFFER_SIZE);
	CHECK_NULL(clCreateBuffer(ctx, CL_MEM_USE_HOST_PTR, 64, NULL, &e_), CL_INVALID_HOST_PTR);
	CHECK_NULL(clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, 64, NULL, &e_), CL_INVALID_HOST_PTR);
	CHECK_NULL(clCreateBuffer(ctx, 0, 64, host, &e_), CL_INVALID_HOST_PTR);
	CHECK_NULL(clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY, 64, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateBuffer(ctx, CL_MEM_USE_HOST_PTR | CL_MEM_ALLOC_HOST_PTR, 64, host, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateBuffer(ctx, CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS, 64, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateBuffer(ctx, (cl_mem_flags)1 << 40, 64, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(t->clCreateBuffer((cl_context)(void *)&fake, 0, 64, NULL, &e_), CL_INVALID_CONTEXT);
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof host, NULL, &err);
	CHECK(err == CL_SUCCESS, "buffer: %d", err);
	cl_mem other = clCreateBuffer(ctx2, CL_MEM_READ_WRITE, sizeof host, NULL, &err);
	cl_mem noacc = clCreateBuffer(ctx, CL_MEM_HOST_NO_ACCESS, sizeof host, NULL, &err);
	cl_mem rdonly = clCreateBuffer(ctx, CL_MEM_HOST_READ_ONLY, sizeof host, NULL, &err);
	cl_event bogus_ev = (cl_event)(void *)&fake;
	CHECK_ERR(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof host, NULL, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueReadBuffer(q, m, CL_TRUE, 8, sizeof host, host, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueReadBuffer(q, m, CL_TRUE, 0, 0, host, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueReadBuffer(q, m, CL_TRUE, SIZE_MAX, 2, host, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueReadBuffer(q, other, CL_TRUE, 0, 4, host, 0, NULL, NULL), CL_INVALID_CONTEXT);
	CHECK_ERR(t->clEnqueueReadBuffer(q, (cl_mem)(void *)&fake, CL_TRUE, 0, 4, host, 0, NULL, NULL),
		  CL_INVALID_MEM_OBJECT);
	CHECK_ERR(clEnqueueReadBuffer(q, m, CL_TRUE, 0, 4, host, 1, NULL, NULL), CL_INVALID_EVENT_WAIT_LIST);
	CHECK_ERR(clEnqueueReadBuffer(q, m, CL_TRUE, 0, 4, host, 0, &bogus_ev, NULL), CL_INVALID_EVENT_WAIT_LIST);
	CHECK_ERR(t->clEnqueueReadBuffer(q, m, CL_TRUE, 0, 4, host, 1, &bogus_ev, NULL), CL_INVALID_EVENT_WAIT_LIST);
	CHECK_ERR(clEnqueueReadBuffer(q, noacc, CL_TRUE, 0, 4, host, 0, NULL, NULL), CL_INVALID_OPERATION);
	CHECK_ERR(clEnqueueWriteBuffer(q, rdonly, CL_TRUE, 0, 4, host, 0, NULL, NULL), CL_INVALID_OPERATION);
	CHECK_ERR(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, 4, NULL, 0, NULL, NULL), CL_INVALID_VALUE);
	cl_event ev2 = NULL;
	OK(clEnqueueMarkerWithWaitList(q2, 0, NULL, &ev2));
	CHECK_ERR(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, 4, host, 1, &ev2, NULL), CL_INVALID_CONTEXT);
	CHECK_ERR(clEnqueueCopyBuffer(q, m, m, 0, 8, 16, 0, NULL, NULL), CL_MEM_COPY_OVERLAP);
	CHECK_ERR(clEnqueueCopyBuffer(q, m, m, 0, 8, 0, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueCopyBuffer(q, m, other, 0, 0, 4, 0, NULL, NULL), CL_INVALID_CONTEXT);
	int pat = 1;
	CHECK_ERR(clEnqueueFillBuffer(q, m, &pat, 3, 0, 12, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueFillBuffer(q, m, &pat, 4, 2, 12, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueFillBuffer(q, m, NULL, 4, 0, 12, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueFillBuffer(q, m, &pat, 4, 0, sizeof host + 4, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_NULL(clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE_INVALIDATE_REGION, 0, 4, 0, NULL, NULL,
				      &e_),
		   CL_INVALID_VALUE);
	CHECK_NULL(clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ, 0, 0, 0, NULL, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clEnqueueMapBuffer(q, noacc, CL_TRUE, CL_MAP_READ, 0, 4, 0, NULL, NULL, &e_), CL_INVALID_OPERATION);
	CHECK_ERR(clEnqueueUnmapMemObject(q, m, host, 0, NULL, NULL), CL_INVALID_VALUE);

	/* Sub-buffers. */
	cl_buffer_region r = {4, 8};
	CHECK_NULL(clCreateSubBuffer(m, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &e_), CL_MISALIGNED_SUB_BUFFER_OFFSET);
	r.origin = 128;
	r.size = sizeof host;
	CHECK_NULL(clCreateSubBuffer(m, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &e_), CL_INVALID_VALUE);
	r.size = 0;
	CHECK_NULL(clCreateSubBuffer(m, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &e_), CL_INVALID_BUFFER_SIZE);
	r.size = 8;
	CHECK_NULL(clCreateSubBuffer(m, 0, 0x7777, &r, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateSubBuffer(m, 0, CL_BUFFER_CREATE_TYPE_REGION, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateSubBuffer(m, CL_MEM_USE_HOST_PTR, CL_BUFFER_CREATE_TYPE_REGION, &r, &e_), CL_INVALID_VALUE);
	cl_mem sub = clCreateSubBuffer(m, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
	CHECK(err == CL_SUCCESS, "sub-buffer: %d", err);
	r.origin = 0;
	CHECK_NULL(clCreateSubBuffer(sub, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &e_), CL_INVALID_MEM_OBJECT);
	cl_buffer_region r2 = {0, 8};
	cl_mem rosub = clCreateSubBuffer(rdonly, CL_MEM_HOST_WRITE_ONLY, CL_BUFFER_CREATE_TYPE_REGION, &r2, &err);
	CHECK(rosub == NULL && err == CL_INVALID_VALUE, "host-read-only parent, host-write-only sub-buffer: %d", err);

	/* Images and samplers (the vGPU on PoCL has them): malformed use. */
	cl_image_format fmt = {CL_RGBA, CL_UNORM_INT8};
	cl_image_desc desc = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 4, .image_height = 4};
	cl_image_format argb = {CL_ARGB, CL_UNORM_INT8}, bad = {0x1234, CL_UNORM_INT8};
	CHECK_NULL(clCreateImage(ctx, 0, &argb, &desc, NULL, &e_), CL_IMAGE_FORMAT_NOT_SUPPORTED);
	CHECK_NULL(clCreateImage(ctx, 0, &bad, &desc, NULL, &e_), CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
	CHECK_NULL(clCreateImage(ctx, 0, NULL, &desc, NULL, &e_), CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
	CHECK_NULL(clCreateImage(ctx, 0, &fmt, NULL, NULL, &e_), CL_INVALID_IMAGE_DESCRIPTOR);
	cl_image_desc wide = desc, pitched = desc, frombuf = desc, flat = desc;
	wide.image_width = (size_t)1 << 40;
	pitched.image_row_pitch = 64; /* a pitch without a host pointer */
	frombuf.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER;
	flat.image_height = 0;
	CHECK_NULL(clCreateImage(ctx, 0, &fmt, &wide, NULL, &e_), CL_INVALID_IMAGE_SIZE);
	CHECK_NULL(clCreateImage(ctx, 0, &fmt, &flat, NULL, &e_), CL_INVALID_IMAGE_SIZE);
	CHECK_NULL(clCreateImage(ctx, 0, &fmt, &pitched, NULL, &e_), CL_INVALID_IMAGE_DESCRIPTOR);
	/* frombuf: an image made from a buffer that names none. */
	CHECK_NULL(clCreateImage(ctx, 0, &fmt, &frombuf, NULL, &e_), CL_INVALID_IMAGE_DESCRIPTOR);
	CHECK_NULL(clCreateImage(ctx, CL_MEM_COPY_HOST_PTR, &fmt, &desc, NULL, &e_), CL_INVALID_HOST_PTR);
	uint8_t px[4 * 4 * 4] = {0};
	pitched.image_row_pitch = 15; /* less than a row, not a multiple of a pixel */
	CHECK_NULL(clCreateImage(ctx, CL_MEM_COPY_HOST_PTR, &fmt, &pitched, px, &e_), CL_INVALID_IMAGE_DESCRIPTOR);
	CHECK_NULL(clCreateSampler(ctx, CL_FALSE, CL_ADDRESS_REPEAT, CL_FILTER_NEAREST, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateSampler(ctx, 7, CL_ADDRESS_NONE, CL_FILTER_NEAREST, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateSampler(ctx, CL_FALSE, CL_ADDRESS_NONE, 0x1142, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateSampler(NULL, CL_FALSE, CL_ADDRESS_NONE, CL_FILTER_NEAREST, &e_), CL_INVALID_CONTEXT);
	cl_uint nf = 99;
	OK(clGetSupportedImageFormats(ctx, CL_MEM_KERNEL_READ_AND_WRITE, CL_MEM_OBJECT_IMAGE1D_BUFFER, 0, NULL, &nf));
	CHECK(nf == 0, "%u formats of read-write images made from buffers", nf);
	CHECK_ERR(clGetSupportedImageFormats(ctx, 0, CL_MEM_OBJECT_BUFFER, 0, NULL, &nf), CL_INVALID_VALUE);
	CHECK_ERR(clGetImageInfo(m, CL_IMAGE_WIDTH, sizeof nf, &nf, NULL), CL_INVALID_MEM_OBJECT);
	cl_mem img = clCreateImage(ctx, 0, &fmt, &desc, NULL, &err);
	CHECK(img != NULL && err == CL_SUCCESS, "clCreateImage: %d", err);
	/* An image is no buffer and a buffer no image. */
	size_t o3[3] = {0, 0, 0}, r3[3] = {4, 4, 1}, big3[3] = {5, 4, 1}, deep3[3] = {4, 4, 2};
	CHECK_ERR(clEnqueueReadBuffer(q, img, CL_TRUE, 0, 4, px, 0, NULL, NULL), CL_INVALID_MEM_OBJECT);
	CHECK_ERR(clEnqueueReadImage(q, m, CL_TRUE, o3, r3, 0, 0, px, 0, NULL, NULL), CL_INVALID_MEM_OBJECT);
	CHECK_NULL(clCreateSubBuffer(img, 0, CL_BUFFER_CREATE_TYPE_REGION, &r2, &e_), CL_INVALID_MEM_OBJECT);
	CHECK_ERR(clEnqueueReadImage(q, img, CL_TRUE, o3, big3, 0, 0, px, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueReadImage(q, img, CL_TRUE, o3, deep3, 0, 0, px, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueReadImage(q, img, CL_TRUE, o3, r3, 8, 0, px, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueReadImage(q, img, CL_TRUE, NULL, r3, 0, 0, px, 0, NULL, NULL), CL_INVALID_VALUE);
	size_t rp;
	CHECK(clEnqueueMapImage(q, img, CL_TRUE, CL_MAP_READ, o3, r3, NULL, NULL, 0, NULL, NULL, &err) == NULL &&
		      err == CL_INVALID_VALUE,
	      "a map without a row pitch: %d", err);
	CHECK(clEnqueueMapImage(q, img, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE_INVALIDATE_REGION, o3, r3, &rp, NULL, 0,
				NULL, NULL, &err) == NULL &&
		      err == CL_INVALID_VALUE,
	      "a map read and invalidating: %d", err);
	cl_image_format r8 = {CL_R, CL_UNORM_INT8};
	cl_mem img8 = clCreateImage(ctx, 0, &r8, &desc, NULL, &err);
	CHECK_ERR(clEnqueueCopyImage(q, img, img8, o3, o3, r3, 0, NULL, NULL), CL_IMAGE_FORMAT_MISMATCH);
	size_t o1[3] = {1, 1, 0}, r2x2[3] = {2, 2, 1};
	CHECK_ERR(clEnqueueCopyImage(q, img, img, o3, o1, r2x2, 0, NULL, NULL), CL_MEM_COPY_OVERLAP);
	CHECK_ERR(clEnqueueCopyImageToBuffer(q, img, m, o3, r3, 4000, 0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueFillImage(q, img, NULL, o3, r3, 0, NULL, NULL), CL_INVALID_VALUE);
	cl_sampler smp = clCreateSampler(ctx, CL_TRUE, CL_ADDRESS_REPEAT, CL_FILTER_LINEAR, &err);
	CHECK(smp != NULL && err == CL_SUCCESS, "clCreateSampler: %d", err);
	CHECK_ERR(clGetSamplerInfo((cl_sampler)m, CL_SAMPLER_REFERENCE_COUNT, sizeof nf, &nf, NULL), CL_INVALID_SAMPLER);
	CHECK_ERR(clGetSamplerInfo(smp, 0x7777, sizeof nf, &nf, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clReleaseSampler(smp), CL_SUCCESS);
	clReleaseMemObject(img8);
	clReleaseMemObject(img);

	/* Programs. */
	CHECK_NULL(clCreateProgramWithSource(ctx, 0, &src, NULL, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateProgramWithSource(ctx, 1, NULL, NULL, &e_), CL_INVALID_VALUE);
	const char *nulls[2] = {src, NULL};
	CHECK_NULL(clCreateProgramWithSource(ctx, 2, nulls, NULL, &e_), CL_INVALID_VALUE);
	size_t len1 = 4;
	const unsigned char *junk = (const unsigned char *)"junk";
	cl_int bst = 0;
	CHECK_NULL(clCreateProgramWithBinary(ctx, 1, &dev, &len1, &junk, &bst, &e_), CL_INVALID_BINARY);
	CHECK(bst == CL_INVALID_BINARY, "binary status %d", bst);
	CHECK_NULL(clCreateProgramWithBinary(ctx, 1, &dev, NULL, &junk, &bst, &e_), CL_INVALID_VALUE);
	CHECK_NULL(clCreateProgramWithBuiltInKernels(ctx, 1, &dev, "foo", &e_), CL_INVALID_VALUE);
	cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
	CHECK_NULL(clCreateKernel(p, "k", &e_), CL_INVALID_PROGRAM_EXECUTABLE);
	size_t nk;
	CHECK_ERR(clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL), CL_INVALID_PROGRAM_EXECUTABLE);
	CHECK_ERR(clBuildProgram(p, 1, NULL, NULL, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clBuildProgram(p, 0, &dev, NULL, NULL, NULL), CL_INVALID_VALUE);
	cl_device_id fdev = (cl_device_id)(void *)&fake;
	CHECK_ERR(clBuildProgram(p, 1, &fdev, NULL, NULL, NULL), CL_INVALID_DEVICE);
	CHECK_ERR(clBuildProgram(p, 0, NULL, "-g", NULL, NULL), CL_INVALID_BUILD_OPTIONS);
	CHECK_ERR(clBuildProgram(p, 0, NULL, "-I", NULL, NULL), CL_INVALID_BUILD_OPTIONS);
	CHECK_ERR(clBuildProgram(p, 0, NULL, "-cl-std=CLC++", NULL, NULL), CL_INVALID_BUILD_OPTIONS);
	CHECK_ERR(clBuildProgram(p, 0, NULL, "-D 1X", NULL, NULL), CL_INVALID_BUILD_OPTIONS);
	OK(clBuildProgram(p, 0, NULL, "-w -Werror -cl-fast-relaxed-math -D A=1 -DB", NULL, NULL));
	cl_build_status bs;
	CHECK_ERR(clGetProgramBuildInfo(p, fdev, CL_PROGRAM_BUILD_STATUS, sizeof bs, &bs, NULL), CL_INVALID_DEVICE);
	CHECK_ERR(clGetProgramBuildInfo(p, dev, 0x7777, sizeof bs, &bs, NULL), CL_INVALID_VALUE);
	CHECK_NULL(clCreateKernel(p, "nope", &e_), CL_INVALID_KERNEL_NAME);
	CHECK_NULL(clCreateKernel(p, NULL, &e_), CL_INVALID_VALUE);
	cl_kernel ks[1];
	CHECK_ERR(clCreateKernelsInProgram(p, 1, ks, NULL), CL_INVALID_VALUE);
	cl_kernel k = clCreateKernel(p, "k", &err);
	CHECK(err == CL_SUCCESS, "kernel: %d", err);
	CHECK_ERR(clBuildProgram(p, 0, NULL, NULL, NULL, NULL), CL_INVALID_OPERATION);

	/* Kernel arguments. */
	int v = 1;
	CHECK_ERR(clSetKernelArg(k, 3, sizeof v, &v), CL_INVALID_ARG_INDEX);
	CHECK_ERR(clSetKernelArg(k, 0, 4, &m), CL_INVALID_ARG_SIZE);
	cl_mem fmem = (cl_mem)(void *)&fake;
	CHECK_ERR(clSetKernelArg(k, 0, sizeof fmem, &fmem), CL_INVALID_MEM_OBJECT);
	CHECK_ERR(clSetKernelArg(k, 0, sizeof other, &other), CL_INVALID_MEM_OBJECT);
	CHECK_ERR(clSetKernelArg(k, 1, 2, &v), CL_INVALID_ARG_SIZE);
	CHECK_ERR(clSetKernelArg(k, 1, sizeof v, NULL), CL_INVALID_ARG_VALUE);
	CHECK_ERR(clSetKernelArg(k, 2, 16, &v), CL_INVALID_ARG_VALUE);
	CHECK_ERR(clSetKernelArg(k, 2, 0, NULL), CL_INVALID_ARG_SIZE);
	CHECK_ERR(t->clSetKernelArg((cl_kernel)(void *)&fake, 0, sizeof m, &m), CL_INVALID_KERNEL);
	size_t g = 64, l = 16, big = 1 << 20, zero = 0, odd = 7;
	CHECK_ERR(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL), CL_INVALID_KERNEL_ARGS);
	OK(clSetKernelArg(k, 0, sizeof m, &m));
	OK(clSetKernelArg(k, 1, sizeof v, &v));
	OK(clSetKernelArg(k, 2, 16 * sizeof(int), NULL));
	CHECK_ERR(clEnqueueNDRangeKernel(q, k, 0, NULL, &g, &l, 0, NULL, NULL), CL_INVALID_WORK_DIMENSION);
	CHECK_ERR(clEnqueueNDRangeKernel(q, k, 4, NULL, &g, &l, 0, NULL, NULL), CL_INVALID_WORK_DIMENSION);
	/* OpenCL 2.1 and later: no global size, or a 0 in it, runs nothing
	 * and completes as a marker does, with the launch's type. */
	cl_event ze = NULL;
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, NULL, &l, 0, NULL, NULL));
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &zero, NULL, 0, NULL, &ze));
	OK(clWaitForEvents(1, &ze));
	cl_command_type zt = 0;
	OK(clGetEventInfo(ze, CL_EVENT_COMMAND_TYPE, sizeof zt, &zt, NULL));
	CHECK(zt == CL_COMMAND_NDRANGE_KERNEL, "zero-sized launch's command type %#x", zt);
	OK(clReleaseEvent(ze));
	CHECK_ERR(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &odd, 0, NULL, NULL), CL_INVALID_WORK_GROUP_SIZE);
	CHECK_ERR(clEnqueueNDRangeKernel(q, k, 1, NULL, &big, &big, 0, NULL, NULL), CL_INVALID_WORK_ITEM_SIZE);
	size_t off = SIZE_MAX - 8;
	CHECK_ERR(clEnqueueNDRangeKernel(q, k, 1, &off, &g, &l, 0, NULL, NULL), CL_INVALID_GLOBAL_OFFSET);
	size_t huge[2] = {1 << 20, 1 << 20};
	CHECK_ERR(clEnqueueNDRangeKernel(q, k, 2, NULL, huge, NULL, 0, NULL, NULL), CL_INVALID_GLOBAL_WORK_SIZE);
	CHECK_ERR(clEnqueueNDRangeKernel(q2, k, 1, NULL, &g, &l, 0, NULL, NULL), CL_INVALID_CONTEXT);
	CHECK_ERR(t->clEnqueueNDRangeKernel(q, (cl_kernel)(void *)&fake, 1, NULL, &g, &l, 0, NULL, NULL),
		  CL_INVALID_KERNEL);
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
	cl_kernel kr = clCreateKernel(p, "r", &err);
	OK(clSetKernelArg(kr, 0, sizeof m, &m));
	size_t compiled[3] = {0};
	OK(clGetKernelWorkGroupInfo(kr, dev, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof compiled, compiled, NULL));
	CHECK(compiled[0] == 4 && compiled[1] == 1, "reqd_work_group_size %zu %zu", compiled[0], compiled[1]);
	size_t l8 = 8, l4 = 4;
	CHECK_ERR(clEnqueueNDRangeKernel(q, kr, 1, NULL, &g, &l8, 0, NULL, NULL), CL_INVALID_WORK_GROUP_SIZE);
	CHECK_ERR(clEnqueueNDRangeKernel(q, kr, 1, NULL, &g, NULL, 0, NULL, NULL), CL_INVALID_WORK_GROUP_SIZE);
	OK(clEnqueueNDRangeKernel(q, kr, 1, NULL, &g, &l4, 0, NULL, NULL));
	CHECK_ERR(clGetKernelWorkGroupInfo(kr, fdev, CL_KERNEL_WORK_GROUP_SIZE, sizeof g, &g, NULL), CL_INVALID_DEVICE);
	CHECK_ERR(clGetKernelWorkGroupInfo(kr, dev, CL_KERNEL_GLOBAL_WORK_SIZE, sizeof compiled, compiled, NULL),
		  CL_INVALID_VALUE);
	CHECK_ERR(clGetKernelArgInfo(kr, 1, CL_KERNEL_ARG_NAME, sizeof compiled, compiled, NULL), CL_INVALID_ARG_INDEX);
	CHECK_ERR(clEnqueueNativeKernel(q, NULL, NULL, 0, 0, NULL, NULL, 0, NULL, NULL), CL_INVALID_OPERATION);
	/* A buffer released behind the kernel's back. */
	cl_mem tmp = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 256, NULL, &err);
	OK(clSetKernelArg(kr, 0, sizeof tmp, &tmp));
	OK(clReleaseMemObject(tmp));
	CHECK_ERR(clEnqueueNDRangeKernel(q, kr, 1, NULL, &g, &l4, 0, NULL, NULL), CL_INVALID_KERNEL_ARGS);
	OK(clReleaseKernel(kr));

	/* Events. */
	CHECK_ERR(clWaitForEvents(0, NULL), CL_INVALID_VALUE);
	CHECK_ERR(t->clWaitForEvents(1, &bogus_ev), CL_INVALID_EVENT);
	cl_event e = NULL;
	OK(clEnqueueMarkerWithWaitList(q, 0, NULL, &e));
	cl_event mixed[2] = {e, ev2};
	CHECK_ERR(clWaitForEvents(2, mixed), CL_INVALID_CONTEXT);
	CHECK_ERR(clSetUserEventStatus(e, CL_COMPLETE), CL_INVALID_EVENT);
	cl_event ue = clCreateUserEvent(ctx, &err);
	CHECK_ERR(clSetUserEventStatus(ue, CL_SUBMITTED), CL_INVALID_VALUE);
	CHECK_ERR(clSetEventCallback(e, 0x7777, (void(CL_CALLBACK *)(cl_event, cl_int, void *))0x1, NULL),
		  CL_INVALID_VALUE);
	CHECK_ERR(clSetEventCallback(e, CL_COMPLETE, NULL, NULL), CL_INVALID_VALUE);
	OK(clWaitForEvents(1, &e));
	cl_ulong ts;
	CHECK_ERR(clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof ts, &ts, NULL),
		  CL_PROFILING_INFO_NOT_AVAILABLE);
	CHECK_ERR(clGetEventInfo(e, 0x7777, sizeof ts, &ts, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueMarker(q, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueWaitForEvents(q, 0, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clEnqueueWaitForEvents(q, 1, &ev2), CL_INVALID_CONTEXT);
	OK(clSetUserEventStatus(ue, CL_COMPLETE));
	OK(clReleaseEvent(ue));
	OK(clReleaseEvent(e));
	CHECK_ERR(t->clReleaseEvent(e), CL_INVALID_EVENT);
	CHECK_ERR(t->clGetEventInfo(e, CL_EVENT_COMMAND_TYPE, sizeof ts, &ts, NULL), CL_INVALID_EVENT);
	OK(clReleaseEvent(ev2));

	/* Released objects. */
	OK(clReleaseKernel(k));
	CHECK_ERR(t->clReleaseKernel(k), CL_INVALID_KERNEL);
	CHECK_ERR(t->clSetKernelArg(k, 1, sizeof v, &v), CL_INVALID_KERNEL);
	OK(clReleaseProgram(p));
	CHECK_ERR(t->clRetainProgram(p), CL_INVALID_PROGRAM);
	CHECK_NULL(t->clCreateKernel(p, "k", &e_), CL_INVALID_PROGRAM);
	OK(clReleaseMemObject(sub));
	OK(clReleaseMemObject(m));
	CHECK_ERR(t->clReleaseMemObject(m), CL_INVALID_MEM_OBJECT);
	CHECK_ERR(t->clEnqueueWriteBuffer(q, m, CL_TRUE, 0, 4, host, 0, NULL, NULL), CL_INVALID_MEM_OBJECT);
	OK(clReleaseMemObject(other));
	OK(clReleaseMemObject(noacc));
	OK(clReleaseMemObject(rdonly));
	OK(clFinish(q));
	OK(clReleaseCommandQueue(q));
	CHECK_ERR(t->clReleaseCommandQueue(q), CL_INVALID_COMMAND_QUEUE);
	OK(clReleaseCommandQueue(q2));
	OK(clReleaseContext(ctx));
	OK(clReleaseContext(ctx2));
}

/* ---- A daemon that dies ---------------------------------------------- */

static int fake_listener;

static void reply(int fd, const struct vgpu_icdp_header *req, const void *body, size_t n)
{
	uint8_t buf[512];
	struct vgpu_icdp_header h = {.op = req->op | VGPU_ICDP_REPLY_BIT, .len = (uint32_t)(sizeof h + n), .id = req->id};
	memcpy(buf, &h, sizeof h);
	memcpy(buf + sizeof h, body, n);
	send(fd, buf, sizeof h + n, MSG_NOSIGNAL);
}

/* serve answers Hello (in the client's version) and Attach, refuses the
 * submission queue, then answers the next request (a BufferCreate, over
 * the socket) with an Error and closes, as the daemon does on a protocol
 * error. */
static void *serve(void *arg)
{
	(void)arg;
	int fd = accept(fake_listener, NULL, NULL);
	if (fd < 0)
		return NULL;
	uint8_t buf[VGPU_ICDP_MAX_MESSAGE];
	for (;;) {
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		ssize_t n = recvmsg(fd, &mh, 0);
		if (n < (ssize_t)sizeof(struct vgpu_icdp_header))
			break;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
			int passed;
			memcpy(&passed, CMSG_DATA(c), sizeof passed);
			close(passed);
		}
		struct vgpu_icdp_header h;
		memcpy(&h, buf, sizeof h);
		if (h.op == VGPU_ICDP_OP_HELLO) {
			struct {
				struct vgpu_icdp_hello_reply_head head;
				struct vgpu_icdp_device_record rec;
			} r = {.head = {.version = ((const struct vgpu_icdp_hello *)(buf + sizeof h))->version, .device_count = 1},
			       .rec = {.abi_version = 0x10004, .mem_size = 1 << 20, .max_alloc = 1 << 20,
				       .compute_units = 1, .max_work_group = 64, .name = "fake"}};
			reply(fd, &h, &r, sizeof r);
		} else if (h.op == VGPU_ICDP_OP_ATTACH) {
			struct vgpu_icdp_attach_reply r = {0};
			reply(fd, &h, &r, sizeof r);
		} else if (h.op == VGPU_ICDP_OP_QUEUE) {
			/* Refused: the ICD goes on over the socket. */
			struct vgpu_icdp_queue_reply r = {.status = VGPU_ICDP_ERR_ARENA};
			reply(fd, &h, &r, sizeof r);
		} else {
			uint8_t e[64] = {0};
			struct vgpu_icdp_header eh = {.op = VGPU_ICDP_OP_ERROR, .len = sizeof eh + 8 + 4, .id = h.id};
			struct vgpu_icdp_error_head err = {.code = VGPU_ICDP_ERR_INTERNAL};
			memcpy(e, &eh, sizeof eh);
			memcpy(e + sizeof eh, &err, sizeof err);
			memcpy(e + sizeof eh + sizeof err, "boom", 4);
			send(fd, e, eh.len, MSG_NOSIGNAL);
			break;
		}
	}
	close(fd);
	return NULL;
}

static void dying_daemon(const char *dir)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/fake.sock", dir);
	unlink(sa.sun_path);
	fake_listener = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	if (bind(fake_listener, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fake_listener, 4) != 0) {
		CHECK(0, "fake daemon at %s", sa.sun_path);
		return;
	}
	pthread_t th;
	pthread_create(&th, NULL, serve, NULL);
	setenv("VGPUD_ICD_SOCKET", sa.sun_path, 1);
	cl_int err;
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS, "context on the fake daemon: %d", err);
	cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
	CHECK(err == CL_SUCCESS, "queue on the fake daemon: %d", err);
	CHECK_NULL(clCreateBuffer(ctx, 0, 64, NULL, &e_), CL_OUT_OF_RESOURCES);
	pthread_join(th, NULL);
	int v = 0;
	CHECK_NULL(clCreateBuffer(ctx, 0, 64, NULL, &e_), CL_OUT_OF_RESOURCES);
	CHECK_ERR(clFinish(q), CL_OUT_OF_RESOURCES);
	CHECK_ERR(clFlush(q), CL_OUT_OF_RESOURCES);
	const char *s = "__kernel void k() {}";
	cl_program p = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
	CHECK(err == CL_SUCCESS, "program: %d", err);
	CHECK_ERR(clBuildProgram(p, 0, NULL, NULL, NULL, NULL), CL_OUT_OF_RESOURCES);
	cl_event e = NULL;
	CHECK_ERR(clEnqueueMarkerWithWaitList(q, 0, NULL, &e), CL_OUT_OF_RESOURCES);
	(void)v;
	OK(clReleaseProgram(p));
	OK(clReleaseCommandQueue(q));
	OK(clReleaseContext(ctx));
	close(fake_listener);
	unlink(sa.sun_path);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: misuse DIR\n");
		return 2;
	}
	find();
	context_misuse();
	object_misuse();
	dying_daemon(argv[1]);
	printf("misuse: %d failures\n", failures);
	return failures > 125 ? 125 : failures;
}

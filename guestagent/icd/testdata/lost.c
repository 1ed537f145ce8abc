/* lost: a kernel that never ends, run through the ICD against a vgpu-icdd
 * (tests/icdhost) whose instance has a short turn budget: vgpud's watchdog
 * ends the worker, the device context is lost, and the waiting application
 * must get the error OpenCL 1.2 gives (the event's execution status a
 * negative error, clWaitForEvents CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
 * instead of waiting for ever; then a new context computes correctly on the
 * device vgpu-icdd reopened. Built and run by icd_test.go.
 *
 * It prints one line per failed check and exits with the number of them. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define N 4096

static const char *spin_src =
	"__kernel void spin(__global volatile int *o) { while (o[1] == 0) { o[0]++; } }\n";
static const char *vadd_src =
	"__kernel void vadd(__global const uint *a, __global uint *b, uint k) {\n"
	"	size_t i = get_global_id(0);\n"
	"	b[i] = a[i] + k;\n"
	"}\n";

static cl_device_id device(void)
{
	cl_platform_id ps[8];
	cl_uint n = 0;
	OK(clGetPlatformIDs(8, ps, &n));
	for (cl_uint i = 0; i < n && i < 8; i++) {
		char name[64] = "";
		clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
		cl_device_id d;
		if (strcmp(name, "vgpud") == 0 && clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_GPU, 1, &d, NULL) == CL_SUCCESS)
			return d;
	}
	printf("lost.c: no vgpud device\n");
	exit(1);
}

static cl_program build(cl_context ctx, cl_device_id dev, const char *src)
{
	cl_int err;
	cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
	OK(err);
	OK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
	return p;
}

/* new_kernel returns kernel name of src, built in a new context of dev
 * with a queue: the context, the queue and the program in *ctx, *q, *p. */
static cl_kernel new_kernel(cl_device_id dev, const char *src, const char *name, cl_context *ctx,
			    cl_command_queue *q, cl_program *p)
{
	cl_int err;
	*ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	OK(err);
	*q = clCreateCommandQueue(*ctx, dev, 0, &err);
	OK(err);
	*p = build(*ctx, dev, src);
	cl_kernel k = clCreateKernel(*p, name, &err);
	OK(err);
	return k;
}

/* release_kernel releases what new_kernel made. */
static void release_kernel(cl_context ctx, cl_command_queue q, cl_program p, cl_kernel k)
{
	clReleaseKernel(k);
	clReleaseProgram(p);
	clReleaseCommandQueue(q);
	clReleaseContext(ctx);
}

/* The spinning kernel's worker is ended by the watchdog: its event fails. */
static void lose(cl_device_id dev)
{
	cl_int err;
	cl_context ctx;
	cl_command_queue q;
	cl_program p;
	cl_kernel k = new_kernel(dev, spin_src, "spin", &ctx, &q, &p);
	int zero[16] = {0};
	cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero, zero, &err);
	OK(err);
	OK(clSetKernelArg(k, 0, sizeof b, &b));
	size_t one = 1;
	cl_event ev;
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &one, NULL, 0, NULL, &ev));
	OK(clFlush(q));
	err = clWaitForEvents(1, &ev);
	CHECK(err == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, "clWaitForEvents on the lost kernel: %d", err);
	cl_int st = 0;
	OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st < 0, "execution status of the lost kernel: %d, want a negative error", st);
	/* A read of the lost buffer fails too, without hanging. */
	int back[16];
	err = clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL);
	CHECK(err != CL_SUCCESS, "blocking read of a buffer of the lost context succeeded");
	clFinish(q);
	printf("lost.c: lost kernel: clWaitForEvents %d, status %d; read %d\n", CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
	       st, err);
	clReleaseEvent(ev);
	clReleaseMemObject(b);
	release_kernel(ctx, q, p, k);
}

/* A new context after the loss computes correctly. */
static void compute(cl_device_id dev)
{
	cl_int err;
	cl_context ctx;
	cl_command_queue q;
	cl_program p;
	cl_kernel k = new_kernel(dev, vadd_src, "vadd", &ctx, &q, &p);
	static cl_uint a[N], out[N];
	for (int i = 0; i < N; i++)
		a[i] = 3u * (cl_uint)i;
	cl_mem ba = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof a, a, &err);
	OK(err);
	cl_mem bb = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof out, NULL, &err);
	OK(err);
	cl_uint kk = 7;
	OK(clSetKernelArg(k, 0, sizeof ba, &ba));
	OK(clSetKernelArg(k, 1, sizeof bb, &bb));
	OK(clSetKernelArg(k, 2, sizeof kk, &kk));
	size_t n = N;
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, bb, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
	int bad = 0;
	for (int i = 0; i < N && bad < 5; i++)
		if (out[i] != a[i] + kk) {
			CHECK(out[i] == a[i] + kk, "element %d = %u, want %u", i, out[i], a[i] + kk);
			bad++;
		}
	clReleaseMemObject(ba);
	clReleaseMemObject(bb);
	release_kernel(ctx, q, p, k);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	cl_device_id dev = device();
	lose(dev);
	compute(dev);
	printf("lost.c: %d failures\n", failures);
	return failures;
}

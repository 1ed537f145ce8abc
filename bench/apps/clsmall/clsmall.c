/*
 * clsmall: an ordinary OpenCL 1.2 program of many small commands, the shape
 * of real GPU applications (Rodinia's cfd: thousands of short kernels;
 * myocyte: thousands of small reads), for bench/apps's "small" table
 * (issue 32). It runs unchanged on any OpenCL platform: PoCL directly, or
 * the vgpud ICD on the host (tests/icdhost) or in a guest.
 *
 *   clsmall launches N     N launches of a short kernel (64 work items,
 *                          one in-order queue, no wait between them), then
 *                          clFinish and one read; the result is checked
 *   clsmall reads N        N blocking reads of 64 bytes each, every one at
 *                          another offset of a 1 MiB buffer a kernel
 *                          filled; each read's bytes are checked
 *   clsmall steps N        N iterations of a kernel then a blocking read of
 *                          16 bytes (the myocyte shape: the host looks at
 *                          each step's result before the next)
 *   clsmall startup        platform, context, queue, a small program built,
 *                          one launch and one blocking read: what every
 *                          program pays before its own work
 *
 * It prints one line "CLSMALL {json}" with the mode, n, setup_ns (platform
 * to program built), run_ns (the mode's work) and total_ns (from main's
 * start to the check done); a wrong result or an OpenCL error exits 1.
 * It uses the first device of the first platform.
 */
#define _POSIX_C_SOURCE 200809L
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ITEMS 64
#define BIG (1 << 20) /* bytes of the reads' buffer */
#define READ 64       /* bytes of one small read */

static const char *source =
	"__kernel void tick(__global int *a, int k) {\n"
	"	int i = get_global_id(0);\n"
	"	a[i] = a[i] * 3 + k + i;\n"
	"}\n"
	"__kernel void spread(__global int *a, int seed) {\n"
	"	int i = get_global_id(0);\n"
	"	a[i] = i * 7 + seed;\n"
	"}\n";

#define PROG "clsmall"
#include "../clcheck.h"

struct cl {
	cl_context ctx;
	cl_command_queue q;
	cl_program prog;
	cl_kernel step, fill;
};

static void setup(struct cl *c)
{
	cl_platform_id plat;
	cl_device_id dev;
	cl_int err;
	CK(clGetPlatformIDs(1, &plat, NULL));
	CK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
	c->ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CK(err);
	c->q = clCreateCommandQueue(c->ctx, dev, 0, &err);
	CK(err);
	c->prog = clCreateProgramWithSource(c->ctx, 1, &source, NULL, &err);
	CK(err);
	err = clBuildProgram(c->prog, 1, &dev, "-cl-std=CL1.2", NULL, NULL);
	if (err != CL_SUCCESS) {
		char log[4096] = "";
		clGetProgramBuildInfo(c->prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
		fprintf(stderr, "clsmall: build log:\n%s\n", log);
		die("clBuildProgram", err);
	}
	c->step = clCreateKernel(c->prog, "tick", &err);
	CK(err);
	c->fill = clCreateKernel(c->prog, "spread", &err);
	CK(err);
}

/* stepped is what n launches of step with k = 0..n-1 make of a[i] = 0. */
static int32_t stepped(int i, long n)
{
	uint32_t v = 0;
	for (long k = 0; k < n; k++)
		v = v * 3u + (uint32_t)k + (uint32_t)i;
	return (int32_t)v;
}

static cl_mem zeroed(struct cl *c, size_t bytes)
{
	cl_int err;
	cl_mem m = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
	CK(err);
	int zero = 0;
	CK(clEnqueueFillBuffer(c->q, m, &zero, sizeof zero, 0, bytes, 0, NULL, NULL));
	return m;
}

static void launch_step(struct cl *c, cl_mem a, cl_int k, size_t items)
{
	CK(clSetKernelArg(c->step, 0, sizeof a, &a));
	CK(clSetKernelArg(c->step, 1, sizeof k, &k));
	CK(clEnqueueNDRangeKernel(c->q, c->step, 1, NULL, &items, NULL, 0, NULL, NULL));
}

static void check_step(const int32_t *got, int count, long n)
{
	for (int i = 0; i < count; i++)
		if (got[i] != stepped(i, n)) {
			fprintf(stderr, "clsmall: a[%d] = %d after %ld steps, want %d\n", i, got[i], n, stepped(i, n));
			exit(1);
		}
}

static void launches(struct cl *c, long n)
{
	size_t items = ITEMS;
	cl_mem a = zeroed(c, ITEMS * sizeof(int32_t));
	for (long k = 0; k < n; k++)
		launch_step(c, a, (cl_int)k, items);
	CK(clFinish(c->q));
	int32_t got[ITEMS];
	CK(clEnqueueReadBuffer(c->q, a, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
	check_step(got, ITEMS, n);
	clReleaseMemObject(a);
}

static void reads(struct cl *c, long n)
{
	size_t items = BIG / sizeof(int32_t);
	cl_int err, seed = 11;
	cl_mem a = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, BIG, NULL, &err);
	CK(err);
	CK(clSetKernelArg(c->fill, 0, sizeof a, &a));
	CK(clSetKernelArg(c->fill, 1, sizeof seed, &seed));
	CK(clEnqueueNDRangeKernel(c->q, c->fill, 1, NULL, &items, NULL, 0, NULL, NULL));
	int32_t got[READ / sizeof(int32_t)];
	for (long r = 0; r < n; r++) {
		size_t off = ((size_t)r * 4099 * READ) % (BIG - READ);
		off -= off % sizeof(int32_t);
		CK(clEnqueueReadBuffer(c->q, a, CL_TRUE, off, READ, got, 0, NULL, NULL));
		for (size_t j = 0; j < READ / sizeof(int32_t); j++) {
			int32_t i = (int32_t)(off / sizeof(int32_t) + j);
			if (got[j] != i * 7 + seed) {
				fprintf(stderr, "clsmall: read %ld: a[%d] = %d, want %d\n", r, i, got[j], i * 7 + seed);
				exit(1);
			}
		}
	}
	clReleaseMemObject(a);
}

static void steps(struct cl *c, long n)
{
	size_t items = ITEMS;
	cl_mem a = zeroed(c, ITEMS * sizeof(int32_t));
	int32_t got[4];
	for (long k = 0; k < n; k++) {
		launch_step(c, a, (cl_int)k, items);
		CK(clEnqueueReadBuffer(c->q, a, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
		check_step(got, 4, k + 1);
	}
	clReleaseMemObject(a);
}

int main(int argc, char **argv)
{
	int64_t t0 = now_ns();
	if (argc < 2 || (strcmp(argv[1], "startup") != 0 && argc != 3)) {
		fprintf(stderr, "usage: clsmall launches|reads|steps N | clsmall startup\n");
		return 2;
	}
	const char *mode = argv[1];
	long n = argc == 3 ? strtol(argv[2], NULL, 10) : 1;
	if (n <= 0) {
		fprintf(stderr, "clsmall: N must be positive\n");
		return 2;
	}
	struct cl c;
	setup(&c);
	int64_t t1 = now_ns();
	if (strcmp(mode, "launches") == 0 || strcmp(mode, "startup") == 0)
		launches(&c, n);
	else if (strcmp(mode, "reads") == 0)
		reads(&c, n);
	else if (strcmp(mode, "steps") == 0)
		steps(&c, n);
	else {
		fprintf(stderr, "clsmall: unknown mode %s\n", mode);
		return 2;
	}
	int64_t t2 = now_ns();
	clReleaseKernel(c.step);
	clReleaseKernel(c.fill);
	clReleaseProgram(c.prog);
	clReleaseCommandQueue(c.q);
	clReleaseContext(c.ctx);
	printf("CLSMALL {\"mode\":\"%s\",\"n\":%ld,\"setup_ns\":%lld,\"run_ns\":%lld,\"total_ns\":%lld}\n",
	       mode, n, (long long)(t1 - t0), (long long)(t2 - t1), (long long)(now_ns() - t0));
	return 0;
}

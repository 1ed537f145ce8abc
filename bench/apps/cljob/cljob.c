/*
 * cljob: the data-path benchmark's matmul job (package guestagent/job) as
 * an ordinary OpenCL 1.2 host program, so that the same work runs through
 * any OpenCL platform: PoCL on the host, or the vgpud ICD in a guest.
 *
 *   cljob DIR N REPS LOCAL RUNS
 *
 * DIR holds what bench/apps wrote from package job, so no input is
 * generated twice: job.cl (job.Source), opts (job.BuildOptions), a0.f32,
 * a1.f32 and b.f32 (job.MakeInputs, little-endian float32, N*N each).
 * Like job.Run: build and allocate (setup), then upload B and REPS times
 * upload A (alternating A0, A1), multiply and download C, each step
 * waited for as the Go driver path waits for it; then check job.Checks
 * elements of the last C against the CPU in double precision with the
 * same tolerance. Each run prints one line "CLJOB {json}" with job.Result's
 * fields; a wrong result or an OpenCL error exits 1.
 *
 * It uses the first GPU device of the first platform that has one, else
 * the first device of the first platform.
 */
#define _POSIX_C_SOURCE 200809L
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECKS 32 /* job.Checks */

#define PROG "cljob"
#include "../clcheck.h"

static void *slurp(const char *dir, const char *name, size_t want, size_t *got)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		perror(path);
		exit(1);
	}
	size_t cap = want ? want : 1 << 20, n = 0;
	char *buf = malloc(cap + 1);
	for (;;) {
		if (n == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
		}
		size_t r = fread(buf + n, 1, cap - n, f);
		if (r == 0)
			break;
		n += r;
	}
	fclose(f);
	if (want && n != want) {
		fprintf(stderr, "cljob: %s: %zu bytes, want %zu\n", path, n, want);
		exit(1);
	}
	buf[n] = 0;
	if (got)
		*got = n;
	return buf;
}

static cl_device_id pick_device(void)
{
	cl_uint np = 0;
	CK(clGetPlatformIDs(0, NULL, &np));
	if (np == 0)
		die("no OpenCL platform", CL_DEVICE_NOT_FOUND);
	cl_platform_id *ps = calloc(np, sizeof *ps);
	CK(clGetPlatformIDs(np, ps, NULL));
	cl_device_id d = NULL;
	for (cl_uint i = 0; i < np && d == NULL; i++)
		if (clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_GPU, 1, &d, NULL) != CL_SUCCESS)
			d = NULL;
	if (d == NULL)
		CK(clGetDeviceIDs(ps[0], CL_DEVICE_TYPE_ALL, 1, &d, NULL));
	free(ps);
	return d;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: cljob DIR N REPS LOCAL RUNS\n");
		return 2;
	}
	const char *dir = argv[1];
	int n = atoi(argv[2]), reps = atoi(argv[3]), local = atoi(argv[4]), runs = atoi(argv[5]);
	if (n < 1 || n > 4096 || local < 1 || n % local || reps < 1 || runs < 1) {
		fprintf(stderr, "cljob: bad sizes\n");
		return 2;
	}
	size_t bytes = (size_t)n * n * 4;
	char *src = slurp(dir, "job.cl", 0, NULL);
	char *opts = slurp(dir, "opts", 0, NULL);
	float *a[2] = {slurp(dir, "a0.f32", bytes, NULL), slurp(dir, "a1.f32", bytes, NULL)};
	float *b = slurp(dir, "b.f32", bytes, NULL);
	float *c = malloc(bytes);

	cl_device_id dev = pick_device();
	char name[256] = "";
	clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
	fprintf(stderr, "cljob: device %s\n", name);
	cl_int err;
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CK(err);
	cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
	CK(err);

	for (int run = 0; run < runs; run++) {
		int64_t t0 = now_ns();
		const char *srcs[1] = {src};
		cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, NULL, &err);
		CK(err);
		if ((err = clBuildProgram(prog, 1, &dev, opts, NULL, NULL)) != CL_SUCCESS) {
			char log[8192] = "";
			clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
			fprintf(stderr, "cljob: build log:\n%s\n", log);
			die("clBuildProgram", err);
		}
		cl_kernel k = clCreateKernel(prog, "matmul", &err);
		CK(err);
		cl_mem ma = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
		CK(err);
		cl_mem mb = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
		CK(err);
		cl_mem mc = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
		CK(err);
		cl_uint un = (cl_uint)n;
		CK(clSetKernelArg(k, 0, sizeof ma, &ma));
		CK(clSetKernelArg(k, 1, sizeof mb, &mb));
		CK(clSetKernelArg(k, 2, sizeof mc, &mc));
		CK(clSetKernelArg(k, 3, sizeof un, &un));
		CK(clFinish(q));
		int64_t setup = now_ns() - t0;

		t0 = now_ns();
		int64_t kernel_ns = 0;
		int launches = 0;
		CK(clEnqueueWriteBuffer(q, mb, CL_TRUE, 0, bytes, b, 0, NULL, NULL));
		for (int i = 0; i < reps; i++) {
			CK(clEnqueueWriteBuffer(q, ma, CL_TRUE, 0, bytes, a[i % 2], 0, NULL, NULL));
			size_t global[2] = {(size_t)n, (size_t)n}, lsz[2] = {(size_t)local, (size_t)local};
			cl_event ev;
			CK(clEnqueueNDRangeKernel(q, k, 2, NULL, global, lsz, 0, NULL, &ev));
			CK(clWaitForEvents(1, &ev));
			cl_ulong s = 0, e = 0;
			if (clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof s, &s, NULL) == CL_SUCCESS &&
			    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof e, &e, NULL) == CL_SUCCESS &&
			    e >= s) {
				kernel_ns += (int64_t)(e - s);
				launches++;
			}
			CK(clReleaseEvent(ev));
			CK(clEnqueueReadBuffer(q, mc, CL_TRUE, 0, bytes, c, 0, NULL, NULL));
		}
		CK(clFinish(q));
		int64_t total = now_ns() - t0;

		/* job.Check: an even walk over C, in double, atol n*1e-5, rtol 1e-5. */
		const float *alast = a[(reps - 1) % 2];
		int checked = 0;
		double maxerr = 0;
		for (int kk = 0; kk < CHECKS; kk++) {
			long idx = ((long)kk * ((long)n * n - 1)) / (CHECKS - 1);
			long row = idx / n, col = idx % n;
			double want = 0;
			for (int i = 0; i < n; i++)
				want += (double)alast[row * n + i] * (double)b[(long)i * n + col];
			double got = c[idx], d = fabs(got - want);
			if (isnan(got))
				d = INFINITY;
			if (d > maxerr)
				maxerr = d;
			if (isnan(got) || d > n * 1e-5 + 1e-5 * fabs(want))
				break;
			checked++;
		}
		printf("CLJOB {\"n\":%d,\"iterations\":%d,\"setup_ns\":%lld,\"total_ns\":%lld,\"kernel_ns\":%lld,"
		       "\"kernel_launches\":%d,\"checked\":%d,\"max_abs_err\":%g}\n",
		       n, reps, (long long)setup, (long long)total, (long long)(launches ? kernel_ns : -1), launches, checked,
		       maxerr);
		fflush(stdout);
		clReleaseMemObject(ma);
		clReleaseMemObject(mb);
		clReleaseMemObject(mc);
		clReleaseKernel(k);
		clReleaseProgram(prog);
		if (checked < CHECKS) {
			fprintf(stderr, "cljob: element %d of %d wrong (max error %g)\n", checked, CHECKS, maxerr);
			return 1;
		}
	}
	clReleaseCommandQueue(q);
	clReleaseContext(ctx);
	return 0;
}

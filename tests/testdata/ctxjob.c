/* ctxjob: one OpenCL process of TestGuestContexts (tests/contexts_test.go).
 * It makes a context, builds a vector addition and makes its buffers (through
 * vgpu-icdd, which gives the process a device context of its own), then
 * waits until N processes have got that far (files in DIR: a barrier, so
 * that N contexts live at once), computes c = a + k*b ROUNDS times (ten by
 * default; k changes every round, so a stale read-back shows) and checks
 * each result. It prints "CTXJOB OK" or the first failure; with PACE_MS,
 * it sleeps that long between rounds and prints "CTXJOB round R" on
 * stderr every 25 rounds (TestMigrateVFIOUserICD migrates the VM
 * meanwhile).
 *
 *   ctxjob DIR N [ROUNDS PACE_MS] */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LEN 65536

static const char *src = "__kernel void vadd(__global const float *a, __global const float *b, __global float *c, float k) {\n"
			 "\tsize_t i = get_global_id(0);\n"
			 "\tc[i] = a[i] + k * b[i];\n"
			 "}\n";

static int fail(const char *what, cl_int err)
{
	printf("CTXJOB FAIL %s: %d\n", what, err);
	return 1;
}

static int count(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	cl_platform_id plat;
	cl_device_id dev;
	cl_int err;
	static float a[LEN], b[LEN], c[LEN];
	char path[4096];
	if (argc != 3 && argc != 5)
		return fprintf(stderr, "usage: ctxjob DIR N [ROUNDS PACE_MS]\n"), 2;
	int want = atoi(argv[2]);
	int rounds = argc == 5 ? atoi(argv[3]) : 10, pace = argc == 5 ? atoi(argv[4]) : 0;
	if ((err = clGetPlatformIDs(1, &plat, NULL)) != CL_SUCCESS)
		return fail("platform", err);
	if ((err = clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL)) != CL_SUCCESS)
		return fail("device", err);
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	if (!ctx)
		return fail("context", err);
	cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
	if (!q)
		return fail("queue", err);
	cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
	if (!p || (err = clBuildProgram(p, 1, &dev, "", NULL, NULL)) != CL_SUCCESS)
		return fail("build", err);
	cl_kernel k = clCreateKernel(p, "vadd", &err);
	if (!k)
		return fail("kernel", err);
	for (int i = 0; i < LEN; i++)
		a[i] = (float)i, b[i] = (float)(i % 13);
	cl_mem da = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof a, a, &err);
	cl_mem db = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof b, b, &err);
	cl_mem dc = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof c, NULL, &err);
	if (!da || !db || !dc)
		return fail("buffers", err);
	if ((err = clFinish(q)) != CL_SUCCESS)
		return fail("finish", err);

	snprintf(path, sizeof path, "%s/%d", argv[1], (int)getpid());
	FILE *f = fopen(path, "w");
	if (!f)
		return fail("barrier file", 0);
	fclose(f);
	for (int waited = 0; count(argv[1]) < want; waited++) {
		if (waited > 6000)
			return fail("barrier: too few processes", count(argv[1]));
		usleep(100000);
	}

	for (int r = 1; r <= rounds; r++) {
		float kk = (float)(r % 1000);
		size_t n = LEN;
		if ((err = clSetKernelArg(k, 0, sizeof da, &da)) || (err = clSetKernelArg(k, 1, sizeof db, &db)) ||
		    (err = clSetKernelArg(k, 2, sizeof dc, &dc)) || (err = clSetKernelArg(k, 3, sizeof kk, &kk)))
			return fail("args", err);
		if ((err = clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL)) != CL_SUCCESS)
			return fail("launch", err);
		if ((err = clEnqueueReadBuffer(q, dc, CL_TRUE, 0, sizeof c, c, 0, NULL, NULL)) != CL_SUCCESS)
			return fail("read", err);
		for (int i = 0; i < LEN; i++)
			if (c[i] != a[i] + kk * b[i]) {
				printf("CTXJOB FAIL c[%d] = %f, want %f (round %d)\n", i, c[i], a[i] + kk * b[i], r);
				return 1;
			}
		if (pace > 0) {
			if (r % 25 == 0)
				fprintf(stderr, "CTXJOB round %d\n", r);
			usleep(pace * 1000);
		}
	}
	printf("CTXJOB OK\n");
	return 0;
}

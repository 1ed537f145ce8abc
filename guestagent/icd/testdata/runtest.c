/* runtest: runs OpenCL work through the ICD loader and the vgpud ICD
 * against a vgpu-icdd (the test harness tests/icdhost, a real vGPU backed by
 * the host's OpenCL): contexts, queues, buffers with every host-pointer
 * flag, a program with an #include found through -I, kernels, fills,
 * copies, maps, rectangles, events with profiling, user events holding
 * commands back, callbacks, sub-buffers, binaries, compile and link, -D
 * options defining function-like macros, transfers and maps larger than the
 * ICD's arena (which must stay within its cap), repeated transfers that
 * reuse resident arena pages, and fork. Built and run by
 * icd_test.go:
 *
 *   runtest DIR     DIR: an empty directory for the test's header files
 *
 * It prints one line per failed check and exits with the number of them. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#include <CL/cl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define N 1024

static cl_platform_id platform;
static cl_device_id dev;
static cl_context ctx;
static cl_command_queue q;

static const char *source =
	"#include \"vadd.h\"\n"
	"/* #include \"not-there.h\" in a comment stays a comment */\n"
	"#if 0\n"
	"#include <not-there-either.h>\n"
	"#endif\n"
	"__kernel void vadd(__global const float *a, __global const float *b, __global float *c, float k)\n"
	"{\n"
	"	size_t i = get_global_id(0);\n"
	"	c[i] = combine(a[i], b[i]) * k + OFFSET;\n"
	"}\n"
	"__kernel void iota(__global int *o, int base)\n"
	"{\n"
	"	o[get_global_id(0)] = base + (int)get_global_id(0);\n"
	"}\n"
	"__kernel void lsum(__global const int *in, __global int *out, __local int *tmp)\n"
	"{\n"
	"	size_t l = get_local_id(0), g = get_group_id(0), n = get_local_size(0);\n"
	"	tmp[l] = in[get_global_id(0)];\n"
	"	barrier(CLK_LOCAL_MEM_FENCE);\n"
	"	if (l == 0) {\n"
	"		int s = 0;\n"
	"		for (size_t j = 0; j < n; j++)\n"
	"			s += tmp[j];\n"
	"		out[g] = s;\n"
	"	}\n"
	"}\n"
	"typedef struct { int a; float b; long c; int d[4]; } big_t;\n"
	"__kernel void bigarg(__global long *o, big_t s, char ch)\n"
	"{\n"
	"	o[0] = s.a + (long)s.b + s.c + s.d[3] + ch;\n"
	"}\n";

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (f == NULL) {
		CHECK(0, "create %s", path);
		return;
	}
	fputs(text, f);
	fclose(f);
}

static cl_program build(const char *src, const char *opts, cl_int want)
{
	cl_int err;
	cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
	CHECK(err == CL_SUCCESS, "clCreateProgramWithSource: %d", err);
	err = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
	if (err != want) {
		char log[8192] = "";
		clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
		CHECK(err == want, "clBuildProgram(%s): %d, want %d; log:\n%s", opts, err, want, log);
	}
	return p;
}

/* run_task runs k, whose argument 0 is m, as a task on q and reads the
 * first n bytes of m into v. */
static void run_task(cl_kernel k, cl_mem m, void *v, size_t n)
{
	OK(clSetKernelArg(k, 0, sizeof m, &m));
	OK(clEnqueueTask(q, k, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, v, 0, NULL, NULL));
}

static void setup(void)
{
	platform = need_vgpud_platform();
	OK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_GPU, 1, &dev, NULL));
	cl_bool avail = CL_FALSE;
	OK(clGetDeviceInfo(dev, CL_DEVICE_AVAILABLE, sizeof avail, &avail, NULL));
	CHECK(avail == CL_TRUE, "device not available");
	cl_command_queue_properties qp = 0;
	OK(clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof qp, &qp, NULL));
	CHECK(qp & CL_QUEUE_PROFILING_ENABLE, "queue properties %#llx", (unsigned long long)qp);

	cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
	cl_int err;
	ctx = clCreateContext(props, 1, &dev, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && ctx != NULL, "clCreateContext: %d", err);
	if (ctx == NULL)
		exit(1);
	cl_context_properties got[8];
	size_t sz = 0;
	OK(clGetContextInfo(ctx, CL_CONTEXT_PROPERTIES, sizeof got, got, &sz));
	CHECK(sz == sizeof props && got[1] == props[1], "context properties (%zu bytes)", sz);
	cl_uint nd = 0;
	OK(clGetContextInfo(ctx, CL_CONTEXT_NUM_DEVICES, sizeof nd, &nd, NULL));
	CHECK(nd == 1, "%u devices", nd);

	q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
	CHECK(err == CL_SUCCESS, "clCreateCommandQueue: %d", err);
	/* Out of order is accepted (and runs in order). */
	cl_command_queue ooo =
		clCreateCommandQueue(ctx, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE, &err);
	CHECK(err == CL_SUCCESS, "out-of-order queue: %d", err);
	OK(clGetCommandQueueInfo(ooo, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL));
	CHECK(qp == (CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE), "props %#llx",
	      (unsigned long long)qp);
	cl_context qc = NULL;
	OK(clGetCommandQueueInfo(ooo, CL_QUEUE_CONTEXT, sizeof qc, &qc, NULL));
	CHECK(qc == ctx, "queue context");
	OK(clReleaseCommandQueue(ooo));
}

static void vadd_test(const char *dir)
{
	/* vadd.h is found through -I; it includes inner.h from its own
	 * directory, twice, and inner.h has #pragma once. */
	write_file(dir, "vadd.h",
		   "#pragma once\n#include \"inner.h\"\n#include \"inner.h\"\n"
		   "static inline float combine(float x, float y) { return COMBINE(x, y); }\n");
	write_file(dir, "inner.h", "#pragma once\n#define COMBINE(x, y) ((x) + (y))\nstruct only_once { int x; };\n");
	char opts[4200];
	snprintf(opts, sizeof opts, "-I %s -DOFFSET=0.5f -cl-mad-enable", dir);
	cl_program p = build(source, opts, CL_SUCCESS);
	cl_build_status bs = CL_BUILD_NONE;
	OK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_STATUS, sizeof bs, &bs, NULL));
	CHECK(bs == CL_BUILD_SUCCESS, "build status %d", bs);
	char got_opts[4200] = "";
	OK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, sizeof got_opts, got_opts, NULL));
	CHECK(strcmp(got_opts, opts) == 0, "build options %s", got_opts);
	size_t nk = 0;
	OK(clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL));
	CHECK(nk == 4, "%zu kernels", nk);
	char names[256] = "";
	OK(clGetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, sizeof names, names, NULL));
	CHECK(strstr(names, "vadd") != NULL && strstr(names, "lsum") != NULL, "kernel names %s", names);
	cl_kernel ks[8];
	cl_uint nks = 0;
	OK(clCreateKernelsInProgram(p, 8, ks, &nks));
	CHECK(nks == 4, "clCreateKernelsInProgram: %u", nks);
	for (cl_uint i = 0; i < nks && i < 8; i++)
		OK(clReleaseKernel(ks[i]));

	cl_int err;
	cl_kernel k = clCreateKernel(p, "vadd", &err);
	CHECK(err == CL_SUCCESS, "clCreateKernel: %d", err);
	cl_uint nargs = 0;
	OK(clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL));
	CHECK(nargs == 4, "%u args", nargs);
	char an[64] = "";
	OK(clGetKernelArgInfo(k, 3, CL_KERNEL_ARG_NAME, sizeof an, an, NULL));
	CHECK(strcmp(an, "k") == 0, "arg 3 name %s", an);
	OK(clGetKernelArgInfo(k, 0, CL_KERNEL_ARG_TYPE_NAME, sizeof an, an, NULL));
	CHECK(strncmp(an, "float*", 6) == 0, "arg 0 type %s", an);
	cl_kernel_arg_address_qualifier aq = 0;
	OK(clGetKernelArgInfo(k, 2, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof aq, &aq, NULL));
	CHECK(aq == CL_KERNEL_ARG_ADDRESS_GLOBAL, "arg 2 address %#x", (unsigned)aq);
	cl_kernel_arg_type_qualifier tq = 0;
	OK(clGetKernelArgInfo(k, 0, CL_KERNEL_ARG_TYPE_QUALIFIER, sizeof tq, &tq, NULL));
	CHECK(tq & CL_KERNEL_ARG_TYPE_CONST, "arg 0 type qualifier %#llx", (unsigned long long)tq);
	size_t wg = 0;
	OK(clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL));
	CHECK(wg > 0, "work-group size %zu", wg);

	float a[N], b[N], c[N];
	for (int i = 0; i < N; i++) {
		a[i] = (float)i;
		b[i] = (float)(2 * i);
	}
	cl_mem ma = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof a, a, &err);
	CHECK(err == CL_SUCCESS, "buffer a: %d", err);
	cl_mem mb = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, sizeof b, b, &err);
	CHECK(err == CL_SUCCESS, "buffer b: %d", err);
	cl_mem mc = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY | CL_MEM_ALLOC_HOST_PTR, sizeof c, NULL, &err);
	CHECK(err == CL_SUCCESS, "buffer c: %d", err);
	void *hp = NULL;
	OK(clGetMemObjectInfo(mb, CL_MEM_HOST_PTR, sizeof hp, &hp, NULL));
	CHECK(hp == b, "USE_HOST_PTR host pointer %p, want %p", hp, (void *)b);
	OK(clGetMemObjectInfo(mc, CL_MEM_HOST_PTR, sizeof hp, &hp, NULL));
	CHECK(hp == NULL, "ALLOC_HOST_PTR host pointer %p", hp);
	float kf = 3.0f;
	OK(clSetKernelArg(k, 0, sizeof ma, &ma));
	OK(clSetKernelArg(k, 1, sizeof mb, &mb));
	OK(clSetKernelArg(k, 2, sizeof mc, &mc));
	OK(clSetKernelArg(k, 3, sizeof kf, &kf));
	size_t gsz = N, lsz = 64;
	cl_event kev = NULL;
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &gsz, &lsz, 0, NULL, &kev));
	OK(clWaitForEvents(1, &kev));
	cl_int st = 1;
	OK(clGetEventInfo(kev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_COMPLETE, "kernel status %d", st);
	cl_command_type ct = 0;
	OK(clGetEventInfo(kev, CL_EVENT_COMMAND_TYPE, sizeof ct, &ct, NULL));
	CHECK(ct == CL_COMMAND_NDRANGE_KERNEL, "command type %#x", ct);
	cl_ulong t[4] = {0};
	OK(clGetEventProfilingInfo(kev, CL_PROFILING_COMMAND_QUEUED, sizeof t[0], &t[0], NULL));
	OK(clGetEventProfilingInfo(kev, CL_PROFILING_COMMAND_SUBMIT, sizeof t[1], &t[1], NULL));
	OK(clGetEventProfilingInfo(kev, CL_PROFILING_COMMAND_START, sizeof t[2], &t[2], NULL));
	OK(clGetEventProfilingInfo(kev, CL_PROFILING_COMMAND_END, sizeof t[3], &t[3], NULL));
	CHECK(t[0] > 0 && t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3], "profile %llu %llu %llu %llu",
	      (unsigned long long)t[0], (unsigned long long)t[1], (unsigned long long)t[2], (unsigned long long)t[3]);
	OK(clReleaseEvent(kev));

	memset(c, 0, sizeof c);
	OK(clEnqueueReadBuffer(q, mc, CL_TRUE, 0, sizeof c, c, 0, NULL, NULL));
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += c[i] != 3.0f * (float)(3 * i) + 0.5f;
	CHECK(bad == 0, "vadd: %d wrong, c[1] = %g", bad, c[1]);

	/* A scalar argument of 48 bytes (passed in the scalar area) and a
	 * char, and the kernel run as a task. */
	cl_kernel kb = clCreateKernel(p, "bigarg", &err);
	CHECK(err == CL_SUCCESS, "bigarg: %d", err);
	struct {
		cl_int a;
		cl_float b;
		cl_long c;
		cl_int d[4];
	} big = {1, 2.0f, 3, {0, 0, 0, 4}};
	cl_char ch = 5;
	cl_mem mo = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 8, NULL, &err);
	OK(clSetKernelArg(kb, 0, sizeof mo, &mo));
	OK(clSetKernelArg(kb, 1, sizeof big, &big));
	OK(clSetKernelArg(kb, 2, sizeof ch, &ch));
	OK(clEnqueueTask(q, kb, 0, NULL, NULL));
	cl_long lo = 0;
	OK(clEnqueueReadBuffer(q, mo, CL_TRUE, 0, sizeof lo, &lo, 0, NULL, NULL));
	CHECK(lo == 15, "bigarg %lld", (long long)lo);
	OK(clReleaseMemObject(mo));
	OK(clReleaseKernel(kb));

	/* Local memory. */
	cl_kernel kl = clCreateKernel(p, "lsum", &err);
	int in[N], out[N / 64];
	for (int i = 0; i < N; i++)
		in[i] = i;
	cl_mem mi = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof in, in, &err);
	cl_mem mout = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof out, NULL, &err);
	OK(clSetKernelArg(kl, 0, sizeof mi, &mi));
	OK(clSetKernelArg(kl, 1, sizeof mout, &mout));
	OK(clSetKernelArg(kl, 2, 64 * sizeof(int), NULL));
	OK(clEnqueueNDRangeKernel(q, kl, 1, NULL, &gsz, &lsz, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, mout, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
	bad = 0;
	for (int g = 0; g < N / 64; g++)
		bad += out[g] != 64 * 64 * g + 63 * 64 / 2;
	CHECK(bad == 0, "lsum: %d wrong, out[1] = %d", bad, out[1]);
	OK(clReleaseMemObject(mi));
	OK(clReleaseMemObject(mout));
	OK(clReleaseKernel(kl));

	/* Fill, copy, non-blocking read completed by clFinish. */
	float seven = 7.0f;
	OK(clEnqueueFillBuffer(q, mc, &seven, sizeof seven, 16, sizeof c - 32, 0, NULL, NULL));
	cl_mem md = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof c, NULL, &err);
	OK(clEnqueueCopyBuffer(q, mc, md, 0, 0, sizeof c, 0, NULL, NULL));
	memset(c, 0, sizeof c);
	OK(clEnqueueReadBuffer(q, md, CL_FALSE, 0, sizeof c, c, 0, NULL, NULL));
	OK(clFinish(q));
	CHECK(c[0] == 0.5f && c[4] == 7.0f && c[N - 5] == 7.0f && c[N - 1] == 3.0f * 3 * (N - 1) + 0.5f,
	      "fill/copy: %g %g %g %g", c[0], c[4], c[N - 5], c[N - 1]);

	/* Map and unmap: a buffer of the arena, and a USE_HOST_PTR one. */
	float *mp = clEnqueueMapBuffer(q, md, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 64, 256, 0, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && mp != NULL, "map: %d", err);
	cl_uint mc_count = 0;
	OK(clGetMemObjectInfo(md, CL_MEM_MAP_COUNT, sizeof mc_count, &mc_count, NULL));
	CHECK(mc_count == 1, "map count %u", mc_count);
	if (mp != NULL) {
		CHECK(mp[0] == 7.0f, "mapped %g", mp[0]);
		for (int i = 0; i < 64; i++)
			mp[i] = -1.0f;
		OK(clEnqueueUnmapMemObject(q, md, mp, 0, NULL, NULL));
	}
	float back[80];
	OK(clEnqueueReadBuffer(q, md, CL_TRUE, 48, sizeof back, back, 0, NULL, NULL));
	CHECK(back[3] == 7.0f && back[4] == -1.0f && back[67] == -1.0f && back[68] == 7.0f, "after unmap: %g %g %g %g",
	      back[3], back[4], back[67], back[68]);
	float *bp = clEnqueueMapBuffer(q, mb, CL_TRUE, CL_MAP_READ, 8, 16, 0, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && bp == b + 2, "USE_HOST_PTR map %p, want %p", (void *)bp, (void *)(b + 2));
	if (bp != NULL)
		OK(clEnqueueUnmapMemObject(q, mb, bp, 0, NULL, NULL));
	float *wp = clEnqueueMapBuffer(q, md, CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, 0, 8, 0, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && wp != NULL, "map invalidate: %d", err);
	if (wp != NULL) {
		wp[0] = 42.0f;
		wp[1] = 43.0f;
		OK(clEnqueueUnmapMemObject(q, md, wp, 0, NULL, NULL));
	}
	OK(clEnqueueReadBuffer(q, md, CL_TRUE, 0, 8, back, 0, NULL, NULL));
	CHECK(back[0] == 42.0f && back[1] == 43.0f, "after invalidate map: %g %g", back[0], back[1]);

	/* Rectangles: a 4x3 block of a 16-float-wide matrix. */
	size_t bo[3] = {4 * sizeof(float), 2, 0}, ho[3] = {0, 0, 0}, reg[3] = {4 * sizeof(float), 3, 1};
	float mat[16 * 8], blk[12];
	for (int i = 0; i < 16 * 8; i++)
		mat[i] = (float)i;
	OK(clEnqueueWriteBuffer(q, md, CL_TRUE, 0, sizeof mat, mat, 0, NULL, NULL));
	OK(clEnqueueReadBufferRect(q, md, CL_TRUE, bo, ho, reg, 16 * sizeof(float), 0, 4 * sizeof(float), 0, blk, 0,
				   NULL, NULL));
	CHECK(blk[0] == 36.0f && blk[3] == 39.0f && blk[4] == 52.0f && blk[11] == 71.0f, "read rect %g %g %g %g",
	      blk[0], blk[3], blk[4], blk[11]);
	for (int i = 0; i < 12; i++)
		blk[i] = -blk[i];
	OK(clEnqueueWriteBufferRect(q, md, CL_TRUE, bo, ho, reg, 16 * sizeof(float), 0, 4 * sizeof(float), 0, blk, 0,
				    NULL, NULL));
	OK(clEnqueueReadBuffer(q, md, CL_TRUE, 0, sizeof mat, mat, 0, NULL, NULL));
	CHECK(mat[36] == -36.0f && mat[35] == 35.0f && mat[71] == -71.0f && mat[72] == 72.0f, "write rect %g %g %g %g",
	      mat[36], mat[35], mat[71], mat[72]);

	OK(clReleaseMemObject(ma));
	OK(clReleaseMemObject(mb));
	OK(clReleaseMemObject(mc));
	OK(clReleaseMemObject(md));
	OK(clReleaseKernel(k));

	/* Binaries round trip: the blob builds again and runs. */
	size_t bsz = 0;
	OK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bsz, &bsz, NULL));
	CHECK(bsz > 8, "binary size %zu", bsz);
	unsigned char *bin = malloc(bsz);
	OK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
	OK(clReleaseProgram(p));
	const unsigned char *cbin = bin;
	cl_int bst = 1;
	cl_program p2 = clCreateProgramWithBinary(ctx, 1, &dev, &bsz, &cbin, &bst, &err);
	CHECK(err == CL_SUCCESS && bst == CL_SUCCESS, "from binary: %d %d", err, bst);
	OK(clBuildProgram(p2, 0, NULL, NULL, NULL, NULL));
	cl_kernel ki = clCreateKernel(p2, "iota", &err);
	CHECK(err == CL_SUCCESS, "kernel from binary: %d", err);
	cl_mem mz = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 16 * sizeof(int), NULL, &err);
	cl_int base = 100;
	OK(clSetKernelArg(ki, 0, sizeof mz, &mz));
	OK(clSetKernelArg(ki, 1, sizeof base, &base));
	size_t g16 = 16;
	OK(clEnqueueNDRangeKernel(q, ki, 1, NULL, &g16, NULL, 0, NULL, NULL));
	int iota[16];
	OK(clEnqueueReadBuffer(q, mz, CL_TRUE, 0, sizeof iota, iota, 0, NULL, NULL));
	CHECK(iota[0] == 100 && iota[15] == 115, "iota from binary %d %d", iota[0], iota[15]);
	/* A corrupt binary. */
	bin[0] ^= 0xff;
	cbin = bin;
	cl_program p3 = clCreateProgramWithBinary(ctx, 1, &dev, &bsz, &cbin, &bst, &err);
	CHECK(p3 == NULL && err == CL_INVALID_BINARY && bst == CL_INVALID_BINARY, "corrupt binary: %d %d", err, bst);
	free(bin);
	OK(clReleaseMemObject(mz));
	OK(clReleaseKernel(ki));
	OK(clReleaseProgram(p2));
}

static int callbacks;
static cl_int callback_status = 1;

static void CL_CALLBACK on_event(cl_event e, cl_int status, void *data)
{
	(void)e;
	callbacks += *(int *)data;
	callback_status = status;
}

static void event_test(void)
{
	cl_int err;
	int data[256], back[256];
	for (int i = 0; i < 256; i++)
		data[i] = i * 3;
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof data, NULL, &err);

	/* A write held back behind a user event, and a read behind it. */
	cl_event ue = clCreateUserEvent(ctx, &err);
	CHECK(err == CL_SUCCESS, "clCreateUserEvent: %d", err);
	cl_int st = 0;
	OK(clGetEventInfo(ue, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_SUBMITTED, "user event status %d", st);
	cl_event w = NULL, r = NULL;
	OK(clEnqueueWriteBuffer(q, m, CL_FALSE, 0, sizeof data, data, 1, &ue, &w));
	memset(back, 0, sizeof back);
	OK(clEnqueueReadBuffer(q, m, CL_FALSE, 0, sizeof back, back, 0, NULL, &r));
	int one = 1;
	OK(clSetEventCallback(r, CL_COMPLETE, on_event, &one));
	OK(clFlush(q));
	struct timespec ts = {0, 30 * 1000 * 1000};
	nanosleep(&ts, NULL);
	OK(clGetEventInfo(w, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_QUEUED, "held write status %d", st);
	OK(clGetEventInfo(r, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_QUEUED, "read behind it: status %d", st);
	CHECK(callbacks == 0, "callback before completion");
	cl_ulong tq;
	CHECK_ERR(clGetEventProfilingInfo(w, CL_PROFILING_COMMAND_END, sizeof tq, &tq, NULL),
		  CL_PROFILING_INFO_NOT_AVAILABLE);
	CHECK_ERR(clGetEventProfilingInfo(ue, CL_PROFILING_COMMAND_END, sizeof tq, &tq, NULL),
		  CL_PROFILING_INFO_NOT_AVAILABLE);
	OK(clSetUserEventStatus(ue, CL_COMPLETE));
	CHECK_ERR(clSetUserEventStatus(ue, CL_COMPLETE), CL_INVALID_OPERATION);
	OK(clWaitForEvents(1, &r));
	CHECK(back[255] == 765, "read after the user event: %d", back[255]);
	/* The callback runs from the ICD's thread or the waiting call. */
	for (int i = 0; i < 200 && callbacks == 0; i++)
		nanosleep(&ts, NULL);
	CHECK(callbacks == 1 && callback_status == CL_COMPLETE, "callbacks %d status %d", callbacks, callback_status);
	/* A callback registered late runs at once. */
	OK(clSetEventCallback(r, CL_SUBMITTED, on_event, &one));
	CHECK(callbacks == 2, "late callback: %d", callbacks);
	OK(clReleaseEvent(w));
	OK(clReleaseEvent(r));
	OK(clReleaseEvent(ue));

	/* A user event that fails fails what waits for it. */
	cl_event ue2 = clCreateUserEvent(ctx, &err);
	cl_event w2 = NULL, mk = NULL;
	OK(clEnqueueWriteBuffer(q, m, CL_FALSE, 0, 4, data, 1, &ue2, &w2));
	OK(clEnqueueMarkerWithWaitList(q, 1, &w2, &mk));
	OK(clSetUserEventStatus(ue2, -42));
	CHECK_ERR(clWaitForEvents(1, &w2), CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
	OK(clGetEventInfo(w2, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st < 0, "write after a failed user event: %d", st);
	OK(clReleaseEvent(w2));
	OK(clReleaseEvent(mk));
	OK(clReleaseEvent(ue2));

	/* Markers, barriers, waits. */
	cl_event e1 = NULL, e2 = NULL;
	OK(clEnqueueMarker(q, &e1));
	OK(clEnqueueBarrierWithWaitList(q, 1, &e1, &e2));
	OK(clEnqueueWaitForEvents(q, 1, &e2));
	OK(clEnqueueBarrier(q));
	OK(clWaitForEvents(1, &e2));
	cl_event both[2] = {e1, e2};
	OK(clWaitForEvents(2, both));
	OK(clReleaseEvent(e1));
	OK(clReleaseEvent(e2));

	/* Many commands in flight. */
	for (int i = 0; i < 3000; i++)
		OK(clEnqueueWriteBuffer(q, m, CL_FALSE, (size_t)(i % 256) * 4, 4, &data[i % 256], 0, NULL, NULL));
	OK(clFinish(q));

	/* Sub-buffers: read and write through them; as a kernel argument a
	 * sub-buffer at a nonzero origin cannot be passed. */
	cl_buffer_region reg = {128, 256};
	cl_mem sub = clCreateSubBuffer(m, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &reg, &err);
	CHECK(err == CL_SUCCESS, "clCreateSubBuffer: %d", err);
	cl_mem parent = NULL;
	size_t off = 0;
	OK(clGetMemObjectInfo(sub, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL));
	OK(clGetMemObjectInfo(sub, CL_MEM_OFFSET, sizeof off, &off, NULL));
	CHECK(parent == m && off == 128, "sub-buffer of %p at %zu", (void *)parent, off);
	int sb[64];
	OK(clEnqueueReadBuffer(q, sub, CL_TRUE, 0, sizeof sb, sb, 0, NULL, NULL));
	CHECK(sb[0] == data[32] && sb[63] == data[95], "sub-buffer read %d %d", sb[0], sb[63]);
	int minus = -5;
	OK(clEnqueueWriteBuffer(q, sub, CL_TRUE, 4, sizeof minus, &minus, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof back, back, 0, NULL, NULL));
	CHECK(back[33] == -5 && back[32] == data[32], "through the sub-buffer: %d %d", back[32], back[33]);
	void *smp = clEnqueueMapBuffer(q, sub, CL_TRUE, CL_MAP_READ, 0, 8, 0, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && smp != NULL && ((int *)smp)[1] == -5, "sub-buffer map: %d", err);
	if (smp != NULL)
		OK(clEnqueueUnmapMemObject(q, sub, smp, 0, NULL, NULL));
	cl_program p = build("__kernel void z(__global int *o) { o[get_global_id(0)] = 0; }", "", CL_SUCCESS);
	cl_kernel kz = clCreateKernel(p, "z", &err);
	OK(clSetKernelArg(kz, 0, sizeof sub, &sub));
	size_t g = 4;
	CHECK_ERR(clEnqueueNDRangeKernel(q, kz, 1, NULL, &g, NULL, 0, NULL, NULL), CL_MISALIGNED_SUB_BUFFER_OFFSET);
	cl_buffer_region reg0 = {0, 64};
	cl_mem sub0 = clCreateSubBuffer(m, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &reg0, &err);
	OK(clSetKernelArg(kz, 0, sizeof sub0, &sub0));
	OK(clEnqueueNDRangeKernel(q, kz, 1, NULL, &g, NULL, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, 32, back, 0, NULL, NULL));
	CHECK(back[0] == 0 && back[3] == 0 && back[4] == data[4], "kernel on an origin-0 sub-buffer: %d %d", back[3],
	      back[4]);
	/* A NULL buffer (pyopencl's empty arrays) runs against a stand-in. */
	OK(clSetKernelArg(kz, 0, sizeof(cl_mem), NULL));
	OK(clEnqueueNDRangeKernel(q, kz, 1, NULL, &g, NULL, 0, NULL, NULL));
	OK(clFinish(q));
	OK(clReleaseKernel(kz));
	OK(clReleaseProgram(p));
	OK(clReleaseMemObject(sub0));
	OK(clReleaseMemObject(sub));
	OK(clReleaseMemObject(m));
}

static void compile_link_test(const char *dir)
{
	cl_int err;
	const char *a = "#include \"twice.h\"\nint twice(int x) { return TWICE(x); }\n";
	const char *b = "int twice(int x);\n__kernel void use(__global int *o) { o[0] = twice(21) + BIAS; }\n";
	const char *h = "#define TWICE(x) ((x) * 2)\n";
	cl_program pa = clCreateProgramWithSource(ctx, 1, &a, NULL, &err);
	cl_program pb = clCreateProgramWithSource(ctx, 1, &b, NULL, &err);
	cl_program ph = clCreateProgramWithSource(ctx, 1, &h, NULL, &err);
	const char *hn = "twice.h";
	OK(clCompileProgram(pa, 1, &dev, NULL, 1, &ph, &hn, NULL, NULL));
	OK(clCompileProgram(pb, 1, &dev, "-DBIAS=1", 0, NULL, NULL, NULL, NULL));
	cl_program_binary_type bt = 0;
	OK(clGetProgramBuildInfo(pa, dev, CL_PROGRAM_BINARY_TYPE, sizeof bt, &bt, NULL));
	CHECK(bt == CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT, "binary type %#x", (unsigned)bt);
	/* A compiled object's binary reloads as a compiled object, and links
	 * as the object did. */
	size_t osz = 0;
	OK(clGetProgramInfo(pa, CL_PROGRAM_BINARY_SIZES, sizeof osz, &osz, NULL));
	unsigned char *obin = malloc(osz);
	OK(clGetProgramInfo(pa, CL_PROGRAM_BINARIES, sizeof obin, &obin, NULL));
	const unsigned char *cobin = obin;
	cl_int ost = 1;
	cl_program pa2 = clCreateProgramWithBinary(ctx, 1, &dev, &osz, &cobin, &ost, &err);
	CHECK(err == CL_SUCCESS && ost == CL_SUCCESS, "an object's binary: %d, %d", err, ost);
	free(obin);
	bt = 0;
	OK(clGetProgramBuildInfo(pa2, dev, CL_PROGRAM_BINARY_TYPE, sizeof bt, &bt, NULL));
	CHECK(bt == CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT, "a reloaded object's binary type %#x", (unsigned)bt);
	cl_program ins[2] = {pa2, pb};
	cl_program pl = clLinkProgram(ctx, 1, &dev, NULL, 2, ins, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && pl != NULL, "clLinkProgram: %d", err);
	OK(clReleaseProgram(pa2));
	if (pl != NULL) {
		cl_kernel k = clCreateKernel(pl, "use", &err);
		cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4, NULL, &err);
		int v = 0;
		run_task(k, m, &v, sizeof v);
		CHECK(v == 43, "linked program: %d", v);
		OK(clReleaseMemObject(m));
		OK(clReleaseKernel(k));
		OK(clReleaseProgram(pl));
	}
	OK(clReleaseProgram(pa));
	OK(clReleaseProgram(pb));
	OK(clReleaseProgram(ph));

	/* A failed build has a log; an option the device refuses is
	 * refused before it. A missing header is in the log. */
	cl_program bad = build("__kernel void k(__global int *o) { o[0] = undefined_name; }", "", CL_BUILD_PROGRAM_FAILURE);
	char log[4096] = "";
	OK(clGetProgramBuildInfo(bad, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL));
	CHECK(strstr(log, "undefined_name") != NULL, "build log: %s", log);
	cl_build_status bs = 0;
	OK(clGetProgramBuildInfo(bad, dev, CL_PROGRAM_BUILD_STATUS, sizeof bs, &bs, NULL));
	CHECK(bs == CL_BUILD_ERROR, "status %d", bs);
	CHECK(clCreateKernel(bad, "k", &err) == NULL && err == CL_INVALID_PROGRAM_EXECUTABLE, "kernel of a failed build: %d",
	      err);
	CHECK_ERR(clBuildProgram(bad, 1, &dev, "-O3", NULL, NULL), CL_INVALID_BUILD_OPTIONS);
	/* -D options become source lines (docs/icd.md): what can never be
	 * a macro definition is refused. */
	const char *never[] = {"-D 1X", "-D F(x", "-D F(1)=x", "-D", "-UX=1", "-D F(x)y=1", "-D=1", "-DX=a\\"};
	for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
		CHECK_ERR(clBuildProgram(bad, 1, &dev, never[i], NULL, NULL), CL_INVALID_BUILD_OPTIONS);
	CHECK_ERR(clCompileProgram(bad, 1, &dev, "-D F(x", 0, NULL, NULL, NULL, NULL), CL_INVALID_COMPILER_OPTIONS);
	OK(clReleaseProgram(bad));
	cl_program missing = build("#include \"nowhere.h\"\n__kernel void k() {}\n", "", CL_BUILD_PROGRAM_FAILURE);
	OK(clGetProgramBuildInfo(missing, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL));
	CHECK(strstr(log, "nowhere.h") != NULL, "missing header log: %s", log);
	OK(clReleaseProgram(missing));
	(void)dir;
}

/* -D and -U options, function-like macros (hashcat's) included, through
 * clBuildProgram and through clCompileProgram and clLinkProgram, where a
 * unit's macros end with it. */
static void macro_test(const char *dir)
{
	cl_int err;
	const char *src = "__kernel void m(__global int *o) {\n"
			  "#ifdef GONE\n  o[0] = -1;\n#else\n"
			  "  o[0] = TWICE(LOCAL_MEM_TYPE) + ADD(1, 2) + KERNEL_STATIC + (int)sizeof(M2S(abc));\n"
			  "#endif\n  EMPTY o[1] = VALUE;\n}\n";
	const char *opts = "-D KERNEL_STATIC -D XM2S(x)=#x -D M2S(x)=XM2S(x) -D LOCAL_MEM_TYPE=2 -DTWICE(a)=((a)*2) "
			   "-D 'ADD(a, b)=((a) + (b))' -DEMPTY= -D\"VALUE=(3 + 4)\" -DGONE -UGONE -w";
	cl_program p = build(src, opts, CL_SUCCESS);
	char got[1024] = "";
	OK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, sizeof got, got, NULL));
	CHECK(strcmp(got, opts) == 0, "build options %s", got);
	cl_kernel k = clCreateKernel(p, "m", &err);
	CHECK(err == CL_SUCCESS, "macro kernel: %d", err);
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 8, NULL, &err);
	int v[2] = {0, 0};
	if (k != NULL) {
		run_task(k, m, v, sizeof v);
		/* 4 + 3 + 1 + sizeof("abc") */
		CHECK(v[0] == 12 && v[1] == 7, "macros: %d %d, want 12 7", v[0], v[1]);
		OK(clReleaseKernel(k));
	}
	OK(clReleaseProgram(p));

	const char *a = "int f(int x) { return MUL(x, K); }\n";
	const char *b = "#if defined(MUL) || defined(K)\n#error a unit's macros leaked into the next\n#endif\n"
			"int f(int x);\n__kernel void use(__global int *o) { o[0] = f(6); }\n";
	cl_program pa = clCreateProgramWithSource(ctx, 1, &a, NULL, &err);
	cl_program pb = clCreateProgramWithSource(ctx, 1, &b, NULL, &err);
	OK(clCompileProgram(pa, 1, &dev, "-D 'MUL(a,b)=((a)*(b))' -DK=7", 0, NULL, NULL, NULL, NULL));
	OK(clCompileProgram(pb, 1, &dev, NULL, 0, NULL, NULL, NULL, NULL));
	cl_program ins[2] = {pa, pb};
	cl_program pl = clLinkProgram(ctx, 1, &dev, NULL, 2, ins, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && pl != NULL, "clLinkProgram with macros: %d", err);
	if (pl != NULL) {
		k = clCreateKernel(pl, "use", &err);
		run_task(k, m, v, sizeof v);
		CHECK(v[0] == 42, "linked macros: %d", v[0]);
		OK(clReleaseKernel(k));
		OK(clReleaseProgram(pl));
	}
	OK(clReleaseProgram(pa));
	OK(clReleaseProgram(pb));

	/* A computed #include, named through -D macros (hashcat's). */
	write_file(dir, "computed.h", "#define COMPUTED 5\n");
	char copts[4400];
	snprintf(copts, sizeof copts, "-D XM2S(x)=#x -D M2S(x)=XM2S(x) -D INCLUDE_PATH=%s", dir);
	p = build("#include M2S(INCLUDE_PATH/computed.h)\n__kernel void c(__global int *o) { o[0] = COMPUTED; }\n", copts,
		  CL_SUCCESS);
	k = clCreateKernel(p, "c", &err);
	CHECK(err == CL_SUCCESS, "computed include kernel: %d", err);
	if (k != NULL) {
		run_task(k, m, v, sizeof v);
		CHECK(v[0] == 5, "computed include: %d", v[0]);
		OK(clReleaseKernel(k));
	}
	OK(clReleaseProgram(p));
	OK(clReleaseMemObject(m));
}

/* kib: a field of /proc/self/status, in KiB. */
static long status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(field);
	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, field, n) == 0 && line[n] == ':')
			v = atol(line + n + 1);
	if (f != NULL)
		fclose(f);
	return v;
}

/* minor_faults: this process's minor page faults so far. */
static long minor_faults(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : -1;
}

static size_t check_pattern(const uint32_t *p, size_t n, uint32_t seed)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint32_t)i * 2654435761u + seed)
			bad++;
	return bad;
}

static void fill_pattern(uint32_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint32_t)i * 2654435761u + seed;
}

/* Transfers larger than the ICD's arena (VGPU_ARENA_CAP, 64 MiB): they go
 * in chunks, and the arena memory the process maps stays within the cap. */
static void big_test(void)
{
	cl_ulong max_alloc = 0;
	OK(clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL));
	size_t size = 80u << 20;
	if (max_alloc < size) {
		printf("runtest: big transfers skipped: the device's largest allocation is %llu bytes\n",
		       (unsigned long long)max_alloc);
		return;
	}
	size_t n = size / 4;
	cl_int err;
	uint32_t *src = malloc(size), *dst = malloc(size);
	CHECK(src != NULL && dst != NULL, "malloc");
	if (src == NULL || dst == NULL)
		return;
	fill_pattern(src, n, 1);
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, size, NULL, &err);
	CHECK(err == CL_SUCCESS, "big buffer: %d", err);

	/* Blocking write and read, with profiling. */
	cl_event ev = NULL;
	OK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, size, src, 0, NULL, &ev));
	cl_int st = 1;
	OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_COMPLETE, "blocking big write status %d", st);
	cl_ulong t[4] = {0};
	for (int i = 0; i < 4; i++)
		OK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_QUEUED + i, sizeof t[i], &t[i], NULL));
	CHECK(t[0] <= t[1] && t[1] <= t[2] && t[2] < t[3], "big write profile %llu %llu %llu %llu",
	      (unsigned long long)t[0], (unsigned long long)t[1], (unsigned long long)t[2], (unsigned long long)t[3]);
	OK(clReleaseEvent(ev));
	memset(dst, 0, size);
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, size, dst, 0, NULL, NULL));
	CHECK(check_pattern(dst, n, 1) == 0, "blocking big read: %zu wrong", check_pattern(dst, n, 1));

	/* Non-blocking: a write of new bytes, a read at an offset, done by
	 * clWaitForEvents; then one read behind a user event. */
	fill_pattern(src, n, 2);
	OK(clEnqueueWriteBuffer(q, m, CL_FALSE, 0, size, src, 0, NULL, NULL));
	memset(dst, 0, size);
	OK(clEnqueueReadBuffer(q, m, CL_FALSE, 4096, size - 4096, dst, 0, NULL, &ev));
	OK(clWaitForEvents(1, &ev));
	OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_COMPLETE, "non-blocking big read status %d", st);
	CHECK(check_pattern(dst, n - 1024, 2 + 1024u * 2654435761u) == 0, "non-blocking big read: %zu wrong",
	      check_pattern(dst, n - 1024, 2 + 1024u * 2654435761u));
	OK(clReleaseEvent(ev));
	cl_event gate = clCreateUserEvent(ctx, &err);
	memset(dst, 0, size);
	OK(clEnqueueReadBuffer(q, m, CL_FALSE, 0, size, dst, 1, &gate, &ev));
	OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_QUEUED, "held big read status %d", st);
	OK(clSetUserEventStatus(gate, CL_COMPLETE));
	OK(clFinish(q));
	OK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
	CHECK(st == CL_COMPLETE && check_pattern(dst, n, 2) == 0, "held big read: status %d, %zu wrong", st,
	      check_pattern(dst, n, 2));
	OK(clReleaseEvent(ev));
	OK(clReleaseEvent(gate));

	/* A map of the whole buffer: read, changed, written back on unmap. */
	uint32_t *mp = clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, size, 0, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && mp != NULL, "big map: %d", err);
	if (mp != NULL) {
		CHECK(check_pattern(mp, n, 2) == 0, "big map: %zu wrong", check_pattern(mp, n, 2));
		fill_pattern(mp, n, 3);
		OK(clEnqueueUnmapMemObject(q, m, mp, 0, NULL, NULL));
	}
	memset(dst, 0, size);
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, size, dst, 0, NULL, NULL));
	CHECK(check_pattern(dst, n, 3) == 0, "after big unmap: %zu wrong", check_pattern(dst, n, 3));

	/* A rectangle of many rows, wider than the tight pitch on the host. */
	size_t region[3] = {40000, 1000, 2}, zero[3] = {0, 0, 0}, hrow = 40960;
	fill_pattern(src, n, 4);
	OK(clEnqueueWriteBufferRect(q, m, CL_FALSE, zero, zero, region, 0, 0, hrow, 0, src, 0, NULL, NULL));
	memset(dst, 0, size);
	OK(clEnqueueReadBufferRect(q, m, CL_TRUE, zero, zero, region, 0, 0, hrow, 0, dst, 0, NULL, NULL));
	size_t rbad = 0;
	for (size_t r = 0; r < region[1] * region[2]; r++)
		rbad += memcmp((char *)dst + r * hrow, (char *)src + r * hrow, region[0]) != 0;
	CHECK(rbad == 0, "big rectangle: %zu rows wrong", rbad);
	OK(clReleaseMemObject(m));

	/* The initial upload of COPY_HOST_PTR. */
	m = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, size, src, &err);
	CHECK(err == CL_SUCCESS, "big COPY_HOST_PTR buffer: %d", err);
	memset(dst, 0, size);
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, size, dst, 0, NULL, NULL));
	CHECK(check_pattern(dst, n, 4) == 0, "big COPY_HOST_PTR: %zu wrong", check_pattern(dst, n, 4));
	OK(clReleaseMemObject(m));

	/* The arena is shared memory: what this process maps of it stays
	 * within the cap (64 MiB), whatever the transfers' sizes. */
	long shm = status_kib("RssShmem");
	CHECK(shm >= 0 && shm <= 72 * 1024, "RssShmem %ld KiB after big transfers", shm);
	free(src);
	free(dst);
}

/* Repeated transfers of one size reuse resident arena pages
 * (VGPU_ARENA_KEEP): the mechanism behind the ICD's transfer cost. A
 * blocking write returns once its bytes are in the arena, so the
 * application may change its memory at once without changing what the
 * buffer gets. After the big transfers, what lies beyond the kept part of
 * the arena has been given back. */
static void reuse_test(void)
{
	OK(clFinish(q));
	long shm = status_kib("RssShmem");
	CHECK(shm >= 0 && shm <= 20 * 1024, "RssShmem %ld KiB once the big transfers are done (kept: 16 MiB)", shm);

	const size_t n = (1 << 20) / 4, size = n * 4;
	uint32_t *src = malloc(size), *dst = malloc(size);
	cl_int err;
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, size, NULL, &err);
	CHECK(err == CL_SUCCESS && src != NULL && dst != NULL, "1 MiB buffer: %d", err);
	if (err != CL_SUCCESS || src == NULL || dst == NULL) {
		free(src);
		free(dst);
		return;
	}
	memset(dst, 0, size);
	/* Two rounds warm up (the arena's pages, the ICD's own memory); the
	 * eight after them would take 8 x 2 x 256 page faults in this process
	 * if each transfer's arena range were given back and touched anew. */
	long faults = 0;
	for (int i = 0; i < 10; i++) {
		if (i == 2)
			faults = minor_faults();
		fill_pattern(src, n, 100 + i);
		OK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, size, src, 0, NULL, NULL));
		fill_pattern(src, n, 999); /* the write has its bytes already */
		OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, size, dst, 0, NULL, NULL));
		CHECK(check_pattern(dst, n, 100 + i) == 0, "transfer %d: %zu wrong", i, check_pattern(dst, n, 100 + i));
	}
	faults = minor_faults() - faults;
	CHECK(faults < 512, "%ld page faults in 8 rounds of a 1 MiB write and read (resident arena: about 0)", faults);
	OK(clReleaseMemObject(m));
	free(src);
	free(dst);
}

/* After fork the child must not use the parent's connection; it may make
 * its own. */
static void fork_test(void)
{
	cl_int err;
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int v = 1, fails = 0;
		if (clEnqueueWriteBuffer(q, m, CL_TRUE, 0, 4, &v, 0, NULL, NULL) != CL_OUT_OF_RESOURCES)
			fails++;
		cl_context c2 = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
		cl_command_queue q2 = c2 != NULL ? clCreateCommandQueue(c2, dev, 0, &err) : NULL;
		cl_mem m2 = c2 != NULL ? clCreateBuffer(c2, CL_MEM_READ_WRITE, 4, NULL, &err) : NULL;
		int w = 0;
		if (q2 == NULL || m2 == NULL || clEnqueueWriteBuffer(q2, m2, CL_TRUE, 0, 4, &v, 0, NULL, NULL) != CL_SUCCESS ||
		    clEnqueueReadBuffer(q2, m2, CL_TRUE, 0, 4, &w, 0, NULL, NULL) != CL_SUCCESS || w != 1)
			fails++;
		_exit(fails);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %#x", status);
	int v = 9, w = 0;
	OK(clEnqueueWriteBuffer(q, m, CL_TRUE, 0, 4, &v, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, 4, &w, 0, NULL, NULL));
	CHECK(w == 9, "parent after fork: %d", w);
	OK(clReleaseMemObject(m));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: runtest DIR\n");
		return 2;
	}
	setup();
	vadd_test(argv[1]);
	event_test();
	compile_link_test(argv[1]);
	macro_test(argv[1]);
	big_test();
	reuse_test();
	fork_test();
	cl_uint refs = 0;
	OK(clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL));
	CHECK(refs == 1, "context references %u", refs);
	OK(clReleaseCommandQueue(q));
	OK(clReleaseContext(ctx));
	CHECK_ERR(clReleaseContext(ctx), CL_INVALID_CONTEXT);
	printf("runtest: %d failures\n", failures);
	return failures > 125 ? 125 : failures;
}

/* il: SPIR-V programs (clCreateProgramWithIL, cl_khr_il_program) through
 * the vgpud ICD, against a vgpu-icdd serving a real vGPU
 * (tests/icdhost). Built and run by icd_test.go (TestDaemon, against
 * PoCL 3.1, which takes no SPIR-V) and scripts/test-platforms.sh (against
 * PoCL 6 and rusticl, which do):
 *
 *   il DIR il|none
 *
 * DIR is gpu/iltest/testdata: scale.spv, whose kernel
 * scale(__global float *a, float s) multiplies a by s, and spec.spv, whose
 * kernel spec(__global uint *o) writes its specialization constant 3
 * (default 7). With "none" the device must say it takes no SPIR-V (no IL
 * version, no cl_khr_il_program) and clCreateProgramWithIL must answer
 * CL_INVALID_OPERATION. With "il" it must report SPIR-V 1.0 to 1.2, and
 * the module must build, describe its kernel, compute, come back from
 * CL_PROGRAM_IL and through a binary, and compile and link alone; a module
 * that is not SPIR-V, or of version 1.3, must be refused, and so must
 * linking two modules; a specialization constant set must be built in. It
 * prints one line per failed check and exits with the number of them. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef cl_program(CL_API_CALL *create_il_fn)(cl_context, const void *, size_t, cl_int *);

/* read_file reads DIR/NAME into a new buffer. */
static unsigned char *read_file(const char *dir, const char *name, size_t *n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	CHECK(f != NULL, "cannot open %s", path);
	if (f == NULL)
		exit(failures);
	unsigned char *buf = malloc(1 << 16);
	*n = fread(buf, 1, 1 << 16, f);
	fclose(f);
	return buf;
}

/* spec_value builds p and runs spec, returning what it wrote. */
static cl_uint spec_value(cl_context ctx, cl_device_id dev, cl_command_queue q, cl_program p)
{
	cl_int err = clBuildProgram(p, 1, &dev, NULL, NULL, NULL);
	CHECK(err == CL_SUCCESS, "spec: clBuildProgram %d", err);
	cl_kernel k = clCreateKernel(p, "spec", &err);
	if (k == NULL)
		return 0;
	cl_uint v = 0;
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof v, NULL, &err);
	OK(clSetKernelArg(k, 0, sizeof m, &m));
	size_t g = 1;
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof v, &v, 0, NULL, NULL));
	clReleaseMemObject(m);
	clReleaseKernel(k);
	return v;
}

/* check_spec: a specialization constant set is built in; the default
 * otherwise; a SpecId the module lacks, a size that is not the
 * constant's, a program of source are refused. */
static void check_spec(cl_context ctx, cl_device_id dev, cl_command_queue q, const unsigned char *m, size_t n)
{
	cl_int err;
	cl_program p = clCreateProgramWithIL(ctx, m, n, &err);
	OK(err);
	CHECK(spec_value(ctx, dev, q, p) == 7, "spec: the default is not 7");
	clReleaseProgram(p);
	p = clCreateProgramWithIL(ctx, m, n, &err);
	cl_uint v = 42;
	uint64_t wide = 1;
	OK(clSetProgramSpecializationConstant(p, 3, sizeof v, &v));
	CHECK_ERR(clSetProgramSpecializationConstant(p, 4, sizeof v, &v), CL_INVALID_SPEC_ID);
	CHECK_ERR(clSetProgramSpecializationConstant(p, 3, sizeof wide, &wide), CL_INVALID_VALUE);
	CHECK_ERR(clSetProgramSpecializationConstant(p, 3, sizeof v, NULL), CL_INVALID_VALUE);
	cl_uint got = spec_value(ctx, dev, q, p);
	CHECK(got == 42, "spec: %u, want the 42 set", got);
	clReleaseProgram(p);
	const char *src = "__kernel void f(void) {}\n";
	cl_program ps = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
	CHECK_ERR(clSetProgramSpecializationConstant(ps, 3, sizeof v, &v), CL_INVALID_PROGRAM);
	clReleaseProgram(ps);
}

/* check_link: a module compiles, links alone into an executable that
 * runs; two modules do not link (the device builds one per program). */
static void check_link(cl_context ctx, cl_device_id dev, cl_command_queue q, const unsigned char *m, size_t n)
{
	cl_int err;
	cl_program p = clCreateProgramWithIL(ctx, m, n, &err);
	cl_uint v = 5;
	OK(clSetProgramSpecializationConstant(p, 3, sizeof v, &v));
	OK(clCompileProgram(p, 1, &dev, NULL, 0, NULL, NULL, NULL, NULL));
	cl_program linked = clLinkProgram(ctx, 1, &dev, NULL, 1, &p, NULL, NULL, &err);
	CHECK(linked != NULL && err == CL_SUCCESS, "linking one module: %d", err);
	if (linked != NULL) {
		cl_kernel k = clCreateKernel(linked, "spec", &err);
		CHECK(k != NULL, "the linked module has no kernel spec: %d", err);
		cl_uint got = 0;
		cl_mem mem = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof got, NULL, &err);
		if (k != NULL) {
			OK(clSetKernelArg(k, 0, sizeof mem, &mem));
			size_t g = 1;
			OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
			OK(clEnqueueReadBuffer(q, mem, CL_TRUE, 0, sizeof got, &got, 0, NULL, NULL));
			clReleaseKernel(k);
		}
		CHECK(got == 5, "the linked module wrote %u, want the 5 set before compiling", got);
		clReleaseMemObject(mem);
		clReleaseProgram(linked);
	}
	cl_program two[2] = {p, p};
	linked = clLinkProgram(ctx, 1, &dev, NULL, 2, two, NULL, NULL, &err);
	CHECK(err == CL_LINK_PROGRAM_FAILURE, "linking two modules: %d, want CL_LINK_PROGRAM_FAILURE", err);
	if (linked != NULL) {
		char log[512] = "";
		OK(clGetProgramBuildInfo(linked, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL));
		CHECK(strstr(log, "SPIR-V") != NULL, "the failed link's log: %s", log);
		clReleaseProgram(linked);
	}
	clReleaseProgram(p);
}

/* run_scale builds p, runs scale over {1,2,3,4} by 2.5 and checks it. */
static void run_scale(cl_context ctx, cl_device_id dev, cl_command_queue q, cl_program p, const char *what)
{
	cl_int err = clBuildProgram(p, 1, &dev, "-cl-mad-enable", NULL, NULL);
	if (err != CL_SUCCESS) {
		char log[4096] = "";
		clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
		CHECK(err == CL_SUCCESS, "%s: clBuildProgram %d, log:\n%s", what, err, log);
		return;
	}
	cl_kernel k = clCreateKernel(p, "scale", &err);
	CHECK(k != NULL && err == CL_SUCCESS, "%s: clCreateKernel %d", what, err);
	if (k == NULL)
		return;
	cl_uint nargs = 0;
	OK(clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL));
	CHECK(nargs == 2, "%s: %u arguments", what, nargs);
	float a[4] = {1, 2, 3, 4}, s = 2.5f;
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof a, a, &err);
	OK(err);
	/* A scalar where the module declares a buffer is refused. */
	CHECK_ERR(clSetKernelArg(k, 0, sizeof s, &s), CL_INVALID_ARG_SIZE);
	OK(clSetKernelArg(k, 0, sizeof m, &m));
	OK(clSetKernelArg(k, 1, sizeof s, &s));
	size_t g = 4;
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof a, a, 0, NULL, NULL));
	CHECK(a[0] == 2.5f && a[1] == 5 && a[2] == 7.5f && a[3] == 10, "%s: scale gave %g %g %g %g", what, a[0], a[1],
	      a[2], a[3]);
	clReleaseMemObject(m);
	clReleaseKernel(k);
}

/* refused builds a module the device must refuse. */
static void refused(cl_context ctx, cl_device_id dev, const unsigned char *il, size_t n, const char *what)
{
	cl_int err;
	cl_program p = clCreateProgramWithIL(ctx, il, n, &err);
	CHECK(p != NULL && err == CL_SUCCESS, "%s: clCreateProgramWithIL %d", what, err);
	if (p == NULL)
		return;
	CHECK_ERR(clBuildProgram(p, 1, &dev, NULL, NULL, NULL), CL_BUILD_PROGRAM_FAILURE);
	char log[4096] = "";
	OK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL));
	CHECK(strstr(log, "SPIR-V") != NULL, "%s: the log does not say why: %s", what, log);
	clReleaseProgram(p);
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[2], "il") != 0 && strcmp(argv[2], "none") != 0)) {
		fprintf(stderr, "usage: il DIR il|none\n");
		return 2;
	}
	int want_il = strcmp(argv[2], "il") == 0;
	size_t n, spec_n;
	unsigned char *il = read_file(argv[1], "scale.spv", &n);
	unsigned char *spec = read_file(argv[1], "spec.spv", &spec_n);
	cl_platform_id plat = need_vgpud_platform();
	cl_device_id dev;
	OK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
	char ver[256] = "", ext[4096] = "";
	OK(clGetDeviceInfo(dev, CL_DEVICE_IL_VERSION, sizeof ver, ver, NULL));
	OK(clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sizeof ext, ext, NULL));
	size_t nv_size = 0;
	OK(clGetDeviceInfo(dev, CL_DEVICE_ILS_WITH_VERSION, 0, NULL, &nv_size));
	create_il_fn khr = (create_il_fn)clGetExtensionFunctionAddressForPlatform(plat, "clCreateProgramWithILKHR");
	cl_int err;
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	OK(err);
	if (!want_il) {
		CHECK(ver[0] == '\0', "IL version %s on a device without SPIR-V", ver);
		CHECK(strstr(ext, "cl_khr_il_program") == NULL, "extensions list cl_khr_il_program: %s", ext);
		CHECK(nv_size == 0, "%zu bytes of ILs with version", nv_size);
		cl_program p = clCreateProgramWithIL(ctx, il, n, &err);
		CHECK(p == NULL && err == CL_INVALID_OPERATION, "clCreateProgramWithIL on a device without SPIR-V: %d", err);
		const char *src = "__kernel void f(void) {}\n";
		cl_program ps = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
		cl_uint v = 1;
		CHECK_ERR(clSetProgramSpecializationConstant(ps, 3, sizeof v, &v), CL_INVALID_OPERATION);
		clReleaseProgram(ps);
		clReleaseContext(ctx);
		free(il);
		free(spec);
		printf("il: %d failures (a device without SPIR-V)\n", failures);
		return failures;
	}
	CHECK(strcmp(ver, "SPIR-V_1.0 SPIR-V_1.1 SPIR-V_1.2") == 0, "IL version %s", ver);
	CHECK(strstr(ext, "cl_khr_il_program") != NULL, "extensions do not list cl_khr_il_program: %s", ext);
	cl_name_version nv[4];
	CHECK(nv_size == 3 * sizeof nv[0], "%zu bytes of ILs with version", nv_size);
	if (nv_size == 3 * sizeof nv[0]) {
		OK(clGetDeviceInfo(dev, CL_DEVICE_ILS_WITH_VERSION, sizeof nv, nv, NULL));
		CHECK(strcmp(nv[2].name, "SPIR-V") == 0 && nv[2].version == CL_MAKE_VERSION(1, 2, 0), "ILs with version: %s %#x",
		      nv[2].name, nv[2].version);
	}
	CHECK(khr != NULL, "no clCreateProgramWithILKHR");
	cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
	OK(err);

	/* Not SPIR-V at all: refused when the program is made. */
	const char *text = "__kernel void f(void) {}\n";
	cl_program p = clCreateProgramWithIL(ctx, text, strlen(text) & ~(size_t)3, &err);
	CHECK(p == NULL && err == CL_INVALID_VALUE, "clCreateProgramWithIL of OpenCL C: %d", err);

	p = khr != NULL ? khr(ctx, il, n, &err) : clCreateProgramWithIL(ctx, il, n, &err);
	CHECK(p != NULL && err == CL_SUCCESS, "clCreateProgramWithIL: %d", err);
	if (p == NULL)
		return failures;
	size_t got = 0;
	OK(clGetProgramInfo(p, CL_PROGRAM_IL, 0, NULL, &got));
	unsigned char *back = malloc(got + 1);
	OK(clGetProgramInfo(p, CL_PROGRAM_IL, got, back, NULL));
	CHECK(got == n && memcmp(back, il, n) == 0, "CL_PROGRAM_IL: %zu bytes, want the %zu given", got, n);
	free(back);
	char src[8] = "x";
	OK(clGetProgramInfo(p, CL_PROGRAM_SOURCE, sizeof src, src, NULL));
	CHECK(src[0] == '\0', "CL_PROGRAM_SOURCE of an IL program: %s", src);
	run_scale(ctx, dev, q, p, "module");
	char arg_type[64] = "";
	cl_kernel k = clCreateKernel(p, "scale", &err);
	if (k != NULL) {
		OK(clGetKernelArgInfo(k, 0, CL_KERNEL_ARG_TYPE_NAME, sizeof arg_type, arg_type, NULL));
		CHECK(strcmp(arg_type, "float*") == 0, "argument 0's type: %s", arg_type);
		clReleaseKernel(k);
	}

	/* Its binary makes a program that builds the module again. */
	size_t bsize = 0;
	OK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bsize, &bsize, NULL));
	unsigned char *bin = malloc(bsize);
	OK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
	const unsigned char *bins[1] = {bin};
	cl_int bstatus;
	cl_program pb = clCreateProgramWithBinary(ctx, 1, &dev, &bsize, bins, &bstatus, &err);
	CHECK(pb != NULL && err == CL_SUCCESS && bstatus == CL_SUCCESS, "clCreateProgramWithBinary: %d, %d", err, bstatus);
	if (pb != NULL) {
		run_scale(ctx, dev, q, pb, "from its binary");
		clReleaseProgram(pb);
	}
	free(bin);
	clReleaseProgram(p);

	/* Refused by the device when built, the log saying why. */
	unsigned char bad[1 << 16];
	memcpy(bad, il, n);
	uint32_t v13 = 0x00010300;
	memcpy(bad + 4, &v13, sizeof v13);
	refused(ctx, dev, bad, n, "SPIR-V 1.3");
	memcpy(bad, il, n);
	memset(bad + 20, 0, 4); /* the first instruction's word count 0 */
	refused(ctx, dev, bad, n, "a word count of 0");

	check_spec(ctx, dev, q, spec, spec_n);
	check_link(ctx, dev, q, spec, spec_n);

	clReleaseCommandQueue(q);
	clReleaseContext(ctx);
	free(il);
	free(spec);
	printf("il: %d failures\n", failures);
	return failures;
}

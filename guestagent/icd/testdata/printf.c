/* printf: kernels that print, through the vgpud ICD against a vgpu-icdd
 * serving a real vGPU whose worker captures its executor's output
 * (tests/icdhost). Built and run by icd_test.go (TestDaemonPrintf), which
 * checks what this program's standard output and standard error hold:
 *
 *   - "first: 7 2.50 abc x" before the program's own "waited" line,
 *     printed once clWaitForEvents on that launch's event returned;
 *   - then "first: ..." and "second" (two launches in queue order, each
 *     launch's output whole, before the program's own "finished" line,
 *     which it prints after clFinish);
 *   - 64 lines "item N of 64" (work-items in parallel: any order);
 *   - exactly CL_DEVICE_PRINTF_BUFFER_SIZE bytes of a launch that prints
 *     more, and on stderr how much more was dropped;
 *   - nothing from a program that does not print.
 *
 * It prints one line per failed check (on stderr: stdout is the output
 * under test) and exits with the number of them. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_STREAM stderr /* stdout is the output under test */
#include "check.h"

static const char *source =
	"__kernel void first(int i, float f) {\n"
	"  printf(\"first: %d %.2f %s %c\\n\", i, f, \"abc\", 'x');\n"
	"}\n"
	"__kernel void second(void) { printf(\"second\\n\"); }\n"
	"__kernel void items(void) {\n"
	"  printf(\"item %d of %d\\n\", (int)get_global_id(0), (int)get_global_size(0));\n"
	"}\n"
	/* 40000 work-items of 32 bytes each: 1.28 MB, more than the buffer. */
	"__kernel void flood(void) {\n"
	"  printf(\"flood %08d xxxxxxxxxxxxxxxx\\n\", (int)get_global_id(0));\n"
	"}\n";

static const char *quiet = "__kernel void quiet(__global int *a) { a[get_global_id(0)] = 1; }\n";

static cl_kernel kernel(cl_context ctx, cl_device_id dev, const char *src, const char *name)
{
	cl_int err;
	cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
	OK(clBuildProgram(p, 1, &dev, NULL, NULL, NULL));
	cl_kernel k = clCreateKernel(p, name, &err);
	CHECK(err == CL_SUCCESS, "clCreateKernel(%s): %d", name, err);
	clReleaseProgram(p);
	return k;
}

int main(void)
{
	cl_platform_id p = need_vgpud_platform();
	cl_device_id dev;
	OK(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &dev, NULL));
	size_t pbs = 0;
	OK(clGetDeviceInfo(dev, CL_DEVICE_PRINTF_BUFFER_SIZE, sizeof pbs, &pbs, NULL));
	CHECK(pbs == 1u << 20, "CL_DEVICE_PRINTF_BUFFER_SIZE %zu", pbs);
	cl_int err;
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
	CHECK(err == CL_SUCCESS, "queue: %d", err);

	/* A launch's output is printed once its event completes (a wait on
	 * the event alone finds it); two launches' in queue order, all of it
	 * before clFinish returns. */
	cl_kernel first = kernel(ctx, dev, source, "first");
	cl_kernel second = kernel(ctx, dev, source, "second");
	cl_int i = 7;
	float f = 2.5f;
	OK(clSetKernelArg(first, 0, sizeof i, &i));
	OK(clSetKernelArg(first, 1, sizeof f, &f));
	size_t one = 1;
	cl_event e;
	OK(clEnqueueNDRangeKernel(q, first, 1, NULL, &one, NULL, 0, NULL, &e));
	OK(clWaitForEvents(1, &e));
	printf("waited\n");
	fflush(stdout);
	clReleaseEvent(e);
	OK(clEnqueueNDRangeKernel(q, first, 1, NULL, &one, NULL, 0, NULL, NULL));
	OK(clEnqueueNDRangeKernel(q, second, 1, NULL, &one, NULL, 0, NULL, NULL));
	OK(clFinish(q));
	printf("finished\n");
	fflush(stdout);

	/* 64 work-items. */
	cl_kernel items = kernel(ctx, dev, source, "items");
	size_t n64 = 64;
	OK(clEnqueueNDRangeKernel(q, items, 1, NULL, &n64, NULL, 0, NULL, NULL));
	OK(clFinish(q));
	printf("items done\n");
	fflush(stdout);

	/* More than the printf buffer: cut at its size, the rest counted. */
	cl_kernel flood = kernel(ctx, dev, source, "flood");
	size_t nflood = 40000;
	OK(clEnqueueNDRangeKernel(q, flood, 1, NULL, &nflood, NULL, 0, NULL, NULL));
	OK(clFinish(q));
	printf("\nflood done\n");
	fflush(stdout);

	/* A program without printf prints nothing and gets no printf buffer. */
	cl_kernel k = kernel(ctx, dev, quiet, "quiet");
	cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * sizeof(cl_int), NULL, &err);
	OK(clSetKernelArg(k, 0, sizeof m, &m));
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n64, NULL, 0, NULL, NULL));
	cl_int got[64];
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
	CHECK(got[63] == 1, "quiet's result %d", got[63]);
	printf("quiet done\n");

	clReleaseMemObject(m);
	clReleaseKernel(k);
	clReleaseKernel(flood);
	clReleaseKernel(items);
	clReleaseKernel(first);
	clReleaseKernel(second);
	clReleaseCommandQueue(q);
	clReleaseContext(ctx);
	if (failures != 0)
		fprintf(stderr, "%d failures\n", failures);
	return failures != 0;
}

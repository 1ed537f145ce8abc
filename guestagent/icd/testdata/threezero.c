/* threezero: the OpenCL 3.0 entries and queries the vgpud ICD offers, used
 * as a 3.0 application uses them, against a vgpu-icdd serving a real vGPU
 * (tests/icdhost). Built and run by icd_test.go (TestDaemon):
 *
 *   threezero DIR     DIR: unused (the runner's common argument)
 *
 * A queue made with properties (profiling, read back as the list given),
 * a buffer made with an empty property list, a program built as OpenCL C
 * 3.0 (its version macro and the int64 feature macro seen by the kernel),
 * a cloned kernel keeping the arguments it was cloned with, the
 * profiling COMPLETE time, destructor callbacks of a context in reverse
 * order, and the 3.0 answers for what the device does not offer. It prints
 * one line per failed check and exits with the number of them. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static cl_device_id dev;

static const char *source =
	/* __LINE__ counts the program's own lines, whatever the ICD puts
	 * before them (its #undefs, the -D lines), and follows #line. */
	"#if __LINE__ != 1\n"
	"#error __LINE__ is not the program's own line\n"
	"#endif\n"
	"#line 100\n"
	"#if __LINE__ != 100 || FORTY_TWO != 42\n"
	"#error #line or -D lost\n"
	"#endif\n"
	"#if __OPENCL_C_VERSION__ != 300\n"
	"#error not built as OpenCL C 3.0\n"
	"#endif\n"
	"#ifndef __opencl_c_int64\n"
	"#error no __opencl_c_int64\n"
	"#endif\n"
	/* Features the vGPU does not report are not defined, whatever the
	 * physical compiler defines (PoCL: 3D image writes, the stronger
	 * atomics); images are (testdata/images.c checks their macros). */
	"#if defined(__opencl_c_atomic_order_seq_cst) || "
	"defined(__opencl_c_generic_address_space) || defined(__opencl_c_3d_image_writes) || "
	"defined(__opencl_c_read_write_images)\n"
	"#error a feature the device does not report is defined\n"
	"#endif\n"
	"__kernel void put(__global ulong *out, ulong v) { out[get_global_id(0)] = v + get_global_id(0); }\n";

static cl_device_id find_device(void)
{
	cl_platform_id p = need_vgpud_platform();
	char ver[64] = "";
	OK(clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof ver, ver, NULL));
	CHECK(strncmp(ver, "OpenCL 3.0 ", 11) == 0, "platform version %s", ver);
	cl_device_id d = NULL;
	OK(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &d, NULL));
	return d;
}

static int order[4], norder;

static void CL_CALLBACK on_destroy(cl_context c, void *data)
{
	(void)c;
	if (norder < 4)
		order[norder++] = (int)(intptr_t)data;
}

/* queue_checks: clCreateCommandQueueWithProperties and its queries; the
 * errors of the properties a vGPU does not offer. */
static cl_command_queue queue_checks(cl_context ctx)
{
	cl_int err;
	cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
	cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, props, &err);
	CHECK(err == CL_SUCCESS && q != NULL, "clCreateCommandQueueWithProperties: %d", err);
	cl_queue_properties got[4] = {9, 9, 9, 9};
	size_t n = 0;
	OK(clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES_ARRAY, sizeof got, got, &n));
	CHECK(n == sizeof props && got[0] == CL_QUEUE_PROPERTIES && got[1] == CL_QUEUE_PROFILING_ENABLE && got[2] == 0,
	      "properties array: %zu bytes", n);
	cl_command_queue_properties bits = 0;
	OK(clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof bits, &bits, NULL));
	CHECK(bits == CL_QUEUE_PROFILING_ENABLE, "properties %#llx", (unsigned long long)bits);
	cl_command_queue dq = (cl_command_queue)1;
	OK(clGetCommandQueueInfo(q, CL_QUEUE_DEVICE_DEFAULT, sizeof dq, &dq, NULL));
	CHECK(dq == NULL, "device default queue %p", (void *)dq);
	cl_uint size;
	CHECK_ERR(clGetCommandQueueInfo(q, CL_QUEUE_SIZE, sizeof size, &size, NULL), CL_INVALID_COMMAND_QUEUE);

	/* No list: a default queue, and no array; an empty list: {0}. */
	cl_command_queue q0 = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
	CHECK(err == CL_SUCCESS, "no properties: %d", err);
	OK(clGetCommandQueueInfo(q0, CL_QUEUE_PROPERTIES_ARRAY, 0, NULL, &n));
	CHECK(n == 0, "no list: %zu bytes", n);
	OK(clReleaseCommandQueue(q0));
	cl_queue_properties empty[] = {0};
	q0 = clCreateCommandQueueWithProperties(ctx, dev, empty, &err);
	OK(clGetCommandQueueInfo(q0, CL_QUEUE_PROPERTIES_ARRAY, 0, NULL, &n));
	CHECK(n == sizeof empty, "empty list: %zu bytes", n);
	OK(clReleaseCommandQueue(q0));
	cl_command_queue q1 = clCreateCommandQueue(ctx, dev, 0, &err);
	OK(clGetCommandQueueInfo(q1, CL_QUEUE_PROPERTIES_ARRAY, 0, NULL, &n));
	CHECK(n == 0, "clCreateCommandQueue's array: %zu bytes", n);
	OK(clReleaseCommandQueue(q1));

	const struct {
		cl_queue_properties p[5];
		cl_int want;
	} bad[] = {
		{{CL_QUEUE_PROPERTIES, CL_QUEUE_ON_DEVICE | CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, 0},
		 CL_INVALID_QUEUE_PROPERTIES},
		{{CL_QUEUE_SIZE, 4096, 0}, CL_INVALID_VALUE},
		{{CL_QUEUE_PROPERTIES, 0, CL_QUEUE_PROPERTIES, 0, 0}, CL_INVALID_VALUE},
		{{CL_QUEUE_PROPERTIES, (cl_queue_properties)1 << 40, 0}, CL_INVALID_VALUE},
		{{0x7777, 1, 0}, CL_INVALID_VALUE},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err = CL_SUCCESS;
		CHECK(clCreateCommandQueueWithProperties(ctx, dev, bad[i].p, &err) == NULL, "bad list %zu made a queue", i);
		CHECK(err == bad[i].want, "bad list %zu: %d, want %d", i, err, bad[i].want);
	}
	err = CL_SUCCESS;
	CHECK(clCreateCommandQueueWithProperties(NULL, dev, props, &err) == NULL && err == CL_INVALID_CONTEXT,
	      "NULL context: %d", err);
	return q;
}

/* buffer_checks: clCreateBufferWithProperties and the 3.0 buffer queries. */
static cl_mem buffer_checks(cl_context ctx)
{
	cl_int err;
	cl_mem_properties none[] = {0};
	cl_mem m = clCreateBufferWithProperties(ctx, none, CL_MEM_READ_WRITE, 64 * sizeof(cl_ulong), NULL, &err);
	CHECK(err == CL_SUCCESS && m != NULL, "clCreateBufferWithProperties: %d", err);
	cl_mem_properties got[2] = {9, 9};
	size_t n = 0;
	OK(clGetMemObjectInfo(m, CL_MEM_PROPERTIES, sizeof got, got, &n));
	CHECK(n == sizeof none && got[0] == 0, "CL_MEM_PROPERTIES: %zu bytes", n);
	cl_bool svm = CL_TRUE;
	OK(clGetMemObjectInfo(m, CL_MEM_USES_SVM_POINTER, sizeof svm, &svm, NULL));
	CHECK(svm == CL_FALSE, "uses SVM pointer");
	cl_mem m2 = clCreateBufferWithProperties(ctx, NULL, CL_MEM_READ_ONLY, 64, NULL, &err);
	CHECK(err == CL_SUCCESS, "NULL properties: %d", err);
	OK(clGetMemObjectInfo(m2, CL_MEM_PROPERTIES, 0, NULL, &n));
	CHECK(n == 0, "NULL properties: %zu bytes", n);
	OK(clReleaseMemObject(m2));
	cl_mem_properties bad[] = {0x4000, 1, 0};
	err = CL_SUCCESS;
	CHECK(clCreateBufferWithProperties(ctx, bad, CL_MEM_READ_WRITE, 64, NULL, &err) == NULL &&
		      err == CL_INVALID_PROPERTY,
	      "unknown property: %d", err);
	err = CL_SUCCESS;
	CHECK(clCreateBufferWithProperties(ctx, none, CL_MEM_READ_WRITE, 0, NULL, &err) == NULL &&
		      err == CL_INVALID_BUFFER_SIZE,
	      "size 0: %d", err);
	return m;
}

/* kernel_checks: a program built as OpenCL C 3.0; a clone keeps the
 * arguments set when it was cloned; COMPLETE is the end. */
static void kernel_checks(cl_context ctx, cl_command_queue q, cl_mem m)
{
	cl_int err;
	cl_program p = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
	err = clBuildProgram(p, 1, &dev, "-cl-std=CL3.0 -DFORTY_TWO=42", NULL, NULL);
	if (err != CL_SUCCESS) {
		char log[8192] = "";
		clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
		CHECK(err == CL_SUCCESS, "clBuildProgram(-cl-std=CL3.0): %d; log:\n%s", err, log);
		exit(1);
	}
	size_t n = 1;
	OK(clGetProgramInfo(p, CL_PROGRAM_IL, 0, NULL, &n));
	CHECK(n == 0, "CL_PROGRAM_IL: %zu bytes", n);
	cl_bool ctors = CL_TRUE;
	OK(clGetProgramInfo(p, CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT, sizeof ctors, &ctors, NULL));
	CHECK(ctors == CL_FALSE, "global constructors present");
	size_t gv = 1;
	OK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_GLOBAL_VARIABLE_TOTAL_SIZE, sizeof gv, &gv, NULL));
	CHECK(gv == 0, "global variable size %zu", gv);

	cl_kernel k = clCreateKernel(p, "put", &err);
	CHECK(err == CL_SUCCESS, "clCreateKernel: %d", err);
	cl_ulong v = 1000;
	OK(clSetKernelArg(k, 0, sizeof m, &m));
	OK(clSetKernelArg(k, 1, sizeof v, &v));
	cl_kernel c = clCloneKernel(k, &err);
	CHECK(err == CL_SUCCESS && c != NULL, "clCloneKernel: %d", err);
	v = 5;
	OK(clSetKernelArg(k, 1, sizeof v, &v)); /* the clone keeps 1000 */
	char name[32] = "";
	OK(clGetKernelInfo(c, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL));
	CHECK(strcmp(name, "put") == 0, "clone's name %s", name);
	cl_program cp = NULL;
	OK(clGetKernelInfo(c, CL_KERNEL_PROGRAM, sizeof cp, &cp, NULL));
	CHECK(cp == p, "clone's program");
	OK(clReleaseKernel(k)); /* the clone outlives its source */
	size_t global = 64;
	cl_event ev;
	OK(clEnqueueNDRangeKernel(q, c, 1, NULL, &global, NULL, 0, NULL, &ev));
	cl_ulong out[64];
	OK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
	for (size_t i = 0; i < 64; i++)
		CHECK(out[i] == 1000 + i, "out[%zu] = %llu, want %zu", i, (unsigned long long)out[i], 1000 + i);
	OK(clWaitForEvents(1, &ev));
	cl_ulong end = 0, complete = 1;
	OK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL));
	OK(clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_COMPLETE, sizeof complete, &complete, NULL));
	CHECK(end != 0 && complete == end, "end %llu, complete %llu", (unsigned long long)end,
	      (unsigned long long)complete);
	OK(clReleaseEvent(ev));
	CHECK(clCloneKernel(NULL, &err) == NULL && err == CL_INVALID_KERNEL, "clone of NULL: %d", err);
	OK(clReleaseKernel(c));
	OK(clReleaseProgram(p));
}

/* absent_checks: what OpenCL 3.0 answers for features the device lacks. */
static void absent_checks(cl_context ctx, cl_command_queue q)
{
	cl_int err = CL_SUCCESS;
	CHECK(clSVMAlloc(ctx, CL_MEM_READ_WRITE, 4096, 0) == NULL, "clSVMAlloc returned memory");
	CHECK(clCreatePipe(ctx, CL_MEM_READ_WRITE, 4, 16, NULL, &err) == NULL && err == CL_INVALID_OPERATION,
	      "clCreatePipe: %d", err);
	cl_uint packet;
	cl_mem notpipe = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
	CHECK_ERR(clGetPipeInfo(notpipe, CL_PIPE_PACKET_SIZE, sizeof packet, &packet, NULL), CL_INVALID_MEM_OBJECT);
	clReleaseMemObject(notpipe);
	cl_uint nfmt = 9;
	OK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE | CL_MEM_KERNEL_READ_AND_WRITE, CL_MEM_OBJECT_IMAGE2D, 0,
				      NULL, &nfmt));
	CHECK(nfmt == 0, "%u read-write image formats", nfmt);
	/* A device without SPIR-V refuses any module; one with it this one,
	 * which is the magic number alone (testdata/il.c checks the rest). */
	static const unsigned char il[] = {0x03, 0x02, 0x23, 0x07};
	char ilver[64] = "";
	OK(clGetDeviceInfo(dev, CL_DEVICE_IL_VERSION, sizeof ilver, ilver, NULL));
	cl_int want_il = ilver[0] == '\0' ? CL_INVALID_OPERATION : CL_INVALID_VALUE;
	CHECK(clCreateProgramWithIL(ctx, il, sizeof il, &err) == NULL && err == want_il, "clCreateProgramWithIL: %d", err);
	cl_ulong t;
	CHECK_ERR(clGetHostTimer(dev, &t), CL_INVALID_OPERATION);
	CHECK_ERR(clSetDefaultDeviceCommandQueue(ctx, dev, q), CL_INVALID_OPERATION);
}

int main(void)
{
	dev = find_device();
	cl_int err;
	cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
	CHECK(err == CL_SUCCESS && ctx != NULL, "clCreateContext: %d", err);
	if (ctx == NULL)
		return 1;
	OK(clSetContextDestructorCallback(ctx, on_destroy, (void *)1));
	OK(clSetContextDestructorCallback(ctx, on_destroy, (void *)2));
	CHECK_ERR(clSetContextDestructorCallback(ctx, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clSetContextDestructorCallback(NULL, on_destroy, NULL), CL_INVALID_CONTEXT);

	cl_command_queue q = queue_checks(ctx);
	cl_mem m = buffer_checks(ctx);
	kernel_checks(ctx, q, m);
	absent_checks(ctx, q);

	/* The callbacks run once the context and all its objects are gone,
	 * the last registered first. */
	OK(clReleaseContext(ctx));
	CHECK(norder == 0, "destructor ran with a queue and a buffer alive");
	OK(clReleaseMemObject(m));
	OK(clReleaseCommandQueue(q));
	CHECK(norder == 2 && order[0] == 2 && order[1] == 1, "destructor order: %d callbacks, %d then %d", norder,
	      order[0], order[1]);
	if (failures != 0)
		printf("%d failures\n", failures);
	return failures != 0;
}

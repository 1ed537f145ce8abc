/* dispatch.c: the dispatch table every object of this ICD points at, and
 * the functions behind the entries this ICD does not implement.
 *
 * An entry the ICD does not implement is never left NULL (the loader would
 * call through it) and never pretends to work: it returns
 * CL_INVALID_OPERATION (or NULL with *errcode_ret = CL_INVALID_OPERATION)
 * and says so once per process on stderr. There are two kinds:
 *
 *   NOT_YET  OpenCL 1.2 API the device will offer (issue 11): contexts,
 *            queues, buffers, programs, kernels, events, and the image,
 *            sampler and native-kernel calls whose final answer depends on
 *            a valid context or queue first.
 *   NOT_12   entries outside OpenCL 1.2 and extensions this device does not
 *            offer (GL and EGL sharing, cl_ext_device_fission, sub-groups,
 *            OpenCL 2.x and 3.0): the platform reports OpenCL 1.2, so a
 *            correct application does not call them.
 *
 * Implementing an entry: write it in the file of its object, declare it in
 * icd.h, point the table at it and delete its refuse_ function here. The
 * compiler checks every function's type against cl_icd.h (an incompatible
 * pointer is an error under -Werror), and the API test checks that only
 * the Windows-only entries are NULL. docs/icd.md lists both kinds. */
#include "icd.h"

#include <stdatomic.h>

/* The parameters of a refusal are not looked at. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define NOT_YET "is not implemented yet (issue 11)"
#define NOT_12 "is not supported by this OpenCL 1.2 device"

#define REFUSE(name, why)                                                                                    \
	do {                                                                                                 \
		static atomic_flag logged = ATOMIC_FLAG_INIT;                                                \
		if (!atomic_flag_test_and_set(&logged))                                                      \
			vgpu_log("%s " why, #name);                                                          \
	} while (0)

static cl_context CL_API_CALL refuse_clCreateContext(const cl_context_properties *a0, cl_uint a1,
	const cl_device_id *a2, void (CL_CALLBACK *a3)(const char *, const void *, size_t, void *), void *a4,
	cl_int *errcode_ret)
{
	REFUSE(clCreateContext, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_context CL_API_CALL refuse_clCreateContextFromType(const cl_context_properties *a0,
	cl_device_type a1, void (CL_CALLBACK *a2)(const char *, const void *, size_t, void *), void *a3,
	cl_int *errcode_ret)
{
	REFUSE(clCreateContextFromType, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clRetainContext(cl_context a0)
{
	REFUSE(clRetainContext, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseContext(cl_context a0)
{
	REFUSE(clReleaseContext, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetContextInfo(cl_context a0, cl_context_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetContextInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_command_queue CL_API_CALL refuse_clCreateCommandQueue(cl_context a0, cl_device_id a1,
	cl_command_queue_properties a2, cl_int *errcode_ret)
{
	REFUSE(clCreateCommandQueue, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clRetainCommandQueue(cl_command_queue a0)
{
	REFUSE(clRetainCommandQueue, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseCommandQueue(cl_command_queue a0)
{
	REFUSE(clReleaseCommandQueue, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetCommandQueueInfo(cl_command_queue a0, cl_command_queue_info a1,
	size_t a2, void *a3, size_t *a4)
{
	REFUSE(clGetCommandQueueInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetCommandQueueProperty(cl_command_queue a0,
	cl_command_queue_properties a1, cl_bool a2, cl_command_queue_properties *a3)
{
	REFUSE(clSetCommandQueueProperty, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_mem CL_API_CALL refuse_clCreateBuffer(cl_context a0, cl_mem_flags a1, size_t a2, void *a3,
	cl_int *errcode_ret)
{
	REFUSE(clCreateBuffer, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateImage2D(cl_context a0, cl_mem_flags a1, const cl_image_format *a2,
	size_t a3, size_t a4, size_t a5, void *a6, cl_int *errcode_ret)
{
	REFUSE(clCreateImage2D, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateImage3D(cl_context a0, cl_mem_flags a1, const cl_image_format *a2,
	size_t a3, size_t a4, size_t a5, size_t a6, size_t a7, void *a8, cl_int *errcode_ret)
{
	REFUSE(clCreateImage3D, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clRetainMemObject(cl_mem a0)
{
	REFUSE(clRetainMemObject, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseMemObject(cl_mem a0)
{
	REFUSE(clReleaseMemObject, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetSupportedImageFormats(cl_context a0, cl_mem_flags a1,
	cl_mem_object_type a2, cl_uint a3, cl_image_format *a4, cl_uint *a5)
{
	REFUSE(clGetSupportedImageFormats, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetMemObjectInfo(cl_mem a0, cl_mem_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetMemObjectInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetImageInfo(cl_mem a0, cl_image_info a1, size_t a2, void *a3, size_t *a4)
{
	REFUSE(clGetImageInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_sampler CL_API_CALL refuse_clCreateSampler(cl_context a0, cl_bool a1, cl_addressing_mode a2,
	cl_filter_mode a3, cl_int *errcode_ret)
{
	REFUSE(clCreateSampler, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clRetainSampler(cl_sampler a0)
{
	REFUSE(clRetainSampler, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseSampler(cl_sampler a0)
{
	REFUSE(clReleaseSampler, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetSamplerInfo(cl_sampler a0, cl_sampler_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetSamplerInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_program CL_API_CALL refuse_clCreateProgramWithSource(cl_context a0, cl_uint a1, const char **a2,
	const size_t *a3, cl_int *errcode_ret)
{
	REFUSE(clCreateProgramWithSource, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_program CL_API_CALL refuse_clCreateProgramWithBinary(cl_context a0, cl_uint a1,
	const cl_device_id *a2, const size_t *a3, const unsigned char **a4, cl_int *a5, cl_int *errcode_ret)
{
	REFUSE(clCreateProgramWithBinary, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clRetainProgram(cl_program a0)
{
	REFUSE(clRetainProgram, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseProgram(cl_program a0)
{
	REFUSE(clReleaseProgram, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clBuildProgram(cl_program a0, cl_uint a1, const cl_device_id *a2,
	const char *a3, void (CL_CALLBACK *a4)(cl_program program, void *user_data), void *a5)
{
	REFUSE(clBuildProgram, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetProgramInfo(cl_program a0, cl_program_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetProgramInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetProgramBuildInfo(cl_program a0, cl_device_id a1,
	cl_program_build_info a2, size_t a3, void *a4, size_t *a5)
{
	REFUSE(clGetProgramBuildInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_kernel CL_API_CALL refuse_clCreateKernel(cl_program a0, const char *a1, cl_int *errcode_ret)
{
	REFUSE(clCreateKernel, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clCreateKernelsInProgram(cl_program a0, cl_uint a1, cl_kernel *a2,
	cl_uint *a3)
{
	REFUSE(clCreateKernelsInProgram, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clRetainKernel(cl_kernel a0)
{
	REFUSE(clRetainKernel, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseKernel(cl_kernel a0)
{
	REFUSE(clReleaseKernel, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetKernelArg(cl_kernel a0, cl_uint a1, size_t a2, const void *a3)
{
	REFUSE(clSetKernelArg, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetKernelInfo(cl_kernel a0, cl_kernel_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetKernelInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetKernelWorkGroupInfo(cl_kernel a0, cl_device_id a1,
	cl_kernel_work_group_info a2, size_t a3, void *a4, size_t *a5)
{
	REFUSE(clGetKernelWorkGroupInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clWaitForEvents(cl_uint a0, const cl_event *a1)
{
	REFUSE(clWaitForEvents, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetEventInfo(cl_event a0, cl_event_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetEventInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clRetainEvent(cl_event a0)
{
	REFUSE(clRetainEvent, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseEvent(cl_event a0)
{
	REFUSE(clReleaseEvent, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetEventProfilingInfo(cl_event a0, cl_profiling_info a1, size_t a2,
	void *a3, size_t *a4)
{
	REFUSE(clGetEventProfilingInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clFlush(cl_command_queue a0)
{
	REFUSE(clFlush, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clFinish(cl_command_queue a0)
{
	REFUSE(clFinish, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueReadBuffer(cl_command_queue a0, cl_mem a1, cl_bool a2, size_t a3,
	size_t a4, void *a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueReadBuffer, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueWriteBuffer(cl_command_queue a0, cl_mem a1, cl_bool a2, size_t a3,
	size_t a4, const void *a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueWriteBuffer, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueCopyBuffer(cl_command_queue a0, cl_mem a1, cl_mem a2, size_t a3,
	size_t a4, size_t a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueCopyBuffer, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueReadImage(cl_command_queue a0, cl_mem a1, cl_bool a2,
	const size_t *a3, const size_t *a4, size_t a5, size_t a6, void *a7, cl_uint a8, const cl_event *a9,
	cl_event *a10)
{
	REFUSE(clEnqueueReadImage, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueWriteImage(cl_command_queue a0, cl_mem a1, cl_bool a2,
	const size_t *a3, const size_t *a4, size_t a5, size_t a6, const void *a7, cl_uint a8,
	const cl_event *a9, cl_event *a10)
{
	REFUSE(clEnqueueWriteImage, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueCopyImage(cl_command_queue a0, cl_mem a1, cl_mem a2,
	const size_t *a3, const size_t *a4, const size_t *a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueCopyImage, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueCopyImageToBuffer(cl_command_queue a0, cl_mem a1, cl_mem a2,
	const size_t *a3, const size_t *a4, size_t a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueCopyImageToBuffer, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueCopyBufferToImage(cl_command_queue a0, cl_mem a1, cl_mem a2,
	size_t a3, const size_t *a4, const size_t *a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueCopyBufferToImage, NOT_YET);
	return CL_INVALID_OPERATION;
}

static void *CL_API_CALL refuse_clEnqueueMapBuffer(cl_command_queue a0, cl_mem a1, cl_bool a2,
	cl_map_flags a3, size_t a4, size_t a5, cl_uint a6, const cl_event *a7, cl_event *a8,
	cl_int *errcode_ret)
{
	REFUSE(clEnqueueMapBuffer, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static void *CL_API_CALL refuse_clEnqueueMapImage(cl_command_queue a0, cl_mem a1, cl_bool a2, cl_map_flags a3,
	const size_t *a4, const size_t *a5, size_t *a6, size_t *a7, cl_uint a8, const cl_event *a9,
	cl_event *a10, cl_int *errcode_ret)
{
	REFUSE(clEnqueueMapImage, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clEnqueueUnmapMemObject(cl_command_queue a0, cl_mem a1, void *a2, cl_uint a3,
	const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueUnmapMemObject, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueNDRangeKernel(cl_command_queue a0, cl_kernel a1, cl_uint a2,
	const size_t *a3, const size_t *a4, const size_t *a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueNDRangeKernel, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueTask(cl_command_queue a0, cl_kernel a1, cl_uint a2,
	const cl_event *a3, cl_event *a4)
{
	REFUSE(clEnqueueTask, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueNativeKernel(cl_command_queue a0, void (CL_CALLBACK *a1)(void *),
	void *a2, size_t a3, cl_uint a4, const cl_mem *a5, const void **a6, cl_uint a7, const cl_event *a8,
	cl_event *a9)
{
	REFUSE(clEnqueueNativeKernel, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueMarker(cl_command_queue a0, cl_event *a1)
{
	REFUSE(clEnqueueMarker, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueWaitForEvents(cl_command_queue a0, cl_uint a1, const cl_event *a2)
{
	REFUSE(clEnqueueWaitForEvents, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueBarrier(cl_command_queue a0)
{
	REFUSE(clEnqueueBarrier, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLBuffer(cl_context a0, cl_mem_flags a1, cl_GLuint a2,
	int *errcode_ret)
{
	REFUSE(clCreateFromGLBuffer, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLTexture2D(cl_context a0, cl_mem_flags a1, cl_GLenum a2,
	cl_GLint a3, cl_GLuint a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLTexture2D, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLTexture3D(cl_context a0, cl_mem_flags a1, cl_GLenum a2,
	cl_GLint a3, cl_GLuint a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLTexture3D, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLRenderbuffer(cl_context a0, cl_mem_flags a1, cl_GLuint a2,
	cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLRenderbuffer, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clGetGLObjectInfo(cl_mem a0, cl_gl_object_type *a1, cl_GLuint *a2)
{
	REFUSE(clGetGLObjectInfo, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetGLTextureInfo(cl_mem a0, cl_gl_texture_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetGLTextureInfo, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueAcquireGLObjects(cl_command_queue a0, cl_uint a1, const cl_mem *a2,
	cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueAcquireGLObjects, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueReleaseGLObjects(cl_command_queue a0, cl_uint a1, const cl_mem *a2,
	cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueReleaseGLObjects, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetGLContextInfoKHR(const cl_context_properties *a0, cl_gl_context_info a1,
	size_t a2, void *a3, size_t *a4)
{
	REFUSE(clGetGLContextInfoKHR, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetEventCallback(cl_event a0, cl_int a1,
	void (CL_CALLBACK *a2)(cl_event, cl_int, void *), void *a3)
{
	REFUSE(clSetEventCallback, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_mem CL_API_CALL refuse_clCreateSubBuffer(cl_mem a0, cl_mem_flags a1, cl_buffer_create_type a2,
	const void *a3, cl_int *errcode_ret)
{
	REFUSE(clCreateSubBuffer, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clSetMemObjectDestructorCallback(cl_mem a0,
	void (CL_CALLBACK *a1)(cl_mem, void *), void *a2)
{
	REFUSE(clSetMemObjectDestructorCallback, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_event CL_API_CALL refuse_clCreateUserEvent(cl_context a0, cl_int *errcode_ret)
{
	REFUSE(clCreateUserEvent, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clSetUserEventStatus(cl_event a0, cl_int a1)
{
	REFUSE(clSetUserEventStatus, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueReadBufferRect(cl_command_queue a0, cl_mem a1, cl_bool a2,
	const size_t *a3, const size_t *a4, const size_t *a5, size_t a6, size_t a7, size_t a8, size_t a9,
	void *a10, cl_uint a11, const cl_event *a12, cl_event *a13)
{
	REFUSE(clEnqueueReadBufferRect, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueWriteBufferRect(cl_command_queue a0, cl_mem a1, cl_bool a2,
	const size_t *a3, const size_t *a4, const size_t *a5, size_t a6, size_t a7, size_t a8, size_t a9,
	const void *a10, cl_uint a11, const cl_event *a12, cl_event *a13)
{
	REFUSE(clEnqueueWriteBufferRect, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueCopyBufferRect(cl_command_queue a0, cl_mem a1, cl_mem a2,
	const size_t *a3, const size_t *a4, const size_t *a5, size_t a6, size_t a7, size_t a8, size_t a9,
	cl_uint a10, const cl_event *a11, cl_event *a12)
{
	REFUSE(clEnqueueCopyBufferRect, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clCreateSubDevicesEXT(cl_device_id a0,
	const cl_device_partition_property_ext *a1, cl_uint a2, cl_device_id *a3, cl_uint *a4)
{
	REFUSE(clCreateSubDevicesEXT, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clRetainDeviceEXT(cl_device_id a0)
{
	REFUSE(clRetainDeviceEXT, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseDeviceEXT(cl_device_id a0)
{
	REFUSE(clReleaseDeviceEXT, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_event CL_API_CALL refuse_clCreateEventFromGLsyncKHR(cl_context a0, cl_GLsync a1,
	cl_int *errcode_ret)
{
	REFUSE(clCreateEventFromGLsyncKHR, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateImage(cl_context a0, cl_mem_flags a1, const cl_image_format *a2,
	const cl_image_desc *a3, void *a4, cl_int *errcode_ret)
{
	REFUSE(clCreateImage, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_program CL_API_CALL refuse_clCreateProgramWithBuiltInKernels(cl_context a0, cl_uint a1,
	const cl_device_id *a2, const char *a3, cl_int *errcode_ret)
{
	REFUSE(clCreateProgramWithBuiltInKernels, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clCompileProgram(cl_program a0, cl_uint a1, const cl_device_id *a2,
	const char *a3, cl_uint a4, const cl_program *a5, const char **a6,
	void (CL_CALLBACK *a7)(cl_program program, void *user_data), void *a8)
{
	REFUSE(clCompileProgram, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_program CL_API_CALL refuse_clLinkProgram(cl_context a0, cl_uint a1, const cl_device_id *a2,
	const char *a3, cl_uint a4, const cl_program *a5,
	void (CL_CALLBACK *a6)(cl_program program, void *user_data), void *a7, cl_int *errcode_ret)
{
	REFUSE(clLinkProgram, NOT_YET);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clGetKernelArgInfo(cl_kernel a0, cl_uint a1, cl_kernel_arg_info a2,
	size_t a3, void *a4, size_t *a5)
{
	REFUSE(clGetKernelArgInfo, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueFillBuffer(cl_command_queue a0, cl_mem a1, const void *a2,
	size_t a3, size_t a4, size_t a5, cl_uint a6, const cl_event *a7, cl_event *a8)
{
	REFUSE(clEnqueueFillBuffer, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueFillImage(cl_command_queue a0, cl_mem a1, const void *a2,
	const size_t a3[3], const size_t a4[3], cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueFillImage, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueMigrateMemObjects(cl_command_queue a0, cl_uint a1, const cl_mem *a2,
	cl_mem_migration_flags a3, cl_uint a4, const cl_event *a5, cl_event *a6)
{
	REFUSE(clEnqueueMigrateMemObjects, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueMarkerWithWaitList(cl_command_queue a0, cl_uint a1,
	const cl_event *a2, cl_event *a3)
{
	REFUSE(clEnqueueMarkerWithWaitList, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueBarrierWithWaitList(cl_command_queue a0, cl_uint a1,
	const cl_event *a2, cl_event *a3)
{
	REFUSE(clEnqueueBarrierWithWaitList, NOT_YET);
	return CL_INVALID_OPERATION;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLTexture(cl_context a0, cl_mem_flags a1, cl_GLenum a2,
	cl_GLint a3, cl_GLuint a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLTexture, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromEGLImageKHR(cl_context a0, CLeglDisplayKHR a1, CLeglImageKHR a2,
	cl_mem_flags a3, const cl_egl_image_properties_khr *a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromEGLImageKHR, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clEnqueueAcquireEGLObjectsKHR(cl_command_queue a0, cl_uint a1,
	const cl_mem *a2, cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueAcquireEGLObjectsKHR, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueReleaseEGLObjectsKHR(cl_command_queue a0, cl_uint a1,
	const cl_mem *a2, cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueReleaseEGLObjectsKHR, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_event CL_API_CALL refuse_clCreateEventFromEGLSyncKHR(cl_context a0, CLeglSyncKHR a1,
	CLeglDisplayKHR a2, cl_int *errcode_ret)
{
	REFUSE(clCreateEventFromEGLSyncKHR, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_command_queue CL_API_CALL refuse_clCreateCommandQueueWithProperties(cl_context a0, cl_device_id a1,
	const cl_queue_properties *a2, cl_int *errcode_ret)
{
	REFUSE(clCreateCommandQueueWithProperties, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreatePipe(cl_context a0, cl_mem_flags a1, cl_uint a2, cl_uint a3,
	const cl_pipe_properties *a4, cl_int *errcode_ret)
{
	REFUSE(clCreatePipe, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clGetPipeInfo(cl_mem a0, cl_pipe_info a1, size_t a2, void *a3, size_t *a4)
{
	REFUSE(clGetPipeInfo, NOT_12);
	return CL_INVALID_OPERATION;
}

static void *CL_API_CALL refuse_clSVMAlloc(cl_context a0, cl_svm_mem_flags a1, size_t a2, unsigned int a3)
{
	REFUSE(clSVMAlloc, NOT_12);
	return NULL;
}

static void CL_API_CALL refuse_clSVMFree(cl_context a0, void *a1)
{
	REFUSE(clSVMFree, NOT_12);
}

static cl_int CL_API_CALL refuse_clEnqueueSVMFree(cl_command_queue a0, cl_uint a1, void **a2,
	void (CL_CALLBACK *a3)(cl_command_queue, cl_uint, void **, void *), void *a4, cl_uint a5,
	const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMFree, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMMemcpy(cl_command_queue a0, cl_bool a1, void *a2, const void *a3,
	size_t a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMemcpy, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMMemFill(cl_command_queue a0, void *a1, const void *a2, size_t a3,
	size_t a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMemFill, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMMap(cl_command_queue a0, cl_bool a1, cl_map_flags a2, void *a3,
	size_t a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMap, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMUnmap(cl_command_queue a0, void *a1, cl_uint a2,
	const cl_event *a3, cl_event *a4)
{
	REFUSE(clEnqueueSVMUnmap, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_sampler CL_API_CALL refuse_clCreateSamplerWithProperties(cl_context a0,
	const cl_sampler_properties *a1, cl_int *errcode_ret)
{
	REFUSE(clCreateSamplerWithProperties, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clSetKernelArgSVMPointer(cl_kernel a0, cl_uint a1, const void *a2)
{
	REFUSE(clSetKernelArgSVMPointer, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetKernelExecInfo(cl_kernel a0, cl_kernel_exec_info a1, size_t a2,
	const void *a3)
{
	REFUSE(clSetKernelExecInfo, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetKernelSubGroupInfoKHR(cl_kernel a0, cl_device_id a1,
	cl_kernel_sub_group_info a2, size_t a3, const void *a4, size_t a5, void *a6, size_t *a7)
{
	REFUSE(clGetKernelSubGroupInfoKHR, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_kernel CL_API_CALL refuse_clCloneKernel(cl_kernel a0, cl_int *errcode_ret)
{
	REFUSE(clCloneKernel, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_program CL_API_CALL refuse_clCreateProgramWithIL(cl_context a0, const void *a1, size_t a2,
	cl_int *errcode_ret)
{
	REFUSE(clCreateProgramWithIL, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMMigrateMem(cl_command_queue a0, cl_uint a1, const void **a2,
	const size_t *a3, cl_mem_migration_flags a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMigrateMem, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetDeviceAndHostTimer(cl_device_id a0, cl_ulong *a1, cl_ulong *a2)
{
	REFUSE(clGetDeviceAndHostTimer, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetHostTimer(cl_device_id a0, cl_ulong *a1)
{
	REFUSE(clGetHostTimer, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetKernelSubGroupInfo(cl_kernel a0, cl_device_id a1,
	cl_kernel_sub_group_info a2, size_t a3, const void *a4, size_t a5, void *a6, size_t *a7)
{
	REFUSE(clGetKernelSubGroupInfo, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetDefaultDeviceCommandQueue(cl_context a0, cl_device_id a1,
	cl_command_queue a2)
{
	REFUSE(clSetDefaultDeviceCommandQueue, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetProgramReleaseCallback(cl_program a0,
	void (CL_CALLBACK *a1)(cl_program program, void *user_data), void *a2)
{
	REFUSE(clSetProgramReleaseCallback, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetProgramSpecializationConstant(cl_program a0, cl_uint a1, size_t a2,
	const void *a3)
{
	REFUSE(clSetProgramSpecializationConstant, NOT_12);
	return CL_INVALID_OPERATION;
}

static cl_mem CL_API_CALL refuse_clCreateBufferWithProperties(cl_context a0, const cl_mem_properties *a1,
	cl_mem_flags a2, size_t a3, void *a4, cl_int *errcode_ret)
{
	REFUSE(clCreateBufferWithProperties, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateImageWithProperties(cl_context a0, const cl_mem_properties *a1,
	cl_mem_flags a2, const cl_image_format *a3, const cl_image_desc *a4, void *a5, cl_int *errcode_ret)
{
	REFUSE(clCreateImageWithProperties, NOT_12);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clSetContextDestructorCallback(cl_context a0,
	void (CL_CALLBACK *a1)(cl_context context, void *user_data), void *a2)
{
	REFUSE(clSetContextDestructorCallback, NOT_12);
	return CL_INVALID_OPERATION;
}

struct _cl_icd_dispatch vgpu_dispatch = {	/* OpenCL 1.0 */
	.clGetPlatformIDs = vgpu_clGetPlatformIDs,
	.clGetPlatformInfo = vgpu_clGetPlatformInfo,
	.clGetDeviceIDs = vgpu_clGetDeviceIDs,
	.clGetDeviceInfo = vgpu_clGetDeviceInfo,
	.clCreateContext = refuse_clCreateContext,
	.clCreateContextFromType = refuse_clCreateContextFromType,
	.clRetainContext = refuse_clRetainContext,
	.clReleaseContext = refuse_clReleaseContext,
	.clGetContextInfo = refuse_clGetContextInfo,
	.clCreateCommandQueue = refuse_clCreateCommandQueue,
	.clRetainCommandQueue = refuse_clRetainCommandQueue,
	.clReleaseCommandQueue = refuse_clReleaseCommandQueue,
	.clGetCommandQueueInfo = refuse_clGetCommandQueueInfo,
	.clSetCommandQueueProperty = refuse_clSetCommandQueueProperty,
	.clCreateBuffer = refuse_clCreateBuffer,
	.clCreateImage2D = refuse_clCreateImage2D,
	.clCreateImage3D = refuse_clCreateImage3D,
	.clRetainMemObject = refuse_clRetainMemObject,
	.clReleaseMemObject = refuse_clReleaseMemObject,
	.clGetSupportedImageFormats = refuse_clGetSupportedImageFormats,
	.clGetMemObjectInfo = refuse_clGetMemObjectInfo,
	.clGetImageInfo = refuse_clGetImageInfo,
	.clCreateSampler = refuse_clCreateSampler,
	.clRetainSampler = refuse_clRetainSampler,
	.clReleaseSampler = refuse_clReleaseSampler,
	.clGetSamplerInfo = refuse_clGetSamplerInfo,
	.clCreateProgramWithSource = refuse_clCreateProgramWithSource,
	.clCreateProgramWithBinary = refuse_clCreateProgramWithBinary,
	.clRetainProgram = refuse_clRetainProgram,
	.clReleaseProgram = refuse_clReleaseProgram,
	.clBuildProgram = refuse_clBuildProgram,
	.clUnloadCompiler = vgpu_clUnloadCompiler,
	.clGetProgramInfo = refuse_clGetProgramInfo,
	.clGetProgramBuildInfo = refuse_clGetProgramBuildInfo,
	.clCreateKernel = refuse_clCreateKernel,
	.clCreateKernelsInProgram = refuse_clCreateKernelsInProgram,
	.clRetainKernel = refuse_clRetainKernel,
	.clReleaseKernel = refuse_clReleaseKernel,
	.clSetKernelArg = refuse_clSetKernelArg,
	.clGetKernelInfo = refuse_clGetKernelInfo,
	.clGetKernelWorkGroupInfo = refuse_clGetKernelWorkGroupInfo,
	.clWaitForEvents = refuse_clWaitForEvents,
	.clGetEventInfo = refuse_clGetEventInfo,
	.clRetainEvent = refuse_clRetainEvent,
	.clReleaseEvent = refuse_clReleaseEvent,
	.clGetEventProfilingInfo = refuse_clGetEventProfilingInfo,
	.clFlush = refuse_clFlush,
	.clFinish = refuse_clFinish,
	.clEnqueueReadBuffer = refuse_clEnqueueReadBuffer,
	.clEnqueueWriteBuffer = refuse_clEnqueueWriteBuffer,
	.clEnqueueCopyBuffer = refuse_clEnqueueCopyBuffer,
	.clEnqueueReadImage = refuse_clEnqueueReadImage,
	.clEnqueueWriteImage = refuse_clEnqueueWriteImage,
	.clEnqueueCopyImage = refuse_clEnqueueCopyImage,
	.clEnqueueCopyImageToBuffer = refuse_clEnqueueCopyImageToBuffer,
	.clEnqueueCopyBufferToImage = refuse_clEnqueueCopyBufferToImage,
	.clEnqueueMapBuffer = refuse_clEnqueueMapBuffer,
	.clEnqueueMapImage = refuse_clEnqueueMapImage,
	.clEnqueueUnmapMemObject = refuse_clEnqueueUnmapMemObject,
	.clEnqueueNDRangeKernel = refuse_clEnqueueNDRangeKernel,
	.clEnqueueTask = refuse_clEnqueueTask,
	.clEnqueueNativeKernel = refuse_clEnqueueNativeKernel,
	.clEnqueueMarker = refuse_clEnqueueMarker,
	.clEnqueueWaitForEvents = refuse_clEnqueueWaitForEvents,
	.clEnqueueBarrier = refuse_clEnqueueBarrier,
	.clGetExtensionFunctionAddress = clGetExtensionFunctionAddress,
	.clCreateFromGLBuffer = refuse_clCreateFromGLBuffer,
	.clCreateFromGLTexture2D = refuse_clCreateFromGLTexture2D,
	.clCreateFromGLTexture3D = refuse_clCreateFromGLTexture3D,
	.clCreateFromGLRenderbuffer = refuse_clCreateFromGLRenderbuffer,
	.clGetGLObjectInfo = refuse_clGetGLObjectInfo,
	.clGetGLTextureInfo = refuse_clGetGLTextureInfo,
	.clEnqueueAcquireGLObjects = refuse_clEnqueueAcquireGLObjects,
	.clEnqueueReleaseGLObjects = refuse_clEnqueueReleaseGLObjects,
	.clGetGLContextInfoKHR = refuse_clGetGLContextInfoKHR,

	/* cl_khr_d3d10_sharing */
	/* .clGetDeviceIDsFromD3D10KHR: declared only on Windows; NULL */
	/* .clCreateFromD3D10BufferKHR: declared only on Windows; NULL */
	/* .clCreateFromD3D10Texture2DKHR: declared only on Windows; NULL */
	/* .clCreateFromD3D10Texture3DKHR: declared only on Windows; NULL */
	/* .clEnqueueAcquireD3D10ObjectsKHR: declared only on Windows; NULL */
	/* .clEnqueueReleaseD3D10ObjectsKHR: declared only on Windows; NULL */

	/* OpenCL 1.1 */
	.clSetEventCallback = refuse_clSetEventCallback,
	.clCreateSubBuffer = refuse_clCreateSubBuffer,
	.clSetMemObjectDestructorCallback = refuse_clSetMemObjectDestructorCallback,
	.clCreateUserEvent = refuse_clCreateUserEvent,
	.clSetUserEventStatus = refuse_clSetUserEventStatus,
	.clEnqueueReadBufferRect = refuse_clEnqueueReadBufferRect,
	.clEnqueueWriteBufferRect = refuse_clEnqueueWriteBufferRect,
	.clEnqueueCopyBufferRect = refuse_clEnqueueCopyBufferRect,

	/* cl_ext_device_fission */
	.clCreateSubDevicesEXT = refuse_clCreateSubDevicesEXT,
	.clRetainDeviceEXT = refuse_clRetainDeviceEXT,
	.clReleaseDeviceEXT = refuse_clReleaseDeviceEXT,

	/* cl_khr_gl_event */
	.clCreateEventFromGLsyncKHR = refuse_clCreateEventFromGLsyncKHR,

	/* OpenCL 1.2 */
	.clCreateSubDevices = vgpu_clCreateSubDevices,
	.clRetainDevice = vgpu_clRetainDevice,
	.clReleaseDevice = vgpu_clReleaseDevice,
	.clCreateImage = refuse_clCreateImage,
	.clCreateProgramWithBuiltInKernels = refuse_clCreateProgramWithBuiltInKernels,
	.clCompileProgram = refuse_clCompileProgram,
	.clLinkProgram = refuse_clLinkProgram,
	.clUnloadPlatformCompiler = vgpu_clUnloadPlatformCompiler,
	.clGetKernelArgInfo = refuse_clGetKernelArgInfo,
	.clEnqueueFillBuffer = refuse_clEnqueueFillBuffer,
	.clEnqueueFillImage = refuse_clEnqueueFillImage,
	.clEnqueueMigrateMemObjects = refuse_clEnqueueMigrateMemObjects,
	.clEnqueueMarkerWithWaitList = refuse_clEnqueueMarkerWithWaitList,
	.clEnqueueBarrierWithWaitList = refuse_clEnqueueBarrierWithWaitList,
	.clGetExtensionFunctionAddressForPlatform = vgpu_clGetExtensionFunctionAddressForPlatform,
	.clCreateFromGLTexture = refuse_clCreateFromGLTexture,

	/* cl_khr_d3d11_sharing */
	/* .clGetDeviceIDsFromD3D11KHR: declared only on Windows; NULL */
	/* .clCreateFromD3D11BufferKHR: declared only on Windows; NULL */
	/* .clCreateFromD3D11Texture2DKHR: declared only on Windows; NULL */
	/* .clCreateFromD3D11Texture3DKHR: declared only on Windows; NULL */
	/* .clCreateFromDX9MediaSurfaceKHR: declared only on Windows; NULL */
	/* .clEnqueueAcquireD3D11ObjectsKHR: declared only on Windows; NULL */
	/* .clEnqueueReleaseD3D11ObjectsKHR: declared only on Windows; NULL */

	/* cl_khr_dx9_media_sharing */
	/* .clGetDeviceIDsFromDX9MediaAdapterKHR: declared only on Windows; NULL */
	/* .clEnqueueAcquireDX9MediaSurfacesKHR: declared only on Windows; NULL */
	/* .clEnqueueReleaseDX9MediaSurfacesKHR: declared only on Windows; NULL */

	/* cl_khr_egl_image */
	.clCreateFromEGLImageKHR = refuse_clCreateFromEGLImageKHR,
	.clEnqueueAcquireEGLObjectsKHR = refuse_clEnqueueAcquireEGLObjectsKHR,
	.clEnqueueReleaseEGLObjectsKHR = refuse_clEnqueueReleaseEGLObjectsKHR,

	/* cl_khr_egl_event */
	.clCreateEventFromEGLSyncKHR = refuse_clCreateEventFromEGLSyncKHR,

	/* OpenCL 2.0 */
	.clCreateCommandQueueWithProperties = refuse_clCreateCommandQueueWithProperties,
	.clCreatePipe = refuse_clCreatePipe,
	.clGetPipeInfo = refuse_clGetPipeInfo,
	.clSVMAlloc = refuse_clSVMAlloc,
	.clSVMFree = refuse_clSVMFree,
	.clEnqueueSVMFree = refuse_clEnqueueSVMFree,
	.clEnqueueSVMMemcpy = refuse_clEnqueueSVMMemcpy,
	.clEnqueueSVMMemFill = refuse_clEnqueueSVMMemFill,
	.clEnqueueSVMMap = refuse_clEnqueueSVMMap,
	.clEnqueueSVMUnmap = refuse_clEnqueueSVMUnmap,
	.clCreateSamplerWithProperties = refuse_clCreateSamplerWithProperties,
	.clSetKernelArgSVMPointer = refuse_clSetKernelArgSVMPointer,
	.clSetKernelExecInfo = refuse_clSetKernelExecInfo,

	/* cl_khr_sub_groups */
	.clGetKernelSubGroupInfoKHR = refuse_clGetKernelSubGroupInfoKHR,

	/* OpenCL 2.1 */
	.clCloneKernel = refuse_clCloneKernel,
	.clCreateProgramWithIL = refuse_clCreateProgramWithIL,
	.clEnqueueSVMMigrateMem = refuse_clEnqueueSVMMigrateMem,
	.clGetDeviceAndHostTimer = refuse_clGetDeviceAndHostTimer,
	.clGetHostTimer = refuse_clGetHostTimer,
	.clGetKernelSubGroupInfo = refuse_clGetKernelSubGroupInfo,
	.clSetDefaultDeviceCommandQueue = refuse_clSetDefaultDeviceCommandQueue,

	/* OpenCL 2.2 */
	.clSetProgramReleaseCallback = refuse_clSetProgramReleaseCallback,
	.clSetProgramSpecializationConstant = refuse_clSetProgramSpecializationConstant,

	/* OpenCL 3.0 */
	.clCreateBufferWithProperties = refuse_clCreateBufferWithProperties,
	.clCreateImageWithProperties = refuse_clCreateImageWithProperties,
	.clSetContextDestructorCallback = refuse_clSetContextDestructorCallback,
};

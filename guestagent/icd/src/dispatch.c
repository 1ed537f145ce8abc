/* dispatch.c: the dispatch table every object of this ICD points at, and
 * the functions behind the entries this ICD does not offer.
 *
 * Every entry of OpenCL 3.0 that a vGPU offers is implemented in the file
 * of its object (context.c, mem.c, program.c, kernel.c, event.c;
 * platform.c and device.c), declared in icd.h with the table's own types.
 * An entry of an optional OpenCL 3.0 feature the device reports absent
 * (shared virtual memory, pipes, device-side queues, intermediate
 * languages where the device takes none, sub-groups, host timers,
 * program-scope global variables, images) or of an extension it does not report (GL and EGL sharing,
 * cl_ext_device_fission, cl_khr_subgroups) is never left NULL (the loader
 * would call through it) and never pretends to work: it returns
 * CL_INVALID_OPERATION (or NULL with *errcode_ret = CL_INVALID_OPERATION),
 * which is OpenCL 3.0's answer for a feature no device of the context
 * supports, and says so once per process on stderr. The compiler checks
 * every function's type against cl_icd.h (an incompatible pointer is an
 * error under -Werror), and the API test checks that only the
 * Windows-only entries are NULL. docs/icd.md lists the refusals. */
#include "icd.h"

#include <stdatomic.h>

/* The parameters of a refusal are not looked at. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define ABSENT "belongs to an optional feature or extension this device does not report"

#define REFUSE(name, why)                                                                                    \
	do {                                                                                                 \
		static atomic_flag logged = ATOMIC_FLAG_INIT;                                                \
		if (!atomic_flag_test_and_set(&logged))                                                      \
			vgpu_log("%s " why, #name);                                                          \
	} while (0)

static cl_mem CL_API_CALL refuse_clCreateFromGLBuffer(cl_context a0, cl_mem_flags a1, cl_GLuint a2,
	int *errcode_ret)
{
	REFUSE(clCreateFromGLBuffer, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLTexture2D(cl_context a0, cl_mem_flags a1, cl_GLenum a2,
	cl_GLint a3, cl_GLuint a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLTexture2D, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLTexture3D(cl_context a0, cl_mem_flags a1, cl_GLenum a2,
	cl_GLint a3, cl_GLuint a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLTexture3D, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLRenderbuffer(cl_context a0, cl_mem_flags a1, cl_GLuint a2,
	cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLRenderbuffer, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clGetGLObjectInfo(cl_mem a0, cl_gl_object_type *a1, cl_GLuint *a2)
{
	REFUSE(clGetGLObjectInfo, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetGLTextureInfo(cl_mem a0, cl_gl_texture_info a1, size_t a2, void *a3,
	size_t *a4)
{
	REFUSE(clGetGLTextureInfo, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueAcquireGLObjects(cl_command_queue a0, cl_uint a1, const cl_mem *a2,
	cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueAcquireGLObjects, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueReleaseGLObjects(cl_command_queue a0, cl_uint a1, const cl_mem *a2,
	cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueReleaseGLObjects, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetGLContextInfoKHR(const cl_context_properties *a0, cl_gl_context_info a1,
	size_t a2, void *a3, size_t *a4)
{
	REFUSE(clGetGLContextInfoKHR, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clCreateSubDevicesEXT(cl_device_id a0,
	const cl_device_partition_property_ext *a1, cl_uint a2, cl_device_id *a3, cl_uint *a4)
{
	REFUSE(clCreateSubDevicesEXT, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clRetainDeviceEXT(cl_device_id a0)
{
	REFUSE(clRetainDeviceEXT, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clReleaseDeviceEXT(cl_device_id a0)
{
	REFUSE(clReleaseDeviceEXT, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_event CL_API_CALL refuse_clCreateEventFromGLsyncKHR(cl_context a0, cl_GLsync a1,
	cl_int *errcode_ret)
{
	REFUSE(clCreateEventFromGLsyncKHR, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromGLTexture(cl_context a0, cl_mem_flags a1, cl_GLenum a2,
	cl_GLint a3, cl_GLuint a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromGLTexture, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreateFromEGLImageKHR(cl_context a0, CLeglDisplayKHR a1, CLeglImageKHR a2,
	cl_mem_flags a3, const cl_egl_image_properties_khr *a4, cl_int *errcode_ret)
{
	REFUSE(clCreateFromEGLImageKHR, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clEnqueueAcquireEGLObjectsKHR(cl_command_queue a0, cl_uint a1,
	const cl_mem *a2, cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueAcquireEGLObjectsKHR, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueReleaseEGLObjectsKHR(cl_command_queue a0, cl_uint a1,
	const cl_mem *a2, cl_uint a3, const cl_event *a4, cl_event *a5)
{
	REFUSE(clEnqueueReleaseEGLObjectsKHR, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_event CL_API_CALL refuse_clCreateEventFromEGLSyncKHR(cl_context a0, CLeglSyncKHR a1,
	CLeglDisplayKHR a2, cl_int *errcode_ret)
{
	REFUSE(clCreateEventFromEGLSyncKHR, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_mem CL_API_CALL refuse_clCreatePipe(cl_context a0, cl_mem_flags a1, cl_uint a2, cl_uint a3,
	const cl_pipe_properties *a4, cl_int *errcode_ret)
{
	REFUSE(clCreatePipe, ABSENT);
	if (errcode_ret != NULL)
		*errcode_ret = CL_INVALID_OPERATION;
	return NULL;
}

static cl_int CL_API_CALL refuse_clGetPipeInfo(cl_mem a0, cl_pipe_info a1, size_t a2, void *a3, size_t *a4)
{
	REFUSE(clGetPipeInfo, ABSENT);
	/* No pipe can exist: what OpenCL 3.0 answers where pipes are not
	 * supported (Khronos' consistency_pipes). */
	return CL_INVALID_MEM_OBJECT;
}

static void *CL_API_CALL refuse_clSVMAlloc(cl_context a0, cl_svm_mem_flags a1, size_t a2, unsigned int a3)
{
	REFUSE(clSVMAlloc, ABSENT);
	return NULL;
}

static void CL_API_CALL refuse_clSVMFree(cl_context a0, void *a1)
{
	REFUSE(clSVMFree, ABSENT);
}

static cl_int CL_API_CALL refuse_clEnqueueSVMFree(cl_command_queue a0, cl_uint a1, void **a2,
	void (CL_CALLBACK *a3)(cl_command_queue, cl_uint, void **, void *), void *a4, cl_uint a5,
	const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMFree, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMMemcpy(cl_command_queue a0, cl_bool a1, void *a2, const void *a3,
	size_t a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMemcpy, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMMemFill(cl_command_queue a0, void *a1, const void *a2, size_t a3,
	size_t a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMemFill, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMMap(cl_command_queue a0, cl_bool a1, cl_map_flags a2, void *a3,
	size_t a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMap, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clEnqueueSVMUnmap(cl_command_queue a0, void *a1, cl_uint a2,
	const cl_event *a3, cl_event *a4)
{
	REFUSE(clEnqueueSVMUnmap, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetKernelArgSVMPointer(cl_kernel a0, cl_uint a1, const void *a2)
{
	REFUSE(clSetKernelArgSVMPointer, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetKernelExecInfo(cl_kernel a0, cl_kernel_exec_info a1, size_t a2,
	const void *a3)
{
	REFUSE(clSetKernelExecInfo, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetKernelSubGroupInfoKHR(cl_kernel a0, cl_device_id a1,
	cl_kernel_sub_group_info a2, size_t a3, const void *a4, size_t a5, void *a6, size_t *a7)
{
	REFUSE(clGetKernelSubGroupInfoKHR, ABSENT);
	return CL_INVALID_OPERATION;
}


static cl_int CL_API_CALL refuse_clEnqueueSVMMigrateMem(cl_command_queue a0, cl_uint a1, const void **a2,
	const size_t *a3, cl_mem_migration_flags a4, cl_uint a5, const cl_event *a6, cl_event *a7)
{
	REFUSE(clEnqueueSVMMigrateMem, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetDeviceAndHostTimer(cl_device_id a0, cl_ulong *a1, cl_ulong *a2)
{
	REFUSE(clGetDeviceAndHostTimer, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetHostTimer(cl_device_id a0, cl_ulong *a1)
{
	REFUSE(clGetHostTimer, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clGetKernelSubGroupInfo(cl_kernel a0, cl_device_id a1,
	cl_kernel_sub_group_info a2, size_t a3, const void *a4, size_t a5, void *a6, size_t *a7)
{
	REFUSE(clGetKernelSubGroupInfo, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetDefaultDeviceCommandQueue(cl_context a0, cl_device_id a1,
	cl_command_queue a2)
{
	REFUSE(clSetDefaultDeviceCommandQueue, ABSENT);
	return CL_INVALID_OPERATION;
}

static cl_int CL_API_CALL refuse_clSetProgramReleaseCallback(cl_program a0,
	void (CL_CALLBACK *a1)(cl_program program, void *user_data), void *a2)
{
	REFUSE(clSetProgramReleaseCallback, ABSENT);
	return CL_INVALID_OPERATION;
}


struct _cl_icd_dispatch vgpu_dispatch = {	/* OpenCL 1.0 */
	.clGetPlatformIDs = vgpu_clGetPlatformIDs,
	.clGetPlatformInfo = vgpu_clGetPlatformInfo,
	.clGetDeviceIDs = vgpu_clGetDeviceIDs,
	.clGetDeviceInfo = vgpu_clGetDeviceInfo,
	.clCreateContext = vgpu_clCreateContext,
	.clCreateContextFromType = vgpu_clCreateContextFromType,
	.clRetainContext = vgpu_clRetainContext,
	.clReleaseContext = vgpu_clReleaseContext,
	.clGetContextInfo = vgpu_clGetContextInfo,
	.clCreateCommandQueue = vgpu_clCreateCommandQueue,
	.clRetainCommandQueue = vgpu_clRetainCommandQueue,
	.clReleaseCommandQueue = vgpu_clReleaseCommandQueue,
	.clGetCommandQueueInfo = vgpu_clGetCommandQueueInfo,
	.clSetCommandQueueProperty = vgpu_clSetCommandQueueProperty,
	.clCreateBuffer = vgpu_clCreateBuffer,
	.clCreateImage2D = vgpu_clCreateImage2D,
	.clCreateImage3D = vgpu_clCreateImage3D,
	.clRetainMemObject = vgpu_clRetainMemObject,
	.clReleaseMemObject = vgpu_clReleaseMemObject,
	.clGetSupportedImageFormats = vgpu_clGetSupportedImageFormats,
	.clGetMemObjectInfo = vgpu_clGetMemObjectInfo,
	.clGetImageInfo = vgpu_clGetImageInfo,
	.clCreateSampler = vgpu_clCreateSampler,
	.clRetainSampler = vgpu_clRetainSampler,
	.clReleaseSampler = vgpu_clReleaseSampler,
	.clGetSamplerInfo = vgpu_clGetSamplerInfo,
	.clCreateProgramWithSource = vgpu_clCreateProgramWithSource,
	.clCreateProgramWithBinary = vgpu_clCreateProgramWithBinary,
	.clRetainProgram = vgpu_clRetainProgram,
	.clReleaseProgram = vgpu_clReleaseProgram,
	.clBuildProgram = vgpu_clBuildProgram,
	.clUnloadCompiler = vgpu_clUnloadCompiler,
	.clGetProgramInfo = vgpu_clGetProgramInfo,
	.clGetProgramBuildInfo = vgpu_clGetProgramBuildInfo,
	.clCreateKernel = vgpu_clCreateKernel,
	.clCreateKernelsInProgram = vgpu_clCreateKernelsInProgram,
	.clRetainKernel = vgpu_clRetainKernel,
	.clReleaseKernel = vgpu_clReleaseKernel,
	.clSetKernelArg = vgpu_clSetKernelArg,
	.clGetKernelInfo = vgpu_clGetKernelInfo,
	.clGetKernelWorkGroupInfo = vgpu_clGetKernelWorkGroupInfo,
	.clWaitForEvents = vgpu_clWaitForEvents,
	.clGetEventInfo = vgpu_clGetEventInfo,
	.clRetainEvent = vgpu_clRetainEvent,
	.clReleaseEvent = vgpu_clReleaseEvent,
	.clGetEventProfilingInfo = vgpu_clGetEventProfilingInfo,
	.clFlush = vgpu_clFlush,
	.clFinish = vgpu_clFinish,
	.clEnqueueReadBuffer = vgpu_clEnqueueReadBuffer,
	.clEnqueueWriteBuffer = vgpu_clEnqueueWriteBuffer,
	.clEnqueueCopyBuffer = vgpu_clEnqueueCopyBuffer,
	.clEnqueueReadImage = vgpu_clEnqueueReadImage,
	.clEnqueueWriteImage = vgpu_clEnqueueWriteImage,
	.clEnqueueCopyImage = vgpu_clEnqueueCopyImage,
	.clEnqueueCopyImageToBuffer = vgpu_clEnqueueCopyImageToBuffer,
	.clEnqueueCopyBufferToImage = vgpu_clEnqueueCopyBufferToImage,
	.clEnqueueMapBuffer = vgpu_clEnqueueMapBuffer,
	.clEnqueueMapImage = vgpu_clEnqueueMapImage,
	.clEnqueueUnmapMemObject = vgpu_clEnqueueUnmapMemObject,
	.clEnqueueNDRangeKernel = vgpu_clEnqueueNDRangeKernel,
	.clEnqueueTask = vgpu_clEnqueueTask,
	.clEnqueueNativeKernel = vgpu_clEnqueueNativeKernel,
	.clEnqueueMarker = vgpu_clEnqueueMarker,
	.clEnqueueWaitForEvents = vgpu_clEnqueueWaitForEvents,
	.clEnqueueBarrier = vgpu_clEnqueueBarrier,
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
	.clSetEventCallback = vgpu_clSetEventCallback,
	.clCreateSubBuffer = vgpu_clCreateSubBuffer,
	.clSetMemObjectDestructorCallback = vgpu_clSetMemObjectDestructorCallback,
	.clCreateUserEvent = vgpu_clCreateUserEvent,
	.clSetUserEventStatus = vgpu_clSetUserEventStatus,
	.clEnqueueReadBufferRect = vgpu_clEnqueueReadBufferRect,
	.clEnqueueWriteBufferRect = vgpu_clEnqueueWriteBufferRect,
	.clEnqueueCopyBufferRect = vgpu_clEnqueueCopyBufferRect,

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
	.clCreateImage = vgpu_clCreateImage,
	.clCreateProgramWithBuiltInKernels = vgpu_clCreateProgramWithBuiltInKernels,
	.clCompileProgram = vgpu_clCompileProgram,
	.clLinkProgram = vgpu_clLinkProgram,
	.clUnloadPlatformCompiler = vgpu_clUnloadPlatformCompiler,
	.clGetKernelArgInfo = vgpu_clGetKernelArgInfo,
	.clEnqueueFillBuffer = vgpu_clEnqueueFillBuffer,
	.clEnqueueFillImage = vgpu_clEnqueueFillImage,
	.clEnqueueMigrateMemObjects = vgpu_clEnqueueMigrateMemObjects,
	.clEnqueueMarkerWithWaitList = vgpu_clEnqueueMarkerWithWaitList,
	.clEnqueueBarrierWithWaitList = vgpu_clEnqueueBarrierWithWaitList,
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
	.clCreateCommandQueueWithProperties = vgpu_clCreateCommandQueueWithProperties,
	.clCreatePipe = refuse_clCreatePipe,
	.clGetPipeInfo = refuse_clGetPipeInfo,
	.clSVMAlloc = refuse_clSVMAlloc,
	.clSVMFree = refuse_clSVMFree,
	.clEnqueueSVMFree = refuse_clEnqueueSVMFree,
	.clEnqueueSVMMemcpy = refuse_clEnqueueSVMMemcpy,
	.clEnqueueSVMMemFill = refuse_clEnqueueSVMMemFill,
	.clEnqueueSVMMap = refuse_clEnqueueSVMMap,
	.clEnqueueSVMUnmap = refuse_clEnqueueSVMUnmap,
	.clCreateSamplerWithProperties = vgpu_clCreateSamplerWithProperties,
	.clSetKernelArgSVMPointer = refuse_clSetKernelArgSVMPointer,
	.clSetKernelExecInfo = refuse_clSetKernelExecInfo,

	/* cl_khr_sub_groups */
	.clGetKernelSubGroupInfoKHR = refuse_clGetKernelSubGroupInfoKHR,

	/* OpenCL 2.1 */
	.clCloneKernel = vgpu_clCloneKernel,
	.clCreateProgramWithIL = vgpu_clCreateProgramWithIL,
	.clEnqueueSVMMigrateMem = refuse_clEnqueueSVMMigrateMem,
	.clGetDeviceAndHostTimer = refuse_clGetDeviceAndHostTimer,
	.clGetHostTimer = refuse_clGetHostTimer,
	.clGetKernelSubGroupInfo = refuse_clGetKernelSubGroupInfo,
	.clSetDefaultDeviceCommandQueue = refuse_clSetDefaultDeviceCommandQueue,

	/* OpenCL 2.2 */
	.clSetProgramReleaseCallback = refuse_clSetProgramReleaseCallback,
	.clSetProgramSpecializationConstant = vgpu_clSetProgramSpecializationConstant,

	/* OpenCL 3.0 */
	.clCreateBufferWithProperties = vgpu_clCreateBufferWithProperties,
	.clCreateImageWithProperties = vgpu_clCreateImageWithProperties,
	.clSetContextDestructorCallback = vgpu_clSetContextDestructorCallback,
};

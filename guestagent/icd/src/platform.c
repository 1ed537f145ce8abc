/* platform.c: the ICD's entry points and the platform queries.
 *
 * The ICD loader (ocl-icd, or Khronos' loader) dlopens the library named
 * in /etc/OpenCL/vendors/vgpud.icd, looks up clGetExtensionFunctionAddress,
 * asks it for clIcdGetPlatformIDsKHR, lists the platforms with that, and
 * asks each for CL_PLATFORM_EXTENSIONS and CL_PLATFORM_ICD_SUFFIX_KHR
 * (ocl-icd through the exported clGetPlatformInfo, Khronos' loader through
 * the dispatch table). The library exports these three symbols only.
 * From then on it calls through the dispatch table of the object an
 * application passes (every object starts with the dispatch pointer). */
#include "icd.h"

#include <string.h>

#define PLATFORM_PROFILE "FULL_PROFILE"
#define PLATFORM_VERSION "OpenCL 3.0 vgpud"
#define PLATFORM_NAME "vgpud"
#define PLATFORM_VENDOR "vgpud"
#define PLATFORM_EXTENSIONS "cl_khr_icd"
#define PLATFORM_ICD_SUFFIX "vgpud"

struct _cl_platform_id vgpu_platform = {.dispatch = &vgpu_dispatch};

/* A NULL platform means this one: the specification leaves NULL to the
 * implementation, and this ICD has only one. */
int vgpu_platform_valid(cl_platform_id p)
{
	return p == NULL || p == &vgpu_platform;
}

/* clIcdGetPlatformIDsKHR lists the platform when at least one vGPU passed
 * discovery; a guest without one sees no vgpud platform at all. */
VGPU_EXPORT cl_int CL_API_CALL clIcdGetPlatformIDsKHR(cl_uint num_entries, cl_platform_id *platforms,
						      cl_uint *num_platforms)
{
	if ((num_entries == 0 && platforms != NULL) || (platforms == NULL && num_platforms == NULL))
		return CL_INVALID_VALUE;
	struct _cl_device_id *list;
	cl_uint n = vgpu_devices(&list) > 0 ? 1 : 0;
	if (num_platforms != NULL)
		*num_platforms = n;
	if (n == 0)
		return CL_PLATFORM_NOT_FOUND_KHR;
	if (platforms != NULL)
		platforms[0] = &vgpu_platform;
	return CL_SUCCESS;
}

cl_int CL_API_CALL vgpu_clGetPlatformIDs(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms)
{
	return clIcdGetPlatformIDsKHR(num_entries, platforms, num_platforms);
}

cl_int CL_API_CALL vgpu_clGetPlatformInfo(cl_platform_id platform, cl_platform_info param_name,
					  size_t param_value_size, void *param_value, size_t *param_value_size_ret)
{
	if (!vgpu_platform_valid(platform))
		return CL_INVALID_PLATFORM;
	const char *s;
	union {
		cl_version ver;
		cl_ulong ul;
		cl_name_version nv;
	} v;
	switch (param_name) {
	case CL_PLATFORM_NUMERIC_VERSION:
		v.ver = CL_MAKE_VERSION(3, 0, 0);
		return vgpu_info(&v.ver, sizeof v.ver, param_value_size, param_value, param_value_size_ret);
	case CL_PLATFORM_EXTENSIONS_WITH_VERSION:
		memset(&v.nv, 0, sizeof v.nv);
		v.nv.version = CL_MAKE_VERSION(1, 0, 0);
		memcpy(v.nv.name, PLATFORM_EXTENSIONS, sizeof PLATFORM_EXTENSIONS);
		return vgpu_info(&v.nv, sizeof v.nv, param_value_size, param_value, param_value_size_ret);
	case CL_PLATFORM_HOST_TIMER_RESOLUTION:
		/* 0: no device and host timer synchronization
		 * (clGetDeviceAndHostTimer and clGetHostTimer refuse). */
		v.ul = 0;
		return vgpu_info(&v.ul, sizeof v.ul, param_value_size, param_value, param_value_size_ret);
	case CL_PLATFORM_PROFILE:
		s = PLATFORM_PROFILE;
		break;
	case CL_PLATFORM_VERSION:
		s = PLATFORM_VERSION;
		break;
	case CL_PLATFORM_NAME:
		s = PLATFORM_NAME;
		break;
	case CL_PLATFORM_VENDOR:
		s = PLATFORM_VENDOR;
		break;
	case CL_PLATFORM_EXTENSIONS:
		s = PLATFORM_EXTENSIONS;
		break;
	case CL_PLATFORM_ICD_SUFFIX_KHR:
		s = PLATFORM_ICD_SUFFIX;
		break;
	default:
		return CL_INVALID_VALUE;
	}
	return vgpu_info_str(s, param_value_size, param_value, param_value_size_ret);
}

/* Exported because ocl-icd looks clGetPlatformInfo up in the library (by
 * clGetExtensionFunctionAddress or dlsym) before it lists an ICD's
 * platforms, as cl_khr_icd says loaders may ("the ICD loader queries
 * clIcdGetPlatformIDsKHR, clGetPlatformInfo and
 * clGetExtensionFunctionAddress"). The loader opens the library with
 * RTLD_LOCAL, so this symbol never stands in for the loader's own. */
VGPU_EXPORT cl_int CL_API_CALL clGetPlatformInfo(cl_platform_id platform, cl_platform_info param_name,
						 size_t param_value_size, void *param_value,
						 size_t *param_value_size_ret)
{
	return vgpu_clGetPlatformInfo(platform, param_name, param_value_size, param_value, param_value_size_ret);
}

/* The extension functions: the ICD entry point itself, and
 * cl_khr_il_program's clCreateProgramWithILKHR (clCreateProgramWithIL of
 * OpenCL 2.1, for applications that ask by the extension's name). */
static void *extension_function(const char *name)
{
	if (name != NULL && strcmp(name, "clIcdGetPlatformIDsKHR") == 0)
		return (void *)clIcdGetPlatformIDsKHR;
	if (name != NULL && strcmp(name, "clCreateProgramWithILKHR") == 0)
		return (void *)vgpu_clCreateProgramWithIL;
	return NULL;
}

VGPU_EXPORT void *CL_API_CALL clGetExtensionFunctionAddress(const char *func_name)
{
	return extension_function(func_name);
}

void *CL_API_CALL vgpu_clGetExtensionFunctionAddressForPlatform(cl_platform_id platform, const char *func_name)
{
	if (platform != &vgpu_platform)
		return NULL;
	return extension_function(func_name);
}

/* Unloading the compiler is a hint; the compiler runs on the host, so
 * there is nothing in the guest to unload. */
cl_int CL_API_CALL vgpu_clUnloadCompiler(void)
{
	return CL_SUCCESS;
}

cl_int CL_API_CALL vgpu_clUnloadPlatformCompiler(cl_platform_id platform)
{
	return platform == &vgpu_platform ? CL_SUCCESS : CL_INVALID_PLATFORM;
}

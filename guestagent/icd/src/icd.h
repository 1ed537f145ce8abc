/* icd.h: what the files of the vgpud OpenCL ICD share. Nothing here is
 * exported from libvgpud-icd.so: the library is built with
 * -fvisibility=hidden and exports only the symbols ICD loaders look up,
 * clIcdGetPlatformIDsKHR, clGetExtensionFunctionAddress and
 * clGetPlatformInfo (platform.c). See docs/icd.md. */
#ifndef VGPUD_ICD_H
#define VGPUD_ICD_H

/* The dispatch table of cl_icd.h lists every entry up to OpenCL 3.0, and
 * the loader calls any of them, so the ICD is compiled against the 3.0
 * declarations to fill every entry with a function of the right type. The
 * device it reports is OpenCL 1.2. The deprecated 1.x entries are part of
 * 1.2 and implemented (or refused) like the others. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_0_APIS
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl_icd.h>

#include <stddef.h>
#include <stdint.h>

#include "vgpu_abi.h"

#define VGPU_EXPORT __attribute__((visibility("default")))
#define VGPU_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* The platform: one per process, listed only when at least one device
 * passed discovery. Every ICD object starts with the dispatch pointer. */
struct _cl_platform_id {
	struct _cl_icd_dispatch *dispatch;
};

/* A vGPU PCI function, with the registers read once at discovery (every
 * trapped register read costs the guest a round trip to vgpud). */
struct _cl_device_id {
	struct _cl_icd_dispatch *dispatch;
	char sysfs[512];  /* the device's sysfs directory */
	char bdf[64];     /* its PCI address, the directory's name */
	uint32_t version; /* RegVersion */
	uint32_t features;
	uint64_t mem_size;  /* RegMemSize */
	uint64_t max_alloc; /* RegMaxAlloc */
	uint32_t compute_units;
	uint32_t max_work_group;
	uint32_t max_ring_slots;
	char profile[VGPU_PROFILE_NAME_LEN + 1];
	char name[VGPU_DEVICE_NAME_LEN + 1];
};

/* Most vGPU functions one guest can see; more are ignored with a message. */
#define VGPU_MAX_DEVICES 64

/* dispatch.c */
extern struct _cl_icd_dispatch vgpu_dispatch;

/* platform.c */
extern struct _cl_platform_id vgpu_platform;
int vgpu_platform_valid(cl_platform_id p);

/* discover.c: the devices found, in bus-address order; the list is built
 * once per process, on first use, and never changes afterwards. */
cl_uint vgpu_devices(struct _cl_device_id **list);
int vgpu_device_valid(cl_device_id d);

/* util.c: one line on stderr, prefixed "vgpud ICD: ". */
void vgpu_log(const char *fmt, ...) VGPU_PRINTF(1, 2);

/* util.c: query answers; copy n bytes from src to value as the OpenCL *Info
 * functions do (CL_INVALID_VALUE when value is not NULL and size < n). */
cl_int vgpu_info(const void *src, size_t n, size_t size, void *value, size_t *size_ret);
cl_int vgpu_info_str(const char *s, size_t size, void *value, size_t *size_ret);

/* The entries implemented so far, by file. */
cl_int CL_API_CALL vgpu_clGetPlatformIDs(cl_uint, cl_platform_id *, cl_uint *);
cl_int CL_API_CALL vgpu_clGetPlatformInfo(cl_platform_id, cl_platform_info, size_t, void *, size_t *);
void *CL_API_CALL vgpu_clGetExtensionFunctionAddressForPlatform(cl_platform_id, const char *);
cl_int CL_API_CALL vgpu_clUnloadCompiler(void);
cl_int CL_API_CALL vgpu_clUnloadPlatformCompiler(cl_platform_id);

cl_int CL_API_CALL vgpu_clGetDeviceIDs(cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *);
cl_int CL_API_CALL vgpu_clGetDeviceInfo(cl_device_id, cl_device_info, size_t, void *, size_t *);
cl_int CL_API_CALL vgpu_clRetainDevice(cl_device_id);
cl_int CL_API_CALL vgpu_clReleaseDevice(cl_device_id);
cl_int CL_API_CALL vgpu_clCreateSubDevices(cl_device_id, const cl_device_partition_property *, cl_uint,
					   cl_device_id *, cl_uint *);

#endif /* VGPUD_ICD_H */

/* device.c: device lists and device queries. Every value is either read
 * from the device's registers at discovery or a constant chosen to promise
 * no more than the ABI guarantees; docs/icd.md has the table with the
 * reason for each. */
#include "icd.h"

#include <stdio.h>

/* The device types a call may name; CL_DEVICE_TYPE_ALL is every bit. */
#define KNOWN_TYPES                                                                                          \
	(CL_DEVICE_TYPE_DEFAULT | CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR |     \
	 CL_DEVICE_TYPE_CUSTOM)

cl_int CL_API_CALL vgpu_clGetDeviceIDs(cl_platform_id platform, cl_device_type device_type, cl_uint num_entries,
				       cl_device_id *devices, cl_uint *num_devices)
{
	if (!vgpu_platform_valid(platform))
		return CL_INVALID_PLATFORM;
	if (device_type == 0 || (device_type != CL_DEVICE_TYPE_ALL && (device_type & ~(cl_device_type)KNOWN_TYPES) != 0))
		return CL_INVALID_DEVICE_TYPE;
	if ((num_entries == 0 && devices != NULL) || (devices == NULL && num_devices == NULL))
		return CL_INVALID_VALUE;
	struct _cl_device_id *list;
	cl_uint n = vgpu_devices(&list);
	if ((device_type & CL_DEVICE_TYPE_GPU) == 0)
		n = (device_type & CL_DEVICE_TYPE_DEFAULT) != 0 && n > 0 ? 1 : 0;
	if (num_devices != NULL)
		*num_devices = n;
	if (n == 0)
		return CL_DEVICE_NOT_FOUND;
	for (cl_uint i = 0; devices != NULL && i < n && i < num_entries; i++)
		devices[i] = &list[i];
	return CL_SUCCESS;
}

/* Root devices are never created or destroyed by the application: retain
 * and release only check the handle (OpenCL 1.2, clRetainDevice). */
cl_int CL_API_CALL vgpu_clRetainDevice(cl_device_id device)
{
	return vgpu_device_valid(device) ? CL_SUCCESS : CL_INVALID_DEVICE;
}

cl_int CL_API_CALL vgpu_clReleaseDevice(cl_device_id device)
{
	return vgpu_device_valid(device) ? CL_SUCCESS : CL_INVALID_DEVICE;
}

/* A vGPU cannot be partitioned (CL_DEVICE_PARTITION_PROPERTIES is {0}), so
 * every partition request is one "not supported by the device", which 1.2
 * answers with CL_INVALID_VALUE. */
cl_int CL_API_CALL vgpu_clCreateSubDevices(cl_device_id in_device, const cl_device_partition_property *properties,
					   cl_uint num_devices, cl_device_id *out_devices, cl_uint *num_devices_ret)
{
	(void)properties;
	(void)num_devices;
	(void)out_devices;
	(void)num_devices_ret;
	if (!vgpu_device_valid(in_device))
		return CL_INVALID_DEVICE;
	return CL_INVALID_VALUE;
}

/* The OpenCL C 1.2 extensions every 1.2 device must report (OpenCL 1.2
 * section 9.2); they are core features of OpenCL C 1.1 and later, so every
 * physical device vgpud can serve has them. Nothing optional is claimed:
 * the ABI does not tell the guest what else the physical device offers. */
#define DEVICE_EXTENSIONS                                                                                     \
	"cl_khr_global_int32_base_atomics cl_khr_global_int32_extended_atomics "                                \
	"cl_khr_local_int32_base_atomics cl_khr_local_int32_extended_atomics cl_khr_byte_addressable_store"

/* OpenCL 1.2 minimums for a full-profile, non-custom device, used where the
 * ABI does not report the physical device's value. */
#define MIN_CONSTANT_BUFFER (64 * 1024)
#define MIN_LOCAL_MEM (32 * 1024)
#define MIN_CONSTANT_ARGS 8
#define MIN_PARAMETER_SIZE 1024
#define MIN_BASE_ADDR_ALIGN_BITS 1024 /* sizeof(long16) in bits */
#define MIN_DATA_TYPE_ALIGN 128       /* sizeof(long16) */

cl_int CL_API_CALL vgpu_clGetDeviceInfo(cl_device_id device, cl_device_info param_name, size_t param_value_size,
					void *param_value, size_t *param_value_size_ret)
{
	if (!vgpu_device_valid(device))
		return CL_INVALID_DEVICE;
	const struct _cl_device_id *d = device;
	union {
		cl_uint u;
		cl_ulong ul;
		size_t sz;
		cl_bool b;
		cl_bitfield bits;
		size_t sizes[3];
		cl_platform_id platform;
		cl_device_id dev;
		cl_device_partition_property prop;
	} v;
	char str[128];
	const char *s = NULL;
	size_t n = 0;
#define UINT(x) (v.u = (x), n = sizeof v.u)
#define ULONG(x) (v.ul = (x), n = sizeof v.ul)
#define SIZE(x) (v.sz = (x), n = sizeof v.sz)
#define BOOL(x) (v.b = (x), n = sizeof v.b)
#define BITS(x) (v.bits = (x), n = sizeof v.bits)
	switch (param_name) {
	/* Identity. */
	case CL_DEVICE_TYPE: BITS(CL_DEVICE_TYPE_GPU); break;
	case CL_DEVICE_VENDOR_ID: UINT(VGPU_VENDOR_ID); break;
	case CL_DEVICE_NAME: s = d->name; break;
	case CL_DEVICE_VENDOR: s = "vgpud"; break;
	case CL_DRIVER_VERSION:
		/* The ABI version the ICD was built for, as major.minor. */
		snprintf(str, sizeof str, "%d.%d", VGPU_VERSION_MAJOR, VGPU_VERSION_MINOR);
		s = str;
		break;
	case CL_DEVICE_PROFILE: s = "FULL_PROFILE"; break;
	case CL_DEVICE_VERSION:
		snprintf(str, sizeof str, "OpenCL 1.2 vgpud ABI %u.%u profile %s", (unsigned)(d->version >> 16),
			 (unsigned)(d->version & 0xffff), d->profile);
		s = str;
		break;
	case CL_DEVICE_OPENCL_C_VERSION: s = "OpenCL C 1.2 vgpud"; break;
	case CL_DEVICE_EXTENSIONS: s = DEVICE_EXTENSIONS; break;
	case CL_DEVICE_BUILT_IN_KERNELS: s = ""; break;
	case CL_DEVICE_PLATFORM: v.platform = &vgpu_platform; n = sizeof v.platform; break;
	case CL_DEVICE_AVAILABLE: BOOL(d->daemon ? CL_TRUE : CL_FALSE); break;
	case CL_DEVICE_COMPILER_AVAILABLE: BOOL(CL_TRUE); break;
	case CL_DEVICE_LINKER_AVAILABLE: BOOL(CL_TRUE); break;
	case CL_DEVICE_ENDIAN_LITTLE: BOOL(CL_TRUE); break;
	case CL_DEVICE_ADDRESS_BITS: UINT(64); break;

	/* Compute. */
	case CL_DEVICE_MAX_COMPUTE_UNITS: UINT(d->compute_units); break;
	case CL_DEVICE_MAX_CLOCK_FREQUENCY: UINT(0); break;
	case CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS: UINT(3); break;
	case CL_DEVICE_MAX_WORK_GROUP_SIZE: SIZE(d->max_work_group); break;
	case CL_DEVICE_MAX_WORK_ITEM_SIZES:
		v.sizes[0] = v.sizes[1] = v.sizes[2] = d->max_work_group;
		n = sizeof v.sizes;
		break;
	case CL_DEVICE_MAX_PARAMETER_SIZE: SIZE(MIN_PARAMETER_SIZE); break;
	case CL_DEVICE_EXECUTION_CAPABILITIES: BITS(CL_EXEC_KERNEL); break;
	case CL_DEVICE_QUEUE_PROPERTIES: BITS(CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE); break;
	case CL_DEVICE_PROFILING_TIMER_RESOLUTION: SIZE(1); break;
	case CL_DEVICE_PRINTF_BUFFER_SIZE: SIZE(0); break;
	case CL_DEVICE_PREFERRED_INTEROP_USER_SYNC: BOOL(CL_TRUE); break;

	/* Floating point and vectors. */
	case CL_DEVICE_SINGLE_FP_CONFIG: BITS(CL_FP_ROUND_TO_NEAREST | CL_FP_INF_NAN); break;
	case CL_DEVICE_DOUBLE_FP_CONFIG: BITS(0); break;
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_CHAR:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_SHORT:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_INT:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_LONG:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_CHAR:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_SHORT:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_INT:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_LONG:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT: UINT(1); break;
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_HALF: UINT(0); break;

	/* Memory. */
	case CL_DEVICE_GLOBAL_MEM_SIZE: ULONG(d->mem_size); break;
	case CL_DEVICE_MAX_MEM_ALLOC_SIZE: ULONG(d->max_alloc); break;
	case CL_DEVICE_GLOBAL_MEM_CACHE_TYPE: UINT(CL_NONE); break;
	case CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE: UINT(0); break;
	case CL_DEVICE_GLOBAL_MEM_CACHE_SIZE: ULONG(0); break;
	case CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE:
		ULONG(d->max_alloc < MIN_CONSTANT_BUFFER ? d->max_alloc : MIN_CONSTANT_BUFFER);
		break;
	case CL_DEVICE_MAX_CONSTANT_ARGS: UINT(MIN_CONSTANT_ARGS); break;
	case CL_DEVICE_LOCAL_MEM_TYPE: UINT(CL_GLOBAL); break;
	case CL_DEVICE_LOCAL_MEM_SIZE: ULONG(MIN_LOCAL_MEM); break;
	case CL_DEVICE_ERROR_CORRECTION_SUPPORT: BOOL(CL_FALSE); break;
	case CL_DEVICE_HOST_UNIFIED_MEMORY: BOOL(CL_FALSE); break;
	case CL_DEVICE_MEM_BASE_ADDR_ALIGN: UINT(MIN_BASE_ADDR_ALIGN_BITS); break;
	case CL_DEVICE_MIN_DATA_TYPE_ALIGN_SIZE: UINT(MIN_DATA_TYPE_ALIGN); break;

	/* Images and samplers: not supported. */
	case CL_DEVICE_IMAGE_SUPPORT: BOOL(CL_FALSE); break;
	case CL_DEVICE_MAX_READ_IMAGE_ARGS:
	case CL_DEVICE_MAX_WRITE_IMAGE_ARGS:
	case CL_DEVICE_MAX_SAMPLERS: UINT(0); break;
	case CL_DEVICE_IMAGE2D_MAX_WIDTH:
	case CL_DEVICE_IMAGE2D_MAX_HEIGHT:
	case CL_DEVICE_IMAGE3D_MAX_WIDTH:
	case CL_DEVICE_IMAGE3D_MAX_HEIGHT:
	case CL_DEVICE_IMAGE3D_MAX_DEPTH:
	case CL_DEVICE_IMAGE_MAX_BUFFER_SIZE:
	case CL_DEVICE_IMAGE_MAX_ARRAY_SIZE: SIZE(0); break;

	/* Partitioning: a vGPU is a root device that cannot be partitioned. */
	case CL_DEVICE_PARENT_DEVICE: v.dev = NULL; n = sizeof v.dev; break;
	case CL_DEVICE_PARTITION_MAX_SUB_DEVICES: UINT(0); break;
	case CL_DEVICE_PARTITION_PROPERTIES:
	case CL_DEVICE_PARTITION_TYPE: v.prop = 0; n = sizeof v.prop; break;
	case CL_DEVICE_PARTITION_AFFINITY_DOMAIN: BITS(0); break;
	case CL_DEVICE_REFERENCE_COUNT: UINT(1); break;

	default:
		/* Queries of later versions and of extensions this device does
		 * not offer (cl_khr_fp16's CL_DEVICE_HALF_FP_CONFIG among them). */
		return CL_INVALID_VALUE;
	}
#undef UINT
#undef ULONG
#undef SIZE
#undef BOOL
#undef BITS
	if (s != NULL)
		return vgpu_info_str(s, param_value_size, param_value, param_value_size_ret);
	return vgpu_info(&v, n, param_value_size, param_value, param_value_size_ret);
}

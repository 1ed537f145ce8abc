/* device.c: device lists and device queries. Every value is read from
 * the device's registers at discovery, taken from the device-information
 * blob vgpu-icdd gives for an abi 1.4 device (the physical device's
 * OpenCL properties as the profile restricts them), or, without one, a
 * constant chosen to promise no more than the ABI guarantees; docs/icd.md
 * has the table with the reason for each. */
#include "icd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The device types a call may name; CL_DEVICE_TYPE_ALL is every bit. */
#define KNOWN_TYPES                                                                                          \
	(CL_DEVICE_TYPE_DEFAULT | CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR |     \
	 CL_DEVICE_TYPE_CUSTOM)

cl_int vgpu_devices_of_type(cl_device_type device_type, struct _cl_device_id **list, cl_uint *n)
{
	/* CL_DEVICE_TYPE_ALL is 0xFFFFFFFF in a 64-bit bitfield: a caller that
	 * writes ALL as ~0 sets the upper bits too, and means every device. */
	int all = (device_type & CL_DEVICE_TYPE_ALL) == CL_DEVICE_TYPE_ALL;
	if (device_type == 0 || (!all && (device_type & ~(cl_device_type)KNOWN_TYPES) != 0))
		return CL_INVALID_DEVICE_TYPE;
	*n = vgpu_devices(list);
	if ((device_type & CL_DEVICE_TYPE_GPU) == 0)
		*n = (device_type & CL_DEVICE_TYPE_DEFAULT) != 0 && *n > 0 ? 1 : 0;
	return CL_SUCCESS;
}

cl_int CL_API_CALL vgpu_clGetDeviceIDs(cl_platform_id platform, cl_device_type device_type, cl_uint num_entries,
				       cl_device_id *devices, cl_uint *num_devices)
{
	if (!vgpu_platform_valid(platform))
		return CL_INVALID_PLATFORM;
	struct _cl_device_id *list;
	cl_uint n;
	cl_int err = vgpu_devices_of_type(device_type, &list, &n);
	if (err != CL_SUCCESS)
		return err;
	if ((num_entries == 0 && devices != NULL) || (devices == NULL && num_devices == NULL))
		return CL_INVALID_VALUE;
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

/* ---- Device information (abi 1.4 device-info, through vgpu-icdd) ---- */

/* What the ICD itself implements, listed after the device's extensions;
 * cl_khr_il_program too where the device takes SPIR-V (abi 1.9). */
#define ICD_EXTENSIONS "cl_khr_icd"
#define IL_EXTENSION "cl_khr_il_program"

/* The SPIR-V versions a device with abi.DeviceILSPIRV builds
 * (gpu.ILVersions). */
#define IL_VERSIONS "SPIR-V_1.0 SPIR-V_1.1 SPIR-V_1.2"

/* The extension list of a blob, at most this long. */
#define MAX_EXTENSIONS (VGPU_MAX_DEVICE_INFO_LEN - VGPU_DEVICE_INFO_FIXED_SIZE)

struct devinfo {
	int state; /* 0: not asked yet; 1: f and ext hold the blob; -1: the device gives none */
	struct vgpu_device_info f;
	char ext[MAX_EXTENSIONS + sizeof " " ICD_EXTENSIONS " " IL_EXTENSION]; /* the device's list, then ours */
	/* A version-2 blob's image section (abi 1.8); images.image_support
	 * 0 without one. */
	struct vgpu_image_info images;
	struct vgpu_image_format formats[VGPU_MAX_IMAGE_FORMATS];
	/* A version-4 blob's buffer part (abi 1.10): images made from
	 * buffers; max_buffer_size 0 without them. */
	struct vgpu_image_buffer_info ibuf;
	struct vgpu_image_format bformats[VGPU_MAX_IMAGE_FORMATS];
};

/* One per entry of vgpu_devices' list, guarded by info_mu. A device's
 * answer is kept for the life of the process once conclusive (a blob, or
 * a status saying there is none); a daemon that cannot be reached is asked
 * again at the next query. */
static struct devinfo infos[VGPU_MAX_DEVICES];
static pthread_mutex_t info_mu = PTHREAD_MUTEX_INITIALIZER;

/* How long a query waits for each of vgpu-icdd's replies. */
#define INFO_TIMEOUT_S 10

/* info_decode checks a device-information blob as abi.UnmarshalDeviceInfo
 * does (the daemon is trusted no further than that) and keeps it in di. */
static int info_decode(const uint8_t *b, uint64_t n, struct devinfo *di)
{
	struct vgpu_device_info f;
	if (n < sizeof f || n > VGPU_MAX_DEVICE_INFO_LEN)
		return -1;
	memcpy(&f, b, sizeof f);
	if (f.version < VGPU_DEVICE_INFO_VERSION || f.version > VGPU_DEVICE_INFO_VERSION_IMAGE_BUFFERS ||
	    (f.version < VGPU_DEVICE_INFO_VERSION_IL && f.il != 0) || (f.il & ~(uint32_t)VGPU_DEVICE_ILSPIRV) != 0 ||
	    f.endian_little > 1 || f.extensions_len > n - sizeof f)
		return -1;
	uint64_t end = sizeof f + f.extensions_len;
	if (f.version >= VGPU_DEVICE_INFO_VERSION_IMAGES) {
		/* The image section, at the next multiple of 8 (padding 0),
		 * checked as abi.UnmarshalDeviceInfo checks it. */
		uint64_t at = (end + 7) & ~(uint64_t)7;
		struct vgpu_image_info ii;
		if (at + sizeof ii > n)
			return -1;
		for (uint64_t i = end; i < at; i++)
			if (b[i] != 0)
				return -1;
		memcpy(&ii, b + at, sizeof ii);
		if (ii.image_support > 1 || ii.format_count > VGPU_MAX_IMAGE_FORMATS ||
		    at + sizeof ii + ii.format_count * sizeof di->formats[0] > n ||
		    (ii.image_support == 0 && ii.format_count != 0))
			return -1;
		memcpy(di->formats, b + at + sizeof ii, ii.format_count * sizeof di->formats[0]);
		di->images = ii;
		end = at + sizeof ii + ii.format_count * sizeof di->formats[0];
	}
	if (f.version >= VGPU_DEVICE_INFO_VERSION_IMAGE_BUFFERS) {
		/* The buffer part, right after the section's formats. */
		struct vgpu_image_buffer_info bi;
		if (end + sizeof bi > n)
			return -1;
		memcpy(&bi, b + end, sizeof bi);
		if (bi.buffer_format_count > VGPU_MAX_IMAGE_FORMATS || bi.reserved != 0 ||
		    bi.max_buffer_size > VGPU_MAX_IMAGE_BUFFER_EXTENT ||
		    (bi.max_buffer_size == 0) != (bi.buffer_format_count == 0) ||
		    (di->images.image_support == 0 && bi.max_buffer_size != 0) ||
		    end + sizeof bi + bi.buffer_format_count * sizeof di->bformats[0] > n)
			return -1;
		memcpy(di->bformats, b + end + sizeof bi, bi.buffer_format_count * sizeof di->bformats[0]);
		di->ibuf = bi;
		end += sizeof bi + bi.buffer_format_count * sizeof di->bformats[0];
	}
	if (end != n)
		return -1;
	const char *e = (const char *)b + sizeof f;
	for (uint32_t i = 0; i < f.extensions_len; i++) {
		char c = e[i];
		int name = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!name && !(c == ' ' && i > 0 && i + 1 < f.extensions_len && e[i - 1] != ' '))
			return -1;
	}
	di->f = f;
	memcpy(di->ext, e, f.extensions_len);
	snprintf(di->ext + f.extensions_len, sizeof di->ext - f.extensions_len, "%s%s%s", f.extensions_len ? " " : "",
		 ICD_EXTENSIONS, f.il & VGPU_DEVICE_ILSPIRV ? " " IL_EXTENSION : "");
	return 0;
}

/* info_fetch asks vgpu-icdd, on one connection, for the blob of every
 * daemon device of list not asked yet. Caller holds info_mu. */
static void info_fetch(struct _cl_device_id *list, cl_uint n)
{
	int fd = vgpu_dial(INFO_TIMEOUT_S);
	if (fd < 0)
		return;
	uint8_t *buf = malloc(VGPU_ICDP_MAX_MESSAGE);
	long hn;
	/* The newest version: a daemon of protocol 4 gives the image
	 * section, of protocol 5 the il word. */
	if (buf == NULL || vgpu_hello_newest(&fd, INFO_TIMEOUT_S, buf, &hn) != 0)
		goto out;
	for (cl_uint i = 0; i < n; i++) {
		if (infos[i].state != 0 || !list[i].daemon || (list[i].version & 0xffff) < 4)
			continue;
		struct {
			struct vgpu_icdp_header h;
			struct vgpu_icdp_device_info b;
		} m = {.h = {.op = VGPU_ICDP_OP_DEVICE_INFO, .len = sizeof m, .id = 2 + i}, .b = {.device = list[i].index}};
		long len = vgpu_call_fd(fd, &m, sizeof m, buf);
		if (len == -2) {
			/* A daemon that refuses the request (older than
			 * DeviceInfo) refuses it again: conclusive. It closed the
			 * connection; other devices are asked on the next. */
			infos[i].state = -1;
			break;
		}
		const struct vgpu_icdp_device_info_reply_head *r = (const void *)(buf + sizeof(struct vgpu_icdp_header));
		if (len < (long)(sizeof(struct vgpu_icdp_header) + sizeof *r))
			break; /* not conclusive: asked again next time */
		const uint8_t *blob = (const uint8_t *)(r + 1);
		if (r->status != 0 || r->info_len != (uint64_t)len - sizeof(struct vgpu_icdp_header) - sizeof *r ||
		    info_decode(blob, r->info_len, &infos[i]) != 0) {
			if (r->status != VGPU_STATUS_INVALID_OPCODE)
				vgpu_log("device %u: no device information from vgpu-icdd (status %u, %llu bytes)",
					 list[i].index, r->status, (unsigned long long)r->info_len);
			infos[i].state = -1;
			continue;
		}
		infos[i].state = 1;
	}
out:
	free(buf);
	if (fd >= 0)
		close(fd);
}

/* device_info returns d's device information, asking vgpu-icdd the first
 * time; NULL when d has none (sysfs discovery, a device older than abi
 * 1.4, a daemon that cannot say): then the queries keep their
 * conservative answers. */
static const struct devinfo *device_info(const struct _cl_device_id *d)
{
	if (!d->daemon || (d->version & 0xffff) < 4)
		return NULL;
	struct _cl_device_id *list;
	cl_uint n = vgpu_devices(&list);
	if (d < list || d >= list + n)
		return NULL;
	size_t i = (size_t)(d - list);
	pthread_mutex_lock(&info_mu);
	if (infos[i].state == 0)
		info_fetch(list, n);
	int ok = infos[i].state == 1;
	pthread_mutex_unlock(&info_mu);
	/* Once 1, infos[i] never changes again: read without the lock. */
	return ok ? &infos[i] : NULL;
}

/* vector_width answers a CL_DEVICE_{PREFERRED,NATIVE}_VECTOR_WIDTH_* query:
 * from the blob (its arrays are in VGPU_VEC_* order), or without one 1
 * for the types every device has and 0 for double and half. */
static cl_uint vector_width(const struct vgpu_device_info *f, cl_device_info q)
{
	static const struct {
		cl_device_info pref, native;
		int vec;
	} w[] = {
		{CL_DEVICE_PREFERRED_VECTOR_WIDTH_CHAR, CL_DEVICE_NATIVE_VECTOR_WIDTH_CHAR, VGPU_VEC_CHAR},
		{CL_DEVICE_PREFERRED_VECTOR_WIDTH_SHORT, CL_DEVICE_NATIVE_VECTOR_WIDTH_SHORT, VGPU_VEC_SHORT},
		{CL_DEVICE_PREFERRED_VECTOR_WIDTH_INT, CL_DEVICE_NATIVE_VECTOR_WIDTH_INT, VGPU_VEC_INT},
		{CL_DEVICE_PREFERRED_VECTOR_WIDTH_LONG, CL_DEVICE_NATIVE_VECTOR_WIDTH_LONG, VGPU_VEC_LONG},
		{CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, VGPU_VEC_FLOAT},
		{CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE, CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE, VGPU_VEC_DOUBLE},
		{CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF, CL_DEVICE_NATIVE_VECTOR_WIDTH_HALF, VGPU_VEC_HALF},
	};
	for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
		if (q != w[i].pref && q != w[i].native)
			continue;
		if (f == NULL)
			return w[i].vec == VGPU_VEC_DOUBLE || w[i].vec == VGPU_VEC_HALF ? 0 : 1;
		return q == w[i].pref ? f->preferred_vector_width[w[i].vec] : f->native_vector_width[w[i].vec];
	}
	return 0;
}

/* The OpenCL C 1.2 extensions every 1.2 device must report (OpenCL 1.2
 * section 9.2); they are core features of OpenCL C 1.1 and later, so every
 * physical device vgpud can serve has them. Nothing optional is claimed:
 * the ABI does not tell the guest what else the physical device offers. */
#define DEVICE_EXTENSIONS                                                                                     \
	"cl_khr_global_int32_base_atomics cl_khr_global_int32_extended_atomics "                                \
	"cl_khr_local_int32_base_atomics cl_khr_local_int32_extended_atomics cl_khr_byte_addressable_store"

/* OpenCL 1.2 minimums for a full-profile, non-custom device, used where the
 * ABI does not report the physical device's value (no device-information
 * blob). */
#define MIN_CONSTANT_BUFFER (64 * 1024)
#define MIN_LOCAL_MEM (32 * 1024)
#define MIN_CONSTANT_ARGS 8
#define MIN_PARAMETER_SIZE 1024
#define MIN_BASE_ADDR_ALIGN_BITS 1024 /* sizeof(long16) in bits */
#define MIN_DATA_TYPE_ALIGN 128       /* sizeof(long16) */

/* name_versions answers a *_WITH_VERSION query: one cl_name_version per
 * space-separated name of list, each of version ver. */
static cl_int name_versions(const char *list, cl_version ver, size_t size, void *value, size_t *size_ret)
{
	size_t n = 0;
	for (const char *p = list; *p != '\0'; p++)
		if (*p != ' ' && (p == list || p[-1] == ' '))
			n++;
	cl_name_version *nv = calloc(n > 0 ? n : 1, sizeof *nv);
	if (nv == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	size_t i = 0;
	for (const char *p = list; *p != '\0';) {
		size_t len = strcspn(p, " ");
		if (len > 0 && len < CL_NAME_VERSION_MAX_NAME_SIZE) {
			memcpy(nv[i].name, p, len);
			nv[i++].version = ver;
		}
		p += len;
		p += strspn(p, " ");
	}
	cl_int err = vgpu_info(nv, i * sizeof *nv, size, value, size_ret);
	free(nv);
	return err;
}

/* il_versions answers CL_DEVICE_ILS_WITH_VERSION for a device that takes
 * SPIR-V: one entry per version of IL_VERSIONS. */
static cl_int il_versions(size_t size, void *value, size_t *size_ret)
{
	static const cl_name_version nv[] = {
		{CL_MAKE_VERSION(1, 0, 0), "SPIR-V"},
		{CL_MAKE_VERSION(1, 1, 0), "SPIR-V"},
		{CL_MAKE_VERSION(1, 2, 0), "SPIR-V"},
	};
	return vgpu_info(nv, sizeof nv, size, value, size_ret);
}

int vgpu_device_il(const struct _cl_device_id *d)
{
	const struct devinfo *di = device_info(d);
	return di != NULL && di->f.version >= VGPU_DEVICE_INFO_VERSION_IL && (di->f.il & VGPU_DEVICE_ILSPIRV) != 0 &&
	       (d->features & VGPU_FEATURE_IL) != 0;
}

/* The OpenCL C versions the device compiles: 1.0 to 1.2, and 3.0 (whose
 * optional features are those of CL_DEVICE_OPENCL_C_FEATURES). The
 * program's -cl-std reaches the physical compiler unchanged (gpu.Source
 * accepts CL1.0 to CL3.0), and every platform vgpud serves (PoCL 3 and
 * later, rusticl, NVIDIA) compiles OpenCL C 3.0. */
static const cl_name_version c_versions[] = {
	{CL_MAKE_VERSION(1, 0, 0), "OpenCL C"},
	{CL_MAKE_VERSION(1, 1, 0), "OpenCL C"},
	{CL_MAKE_VERSION(1, 2, 0), "OpenCL C"},
	{CL_MAKE_VERSION(3, 0, 0), "OpenCL C"},
};

const struct vgpu_image_info *vgpu_device_images(const struct _cl_device_id *d, const struct vgpu_image_format **formats)
{
	const struct devinfo *di = device_info(d);
	if (di == NULL || di->images.image_support != 1 || di->images.format_count == 0)
		return NULL;
	if (formats != NULL)
		*formats = di->formats;
	return &di->images;
}

uint64_t vgpu_device_image_buffers(const struct _cl_device_id *d, const struct vgpu_image_format **formats,
				   uint32_t *count)
{
	const struct devinfo *di = device_info(d);
	if (di == NULL || di->images.image_support != 1 || di->ibuf.max_buffer_size == 0)
		return 0;
	if (formats != NULL)
		*formats = di->bformats;
	if (count != NULL)
		*count = di->ibuf.buffer_format_count;
	return di->ibuf.max_buffer_size;
}

int vgpu_device_has_fp64(const struct _cl_device_id *d)
{
	const struct devinfo *di = device_info(d);
	return di != NULL && di->f.double_fp_config != 0;
}

/* c_features answers CL_DEVICE_OPENCL_C_FEATURES: __opencl_c_int64,
 * which every full-profile device has, __opencl_c_fp64 where the device
 * reports double precision, and __opencl_c_images where it has images
 * (abi 1.8). Nothing else is claimed: the other features (3D image
 * writes, read-write images, pipes, generic address space, the stronger
 * atomics) are absent from the vGPU or not reported by the ABI, and a
 * program may move to another device model on migration. */
static cl_int c_features(const struct vgpu_device_info *f, int images, size_t size, void *value, size_t *size_ret)
{
	cl_name_version nv[3] = {{CL_MAKE_VERSION(3, 0, 0), "__opencl_c_int64"}};
	size_t n = 1;
	if (f != NULL && f->double_fp_config != 0)
		nv[n++] = (cl_name_version){CL_MAKE_VERSION(3, 0, 0), "__opencl_c_fp64"};
	if (images)
		nv[n++] = (cl_name_version){CL_MAKE_VERSION(3, 0, 0), "__opencl_c_images"};
	return vgpu_info(nv, n * sizeof nv[0], size, value, size_ret);
}

cl_int CL_API_CALL vgpu_clGetDeviceInfo(cl_device_id device, cl_device_info param_name, size_t param_value_size,
					void *param_value, size_t *param_value_size_ret)
{
	if (!vgpu_device_valid(device))
		return CL_INVALID_DEVICE;
	const struct _cl_device_id *d = device;
	/* The device's own values when it gives them (abi 1.4), else NULL
	 * and the conservative answers below. */
	const struct devinfo *di = device_info(d);
	const struct vgpu_device_info *f = di != NULL ? &di->f : NULL;
	const struct vgpu_image_info *ii = vgpu_device_images(d, NULL);
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
		snprintf(str, sizeof str, "OpenCL 3.0 vgpud ABI %u.%u profile %s", (unsigned)(d->version >> 16),
			 (unsigned)(d->version & 0xffff), d->profile);
		s = str;
		break;
	case CL_DEVICE_NUMERIC_VERSION: UINT(CL_MAKE_VERSION(3, 0, 0)); break;
	case CL_DEVICE_LATEST_CONFORMANCE_VERSION_PASSED:
		/* No conformance submission: the format's earliest date. */
		s = "v0000-01-01-00";
		break;
	case CL_DEVICE_OPENCL_C_VERSION:
		/* The highest version before 3.0 (3.0 devices report 1.2 here
		 * unless they compile OpenCL C 2.0). */
		s = "OpenCL C 1.2 vgpud";
		break;
	case CL_DEVICE_OPENCL_C_ALL_VERSIONS:
		return vgpu_info(c_versions, sizeof c_versions, param_value_size, param_value, param_value_size_ret);
	case CL_DEVICE_OPENCL_C_FEATURES:
		return c_features(f, ii != NULL, param_value_size, param_value, param_value_size_ret);
	case CL_DEVICE_EXTENSIONS: s = di != NULL ? di->ext : DEVICE_EXTENSIONS; break;
	case CL_DEVICE_EXTENSIONS_WITH_VERSION:
		/* The ABI carries names only: each is reported at 1.0.0, the
		 * version of every cl_khr extension a vGPU passes on. */
		return name_versions(di != NULL ? di->ext : DEVICE_EXTENSIONS, CL_MAKE_VERSION(1, 0, 0),
				     param_value_size, param_value, param_value_size_ret);
	case CL_DEVICE_BUILT_IN_KERNELS: s = ""; break;
	case CL_DEVICE_BUILT_IN_KERNELS_WITH_VERSION: n = 0; break;
	case CL_DEVICE_ILS_WITH_VERSION:
		if (!vgpu_device_il(d)) {
			n = 0;
			break;
		}
		return il_versions(param_value_size, param_value, param_value_size_ret);
	case CL_DEVICE_IL_VERSION: s = vgpu_device_il(d) ? IL_VERSIONS : ""; break;
	case CL_DEVICE_PLATFORM: v.platform = &vgpu_platform; n = sizeof v.platform; break;
	case CL_DEVICE_AVAILABLE: BOOL(d->daemon ? CL_TRUE : CL_FALSE); break;
	case CL_DEVICE_COMPILER_AVAILABLE: BOOL(CL_TRUE); break;
	case CL_DEVICE_LINKER_AVAILABLE: BOOL(CL_TRUE); break;
	case CL_DEVICE_ENDIAN_LITTLE: BOOL(f == NULL || f->endian_little ? CL_TRUE : CL_FALSE); break;
	case CL_DEVICE_ADDRESS_BITS: UINT(f != NULL ? (cl_uint)f->address_bits : 64); break;

	/* Compute. */
	case CL_DEVICE_MAX_COMPUTE_UNITS: UINT(d->compute_units); break;
	case CL_DEVICE_MAX_CLOCK_FREQUENCY: UINT(f != NULL ? (cl_uint)f->max_clock_frequency : 0); break;
	case CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS: UINT(3); break;
	case CL_DEVICE_MAX_WORK_GROUP_SIZE: SIZE(d->max_work_group); break;
	case CL_DEVICE_MAX_WORK_ITEM_SIZES:
		v.sizes[0] = v.sizes[1] = v.sizes[2] = d->max_work_group;
		for (int i = 0; f != NULL && i < 3; i++)
			if (f->max_work_item_sizes[i] < v.sizes[i])
				v.sizes[i] = (size_t)f->max_work_item_sizes[i];
		n = sizeof v.sizes;
		break;
	case CL_DEVICE_MAX_PARAMETER_SIZE: SIZE(f != NULL ? (size_t)f->max_parameter_size : MIN_PARAMETER_SIZE); break;
	case CL_DEVICE_EXECUTION_CAPABILITIES: BITS(CL_EXEC_KERNEL); break;
	case CL_DEVICE_QUEUE_PROPERTIES: /* = CL_DEVICE_QUEUE_ON_HOST_PROPERTIES */
		BITS(CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE);
		break;
	case CL_DEVICE_PREFERRED_WORK_GROUP_SIZE_MULTIPLE: SIZE(1); break;
	case CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT:
	case CL_DEVICE_WORK_GROUP_COLLECTIVE_FUNCTIONS_SUPPORT:
	case CL_DEVICE_GENERIC_ADDRESS_SPACE_SUPPORT:
	case CL_DEVICE_PIPE_SUPPORT:
	case CL_DEVICE_SUB_GROUP_INDEPENDENT_FORWARD_PROGRESS: BOOL(CL_FALSE); break;
	case CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES:
		/* The minimum OpenCL 3.0 asks; a stronger order or scope is
		 * the physical device's, not promised across migration. */
		BITS(CL_DEVICE_ATOMIC_ORDER_RELAXED | CL_DEVICE_ATOMIC_SCOPE_WORK_GROUP);
		break;
	case CL_DEVICE_ATOMIC_FENCE_CAPABILITIES:
		BITS(CL_DEVICE_ATOMIC_ORDER_RELAXED | CL_DEVICE_ATOMIC_ORDER_ACQ_REL | CL_DEVICE_ATOMIC_SCOPE_WORK_GROUP);
		break;

	/* OpenCL 2.x features a vGPU does not offer (OpenCL 3.0 makes them
	 * optional; these are their "not supported" answers). */
	case CL_DEVICE_SVM_CAPABILITIES:
	case CL_DEVICE_QUEUE_ON_DEVICE_PROPERTIES:
	case CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES: BITS(0); break;
	case CL_DEVICE_QUEUE_ON_DEVICE_PREFERRED_SIZE:
	case CL_DEVICE_QUEUE_ON_DEVICE_MAX_SIZE:
	case CL_DEVICE_MAX_ON_DEVICE_QUEUES:
	case CL_DEVICE_MAX_ON_DEVICE_EVENTS:
	case CL_DEVICE_MAX_PIPE_ARGS:
	case CL_DEVICE_PIPE_MAX_ACTIVE_RESERVATIONS:
	case CL_DEVICE_PIPE_MAX_PACKET_SIZE:
	case CL_DEVICE_PREFERRED_PLATFORM_ATOMIC_ALIGNMENT:
	case CL_DEVICE_PREFERRED_GLOBAL_ATOMIC_ALIGNMENT:
	case CL_DEVICE_PREFERRED_LOCAL_ATOMIC_ALIGNMENT:
	case CL_DEVICE_MAX_NUM_SUB_GROUPS: UINT(0); break;
	case CL_DEVICE_MAX_GLOBAL_VARIABLE_SIZE:
	case CL_DEVICE_GLOBAL_VARIABLE_PREFERRED_TOTAL_SIZE: SIZE(0); break;
	case CL_DEVICE_PROFILING_TIMER_RESOLUTION:
		SIZE(f != NULL && f->profiling_timer_resolution != 0 ? (size_t)f->profiling_timer_resolution : 1);
		break;
	case CL_DEVICE_PRINTF_BUFFER_SIZE:
		/* The context's printf buffer where the vGPU delivers printf
		 * output (kernel.c), else 0: the output stays on the host. */
		SIZE(vgpu_printf_ok(d) ? VGPU_PRINTF_BYTES : 0);
		break;
	case CL_DEVICE_PREFERRED_INTEROP_USER_SYNC: BOOL(CL_TRUE); break;

	/* Floating point and vectors. */
	case CL_DEVICE_SINGLE_FP_CONFIG:
		BITS(f != NULL && f->single_fp_config != 0 ? f->single_fp_config : CL_FP_ROUND_TO_NEAREST | CL_FP_INF_NAN);
		break;
	case CL_DEVICE_DOUBLE_FP_CONFIG: BITS(f != NULL ? f->double_fp_config : 0); break;
	case CL_DEVICE_HALF_FP_CONFIG:
		/* A query of cl_khr_fp16: only a device that offers it answers. */
		if (f == NULL || f->half_fp_config == 0)
			return CL_INVALID_VALUE;
		BITS(f->half_fp_config);
		break;
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_CHAR:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_SHORT:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_INT:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_LONG:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE:
	case CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_CHAR:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_SHORT:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_INT:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_LONG:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE:
	case CL_DEVICE_NATIVE_VECTOR_WIDTH_HALF: UINT(vector_width(f, param_name)); break;

	/* Memory. */
	case CL_DEVICE_GLOBAL_MEM_SIZE: ULONG(d->mem_size); break;
	case CL_DEVICE_MAX_MEM_ALLOC_SIZE: ULONG(d->max_alloc); break;
	case CL_DEVICE_GLOBAL_MEM_CACHE_TYPE: UINT(CL_NONE); break;
	case CL_DEVICE_GLOBAL_MEM_CACHELINE_SIZE: UINT(0); break;
	case CL_DEVICE_GLOBAL_MEM_CACHE_SIZE: ULONG(0); break;
	case CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE: {
		/* A __constant argument is a buffer: never more than one. */
		cl_ulong c = f != NULL ? f->max_constant_buffer_size : MIN_CONSTANT_BUFFER;
		ULONG(d->max_alloc < c ? d->max_alloc : c);
		break;
	}
	case CL_DEVICE_MAX_CONSTANT_ARGS: UINT(f != NULL ? (cl_uint)f->max_constant_args : MIN_CONSTANT_ARGS); break;
	case CL_DEVICE_LOCAL_MEM_TYPE: UINT(CL_GLOBAL); break;
	case CL_DEVICE_LOCAL_MEM_SIZE: ULONG(f != NULL ? f->local_mem_size : MIN_LOCAL_MEM); break;
	case CL_DEVICE_ERROR_CORRECTION_SUPPORT: BOOL(CL_FALSE); break;
	case CL_DEVICE_HOST_UNIFIED_MEMORY: BOOL(CL_FALSE); break;
	case CL_DEVICE_MEM_BASE_ADDR_ALIGN:
		UINT(f != NULL ? (cl_uint)f->mem_base_addr_align : MIN_BASE_ADDR_ALIGN_BITS);
		break;
	case CL_DEVICE_MIN_DATA_TYPE_ALIGN_SIZE:
		UINT(f != NULL ? (cl_uint)f->min_data_type_align_size : MIN_DATA_TYPE_ALIGN);
		break;

	/* Images and samplers (abi 1.8): the device's image section, all 0
	 * without one; images made from buffers (abi 1.10) where its buffer
	 * part offers them. Read-write images (OpenCL 2.0) and 2D images
	 * made from buffers are not offered. */
	case CL_DEVICE_IMAGE_SUPPORT: BOOL(ii != NULL ? CL_TRUE : CL_FALSE); break;
	case CL_DEVICE_MAX_READ_IMAGE_ARGS: UINT(ii != NULL ? (cl_uint)ii->max_read_args : 0); break;
	case CL_DEVICE_MAX_WRITE_IMAGE_ARGS: UINT(ii != NULL ? (cl_uint)ii->max_write_args : 0); break;
	case CL_DEVICE_MAX_SAMPLERS: UINT(ii != NULL ? (cl_uint)ii->max_samplers : 0); break;
	case CL_DEVICE_MAX_READ_WRITE_IMAGE_ARGS:
	case CL_DEVICE_IMAGE_PITCH_ALIGNMENT:
	case CL_DEVICE_IMAGE_BASE_ADDRESS_ALIGNMENT: UINT(0); break;
	case CL_DEVICE_IMAGE2D_MAX_WIDTH: SIZE(ii != NULL ? (size_t)ii->max_plane[0] : 0); break;
	case CL_DEVICE_IMAGE2D_MAX_HEIGHT: SIZE(ii != NULL ? (size_t)ii->max_plane[1] : 0); break;
	case CL_DEVICE_IMAGE3D_MAX_WIDTH: SIZE(ii != NULL ? (size_t)ii->max_volume[0] : 0); break;
	case CL_DEVICE_IMAGE3D_MAX_HEIGHT: SIZE(ii != NULL ? (size_t)ii->max_volume[1] : 0); break;
	case CL_DEVICE_IMAGE3D_MAX_DEPTH: SIZE(ii != NULL ? (size_t)ii->max_volume[2] : 0); break;
	case CL_DEVICE_IMAGE_MAX_BUFFER_SIZE: SIZE(ii != NULL ? (size_t)vgpu_device_image_buffers(d, NULL, NULL) : 0); break;
	case CL_DEVICE_IMAGE_MAX_ARRAY_SIZE: SIZE(ii != NULL ? (size_t)ii->max_array_size : 0); break;

	/* Partitioning: a vGPU is a root device that cannot be partitioned. */
	case CL_DEVICE_PARENT_DEVICE: v.dev = NULL; n = sizeof v.dev; break;
	case CL_DEVICE_PARTITION_MAX_SUB_DEVICES: UINT(0); break;
	case CL_DEVICE_PARTITION_PROPERTIES:
	case CL_DEVICE_PARTITION_TYPE: v.prop = 0; n = sizeof v.prop; break;
	case CL_DEVICE_PARTITION_AFFINITY_DOMAIN: BITS(0); break;
	case CL_DEVICE_REFERENCE_COUNT: UINT(1); break;

	default:
		/* Queries of extensions this device does not offer. */
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

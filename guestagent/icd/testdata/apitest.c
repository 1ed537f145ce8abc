/* apitest: calls the vgpud ICD through the ICD loader (and, for the entry
 * the loader keeps to itself, directly) and checks the answers to
 * well-formed and malformed calls. Built and run by icd_test.go:
 *
 *   apitest full /path/libvgpud-icd.so   the fake tree of TestAPI
 *   apitest none /path/libvgpud-icd.so   a tree with no usable vGPU
 *
 * It prints one line per failed check and exits with the number of them. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_0_APIS
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl_icd.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* find the vgpud platform among those the loader lists. */
static cl_platform_id vgpud_platform(void)
{
	cl_platform_id ps[16];
	cl_uint n = 0;
	if (clGetPlatformIDs(16, ps, &n) != CL_SUCCESS)
		return NULL;
	for (cl_uint i = 0; i < n && i < 16; i++) {
		char name[64] = "";
		clGetPlatformInfo(ps[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
		if (strcmp(name, "vgpud") == 0)
			return ps[i];
	}
	return NULL;
}

/* A fake object that starts with the ICD's dispatch pointer, as a stale or
 * foreign handle of the right "vendor" would: the loader forwards calls on
 * it to the ICD, which must refuse them without touching anything else. */
struct fake {
	struct _cl_icd_dispatch *dispatch;
	char junk[64];
};

/* The OpenCL 3.0 answers of a device: version 3.0, OpenCL C 1.0 to 1.2
 * and 3.0, the features and capabilities every 3.0 full-profile device
 * has and none of the optional 2.x ones, the extensions by name and
 * version as CL_DEVICE_EXTENSIONS lists them. */
static void threezero_checks(cl_device_id d)
{
	cl_version ver = 0;
	size_t n = 0;
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_NUMERIC_VERSION, sizeof ver, &ver, NULL), CL_SUCCESS);
	CHECK(ver == CL_MAKE_VERSION(3, 0, 0), "device numeric version %#x", ver);
	cl_name_version nv[64];
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_OPENCL_C_ALL_VERSIONS, sizeof nv, nv, &n), CL_SUCCESS);
	int has30 = 0, has12 = 0;
	for (size_t i = 0; i < n / sizeof nv[0]; i++) {
		CHECK(strcmp(nv[i].name, "OpenCL C") == 0, "C version name %s", nv[i].name);
		has30 |= nv[i].version == CL_MAKE_VERSION(3, 0, 0);
		has12 |= nv[i].version == CL_MAKE_VERSION(1, 2, 0);
	}
	CHECK(has30 && has12 && n == 4 * sizeof nv[0], "OpenCL C versions: %zu bytes", n);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_OPENCL_C_FEATURES, sizeof nv, nv, &n), CL_SUCCESS);
	CHECK(n >= sizeof nv[0] && strcmp(nv[0].name, "__opencl_c_int64") == 0, "features: %zu bytes", n);
	char ext[4096];
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, sizeof ext, ext, NULL), CL_SUCCESS);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS_WITH_VERSION, sizeof nv, nv, &n), CL_SUCCESS);
	size_t k = 0;
	for (char *w = strtok(ext, " "); w != NULL; w = strtok(NULL, " "), k++)
		CHECK(k < n / sizeof nv[0] && strcmp(nv[k].name, w) == 0 && nv[k].version == CL_MAKE_VERSION(1, 0, 0),
		      "extension %zu: %s", k, w);
	CHECK(k == n / sizeof nv[0] && k > 0, "%zu extensions, %zu with version", k, n / sizeof nv[0]);
	const struct {
		cl_device_info q;
		cl_ulong want;
	} bits[] = {
		{CL_DEVICE_SVM_CAPABILITIES, 0},
		{CL_DEVICE_QUEUE_ON_DEVICE_PROPERTIES, 0},
		{CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES, 0},
		{CL_DEVICE_QUEUE_ON_HOST_PROPERTIES, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE | CL_QUEUE_PROFILING_ENABLE},
		{CL_DEVICE_ATOMIC_MEMORY_CAPABILITIES, CL_DEVICE_ATOMIC_ORDER_RELAXED | CL_DEVICE_ATOMIC_SCOPE_WORK_GROUP},
		{CL_DEVICE_ATOMIC_FENCE_CAPABILITIES,
		 CL_DEVICE_ATOMIC_ORDER_RELAXED | CL_DEVICE_ATOMIC_ORDER_ACQ_REL | CL_DEVICE_ATOMIC_SCOPE_WORK_GROUP},
	};
	for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
		cl_bitfield b = 99;
		CHECK_ERR(clGetDeviceInfo(d, bits[i].q, sizeof b, &b, NULL), CL_SUCCESS);
		CHECK(b == bits[i].want, "query %#x = %#llx", (unsigned)bits[i].q, (unsigned long long)b);
	}
	const cl_device_info no[] = {CL_DEVICE_PIPE_SUPPORT, CL_DEVICE_GENERIC_ADDRESS_SPACE_SUPPORT,
				     CL_DEVICE_NON_UNIFORM_WORK_GROUP_SUPPORT,
				     CL_DEVICE_WORK_GROUP_COLLECTIVE_FUNCTIONS_SUPPORT,
				     CL_DEVICE_SUB_GROUP_INDEPENDENT_FORWARD_PROGRESS};
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
		cl_bool b = 99;
		CHECK_ERR(clGetDeviceInfo(d, no[i], sizeof b, &b, NULL), CL_SUCCESS);
		CHECK(b == CL_FALSE, "query %#x = %u", (unsigned)no[i], b);
	}
	char s[64];
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_IL_VERSION, sizeof s, s, NULL), CL_SUCCESS);
	CHECK(s[0] == '\0', "IL version %s", s);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_LATEST_CONFORMANCE_VERSION_PASSED, sizeof s, s, NULL), CL_SUCCESS);
	CHECK(strlen(s) == 14 && s[0] == 'v' && s[5] == '-' && s[8] == '-' && s[11] == '-', "conformance %s", s);
}

static void platform_checks(cl_platform_id p)
{
	char buf[128];
	size_t n = 0;
	CHECK_ERR(clGetPlatformInfo(p, CL_PLATFORM_NAME, 0, NULL, &n), CL_SUCCESS);
	CHECK(n == sizeof "vgpud", "CL_PLATFORM_NAME size %zu", n);
	CHECK_ERR(clGetPlatformInfo(p, CL_PLATFORM_NAME, 3, buf, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clGetPlatformInfo(p, CL_PLATFORM_NAME, 0, buf, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clGetPlatformInfo(p, 0x0999, sizeof buf, buf, NULL), CL_INVALID_VALUE);
	/* The OpenCL 3.0 queries. */
	cl_version ver = 0;
	CHECK_ERR(clGetPlatformInfo(p, CL_PLATFORM_NUMERIC_VERSION, sizeof ver, &ver, &n), CL_SUCCESS);
	CHECK(ver == CL_MAKE_VERSION(3, 0, 0) && n == sizeof ver, "numeric version %#x", ver);
	CHECK_ERR(clGetPlatformInfo(p, CL_PLATFORM_NUMERIC_VERSION, 2, &ver, NULL), CL_INVALID_VALUE);
	cl_name_version nv[2];
	CHECK_ERR(clGetPlatformInfo(p, CL_PLATFORM_EXTENSIONS_WITH_VERSION, sizeof nv, nv, &n), CL_SUCCESS);
	CHECK(n == sizeof nv[0] && strcmp(nv[0].name, "cl_khr_icd") == 0 && nv[0].version == CL_MAKE_VERSION(1, 0, 0),
	      "extensions with version: %zu bytes, %s %#x", n, nv[0].name, nv[0].version);
	cl_ulong timer = 1;
	CHECK_ERR(clGetPlatformInfo(p, CL_PLATFORM_HOST_TIMER_RESOLUTION, sizeof timer, &timer, NULL), CL_SUCCESS);
	CHECK(timer == 0, "host timer resolution %llu", (unsigned long long)timer);
	const struct {
		cl_platform_info param;
		const char *want;
	} strs[] = {
		{CL_PLATFORM_PROFILE, "FULL_PROFILE"}, {CL_PLATFORM_VERSION, "OpenCL 3.0 vgpud"},
		{CL_PLATFORM_NAME, "vgpud"},	       {CL_PLATFORM_VENDOR, "vgpud"},
		{CL_PLATFORM_EXTENSIONS, "cl_khr_icd"}, {CL_PLATFORM_ICD_SUFFIX_KHR, "vgpud"},
	};
	for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
		memset(buf, 'x', sizeof buf);
		CHECK_ERR(clGetPlatformInfo(p, strs[i].param, sizeof buf, buf, &n), CL_SUCCESS);
		CHECK(strcmp(buf, strs[i].want) == 0 && n == strlen(strs[i].want) + 1, "param %#x = %.*s (%zu bytes)",
		      (unsigned)strs[i].param, (int)sizeof buf, buf, n);
	}
	void *f = clGetExtensionFunctionAddressForPlatform(p, "clIcdGetPlatformIDsKHR");
	CHECK(f != NULL, "clGetExtensionFunctionAddressForPlatform(clIcdGetPlatformIDsKHR) = NULL");
	CHECK(clGetExtensionFunctionAddressForPlatform(p, "clNoSuchFunctionvgpud") == NULL, "unknown function found");
	CHECK(clGetExtensionFunctionAddressForPlatform(p, NULL) == NULL, "NULL name found");
	CHECK_ERR(clUnloadPlatformCompiler(p), CL_SUCCESS);
}

static void device_checks(cl_platform_id p)
{
	cl_device_id devs[8];
	cl_uint n = 99;

	/* Lists. */
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 0, devs, &n), CL_INVALID_VALUE);
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 8, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clGetDeviceIDs(p, 0, 8, devs, &n), CL_INVALID_DEVICE_TYPE);
	CHECK_ERR(clGetDeviceIDs(p, (cl_device_type)1 << 40, 8, devs, &n), CL_INVALID_DEVICE_TYPE);
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_CPU, 8, devs, &n), CL_DEVICE_NOT_FOUND);
	CHECK(n == 0, "CPU devices: %u", n);
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_ACCELERATOR | CL_DEVICE_TYPE_CUSTOM, 8, devs, &n),
		  CL_DEVICE_NOT_FOUND);
	/* Two good devices: 0000:00:04.0 and 0000:00:07.0; 05.0 has a bad ID,
	 * 06.0 a bad major version, 03.0 is not a vGPU. */
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, &n), CL_SUCCESS);
	CHECK(n == 2, "ALL devices: %u", n);
	/* ALL written as a 64-bit all-ones value (OpenCV's ":ALL:"). */
	n = 99;
	CHECK_ERR(clGetDeviceIDs(p, ~(cl_device_type)0, 8, devs, &n), CL_SUCCESS);
	CHECK(n == 2, "~0 devices: %u", n);
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL | (cl_device_type)1 << 40, 8, devs, &n), CL_SUCCESS);
	CHECK(n == 2, "ALL|1<<40 devices: %u", n);
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_CPU, 8, devs, &n), CL_SUCCESS);
	CHECK(n == 2, "GPU|CPU devices: %u", n);
	cl_device_id first = NULL;
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_GPU, 1, &first, &n), CL_SUCCESS);
	CHECK(n == 2 && first == devs[0], "GPU, 1 entry: n=%u first=%p", n, (void *)first);
	cl_device_id def[2] = {NULL, NULL};
	CHECK_ERR(clGetDeviceIDs(p, CL_DEVICE_TYPE_DEFAULT, 2, def, &n), CL_SUCCESS);
	CHECK(n == 1 && def[0] == devs[0] && def[1] == NULL, "DEFAULT: n=%u", n);
	if (n < 1)
		return;

	/* Names, in bus-address order. */
	char name[128];
	CHECK_ERR(clGetDeviceInfo(devs[0], CL_DEVICE_NAME, sizeof name, name, NULL), CL_SUCCESS);
	CHECK(strcmp(name, "pthread-test") == 0, "device 0 name %s", name);
	CHECK_ERR(clGetDeviceInfo(devs[1], CL_DEVICE_NAME, sizeof name, name, NULL), CL_SUCCESS);
	CHECK(strcmp(name, "second, a name of exactly sixty-four bytes, with no NUL at all!!") == 0,
	      "device 1 name %s", name);

	cl_device_id d = devs[0];
	cl_ulong ul = 0;
	cl_uint u = 0;
	size_t sz = 0, sizes[3] = {0, 0, 0};
	cl_bool b = CL_TRUE;
	cl_device_type type = 0;
	cl_platform_id dp = NULL;
	size_t ret = 0;

	/* Values from the registers. */
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ul, &ul, &ret), CL_SUCCESS);
	CHECK(ul == 256ull << 20 && ret == sizeof ul, "global mem %llu", (unsigned long long)ul);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ul, &ul, NULL), CL_SUCCESS);
	CHECK(ul == 64ull << 20, "max alloc %llu", (unsigned long long)ul);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u, &u, NULL), CL_SUCCESS);
	CHECK(u == 2, "compute units %u", u);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof sz, &sz, NULL), CL_SUCCESS);
	CHECK(sz == 1024, "work group %zu", sz);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof sizes, sizes, &ret), CL_SUCCESS);
	CHECK(sizes[0] == 1024 && sizes[2] == 1024 && ret == sizeof sizes, "work item sizes %zu", sizes[0]);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_VERSION, sizeof name, name, NULL), CL_SUCCESS);
	CHECK(strncmp(name, "OpenCL 3.0 vgpud ABI 1.", 23) == 0 && strstr(name, " profile vgpu-small") != NULL &&
		      strcmp(strstr(name, " profile "), " profile vgpu-small") == 0,
	      "version %s", name);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_OPENCL_C_VERSION, sizeof name, name, NULL), CL_SUCCESS);
	CHECK(strncmp(name, "OpenCL C 1.2 ", 13) == 0, "C version %s", name);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_IMAGE_SUPPORT, sizeof b, &b, NULL), CL_SUCCESS);
	CHECK(b == CL_FALSE, "image support %u", b);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL), CL_SUCCESS);
	CHECK(type == CL_DEVICE_TYPE_GPU, "type %llu", (unsigned long long)type);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_PLATFORM, sizeof dp, &dp, NULL), CL_SUCCESS);
	CHECK(dp == p, "device platform %p, want %p", (void *)dp, (void *)p);

	/* Every OpenCL 1.2 query is answered; later ones are not. */
	for (cl_device_info q = CL_DEVICE_TYPE; q <= CL_DEVICE_PRINTF_BUFFER_SIZE; q++) {
		if (q == 0x1033 /* CL_DEVICE_HALF_FP_CONFIG, cl_khr_fp16 */) {
			CHECK_ERR(clGetDeviceInfo(d, q, 0, NULL, &ret), CL_INVALID_VALUE);
			continue;
		}
		ret = 0;
		CHECK_ERR(clGetDeviceInfo(d, q, 0, NULL, &ret), CL_SUCCESS);
		CHECK(ret > 0 && ret <= 256, "query %#x: size %zu", (unsigned)q, ret);
		char big[256];
		size_t ret2 = 0;
		CHECK_ERR(clGetDeviceInfo(d, q, sizeof big, big, &ret2), CL_SUCCESS);
		CHECK(ret2 == ret, "query %#x: size %zu then %zu", (unsigned)q, ret, ret2);
		if (ret > 0)
			CHECK_ERR(clGetDeviceInfo(d, q, ret - 1, big, NULL), CL_INVALID_VALUE);
	}
	/* And every query OpenCL 2.0 to 3.0 added; the values that OpenCL
	 * 3.0 fixes for what the device offers are in threezero_checks. */
	for (cl_device_info q = CL_DEVICE_IMAGE_PITCH_ALIGNMENT; q <= CL_DEVICE_LATEST_CONFORMANCE_VERSION_PASSED; q++) {
		if (q == 0x105F || (q > CL_DEVICE_GENERIC_ADDRESS_SPACE_SUPPORT && q < CL_DEVICE_OPENCL_C_FEATURES)) {
			/* Not defined by OpenCL (extensions' numbers). */
			CHECK_ERR(clGetDeviceInfo(d, q, 0, NULL, &ret), CL_INVALID_VALUE);
			continue;
		}
		ret = 1;
		CHECK_ERR(clGetDeviceInfo(d, q, 0, NULL, &ret), CL_SUCCESS);
		int empty = q == CL_DEVICE_ILS_WITH_VERSION || q == CL_DEVICE_BUILT_IN_KERNELS_WITH_VERSION;
		CHECK(empty ? ret == 0 : ret > 0 && ret <= 16384, "query %#x: size %zu", (unsigned)q, ret);
		char *big = calloc(1, ret + 1);
		size_t ret2 = 0;
		CHECK_ERR(clGetDeviceInfo(d, q, ret + 1, big, &ret2), CL_SUCCESS);
		CHECK(ret2 == ret, "query %#x: size %zu then %zu", (unsigned)q, ret, ret2);
		if (ret > 0)
			CHECK_ERR(clGetDeviceInfo(d, q, ret - 1, big, NULL), CL_INVALID_VALUE);
		free(big);
	}
	threezero_checks(d);
	CHECK_ERR(clGetDeviceInfo(d, 0x7fffffff, sizeof u, &u, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u, &u, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_NAME, 4, name, NULL), CL_INVALID_VALUE);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_NAME, 0, NULL, NULL), CL_SUCCESS);

	/* Retain, release, partition. */
	CHECK_ERR(clRetainDevice(d), CL_SUCCESS);
	CHECK_ERR(clReleaseDevice(d), CL_SUCCESS);
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_REFERENCE_COUNT, sizeof u, &u, NULL), CL_SUCCESS);
	CHECK(u == 1, "reference count %u", u);
	cl_device_partition_property props[] = {CL_DEVICE_PARTITION_EQUALLY, 1, 0};
	CHECK_ERR(clCreateSubDevices(d, props, 8, devs, &n), CL_INVALID_VALUE);
	CHECK_ERR(clCreateSubDevices(d, NULL, 0, NULL, NULL), CL_INVALID_VALUE);

	/* Handles of the wrong kind, or made up, that reach the ICD. */
	struct fake fake = {.dispatch = *(struct _cl_icd_dispatch **)d};
	cl_device_id fake_dev = (cl_device_id)(void *)&fake;
	cl_device_id plat_as_dev = (cl_device_id)(void *)p;
	cl_platform_id dev_as_plat = (cl_platform_id)(void *)d;
	cl_device_id off_by_one = (cl_device_id)(void *)((char *)d + 8);
	CHECK_ERR(clGetDeviceInfo(fake_dev, CL_DEVICE_NAME, sizeof name, name, NULL), CL_INVALID_DEVICE);
	CHECK_ERR(clGetDeviceInfo(plat_as_dev, CL_DEVICE_NAME, sizeof name, name, NULL), CL_INVALID_DEVICE);
	CHECK_ERR(clGetDeviceInfo(NULL, CL_DEVICE_NAME, sizeof name, name, NULL), CL_INVALID_DEVICE);
	CHECK_ERR(clRetainDevice(fake_dev), CL_INVALID_DEVICE);
	CHECK_ERR(clReleaseDevice(plat_as_dev), CL_INVALID_DEVICE);
	CHECK_ERR(clCreateSubDevices(plat_as_dev, props, 8, devs, &n), CL_INVALID_DEVICE);
	CHECK_ERR(clGetPlatformInfo(dev_as_plat, CL_PLATFORM_NAME, sizeof name, name, NULL), CL_INVALID_PLATFORM);
	CHECK_ERR(clGetDeviceIDs(dev_as_plat, CL_DEVICE_TYPE_ALL, 8, devs, &n), CL_INVALID_PLATFORM);
	CHECK_ERR(clUnloadPlatformCompiler(dev_as_plat), CL_INVALID_PLATFORM);
	CHECK(clGetExtensionFunctionAddressForPlatform(dev_as_plat, "clIcdGetPlatformIDsKHR") == NULL,
	      "extension function of a non-platform");
	/* off_by_one's dispatch pointer is d's sysfs path: call the ICD's
	 * entry directly, as the loader would. */
	CHECK_ERR(fake.dispatch->clGetDeviceInfo(off_by_one, CL_DEVICE_NAME, sizeof name, name, NULL),
		  CL_INVALID_DEVICE);

	/* Found through sysfs, without vgpu-icdd: queries only. */
	CHECK_ERR(clGetDeviceInfo(d, CL_DEVICE_AVAILABLE, sizeof b, &b, NULL), CL_SUCCESS);
	CHECK(b == CL_FALSE, "available %u without the daemon", b);
	cl_int err = CL_SUCCESS;
	CHECK(clCreateContext(NULL, 1, &d, NULL, NULL, &err) == NULL, "clCreateContext returned a context");
	CHECK(err == CL_DEVICE_NOT_AVAILABLE, "clCreateContext: %d", err);
	CHECK(clCreateContext(NULL, 1, &d, NULL, NULL, NULL) == NULL, "clCreateContext returned a context");
	CHECK(clCreateContextFromType(NULL, CL_DEVICE_TYPE_GPU, NULL, NULL, &err) == NULL, "context from type");
	CHECK(err == CL_OUT_OF_RESOURCES, "clCreateContextFromType of two vGPUs: %d", err);
	err = CL_SUCCESS;
	CHECK(clCreateContextFromType(NULL, ~(cl_device_type)0, NULL, NULL, &err) == NULL, "context from ~0");
	CHECK(err == CL_OUT_OF_RESOURCES, "clCreateContextFromType(~0) of two vGPUs: %d", err);
}

/* Every entry of the dispatch table is filled but those whose types only
 * exist on Windows (cl_icd.h declares them void *). */
static void dispatch_checks(cl_platform_id p)
{
	const struct _cl_icd_dispatch *t = *(struct _cl_icd_dispatch **)p;
	const void *const windows_only[] = {
		t->clGetDeviceIDsFromD3D10KHR,		 t->clCreateFromD3D10BufferKHR,
		t->clCreateFromD3D10Texture2DKHR,	 t->clCreateFromD3D10Texture3DKHR,
		t->clEnqueueAcquireD3D10ObjectsKHR,	 t->clEnqueueReleaseD3D10ObjectsKHR,
		t->clGetDeviceIDsFromD3D11KHR,		 t->clCreateFromD3D11BufferKHR,
		t->clCreateFromD3D11Texture2DKHR,	 t->clCreateFromD3D11Texture3DKHR,
		t->clCreateFromDX9MediaSurfaceKHR,	 t->clEnqueueAcquireD3D11ObjectsKHR,
		t->clEnqueueReleaseD3D11ObjectsKHR,	 t->clGetDeviceIDsFromDX9MediaAdapterKHR,
		t->clEnqueueAcquireDX9MediaSurfacesKHR, t->clEnqueueReleaseDX9MediaSurfacesKHR,
	};
	size_t nulls = 0, n = sizeof *t / sizeof(void *);
	const void *const *slot = (const void *const *)(const void *)t;
	for (size_t i = 0; i < n; i++)
		nulls += slot[i] == NULL;
	size_t want = sizeof windows_only / sizeof windows_only[0];
	for (size_t i = 0; i < want; i++)
		CHECK(windows_only[i] == NULL, "Windows-only entry %zu is set", i);
	CHECK(nulls == want, "%zu of %zu dispatch entries are NULL, want %zu", nulls, n, want);
	CHECK(t->clGetPlatformInfo != NULL && t->clSVMFree != NULL && t->clSetContextDestructorCallback != NULL,
	      "entries missing");
}

/* The entry point the loader keeps to itself, called directly. */
static void entry_checks(const char *lib, cl_int want_err, cl_uint want_n)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	CHECK(h != NULL, "dlopen %s: %s", lib, dlerror());
	if (h == NULL)
		return;
	clIcdGetPlatformIDsKHR_fn get = (clIcdGetPlatformIDsKHR_fn)dlsym(h, "clIcdGetPlatformIDsKHR");
	void *(*ext)(const char *) = (void *(*)(const char *))dlsym(h, "clGetExtensionFunctionAddress");
	CHECK(get != NULL && ext != NULL, "symbols missing");
	if (get == NULL || ext == NULL)
		return;
	CHECK(ext("clIcdGetPlatformIDsKHR") == (void *)get, "clGetExtensionFunctionAddress(clIcdGetPlatformIDsKHR)");
	CHECK(ext("clGetPlatformInfo") == NULL && ext(NULL) == NULL, "clGetExtensionFunctionAddress answers too much");
	cl_platform_id ps[2] = {NULL, NULL};
	cl_uint n = 99;
	CHECK_ERR(get(0, NULL, NULL), CL_INVALID_VALUE);
	CHECK_ERR(get(0, ps, &n), CL_INVALID_VALUE);
	CHECK_ERR(get(2, ps, &n), want_err);
	CHECK(n == want_n, "%u platforms, want %u", n, want_n);
	if (want_n == 1) {
		CHECK(ps[0] != NULL && ps[1] == NULL, "platforms %p %p", (void *)ps[0], (void *)ps[1]);
		/* NULL stands for the ICD's one platform. */
		const struct _cl_icd_dispatch *t = *(struct _cl_icd_dispatch **)ps[0];
		char name[16] = "";
		CHECK_ERR(t->clGetPlatformInfo(NULL, CL_PLATFORM_NAME, sizeof name, name, NULL), CL_SUCCESS);
		CHECK(strcmp(name, "vgpud") == 0, "NULL platform name %s", name);
		CHECK_ERR(t->clGetPlatformIDs(1, ps, NULL), CL_SUCCESS);
	}
	dlclose(h);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: apitest full|none libvgpud-icd.so\n");
		return 2;
	}
	if (strcmp(argv[1], "none") == 0) {
		cl_uint n = 99;
		CHECK_ERR(clGetPlatformIDs(0, NULL, &n), CL_PLATFORM_NOT_FOUND_KHR);
		CHECK(n == 0, "%u platforms", n);
		entry_checks(argv[2], CL_PLATFORM_NOT_FOUND_KHR, 0);
	} else {
		cl_platform_id p = vgpud_platform();
		CHECK(p != NULL, "no vgpud platform");
		if (p != NULL) {
			platform_checks(p);
			device_checks(p);
			dispatch_checks(p);
		}
		entry_checks(argv[2], CL_SUCCESS, 1);
	}
	printf("apitest %s: %d failures\n", argv[1], failures);
	return failures > 125 ? 125 : failures;
}

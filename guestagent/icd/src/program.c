/* program.c: programs: source, builds, binaries (their options and
 * includes: program_options.c).
 *
 * A program "binary" is a portable blob: a magic, the version, the options
 * the device was given and the inlined source. Applications that cache
 * binaries (pyopencl does) get it back and build it again anywhere.
 * clCompileProgram keeps the inlined source and options (with the
 * embedded headers it is given, its -D and -U lines before it and an
 * #undef of each -D macro after it, so that a unit's macros end with it);
 * clLinkProgram concatenates the compiled sources and builds the whole. */
#define _GNU_SOURCE
#include "icd.h"
#include "program_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIN_MAGIC "VGPUDBIN"
#define BIN_VERSION 2
#define LOG_CAP VGPU_MAX_BUILD_LOG_LEN
#define INFO_CAP (256u << 10)

/* ---- Objects -------------------------------------------------------- */

static cl_program new_program(cl_context ctx)
{
	cl_program p = calloc(1, sizeof *p);
	if (p == NULL)
		return NULL;
	vgpu_obj_init(&p->obj, VGPU_PROGRAM);
	p->ctx = ctx;
	IREF(ctx);
	p->status = CL_BUILD_NONE;
	p->bintype = CL_PROGRAM_BINARY_TYPE_NONE;
	return p;
}

static void free_kernels(cl_program p)
{
	for (cl_uint i = 0; i < p->nkernels; i++)
		free(p->kernels[i].args);
	free(p->kernels);
	p->kernels = NULL;
	p->nkernels = 0;
	free(p->kernel_names);
	p->kernel_names = NULL;
}

static void drop_device_program(cl_program p)
{
	if (p->id != 0 && conn_ok(p->ctx)) {
		struct {
			struct vgpu_icdp_header h;
			struct vgpu_icdp_program_free b;
		} f = {.b = {.program = p->id}};
		conn_hdr(p->ctx, &f, VGPU_ICDP_OP_PROGRAM_FREE, sizeof f);
		conn_send(p->ctx, &f, sizeof f);
	}
	p->id = 0;
}

void vgpu_program_destroy(cl_program p)
{
	cl_context ctx = p->ctx;
	ctx_lock(ctx);
	drop_device_program(p);
	ctx_unlock(ctx);
	free_kernels(p);
	free(p->source);
	free(p->specs);
	free(p->built_src);
	free(p->built_opts);
	free(p->options);
	free(p->log);
	free(p);
	PUT(ctx);
}

cl_program CL_API_CALL vgpu_clCreateProgramWithSource(cl_context context, cl_uint count, const char **strings,
						      const size_t *lengths, cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_program p = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (count == 0 || strings == NULL) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	struct sbuf b = {0};
	for (cl_uint i = 0; i < count; i++) {
		if (strings[i] == NULL) {
			free(b.p);
			err = CL_INVALID_VALUE;
			goto put;
		}
		size_t n = lengths != NULL && lengths[i] != 0 ? strnlen(strings[i], lengths[i]) : strlen(strings[i]);
		if (lengths != NULL && lengths[i] != 0)
			n = lengths[i]; /* the bytes as given, NULs included (refused by the device) */
		sb_add(&b, strings[i], n);
	}
	if (b.p == NULL)
		sb_add(&b, "", 0);
	if (b.oom || (p = new_program(ctx)) == NULL) {
		free(b.p);
		err = CL_OUT_OF_HOST_MEMORY;
		goto put;
	}
	p->source = b.p;
	p->source_len = b.len;
	vgpu_obj_publish(&p->obj);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return p;
}

/* clCreateProgramWithIL (OpenCL 2.1, cl_khr_il_program): a SPIR-V module,
 * kept as given; the device checks it when the program is built
 * (docs/ABI.md "SPIR-V"). Only the header's magic is looked at here, for
 * CL_INVALID_VALUE; a device that takes no SPIR-V (PoCL 3.1, a daemon
 * older than protocol 5) gives CL_INVALID_OPERATION, as OpenCL does for a
 * context with no device that supports IL. */
cl_program CL_API_CALL vgpu_clCreateProgramWithIL(cl_context context, const void *il, size_t length,
						  cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_program p = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (il == NULL || length == 0) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	if (!vgpu_device_il(ctx->dev)) {
		err = CL_INVALID_OPERATION;
		goto put;
	}
	uint32_t magic = 0;
	if (length >= sizeof magic)
		memcpy(&magic, il, sizeof magic);
	if (length < 20 || length % 4 != 0 || magic != 0x07230203u) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	char *m = vgpu_strndup(il, length);
	if (m == NULL || (p = new_program(ctx)) == NULL) {
		free(m);
		err = CL_OUT_OF_HOST_MEMORY;
		goto put;
	}
	p->il = 1;
	p->source = m;
	p->source_len = length;
	vgpu_obj_publish(&p->obj);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return p;
}

/* ---- Specialization constants (SPIR-V) ------------------------------ */

/* spv_word reads word i of module m. */
static uint32_t spv_word(const char *m, size_t i)
{
	uint32_t w;
	memcpy(&w, m + 4 * i, 4);
	return w;
}

/* spec_find finds specialization constant spec_id of module m (len
 * bytes): the word index of its OpSpecConstantTrue (48), OpSpecConstantFalse
 * (49) or OpSpecConstant (50) and its size in bytes (1 for a boolean, as
 * OpenCL asks: a cl_uchar). 0, or -1 where the module has none of that
 * SpecId (or an instruction runs past the end). */
static int spec_find(const char *m, size_t len, uint32_t spec_id, size_t *at, uint32_t *size)
{
	size_t n = len / 4;
	uint32_t target = 0;
	for (size_t i = 5; i < n && target == 0;) {
		uint32_t w0 = spv_word(m, i), wc = w0 >> 16;
		if (wc == 0 || wc > n - i)
			return -1;
		/* OpDecorate (71) target SpecId (1) id */
		if ((w0 & 0xffff) == 71 && wc == 4 && spv_word(m, i + 2) == 1 && spv_word(m, i + 3) == spec_id)
			target = spv_word(m, i + 1);
		i += wc;
	}
	if (target == 0)
		return -1;
	size_t def = 0;
	uint32_t type = 0;
	for (size_t i = 5; i < n;) {
		uint32_t w0 = spv_word(m, i), wc = w0 >> 16, op = w0 & 0xffff;
		if (wc == 0 || wc > n - i)
			return -1;
		if ((op == 48 || op == 49 || op == 50) && wc >= 3 && spv_word(m, i + 2) == target) {
			def = i;
			type = spv_word(m, i + 1);
		}
		i += wc;
	}
	if (def == 0)
		return -1;
	uint32_t op = spv_word(m, def) & 0xffff;
	if (op != 50) {
		*at = def;
		*size = 1;
		return 0;
	}
	for (size_t i = 5; i < n;) {
		uint32_t w0 = spv_word(m, i), wc = w0 >> 16, top = w0 & 0xffff;
		/* OpTypeInt (21) and OpTypeFloat (22): result id, width */
		if ((top == 21 || top == 22) && wc >= 3 && spv_word(m, i + 1) == type) {
			uint32_t width = spv_word(m, i + 2);
			uint32_t words = width <= 32 ? 1 : 2;
			if ((width != 8 && width != 16 && width != 32 && width != 64) || (spv_word(m, def) >> 16) != 3 + words)
				return -1;
			*at = def;
			*size = width / 8;
			return 0;
		}
		i += wc;
	}
	return -1;
}

cl_int CL_API_CALL vgpu_clSetProgramSpecializationConstant(cl_program program, cl_uint spec_id, size_t spec_size,
							   const void *spec_value)
{
	ENTER_OBJ(cl_program, p, program, VGPU_PROGRAM, CL_INVALID_PROGRAM);
	cl_int err = CL_SUCCESS;
	size_t at;
	uint32_t size;
	if (!vgpu_device_il(ctx->dev)) {
		err = CL_INVALID_OPERATION; /* as OpenCL 3.0 asks where no device takes IL */
	} else if (!p->il || p->source == NULL) {
		err = CL_INVALID_PROGRAM;
	} else if (spec_find(p->source, p->source_len, spec_id, &at, &size) != 0) {
		err = CL_INVALID_SPEC_ID;
	} else if (spec_value == NULL || spec_size != size) {
		err = CL_INVALID_VALUE;
	} else {
		uint64_t v = 0;
		memcpy(&v, spec_value, spec_size);
		cl_uint i = 0;
		while (i < p->nspecs && p->specs[i].id != spec_id)
			i++;
		if (i == p->nspecs) {
			struct vgpu_spec *s = realloc(p->specs, (p->nspecs + 1) * sizeof *s);
			if (s == NULL) {
				err = CL_OUT_OF_HOST_MEMORY;
				goto out;
			}
			p->specs = s;
			p->nspecs++;
		}
		p->specs[i] = (struct vgpu_spec){.id = spec_id, .size = size, .value = v};
	}
out:
	PUT(p);
	LEAVE(ctx);
	return err;
}

/* specialize writes the values of p's specialization constants into m, a
 * copy of p's module (len bytes): a boolean's opcode becomes
 * OpSpecConstantTrue or False, another's literal its value (zero-extended:
 * OpenCL's integers have no signedness), so that the device, which takes
 * no values, builds with them as the constants' defaults. */
static void specialize(const struct _cl_program *p, char *m, size_t len)
{
	for (cl_uint i = 0; i < p->nspecs; i++) {
		size_t at;
		uint32_t size;
		if (spec_find(m, len, p->specs[i].id, &at, &size) != 0 || size != p->specs[i].size)
			continue; /* checked when it was set */
		uint32_t w0 = spv_word(m, at);
		uint64_t v = p->specs[i].value;
		if ((w0 & 0xffff) != 50) {
			w0 = (w0 & 0xffff0000u) | (v != 0 ? 48u : 49u);
			memcpy(m + 4 * at, &w0, 4);
			continue;
		}
		uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
		memcpy(m + 4 * (at + 3), &lo, 4);
		if (size == 8)
			memcpy(m + 4 * (at + 4), &hi, 4);
	}
}

/* The binary blob: magic, version, options length, source length, (from
 * version 2) the program's binary type and a flags word (BIN_IL: the
 * source is a SPIR-V module; other bits 0), then the options and the
 * source (not NUL-terminated). Version 1, without the type, is an
 * executable. */
struct binhdr {
	char magic[8];
	uint32_t version;
	uint32_t opts_len;
	uint64_t src_len;
};

struct binhdr2 {
	struct binhdr h;
	uint32_t type; /* CL_PROGRAM_BINARY_TYPE_{EXECUTABLE,COMPILED_OBJECT,LIBRARY} */
	uint32_t flags;
};

#define BIN_IL 1u

static int parse_binary(const unsigned char *bin, size_t len, char **src, size_t *src_len, char **opts,
			cl_program_binary_type *type, int *il)
{
	struct binhdr2 h2 = {.type = CL_PROGRAM_BINARY_TYPE_EXECUTABLE};
	struct binhdr h;
	if (bin == NULL || len < sizeof h)
		return -1;
	memcpy(&h, bin, sizeof h);
	size_t hl = sizeof h;
	if (h.version == BIN_VERSION) {
		if (len < sizeof h2)
			return -1;
		memcpy(&h2, bin, sizeof h2);
		hl = sizeof h2;
	}
	if (memcmp(h.magic, BIN_MAGIC, 8) != 0 || (h.version != 1 && h.version != BIN_VERSION) ||
	    h.opts_len > VGPU_MAX_OPTIONS_LEN || h.src_len > VGPU_MAX_SOURCE_LEN || len != hl + h.opts_len + h.src_len ||
	    (h2.flags & ~BIN_IL) != 0 ||
	    (h2.type != CL_PROGRAM_BINARY_TYPE_EXECUTABLE && h2.type != CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT &&
	     h2.type != CL_PROGRAM_BINARY_TYPE_LIBRARY))
		return -1;
	*type = h2.type;
	*il = (h2.flags & BIN_IL) != 0;
	*opts = vgpu_strndup((const char *)bin + hl, h.opts_len);
	*src = vgpu_strndup((const char *)bin + hl + h.opts_len, (size_t)h.src_len);
	*src_len = (size_t)h.src_len;
	if (*opts == NULL || *src == NULL) {
		free(*opts);
		free(*src);
		return -2;
	}
	return 0;
}

cl_program CL_API_CALL vgpu_clCreateProgramWithBinary(cl_context context, cl_uint num_devices,
						      const cl_device_id *devices, const size_t *lengths,
						      const unsigned char **binaries, cl_int *binary_status,
						      cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_program p = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if (devices == NULL || num_devices == 0) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	for (cl_uint i = 0; i < num_devices; i++) {
		if (devices[i] != ctx->dev) {
			err = CL_INVALID_DEVICE;
			goto put;
		}
	}
	if (lengths == NULL || binaries == NULL) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	for (cl_uint i = 0; i < num_devices; i++) {
		if (lengths[i] == 0 || binaries[i] == NULL) {
			if (binary_status != NULL)
				binary_status[i] = CL_INVALID_VALUE;
			err = CL_INVALID_VALUE;
		}
	}
	if (err != CL_SUCCESS)
		goto put;
	char *src = NULL, *opts = NULL;
	size_t src_len = 0;
	cl_program_binary_type type = CL_PROGRAM_BINARY_TYPE_EXECUTABLE;
	int il = 0;
	for (cl_uint i = 0; i < num_devices; i++) {
		char *s, *o;
		size_t sl;
		cl_program_binary_type t;
		int sil = 0;
		int r = parse_binary(binaries[i], lengths[i], &s, &sl, &o, &t, &sil);
		if (binary_status != NULL)
			binary_status[i] = r == 0 ? CL_SUCCESS : CL_INVALID_BINARY;
		if (r == -2)
			err = CL_OUT_OF_HOST_MEMORY;
		else if (r != 0 && err == CL_SUCCESS)
			err = CL_INVALID_BINARY;
		if (r == 0 && src == NULL) {
			src = s;
			opts = o;
			src_len = sl;
			type = t;
			il = sil;
		} else if (r == 0) {
			free(s);
			free(o);
		}
	}
	if (err == CL_SUCCESS && (p = new_program(ctx)) == NULL)
		err = CL_OUT_OF_HOST_MEMORY;
	if (err != CL_SUCCESS) {
		free(src);
		free(opts);
		goto put;
	}
	p->from_binary = 1;
	p->il = il;
	p->built_src = src;
	p->built_len = src_len;
	p->built_opts = opts;
	/* A compiled object or library links as the one it came from; building
	 * any of them makes an executable of its source. */
	p->bintype = type;
	vgpu_obj_publish(&p->obj);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return p;
}

cl_program CL_API_CALL vgpu_clCreateProgramWithBuiltInKernels(cl_context context, cl_uint num_devices,
							      const cl_device_id *devices, const char *names,
							      cl_int *errcode_ret)
{
	cl_int err;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
	} else {
		err = CL_INVALID_VALUE; /* "a kernel name not supported": the device has none */
		if (devices != NULL && num_devices > 0)
			for (cl_uint i = 0; i < num_devices; i++)
				if (devices[i] != ctx->dev)
					err = CL_INVALID_DEVICE;
		(void)names;
		PUT(ctx);
	}
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return NULL;
}

cl_int CL_API_CALL vgpu_clRetainProgram(cl_program program)
{
	return vgpu_retain(program, VGPU_PROGRAM, CL_INVALID_PROGRAM);
}

cl_int CL_API_CALL vgpu_clReleaseProgram(cl_program program)
{
	return vgpu_release(program, VGPU_PROGRAM, CL_INVALID_PROGRAM, vgpu_put_locked);
}

/* ---- Building ------------------------------------------------------- */

/* type_size: the size of an OpenCL C scalar or vector type, 0 if not one. */
static size_t type_size(const char *t)
{
	static const struct {
		const char *name;
		size_t size;
	} base[] = {
		{"char", 1},  {"uchar", 1},  {"unsigned char", 1}, {"short", 2},  {"ushort", 2},
		{"unsigned short", 2}, {"int", 4}, {"uint", 4}, {"unsigned int", 4}, {"long", 8},
		{"ulong", 8}, {"unsigned long", 8}, {"float", 4}, {"double", 8}, {"half", 2},
		{"bool", 1},  {"size_t", 8}, {"ptrdiff_t", 8}, {"intptr_t", 8}, {"uintptr_t", 8},
	};
	for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
		size_t n = strlen(base[i].name);
		if (strncmp(t, base[i].name, n) != 0)
			continue;
		const char *v = t + n;
		if (*v == '\0')
			return base[i].size;
		char *e;
		unsigned long w = strtoul(v, &e, 10);
		if (*e != '\0')
			continue;
		switch (w) {
		case 2: return 2 * base[i].size;
		case 3:
		case 4: return 4 * base[i].size;
		case 8: return 8 * base[i].size;
		case 16: return 16 * base[i].size;
		}
	}
	return 0;
}

static void field(char *dst, const uint8_t *src, size_t n)
{
	size_t i = 0;
	for (; i + 1 < n && src[i] != 0; i++)
		dst[i] = (char)src[i];
	dst[i] = '\0';
}

/* parse_info decodes the program-information blob (docs/ABI.md
 * "Program-information blob"); 0, or -1 if it is malformed. */
static int parse_info(cl_program p, const uint8_t *b, uint64_t len)
{
	struct vgpu_program_info_header h;
	if (len < sizeof h)
		return -1;
	memcpy(&h, b, sizeof h);
	if (h.total_len > len || h.total_len < sizeof h ||
	    h.kernel_count > (h.total_len - sizeof h) / sizeof(struct vgpu_kernel_info))
		return -1;
	struct vgpu_kinfo *ks = calloc(h.kernel_count + 1, sizeof *ks);
	if (ks == NULL)
		return -1;
	uint64_t off = sizeof h;
	struct sbuf names = {0};
	sb_add(&names, "", 0);
	for (uint32_t i = 0; i < h.kernel_count; i++) {
		struct vgpu_kernel_info kr;
		if (h.total_len - off < sizeof kr)
			goto bad;
		memcpy(&kr, b + off, sizeof kr);
		off += sizeof kr;
		if (kr.num_args > (h.total_len - off) / sizeof(struct vgpu_arg_info) || kr.num_args > VGPU_MAX_KERNEL_ARGS)
			goto bad;
		struct vgpu_kinfo *k = &ks[i];
		field(k->name, kr.name, sizeof kr.name);
		k->num_args = kr.num_args;
		k->work_group_size = kr.work_group_size;
		k->preferred_multiple = kr.preferred_multiple;
		k->local_mem = kr.local_mem_size;
		k->private_mem = kr.private_mem_size;
		for (int d = 0; d < 3; d++)
			k->compile_wg[d] = kr.compile_work_group_size[d];
		k->args = calloc(kr.num_args + 1, sizeof *k->args);
		if (k->args == NULL)
			goto bad;
		for (uint32_t j = 0; j < kr.num_args; j++) {
			struct vgpu_arg_info ar;
			memcpy(&ar, b + off, sizeof ar);
			off += sizeof ar;
			struct vgpu_karg_info *a = &k->args[j];
			a->address = ar.address_qualifier;
			a->access = ar.access_qualifier;
			a->type_qual = ar.type_qualifier;
			field(a->type_name, ar.type_name, sizeof ar.type_name);
			field(a->name, ar.name, sizeof ar.name);
			a->scalar_size = a->address == VGPU_ARG_ADDRESS_PRIVATE ? type_size(a->type_name) : 0;
		}
		sb_printf(&names, "%s%s", i ? ";" : "", k->name);
	}
	if (names.oom)
		goto bad;
	free_kernels(p);
	p->kernels = ks;
	p->nkernels = h.kernel_count;
	p->kernel_names = names.p;
	return 0;
bad:
	for (uint32_t i = 0; i < h.kernel_count; i++)
		free(ks[i].args);
	free(ks);
	free(names.p);
	return -1;
}

/* set_log makes the build log icd (the ICD's lines) then dev (dev_len
 * bytes of the device's, not NUL-terminated). icd may be the old log. */
static void set_log(cl_program p, const char *icd, const char *dev, size_t dev_len)
{
	struct sbuf b = {0};
	sb_add(&b, "", 0);
	if (icd != NULL)
		sb_str(&b, icd);
	if (dev != NULL)
		sb_add(&b, dev, dev_len);
	free(p->log);
	p->log = b.p;
}

static void set_log_msg(cl_program p, const char *icd, const char *msg)
{
	set_log(p, icd, msg, strlen(msg));
}

/* The OpenCL C 3.0 optional features (and their macros) a vGPU does not
 * report in CL_DEVICE_OPENCL_C_FEATURES (device.c): the physical compiler
 * defines those of its own device, so each is #undef'd before the source,
 * and a program that tests a macro sees what the vGPU offers, on every
 * device model it may migrate to. __opencl_c_int64 stays; so does
 * __opencl_c_fp64 where the device reports doubles. Harmless before
 * OpenCL C 3.0, where none is defined. __IMAGE_SUPPORT__ is the compiler's
 * "images are supported" in every version: it and __opencl_c_images stay
 * where CL_DEVICE_IMAGE_SUPPORT says they are (abi 1.8). The lines end with "#line 1" (ABI 1.7's source rules
 * take it), after the -D lines too, so __LINE__ counts the program's own
 * lines; a device older than 1.7 gets neither (the -D lines then move
 * __LINE__, as they always did). */
static const char *const absent_features[] = {
	"__opencl_c_3d_image_writes",		 "__opencl_c_atomic_order_acq_rel",
	"__opencl_c_atomic_order_seq_cst",	 "__opencl_c_atomic_scope_device",
	"__opencl_c_atomic_scope_all_devices", "__opencl_c_device_enqueue",
	"__opencl_c_generic_address_space",	 "__opencl_c_images",
	"__opencl_c_pipes",			 "__opencl_c_program_scope_global_variables",
	"__opencl_c_read_write_images",	 "__opencl_c_subgroups",
	"__opencl_c_work_group_collective_functions", "__IMAGE_SUPPORT__",
};

static int takes_line(const struct _cl_device_id *dev)
{
	return (dev->version >> 16) == VGPU_VERSION_MAJOR && (dev->version & 0xffff) >= 7;
}

static void undef_absent_features(struct sbuf *b, const struct _cl_device_id *dev)
{
	if (!takes_line(dev))
		return;
	int images = vgpu_device_images(dev, NULL) != NULL;
	for (size_t i = 0; i < sizeof absent_features / sizeof absent_features[0]; i++) {
		const char *m = absent_features[i];
		if (images && (strcmp(m, "__opencl_c_images") == 0 || strcmp(m, "__IMAGE_SUPPORT__") == 0))
			continue; /* abi 1.8: the device says it has images */
		sb_printf(b, "#undef %s\n", m);
	}
	if (!vgpu_device_has_fp64(dev))
		sb_str(b, "#undef __opencl_c_fp64\n");
}

/* device_build sends Build for p->built_src with p->built_opts and takes
 * the log and the kernel information. Returns CL_SUCCESS or the error of
 * clBuildProgram. icdlog is what the ICD adds to the front of the log. */
static cl_int device_build(cl_program p, const char *icdlog)
{
	cl_context ctx = p->ctx;
	drop_device_program(p);
	free_kernels(p);
	p->status = CL_BUILD_IN_PROGRESS;
	if (p->built_len == 0 || p->built_len > VGPU_MAX_SOURCE_LEN) {
		set_log_msg(p, icdlog,
			    p->built_len == 0 ? "vgpud ICD: the program is empty\n"
					      : "vgpud ICD: the source (includes inlined) is longer than the device takes (1 MiB)\n");
		p->status = CL_BUILD_ERROR;
		return CL_BUILD_PROGRAM_FAILURE;
	}
	size_t olen = strlen(p->built_opts != NULL ? p->built_opts : "");
	uint64_t need = p->built_len + olen + LOG_CAP + INFO_CAP;
	struct vgpu_range r;
	cl_int err = arena_alloc(ctx, need, &r);
	if (err != CL_SUCCESS) {
		p->status = CL_BUILD_ERROR;
		return err;
	}
	uint8_t *a = arena_ptr(ctx, &r);
	memcpy(a, p->built_src, p->built_len);
	memcpy(a + p->built_len, p->built_opts != NULL ? p->built_opts : "", olen);
	if (++ctx->next_program == 0)
		++ctx->next_program;
	uint32_t id = ctx->next_program;
	struct {
		struct vgpu_icdp_header h;
		struct vgpu_icdp_build b;
	} m = {.b = {
		       .device = ctx->dev->index,
		       .program = id,
		       .arena = r.arena,
		       .src_offset = r.off,
		       .src_len = (uint32_t)p->built_len,
		       .opts_len = (uint32_t)olen,
		       .opts_offset = r.off + p->built_len,
		       .out_offset = r.off + p->built_len + olen,
		       .out_cap = LOG_CAP + INFO_CAP,
		       .flags = p->il ? VGPU_FLAG_IL : 0,
	       }};
	conn_hdr(ctx, &m, VGPU_ICDP_OP_BUILD, sizeof m);
	struct vgpu_icdp_build_reply br;
	long n = conn_call(ctx, &m, sizeof m, &br, sizeof br);
	if (n < (long)sizeof br) {
		arena_free(ctx, &r);
		p->status = CL_BUILD_ERROR;
		set_log_msg(p, icdlog, "vgpud ICD: the connection to vgpu-icdd failed during the build\n");
		return CL_OUT_OF_RESOURCES;
	}
	const uint8_t *out = a + p->built_len + olen;
	uint64_t cap = LOG_CAP + INFO_CAP;
	uint64_t loglen = br.log_len < cap ? br.log_len : cap;
	/* The ICD's lines (headers not found, which a false #if may have
	 * skipped) only matter when the build failed: applications warn about
	 * any log of a successful build. */
	set_log(p, br.status != VGPU_STATUS_OK ? icdlog : NULL, (const char *)out, (size_t)loglen);
	if (br.status != VGPU_STATUS_OK) {
		arena_free(ctx, &r);
		p->status = CL_BUILD_ERROR;
		return br.status == VGPU_STATUS_BUILD_FAILED ? CL_BUILD_PROGRAM_FAILURE : CL_OUT_OF_RESOURCES;
	}
	p->id = id;
	int ok;
	if (loglen + br.info_len <= cap) {
		ok = parse_info(p, out + loglen, br.info_len) == 0;
	} else {
		/* Ask again, with room. */
		struct vgpu_range ir;
		ok = 0;
		if (br.info_len < (64u << 20) && arena_alloc(ctx, br.info_len, &ir) == CL_SUCCESS) {
			struct {
				struct vgpu_icdp_header h;
				struct vgpu_icdp_program_info b;
			} q = {.b = {.program = id, .arena = ir.arena, .out_offset = ir.off, .out_cap = ir.len}};
			conn_hdr(ctx, &q, VGPU_ICDP_OP_PROGRAM_INFO, sizeof q);
			struct vgpu_icdp_program_info_reply qr;
			if (conn_call(ctx, &q, sizeof q, &qr, sizeof qr) >= (long)sizeof qr && qr.status == 0 &&
			    qr.info_len <= ir.len)
				ok = parse_info(p, arena_ptr(ctx, &ir), qr.info_len) == 0;
			arena_free(ctx, &ir);
		}
	}
	arena_free(ctx, &r);
	if (!ok) {
		drop_device_program(p);
		p->status = CL_BUILD_ERROR;
		set_log_msg(p, p->log, "vgpud ICD: the program information from the device is malformed\n");
		return CL_OUT_OF_RESOURCES;
	}
	p->status = CL_BUILD_SUCCESS;
	p->bintype = CL_PROGRAM_BINARY_TYPE_EXECUTABLE;
	return CL_SUCCESS;
}

/* check_devices: clBuildProgram's device list rules. */
static cl_int check_devices(cl_program p, cl_uint num_devices, const cl_device_id *devices)
{
	if ((devices == NULL) != (num_devices == 0))
		return CL_INVALID_VALUE;
	for (cl_uint i = 0; i < num_devices; i++)
		if (devices[i] != p->ctx->dev)
			return CL_INVALID_DEVICE;
	return CL_SUCCESS;
}

/* refuse_options ends a build or compile (what) whose options o parse_opts
 * refused: the log names the option, the program's build failed, o is
 * freed; it returns err. */
static cl_int refuse_options(cl_program p, struct opts *o, const char *what, cl_int err)
{
	char msg[256];
	snprintf(msg, sizeof msg, "vgpud ICD: %s option %s is not supported by the device\n", what, o->bad);
	set_log(p, msg, NULL, 0);
	p->status = CL_BUILD_ERROR;
	opts_free(o);
	return err;
}

cl_int CL_API_CALL vgpu_clBuildProgram(cl_program program, cl_uint num_devices, const cl_device_id *devices,
				       const char *options, void(CL_CALLBACK *notify)(cl_program, void *),
				       void *user_data)
{
	ENTER_OBJ(cl_program, p, program, VGPU_PROGRAM, CL_INVALID_PROGRAM);
	cl_int err = check_devices(p, num_devices, devices);
	if (err == CL_SUCCESS && notify == NULL && user_data != NULL)
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && p->nkernel_objs > 0)
		err = CL_INVALID_OPERATION;
	if (err == CL_SUCCESS && p->source == NULL && !p->from_binary)
		err = CL_INVALID_OPERATION; /* a linked library or compiled object */
	if (err == CL_SUCCESS && !conn_ok(ctx))
		err = CL_OUT_OF_RESOURCES;
	struct opts o;
	if (err == CL_SUCCESS && parse_opts(options, &o, 0) != 0) {
		err = refuse_options(p, &o, "build", CL_INVALID_BUILD_OPTIONS);
	} else if (err == CL_SUCCESS) {
		free(p->options);
		p->options = strdup(options != NULL ? options : "");
		struct expand x = {.o = &o, .line_ok = takes_line(ctx->dev)};
		sb_add(&x.log, "", 0);
		if (p->il && !p->from_binary) {
			/* A module goes to the device as it is, with the options
			 * for the device (nothing to expand or define) and the
			 * values of its specialization constants written in. */
			sb_add(&x.out, p->source, p->source_len);
			if (!x.out.oom)
				specialize(p, x.out.p, x.out.len);
			free(p->built_src);
			free(p->built_opts);
			p->built_src = x.out.p;
			p->built_len = x.out.len;
			p->built_opts = o.dev.p;
			o.dev.p = NULL;
			x.out.p = NULL;
		} else if (!p->from_binary) {
			undef_absent_features(&x.out, ctx->dev);
			sb_add(&x.out, o.defs.p, o.defs.len); /* -D and -U, before the source */
			if (takes_line(ctx->dev))
				sb_str(&x.out, "#line 1\n");
			expand_source(&x, p->source, p->source_len);
			if (x.out.p == NULL)
				sb_add(&x.out, "", 0);
			free(p->built_src);
			free(p->built_opts);
			p->built_src = x.out.p;
			p->built_len = x.out.len;
			p->built_opts = o.dev.p;
			o.dev.p = NULL;
			x.out.p = NULL;
		}
		if (x.out.oom || x.log.oom || p->built_src == NULL) {
			err = CL_OUT_OF_HOST_MEMORY;
			p->status = CL_BUILD_ERROR;
		} else if (x.failed) {
			set_log_msg(p, x.log.p, "vgpud ICD: the source with its includes is too large or nested too deeply\n");
			p->status = CL_BUILD_ERROR;
			err = CL_BUILD_PROGRAM_FAILURE;
		} else {
			err = device_build(p, x.log.p);
		}
		free(x.out.p);
		free(x.log.p);
		expand_free(&x);
		opts_free(&o);
	}
	PUT(p);
	LEAVE(ctx);
	if (notify != NULL && err != CL_INVALID_VALUE && err != CL_INVALID_DEVICE && err != CL_INVALID_OPERATION &&
	    err != CL_INVALID_BUILD_OPTIONS)
		notify(program, user_data);
	return err;
}

/* A compiled object keeps its inlined source and options; the link builds. */
cl_int CL_API_CALL vgpu_clCompileProgram(cl_program program, cl_uint num_devices, const cl_device_id *devices,
					 const char *options, cl_uint num_headers, const cl_program *headers,
					 const char **header_names, void(CL_CALLBACK *notify)(cl_program, void *),
					 void *user_data)
{
	ENTER_OBJ(cl_program, p, program, VGPU_PROGRAM, CL_INVALID_PROGRAM);
	cl_int err = check_devices(p, num_devices, devices);
	if (err == CL_SUCCESS && ((notify == NULL && user_data != NULL) ||
				  (num_headers == 0 && (headers != NULL || header_names != NULL)) ||
				  (num_headers != 0 && (headers == NULL || header_names == NULL))))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && (p->nkernel_objs > 0 || p->source == NULL))
		err = CL_INVALID_OPERATION;
	struct header *hs = NULL;
	if (err == CL_SUCCESS && num_headers > 0 && (hs = calloc(num_headers, sizeof *hs)) == NULL)
		err = CL_OUT_OF_HOST_MEMORY;
	for (cl_uint i = 0; err == CL_SUCCESS && i < num_headers; i++) {
		cl_program h = GET(headers[i], VGPU_PROGRAM);
		if (h == NULL || h->source == NULL || header_names[i] == NULL) {
			err = CL_INVALID_VALUE;
		} else {
			hs[i].name = header_names[i];
			hs[i].src = h->source; /* kept alive by the application during the call */
		}
		if (h != NULL)
			PUT(h);
	}
	struct opts o;
	if (err == CL_SUCCESS && parse_opts(options, &o, 0) != 0) {
		err = refuse_options(p, &o, "compile", CL_INVALID_COMPILER_OPTIONS);
	} else if (err == CL_SUCCESS && p->il) {
		/* A SPIR-V module is kept as the compiled object, its
		 * specialization constants written in; the link builds it
		 * (headers are for source). */
		char *m = vgpu_strndup(p->source, p->source_len);
		char *opts = strdup(options != NULL ? options : "");
		if (m == NULL || opts == NULL) {
			free(m);
			free(opts);
			err = CL_OUT_OF_HOST_MEMORY;
		} else {
			specialize(p, m, p->source_len);
			drop_device_program(p);
			free_kernels(p);
			free(p->built_src);
			free(p->built_opts);
			free(p->options);
			p->built_src = m;
			p->built_len = p->source_len;
			p->built_opts = o.dev.p;
			o.dev.p = NULL;
			p->options = opts;
			set_log(p, "", NULL, 0);
			p->status = CL_BUILD_SUCCESS;
			p->bintype = CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT;
		}
		opts_free(&o);
	} else if (err == CL_SUCCESS) {
		struct expand x = {.o = &o, .hdrs = hs, .nhdrs = num_headers, .line_ok = takes_line(ctx->dev)};
		sb_add(&x.log, "", 0);
		undef_absent_features(&x.out, ctx->dev);
		sb_add(&x.out, o.defs.p, o.defs.len);
		if (takes_line(ctx->dev))
			sb_str(&x.out, "#line 1\n");
		expand_source(&x, p->source, p->source_len);
		/* The unit's -D macros end with it (clLinkProgram concatenates). */
		sb_str(&x.out, "\n");
		sb_add(&x.out, o.undefs.p, o.undefs.len);
		if (x.out.oom || x.log.oom) {
			err = CL_OUT_OF_HOST_MEMORY;
		} else if (x.failed) {
			set_log_msg(p, x.log.p, "vgpud ICD: the source with its includes is too large or nested too deeply\n");
			p->status = CL_BUILD_ERROR;
			err = CL_COMPILE_PROGRAM_FAILURE;
		} else {
			drop_device_program(p);
			free_kernels(p);
			free(p->built_src);
			free(p->built_opts);
			free(p->options);
			p->built_src = x.out.p;
			p->built_len = x.out.len;
			x.out.p = NULL;
			p->built_opts = o.dev.p;
			o.dev.p = NULL;
			p->options = strdup(options != NULL ? options : "");
			set_log(p, x.log.p, NULL, 0);
			p->status = CL_BUILD_SUCCESS;
			p->bintype = CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT;
		}
		free(x.out.p);
		free(x.log.p);
		expand_free(&x);
		opts_free(&o);
	}
	free(hs);
	PUT(p);
	LEAVE(ctx);
	if (notify != NULL && (err == CL_SUCCESS || err == CL_COMPILE_PROGRAM_FAILURE))
		notify(program, user_data);
	return err;
}

cl_program CL_API_CALL vgpu_clLinkProgram(cl_context context, cl_uint num_devices, const cl_device_id *devices,
					  const char *options, cl_uint num_inputs, const cl_program *inputs,
					  void(CL_CALLBACK *notify)(cl_program, void *), void *user_data,
					  cl_int *errcode_ret)
{
	cl_int err = CL_SUCCESS;
	cl_program p = NULL;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
		goto out;
	}
	if ((devices == NULL) != (num_devices == 0) || num_inputs == 0 || inputs == NULL ||
	    (notify == NULL && user_data != NULL)) {
		err = CL_INVALID_VALUE;
		goto put;
	}
	for (cl_uint i = 0; i < num_devices; i++) {
		if (devices[i] != ctx->dev) {
			err = CL_INVALID_DEVICE;
			goto put;
		}
	}
	struct opts lo;
	if (parse_opts(options, &lo, 1) != 0) {
		opts_free(&lo);
		err = CL_INVALID_LINKER_OPTIONS;
		goto put;
	}
	ENTER(ctx);
	struct sbuf src = {0}, devopts = {0};
	sb_add(&devopts, lo.dev.p, lo.dev.len);
	cl_uint il_inputs = 0;
	for (cl_uint i = 0; i < num_inputs && err == CL_SUCCESS; i++) {
		cl_program in = GET(inputs[i], VGPU_PROGRAM);
		if (in == NULL) {
			err = CL_INVALID_PROGRAM;
			break;
		}
		if (in->ctx != ctx || (in->bintype != CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT &&
				       in->bintype != CL_PROGRAM_BINARY_TYPE_LIBRARY)) {
			err = in->ctx != ctx ? CL_INVALID_PROGRAM : CL_INVALID_OPERATION;
			PUT(in);
			break;
		}
		struct opts io;
		if (parse_opts(in->built_opts, &io, 0) != 0) {
			opts_free(&io);
			err = CL_INVALID_OPERATION;
			PUT(in);
			break;
		}
		if (in->il) {
			/* A SPIR-V module links alone: it is built as it is. */
			il_inputs++;
			sb_add(&src, in->built_src, in->built_len);
		} else {
			/* A unit's -D and -U are in its source, around it (a binary
			 * of an older ICD kept them in its options: turned into lines
			 * here). */
			sb_add(&src, io.defs.p, io.defs.len);
			sb_add(&src, in->built_src, in->built_len);
			sb_str(&src, "\n");
			sb_add(&src, io.undefs.p, io.undefs.len);
		}
		const char *w = io.dev.p;
		int quoted;
		char *word;
		while ((word = next_word(&w, &quoted)) != NULL) {
			if (strncmp(word, "-D", 2) != 0 && strncmp(word, "-U", 2) != 0 &&
			    (devopts.p == NULL || strstr(devopts.p, word) == NULL))
				sb_printf(&devopts, "%s%s", devopts.len ? " " : "", word);
			free(word);
		}
		opts_free(&io);
		PUT(in);
	}
	if (err == CL_SUCCESS && (src.oom || devopts.oom || (p = new_program(ctx)) == NULL))
		err = CL_OUT_OF_HOST_MEMORY;
	if (err == CL_SUCCESS) {
		p->built_src = src.p;
		p->built_len = src.len;
		p->built_opts = devopts.p != NULL ? devopts.p : strdup("");
		p->options = strdup(options != NULL ? options : "");
		p->il = il_inputs > 0;
		src.p = devopts.p = NULL;
		if (il_inputs > 0 && num_inputs > 1) {
			/* The device builds one module per program: no SPIR-V
			 * linker in between. */
			set_log_msg(p, "", il_inputs == num_inputs
						  ? "vgpud ICD: linking SPIR-V modules together is not supported: link one, or build each\n"
						  : "vgpud ICD: SPIR-V modules and OpenCL C cannot be linked together\n");
			p->status = CL_BUILD_ERROR;
			err = CL_LINK_PROGRAM_FAILURE;
		} else if (lo.create_library) {
			p->status = CL_BUILD_SUCCESS;
			p->bintype = CL_PROGRAM_BINARY_TYPE_LIBRARY;
			set_log(p, "", NULL, 0);
		} else {
			p->from_binary = 1; /* rebuilt from built_src */
			cl_int berr = device_build(p, "");
			if (berr != CL_SUCCESS) {
				/* 1.2: a failed link returns a program whose log says why. */
				err = berr == CL_BUILD_PROGRAM_FAILURE ? CL_LINK_PROGRAM_FAILURE : berr;
			}
		}
		if (err == CL_SUCCESS || err == CL_LINK_PROGRAM_FAILURE) {
			vgpu_obj_publish(&p->obj);
		} else {
			PUT(p);
			p = NULL;
		}
	}
	free(src.p);
	free(devopts.p);
	opts_free(&lo);
	LEAVE(ctx);
	if (notify != NULL && p != NULL)
		notify(p, user_data);
put:
	PUT(ctx);
out:
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return p;
}

/* ---- Queries -------------------------------------------------------- */

static size_t binary_size(const struct _cl_program *p)
{
	if (p->built_src == NULL || (p->status != CL_BUILD_SUCCESS && !p->from_binary) ||
	    p->bintype == CL_PROGRAM_BINARY_TYPE_NONE)
		return 0;
	return sizeof(struct binhdr2) + strlen(p->built_opts != NULL ? p->built_opts : "") + p->built_len;
}

static void write_binary(const struct _cl_program *p, unsigned char *out)
{
	struct binhdr2 h = {.type = (uint32_t)p->bintype, .flags = p->il ? BIN_IL : 0};
	memcpy(h.h.magic, BIN_MAGIC, 8);
	const char *o = p->built_opts != NULL ? p->built_opts : "";
	h.h.version = BIN_VERSION;
	h.h.opts_len = (uint32_t)strlen(o);
	h.h.src_len = p->built_len;
	memcpy(out, &h, sizeof h);
	memcpy(out + sizeof h, o, h.h.opts_len);
	memcpy(out + sizeof h + h.h.opts_len, p->built_src, p->built_len);
}

cl_int CL_API_CALL vgpu_clGetProgramInfo(cl_program program, cl_program_info param_name, size_t param_value_size,
					 void *param_value, size_t *param_value_size_ret)
{
	ENTER_OBJ(cl_program, p, program, VGPU_PROGRAM, CL_INVALID_PROGRAM);
	cl_int err = CL_SUCCESS;
	union {
		cl_uint u;
		cl_context c;
		cl_device_id d;
		size_t sz;
	} v;
	switch (param_name) {
	case CL_PROGRAM_REFERENCE_COUNT:
		v.u = vgpu_obj_refs(&p->obj);
		err = vgpu_info(&v, sizeof v.u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_CONTEXT:
		v.c = ctx;
		err = vgpu_info(&v, sizeof v.c, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_NUM_DEVICES:
		v.u = 1;
		err = vgpu_info(&v, sizeof v.u, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_DEVICES:
		v.d = ctx->dev;
		err = vgpu_info(&v, sizeof v.d, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_SOURCE:
		/* A program from a binary returns the source the binary carries;
		 * one from IL an empty string. */
		if (p->il)
			err = vgpu_info_str("", param_value_size, param_value, param_value_size_ret);
		else if (p->source != NULL)
			err = vgpu_info(p->source, p->source_len + 1, param_value_size, param_value,
					param_value_size_ret);
		else if (p->built_src != NULL)
			err = vgpu_info(p->built_src, p->built_len + 1, param_value_size, param_value,
					param_value_size_ret);
		else
			err = vgpu_info_str("", param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_BINARY_SIZES:
		v.sz = binary_size(p);
		err = vgpu_info(&v, sizeof v.sz, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_BINARIES: {
		/* An array of one pointer, to memory the application provides. */
		if (param_value != NULL && param_value_size < sizeof(unsigned char *)) {
			err = CL_INVALID_VALUE;
			break;
		}
		if (param_value != NULL) {
			unsigned char *out = *(unsigned char **)param_value;
			if (out != NULL && binary_size(p) > 0)
				write_binary(p, out);
		}
		if (param_value_size_ret != NULL)
			*param_value_size_ret = sizeof(unsigned char *);
		break;
	}
	case CL_PROGRAM_NUM_KERNELS:
	case CL_PROGRAM_KERNEL_NAMES:
		if (p->status != CL_BUILD_SUCCESS || p->bintype != CL_PROGRAM_BINARY_TYPE_EXECUTABLE || p->id == 0) {
			err = CL_INVALID_PROGRAM_EXECUTABLE;
		} else if (param_name == CL_PROGRAM_NUM_KERNELS) {
			v.sz = p->nkernels;
			err = vgpu_info(&v, sizeof v.sz, param_value_size, param_value, param_value_size_ret);
		} else {
			err = vgpu_info_str(p->kernel_names != NULL ? p->kernel_names : "", param_value_size,
					    param_value, param_value_size_ret);
		}
		break;
	case CL_PROGRAM_IL:
		/* The module as given; nothing for a program made from source or
		 * a binary. */
		if (p->il && p->source != NULL)
			err = vgpu_info(p->source, p->source_len, param_value_size, param_value, param_value_size_ret);
		else
			err = vgpu_info(NULL, 0, param_value_size, param_value, param_value_size_ret);
		break;
	case CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT:
	case CL_PROGRAM_SCOPE_GLOBAL_DTORS_PRESENT: {
		/* No program-scope global variables on the device. */
		cl_bool b = CL_FALSE;
		err = vgpu_info(&b, sizeof b, param_value_size, param_value, param_value_size_ret);
		break;
	}
	default: err = CL_INVALID_VALUE; break;
	}
	PUT(p);
	LEAVE(ctx);
	return err;
}

cl_int CL_API_CALL vgpu_clGetProgramBuildInfo(cl_program program, cl_device_id device,
					      cl_program_build_info param_name, size_t param_value_size,
					      void *param_value, size_t *param_value_size_ret)
{
	ENTER_OBJ(cl_program, p, program, VGPU_PROGRAM, CL_INVALID_PROGRAM);
	cl_int err;
	if (!vgpu_device_valid(device) || device != ctx->dev) {
		err = CL_INVALID_DEVICE;
	} else {
		switch (param_name) {
		case CL_PROGRAM_BUILD_STATUS:
			err = vgpu_info(&p->status, sizeof p->status, param_value_size, param_value,
					param_value_size_ret);
			break;
		case CL_PROGRAM_BUILD_OPTIONS:
			err = vgpu_info_str(p->options != NULL ? p->options : "", param_value_size, param_value,
					    param_value_size_ret);
			break;
		case CL_PROGRAM_BUILD_LOG:
			err = vgpu_info_str(p->log != NULL ? p->log : "", param_value_size, param_value,
					    param_value_size_ret);
			break;
		case CL_PROGRAM_BINARY_TYPE: {
			cl_program_binary_type t = p->status == CL_BUILD_SUCCESS || p->from_binary
							   ? p->bintype
							   : CL_PROGRAM_BINARY_TYPE_NONE;
			err = vgpu_info(&t, sizeof t, param_value_size, param_value, param_value_size_ret);
			break;
		}
		case CL_PROGRAM_BUILD_GLOBAL_VARIABLE_TOTAL_SIZE: {
			/* No program-scope global variables on the device. */
			size_t z = 0;
			err = vgpu_info(&z, sizeof z, param_value_size, param_value, param_value_size_ret);
			break;
		}
		default: err = CL_INVALID_VALUE; break;
		}
	}
	PUT(p);
	LEAVE(ctx);
	return err;
}

/* images: OpenCL 1.2's images and samplers through the vgpud ICD, used as
 * an image-processing application uses them, against a vgpu-icdd serving
 * a real vGPU (tests/icdhost). Built and run by icd_test.go (TestDaemon):
 *
 *   images DIR     DIR: unused (the runner's common argument)
 *
 * The device's image queries and formats; a 2D image made from host
 * memory with a padded row pitch, read whole and in part, written in
 * part, filled with a colour, copied to another image, to a buffer and
 * back, mapped for reading and for writing; an image made on the
 * application's memory (USE_HOST_PTR), mapped in place; a 2D array and a
 * 3D image; kernels reading and writing images through a sampler argument
 * and a sampler of the source, with the image macros defined; half-float
 * fills; samplers made with properties and their queries. It prints one
 * line per failed check and exits with the number of them. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *source =
	"#if !defined(__IMAGE_SUPPORT__) || !defined(__opencl_c_images)\n"
	"#error the image macros are not defined\n"
	"#endif\n"
	"__constant sampler_t near = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP_TO_EDGE | CLK_FILTER_NEAREST;\n"
	"__kernel void brighten(__read_only image2d_t in, __write_only image2d_t out, sampler_t s, float k) {\n"
	"	int2 p = (int2)(get_global_id(0), get_global_id(1));\n"
	"	write_imagef(out, p, read_imagef(in, s, p) * k);\n"
	"}\n"
	"__kernel void invert(__read_only image2d_t in, __write_only image2d_t out) {\n"
	"	int2 p = (int2)(get_global_id(0), get_global_id(1));\n"
	"	write_imageui(out, p, (uint4)(255) - read_imageui(in, near, p));\n"
	"}\n"
	"__kernel void layer_sums(__read_only image2d_array_t a, __read_only image3d_t v, __global float *o) {\n"
	"	int z = get_global_id(0);\n"
	"	float s = 0;\n"
	"	for (int y = 0; y < 2; y++)\n"
	"		for (int x = 0; x < 3; x++)\n"
	"			s += read_imagef(a, near, (int4)(x, y, z, 0)).x + read_imagef(v, near, (int4)(x, y, z, 0)).x;\n"
	"	o[z] = s;\n"
	"}\n"
	"__kernel void twice1db(__read_only image1d_buffer_t in, __write_only image1d_buffer_t out) {\n"
	"	int x = get_global_id(0);\n"
	"	write_imagef(out, x, read_imagef(in, x) * 2.0f);\n"
	"}\n";

static cl_context ctx;
static cl_command_queue q;

static void from_buffers(cl_device_id d, cl_program p, cl_kernel k2d);

/* image_of makes an image of fmt from host memory (or none), checking it. */
static cl_mem image_of(cl_mem_flags flags, cl_image_format fmt, cl_image_desc desc, void *host)
{
	cl_int err;
	cl_mem m = clCreateImage(ctx, flags, &fmt, &desc, host, &err);
	CHECK(m != NULL && err == CL_SUCCESS, "clCreateImage(type %#x, %zux%zu): %d", desc.image_type,
	      desc.image_width, desc.image_height, err);
	return m;
}

static void device_queries(cl_device_id d)
{
	cl_bool b = CL_FALSE;
	OK(clGetDeviceInfo(d, CL_DEVICE_IMAGE_SUPPORT, sizeof b, &b, NULL));
	CHECK(b == CL_TRUE, "image support %u", b);
	size_t w = 0, h = 0, dd = 0, arr = 0;
	OK(clGetDeviceInfo(d, CL_DEVICE_IMAGE2D_MAX_WIDTH, sizeof w, &w, NULL));
	OK(clGetDeviceInfo(d, CL_DEVICE_IMAGE2D_MAX_HEIGHT, sizeof h, &h, NULL));
	OK(clGetDeviceInfo(d, CL_DEVICE_IMAGE3D_MAX_DEPTH, sizeof dd, &dd, NULL));
	OK(clGetDeviceInfo(d, CL_DEVICE_IMAGE_MAX_ARRAY_SIZE, sizeof arr, &arr, NULL));
	/* OpenCL 1.2's minimums for a full profile. */
	CHECK(w >= 8192 && h >= 8192 && dd >= 2048 && arr >= 2048, "2D %zux%zu, depth %zu, arrays %zu", w, h, dd, arr);
	cl_uint rd = 0, wr = 0, smp = 0, rw = 9;
	OK(clGetDeviceInfo(d, CL_DEVICE_MAX_READ_IMAGE_ARGS, sizeof rd, &rd, NULL));
	OK(clGetDeviceInfo(d, CL_DEVICE_MAX_WRITE_IMAGE_ARGS, sizeof wr, &wr, NULL));
	OK(clGetDeviceInfo(d, CL_DEVICE_MAX_SAMPLERS, sizeof smp, &smp, NULL));
	OK(clGetDeviceInfo(d, CL_DEVICE_MAX_READ_WRITE_IMAGE_ARGS, sizeof rw, &rw, NULL));
	CHECK(rd >= 128 && wr >= 8 && smp >= 16 && rw == 0, "read %u, write %u, samplers %u, read-write %u", rd, wr,
	      smp, rw);
	cl_name_version nv[8];
	size_t n = 0;
	OK(clGetDeviceInfo(d, CL_DEVICE_OPENCL_C_FEATURES, sizeof nv, nv, &n));
	int images = 0;
	for (size_t i = 0; i < n / sizeof nv[0]; i++)
		images |= strcmp(nv[i].name, "__opencl_c_images") == 0;
	CHECK(images, "no __opencl_c_images among %zu features", n / sizeof nv[0]);
}

static void formats(void)
{
	cl_uint n = 0;
	OK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE2D, 0, NULL, &n));
	cl_image_format f[128];
	CHECK(n > 0 && n <= 128, "%u formats", n);
	OK(clGetSupportedImageFormats(ctx, CL_MEM_READ_ONLY, CL_MEM_OBJECT_IMAGE3D, 128, f, &n));
	/* The formats every device with images has (OpenCL 1.2 table 5.8). */
	static const cl_image_format need[] = {{CL_RGBA, CL_UNORM_INT8}, {CL_RGBA, CL_FLOAT},
					       {CL_BGRA, CL_UNORM_INT8}, {CL_RGBA, CL_UNSIGNED_INT8},
					       {CL_R, CL_FLOAT},         {CL_RGBA, CL_HALF_FLOAT}};
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		int found = 0;
		for (cl_uint j = 0; j < n && j < 128; j++)
			found |= f[j].image_channel_order == need[i].image_channel_order &&
				 f[j].image_channel_data_type == need[i].image_channel_data_type;
		CHECK(found, "format %#x/%#x not listed", need[i].image_channel_order, need[i].image_channel_data_type);
	}
	/* No cl_khr_3d_image_writes: no 3D formats for kernels that write. */
	cl_uint n3;
	OK(clGetSupportedImageFormats(ctx, CL_MEM_WRITE_ONLY, CL_MEM_OBJECT_IMAGE3D, 0, NULL, &n3));
	CHECK(n3 == 0, "%u 3D formats for writing without cl_khr_3d_image_writes", n3);
	OK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE3D, 0, NULL, &n3));
	CHECK(n3 == 0, "%u 3D formats for reading and writing without cl_khr_3d_image_writes", n3);
	/* No cl_khr_image2d_from_buffer: CL_INVALID_OPERATION, as 3.0 asks. */
	cl_int err;
	cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * 64 * 4, NULL, &err);
	cl_image_desc d = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 64, .image_height = 64, .buffer = buf};
	cl_image_format rgba = {CL_RGBA, CL_UNORM_INT8};
	CHECK(clCreateImage(ctx, CL_MEM_READ_ONLY, &rgba, &d, NULL, &err) == NULL && err == CL_INVALID_OPERATION,
	      "a 2D image from a buffer: %d", err);
	clReleaseMemObject(buf);
	/* An image made with (an empty list of) properties reports it. */
	d.buffer = NULL;
	cl_mem_properties none[] = {0};
	cl_mem im = clCreateImageWithProperties(ctx, none, CL_MEM_READ_WRITE, &rgba, &d, NULL, &err);
	OK(err);
	size_t psize = 1;
	OK(clGetMemObjectInfo(im, CL_MEM_PROPERTIES, 0, NULL, &psize));
	CHECK(psize == sizeof(cl_mem_properties), "CL_MEM_PROPERTIES of an image made with properties: %zu bytes", psize);
	clReleaseMemObject(im);
	im = clCreateImage(ctx, CL_MEM_READ_WRITE, &rgba, &d, NULL, &err);
	OK(clGetMemObjectInfo(im, CL_MEM_PROPERTIES, 0, NULL, &psize));
	CHECK(psize == 0, "CL_MEM_PROPERTIES of an image made without: %zu bytes", psize);
	clReleaseMemObject(im);
}

#define W 13
#define H 7
#define PITCH (W * 4 + 12)

/* plane: a 2D RGBA8 image from padded host memory, through every
 * transfer and copy. */
static void plane(void)
{
	static uint8_t host[H * PITCH], back[W * H * 4];
	for (size_t i = 0; i < sizeof host; i++)
		host[i] = (uint8_t)(i * 7 + 3);
	cl_image_format rgba8 = {CL_RGBA, CL_UNORM_INT8};
	cl_image_desc d2 = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = W, .image_height = H,
			    .image_row_pitch = PITCH};
	cl_mem a = image_of(CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, rgba8, d2, host);
	d2.image_row_pitch = 0;
	cl_mem b = image_of(CL_MEM_READ_WRITE, rgba8, d2, NULL);
	size_t v = 0;
	OK(clGetImageInfo(a, CL_IMAGE_ELEMENT_SIZE, sizeof v, &v, NULL));
	CHECK(v == 4, "element size %zu", v);
	OK(clGetImageInfo(a, CL_IMAGE_WIDTH, sizeof v, &v, NULL));
	CHECK(v == W, "width %zu", v);
	OK(clGetImageInfo(a, CL_IMAGE_DEPTH, sizeof v, &v, NULL));
	CHECK(v == 0, "depth %zu", v);
	cl_mem_object_type t = 0;
	OK(clGetMemObjectInfo(a, CL_MEM_TYPE, sizeof t, &t, NULL));
	CHECK(t == CL_MEM_OBJECT_IMAGE2D, "type %#x", t);

	/* The whole image, tight, then a region with a pitch of its own. */
	size_t o[3] = {0, 0, 0}, all[3] = {W, H, 1};
	OK(clEnqueueReadImage(q, a, CL_TRUE, o, all, 0, 0, back, 0, NULL, NULL));
	int bad = 0;
	for (int y = 0; y < H; y++)
		bad += memcmp(back + y * W * 4, host + y * PITCH, W * 4) != 0;
	CHECK(bad == 0, "%d rows differ after a read of the whole image", bad);
	size_t ro[3] = {2, 3, 0}, rr[3] = {5, 2, 1};
	uint8_t part[2][40];
	OK(clEnqueueReadImage(q, a, CL_TRUE, ro, rr, sizeof part[0], 0, part, 0, NULL, NULL));
	for (int y = 0; y < 2; y++)
		CHECK(memcmp(part[y], host + (3 + y) * PITCH + 2 * 4, 5 * 4) == 0, "region row %d", y);

	/* A region written, then filled. */
	uint8_t w8[2][5][4];
	memset(w8, 0xab, sizeof w8);
	OK(clEnqueueWriteImage(q, a, CL_TRUE, ro, rr, 0, 0, w8, 0, NULL, NULL));
	float color[4] = {0.5f, 0.25f, 1.0f, 0.0f};
	size_t fo[3] = {0, 6, 0}, fr[3] = {W, 1, 1};
	OK(clEnqueueFillImage(q, a, color, fo, fr, 0, NULL, NULL));
	OK(clEnqueueReadImage(q, a, CL_TRUE, o, all, 0, 0, back, 0, NULL, NULL));
	CHECK(back[(3 * W + 2) * 4] == 0xab && back[(4 * W + 6) * 4 + 3] == 0xab && back[(3 * W + 7) * 4] == host[3 * PITCH + 28],
	      "written region: %#x %#x %#x", back[(3 * W + 2) * 4], back[(4 * W + 6) * 4 + 3], back[(3 * W + 7) * 4]);
	uint8_t *last = back + 6 * W * 4;
	CHECK(last[0] == 128 && last[1] == 64 && last[2] == 255 && last[3] == 0 && last[(W - 1) * 4 + 1] == 64,
	      "filled row %u %u %u %u", last[0], last[1], last[2], last[3]);

	/* Image to image, to a buffer and back. */
	OK(clEnqueueCopyImage(q, a, b, o, o, all, 0, NULL, NULL));
	cl_int err;
	cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, W * H * 4 + 16, NULL, &err);
	OK(err);
	OK(clEnqueueCopyImageToBuffer(q, b, buf, o, all, 16, 0, NULL, NULL));
	uint8_t *flat = malloc(W * H * 4);
	OK(clEnqueueReadBuffer(q, buf, CL_TRUE, 16, W * H * 4, flat, 0, NULL, NULL));
	CHECK(memcmp(flat, back, W * H * 4) == 0, "copy of the image to a buffer differs");
	size_t co[3] = {1, 1, 0}, cr[3] = {3, 2, 1};
	OK(clEnqueueCopyBufferToImage(q, buf, b, 16, co, cr, 0, NULL, NULL));
	OK(clEnqueueReadImage(q, b, CL_TRUE, co, cr, 0, 0, part, 0, NULL, NULL));
	CHECK(memcmp(part, flat, 3 * 2 * 4) == 0, "a buffer's packed bytes copied into a region differ");

	/* Mapped for reading, at a region; then for writing. */
	size_t rp = 0;
	uint8_t *p = clEnqueueMapImage(q, a, CL_TRUE, CL_MAP_READ, ro, rr, &rp, NULL, 0, NULL, NULL, &err);
	CHECK(p != NULL && err == CL_SUCCESS && rp >= 5 * 4, "map: %d, row pitch %zu", err, rp);
	if (p != NULL) {
		CHECK(p[0] == 0xab && p[rp + 4 * 4 + 3] == 0xab, "mapped bytes %#x %#x", p[0], p[rp + 19]);
		OK(clEnqueueUnmapMemObject(q, a, p, 0, NULL, NULL));
	}
	p = clEnqueueMapImage(q, a, CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, o, all, &rp, NULL, 0, NULL, NULL, &err);
	CHECK(p != NULL && err == CL_SUCCESS, "map for writing: %d", err);
	if (p != NULL) {
		for (int y = 0; y < H; y++)
			memset(p + y * rp, y, W * 4);
		OK(clEnqueueUnmapMemObject(q, a, p, 0, NULL, NULL));
	}
	OK(clEnqueueReadImage(q, a, CL_TRUE, o, all, 0, 0, back, 0, NULL, NULL));
	CHECK(back[0] == 0 && back[W * 4 * 5 + 9] == 5 && back[W * H * 4 - 1] == H - 1, "written through a map: %u %u %u",
	      back[0], back[W * 4 * 5 + 9], back[W * H * 4 - 1]);
	free(flat);
	clReleaseMemObject(buf);
	clReleaseMemObject(a);
	clReleaseMemObject(b);
}

/* in_place: an image on the application's memory is mapped there. */
static void in_place(void)
{
	static uint8_t host[4 * 16];
	for (size_t i = 0; i < sizeof host; i++)
		host[i] = (uint8_t)i;
	cl_image_format r8 = {CL_R, CL_UNSIGNED_INT8};
	cl_image_desc d = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 10, .image_height = 4, .image_row_pitch = 16};
	cl_mem m = image_of(CL_MEM_USE_HOST_PTR, r8, d, host);
	size_t o[3] = {2, 1, 0}, r[3] = {4, 2, 1}, rp = 0;
	cl_int err;
	uint8_t *p = clEnqueueMapImage(q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, o, r, &rp, NULL, 0, NULL, NULL, &err);
	CHECK(p == host + 16 + 2 && rp == 16 && err == CL_SUCCESS, "map of a USE_HOST_PTR image at %p (host %p), pitch %zu: %d",
	      (void *)p, (void *)host, rp, err);
	if (p != NULL) {
		p[0] = 200;
		OK(clEnqueueUnmapMemObject(q, m, p, 0, NULL, NULL));
	}
	uint8_t px[4];
	OK(clEnqueueReadImage(q, m, CL_TRUE, o, (size_t[3]){4, 1, 1}, 0, 0, px, 0, NULL, NULL));
	CHECK(px[0] == 200 && px[1] == 19, "after the unmap: %u %u", px[0], px[1]);
	clReleaseMemObject(m);
}

static void kernels(cl_device_id d)
{
	cl_int err;
	cl_program p = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
	OK(err);
	err = clBuildProgram(p, 1, &d, "-cl-std=CL3.0", NULL, NULL);
	if (err != CL_SUCCESS) {
		char log[4096] = "";
		clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
		CHECK(0, "build: %d\n%s", err, log);
		return;
	}
	/* brighten: float pixels through a sampler argument. */
	cl_image_format rgba8 = {CL_RGBA, CL_UNORM_INT8};
	cl_image_desc d2 = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = 8, .image_height = 4};
	uint8_t px[8 * 4 * 4], out[8 * 4 * 4];
	for (size_t i = 0; i < sizeof px; i++)
		px[i] = (uint8_t)i;
	cl_mem in = image_of(CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, rgba8, d2, px);
	cl_mem dst = image_of(CL_MEM_WRITE_ONLY, rgba8, d2, NULL);
	cl_sampler_properties props[] = {CL_SAMPLER_NORMALIZED_COORDS, CL_FALSE, CL_SAMPLER_ADDRESSING_MODE,
					 CL_ADDRESS_CLAMP_TO_EDGE, 0};
	cl_sampler s = clCreateSamplerWithProperties(ctx, props, &err);
	CHECK(s != NULL && err == CL_SUCCESS, "clCreateSamplerWithProperties: %d", err);
	cl_filter_mode fm = 0;
	cl_addressing_mode am = 0;
	cl_bool norm = CL_TRUE;
	OK(clGetSamplerInfo(s, CL_SAMPLER_FILTER_MODE, sizeof fm, &fm, NULL));
	OK(clGetSamplerInfo(s, CL_SAMPLER_ADDRESSING_MODE, sizeof am, &am, NULL));
	OK(clGetSamplerInfo(s, CL_SAMPLER_NORMALIZED_COORDS, sizeof norm, &norm, NULL));
	CHECK(fm == CL_FILTER_NEAREST && am == CL_ADDRESS_CLAMP_TO_EDGE && norm == CL_FALSE, "sampler %#x %#x %u", fm, am,
	      norm);
	size_t plen = 0;
	OK(clGetSamplerInfo(s, CL_SAMPLER_PROPERTIES, 0, NULL, &plen));
	CHECK(plen == sizeof props, "properties of %zu bytes", plen);
	cl_kernel k = clCreateKernel(p, "brighten", &err);
	OK(err);
	float two = 2.0f;
	OK(clSetKernelArg(k, 0, sizeof in, &in));
	OK(clSetKernelArg(k, 1, sizeof dst, &dst));
	OK(clSetKernelArg(k, 2, sizeof s, &s));
	OK(clSetKernelArg(k, 3, sizeof two, &two));
	cl_mem plain = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
	CHECK_ERR(clSetKernelArg(k, 0, sizeof plain, &plain), CL_INVALID_MEM_OBJECT);
	CHECK_ERR(clSetKernelArg(k, 2, sizeof plain, &plain), CL_INVALID_SAMPLER);
	size_t g[2] = {8, 4}, o[3] = {0, 0, 0}, all[3] = {8, 4, 1};
	OK(clEnqueueNDRangeKernel(q, k, 2, NULL, g, NULL, 0, NULL, NULL));
	OK(clEnqueueReadImage(q, dst, CL_TRUE, o, all, 0, 0, out, 0, NULL, NULL));
	int bad = 0;
	for (size_t i = 0; i < sizeof px; i++)
		bad += out[i] != (px[i] * 2 > 255 ? 255 : px[i] * 2);
	CHECK(bad == 0, "brighten: %d bytes wrong (out[5] %u)", bad, out[5]);

	/* invert: a sampler of the source, integer pixels. */
	cl_image_format u8 = {CL_RGBA, CL_UNSIGNED_INT8};
	cl_mem ui = image_of(CL_MEM_COPY_HOST_PTR, u8, d2, px), uo = image_of(0, u8, d2, NULL);
	cl_kernel inv = clCreateKernel(p, "invert", &err);
	OK(clSetKernelArg(inv, 0, sizeof ui, &ui));
	OK(clSetKernelArg(inv, 1, sizeof uo, &uo));
	OK(clEnqueueNDRangeKernel(q, inv, 2, NULL, g, NULL, 0, NULL, NULL));
	OK(clEnqueueReadImage(q, uo, CL_TRUE, o, all, 0, 0, out, 0, NULL, NULL));
	bad = 0;
	for (size_t i = 0; i < sizeof px; i++)
		bad += out[i] != 255 - px[i];
	CHECK(bad == 0, "invert: %d bytes wrong", bad);

	/* layer_sums: a 2D array of 3 layers and a 3D image of 3 slices,
	 * R float, 3x2 each; one filled as a whole with 1.0 in half... in
	 * float, the other written with each slice's index. */
	cl_image_format rf = {CL_R, CL_FLOAT};
	cl_image_desc da = {.image_type = CL_MEM_OBJECT_IMAGE2D_ARRAY, .image_width = 3, .image_height = 2,
			    .image_array_size = 3};
	cl_image_desc dv = {.image_type = CL_MEM_OBJECT_IMAGE3D, .image_width = 3, .image_height = 2, .image_depth = 3};
	cl_mem arr = image_of(0, rf, da, NULL), vol = image_of(0, rf, dv, NULL);
	float one[4] = {1, 0, 0, 0};
	size_t whole[3] = {3, 2, 3};
	OK(clEnqueueFillImage(q, arr, one, o, whole, 0, NULL, NULL));
	float slices[3][2][3];
	for (int z = 0; z < 3; z++)
		for (int y = 0; y < 2; y++)
			for (int x = 0; x < 3; x++)
				slices[z][y][x] = (float)z;
	OK(clEnqueueWriteImage(q, vol, CL_TRUE, o, whole, 0, 0, slices, 0, NULL, NULL));
	cl_mem sums = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 3 * sizeof(float), NULL, &err);
	cl_kernel ls = clCreateKernel(p, "layer_sums", &err);
	OK(clSetKernelArg(ls, 0, sizeof arr, &arr));
	OK(clSetKernelArg(ls, 1, sizeof vol, &vol));
	OK(clSetKernelArg(ls, 2, sizeof sums, &sums));
	size_t three = 3;
	OK(clEnqueueNDRangeKernel(q, ls, 1, NULL, &three, NULL, 0, NULL, NULL));
	float got[3];
	OK(clEnqueueReadBuffer(q, sums, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
	for (int z = 0; z < 3; z++)
		CHECK(got[z] == 6.0f + 6.0f * z, "layer %d: sum %g, want %g", z, got[z], 6.0 + 6.0 * z);

	/* Half floats: a fill of 1.0 and -2.5 is 0x3c00 and 0xc100. */
	cl_image_format rgh = {CL_RGBA, CL_HALF_FLOAT};
	cl_mem hh = image_of(0, rgh, d2, NULL);
	float hc[4] = {1.0f, -2.5f, 0, 0};
	OK(clEnqueueFillImage(q, hh, hc, o, all, 0, NULL, NULL));
	uint16_t hv[4];
	OK(clEnqueueReadImage(q, hh, CL_TRUE, (size_t[3]){7, 3, 0}, (size_t[3]){1, 1, 1}, 0, 0, hv, 0, NULL, NULL));
	CHECK(hv[0] == 0x3c00 && hv[1] == 0xc100, "half fill: %#x %#x", hv[0], hv[1]);

	from_buffers(d, p, k);

	clReleaseMemObject(hh);
	clReleaseMemObject(sums);
	clReleaseMemObject(arr);
	clReleaseMemObject(vol);
	clReleaseMemObject(ui);
	clReleaseMemObject(uo);
	clReleaseMemObject(plain);
	clReleaseMemObject(in);
	clReleaseMemObject(dst);
	clReleaseSampler(s);
	clReleaseKernel(k);
	clReleaseKernel(inv);
	clReleaseKernel(ls);
	clReleaseProgram(p);
}

/* from_buffers: images made from buffers (CL_MEM_OBJECT_IMAGE1D_BUFFER)
 * share their buffer's memory: a kernel's writes to the image are the
 * buffer's bytes, a buffer write is what the image reads. */
static void from_buffers(cl_device_id d, cl_program p, cl_kernel k2d)
{
	size_t maxbuf = 0;
	OK(clGetDeviceInfo(d, CL_DEVICE_IMAGE_MAX_BUFFER_SIZE, sizeof maxbuf, &maxbuf, NULL));
	CHECK(maxbuf >= 65536, "CL_DEVICE_IMAGE_MAX_BUFFER_SIZE %zu, under OpenCL's 65536", maxbuf);
	cl_image_format f[128];
	cl_uint nf = 0;
	OK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE1D_BUFFER, 128, f, &nf));
	int rfloat = 0, rgba8 = 0;
	for (cl_uint i = 0; i < nf && i < 128; i++) {
		rfloat |= f[i].image_channel_order == CL_R && f[i].image_channel_data_type == CL_FLOAT;
		rgba8 |= f[i].image_channel_order == CL_RGBA && f[i].image_channel_data_type == CL_UNORM_INT8;
	}
	CHECK(rfloat && rgba8, "%u formats of images made from buffers, without R FLOAT or RGBA UNORM_INT8", nf);

	enum { N = 64 };
	float src[N], got[N];
	for (int i = 0; i < N; i++)
		src[i] = (float)i;
	cl_int err;
	cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof src, src, &err);
	OK(err);
	cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof src + 16, NULL, &err);
	OK(err);
	cl_image_format rf = {CL_R, CL_FLOAT};
	cl_image_desc da = {.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER, .image_width = N, .buffer = a};
	cl_image_desc db = da;
	db.buffer = b;
	cl_mem ia = image_of(0, rf, da, NULL), ib = image_of(CL_MEM_WRITE_ONLY, rf, db, NULL);
	cl_mem m = NULL, assoc = NULL;
	cl_mem_object_type t = 0;
	cl_mem_flags fl = 0;
	size_t w = 0, sz = 0, off = 9;
	OK(clGetImageInfo(ia, CL_IMAGE_BUFFER, sizeof m, &m, NULL));
	OK(clGetImageInfo(ia, CL_IMAGE_WIDTH, sizeof w, &w, NULL));
	OK(clGetMemObjectInfo(ia, CL_MEM_TYPE, sizeof t, &t, NULL));
	OK(clGetMemObjectInfo(ia, CL_MEM_FLAGS, sizeof fl, &fl, NULL));
	OK(clGetMemObjectInfo(ia, CL_MEM_SIZE, sizeof sz, &sz, NULL));
	OK(clGetMemObjectInfo(ia, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof assoc, &assoc, NULL));
	OK(clGetMemObjectInfo(ia, CL_MEM_OFFSET, sizeof off, &off, NULL));
	CHECK(m == a && assoc == a && w == N && t == CL_MEM_OBJECT_IMAGE1D_BUFFER && sz == sizeof src && off == 0 &&
		      fl == (CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR),
	      "image from a buffer: buffer %p (want %p), associated %p, width %zu, type %#x, size %zu, offset %zu, "
	      "flags %#llx (inherited)",
	      (void *)m, (void *)a, (void *)assoc, w, t, sz, off, (unsigned long long)fl);
	/* The buffer may go first: the image keeps it. */
	clReleaseMemObject(a);

	cl_kernel k = clCreateKernel(p, "twice1db", &err);
	OK(err);
	OK(clSetKernelArg(k, 0, sizeof ia, &ia));
	OK(clSetKernelArg(k, 1, sizeof ib, &ib));
	size_t n = N, o[3] = {0, 0, 0}, all[3] = {N, 1, 1};
	OK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
	OK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += got[i] != 2.0f * (float)i;
	CHECK(bad == 0, "twice1db, read from the buffer: %d pixels wrong (got[3] %g)", bad, got[3]);
	/* A write to the buffer is what the image reads. */
	OK(clEnqueueWriteBuffer(q, b, CL_TRUE, 0, sizeof src, src, 0, NULL, NULL));
	OK(clEnqueueReadImage(q, ib, CL_TRUE, o, all, 0, 0, got, 0, NULL, NULL));
	CHECK(memcmp(got, src, sizeof src) == 0, "image read after a buffer write: got[5] %g", got[5]);

	/* Each kind to its own parameter type. */
	cl_image_desc d1 = {.image_type = CL_MEM_OBJECT_IMAGE1D, .image_width = N};
	cl_mem plain1d = image_of(0, rf, d1, NULL);
	CHECK_ERR(clSetKernelArg(k, 0, sizeof plain1d, &plain1d), CL_INVALID_ARG_VALUE);
	CHECK_ERR(clSetKernelArg(k2d, 0, sizeof ia, &ia), CL_INVALID_ARG_VALUE);

	/* Refusals. */
	cl_image_desc wide = db, nobuf = db, onimage = db, onsub = db;
	wide.image_width = N + 5; /* more than b's bytes */
	nobuf.buffer = NULL;
	onimage.buffer = ia;
	cl_buffer_region r = {128, 64};
	cl_mem sub = clCreateSubBuffer(b, 0, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
	OK(err);
	onsub.buffer = sub;
	onsub.image_width = 4;
	cl_mem ro = clCreateBuffer(ctx, CL_MEM_READ_ONLY, sizeof src, NULL, &err);
	cl_image_desc dro = db;
	dro.buffer = ro;
	struct {
		const char *what;
		cl_mem_flags flags;
		const cl_image_desc *desc;
		void *host;
		cl_int want;
	} refusals[] = {
		{"wider than its buffer", 0, &wide, NULL, CL_INVALID_IMAGE_SIZE},
		{"no buffer", 0, &nobuf, NULL, CL_INVALID_IMAGE_DESCRIPTOR},
		{"on an image", 0, &onimage, NULL, CL_INVALID_IMAGE_DESCRIPTOR},
		{"on a sub-buffer at 128", 0, &onsub, NULL, CL_INVALID_IMAGE_DESCRIPTOR},
		{"with CL_MEM_USE_HOST_PTR", CL_MEM_USE_HOST_PTR, &db, src, CL_INVALID_VALUE},
		{"write-only on a read-only buffer", CL_MEM_WRITE_ONLY, &dro, NULL, CL_INVALID_VALUE},
	};
	for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
		err = 1;
		cl_mem im = clCreateImage(ctx, refusals[i].flags, &rf, refusals[i].desc, refusals[i].host, &err);
		CHECK(im == NULL && err == refusals[i].want, "image from a buffer %s: %p, %d, want %d", refusals[i].what,
		      (void *)im, err, refusals[i].want);
	}

	clReleaseMemObject(ro);
	clReleaseMemObject(sub);
	clReleaseMemObject(plain1d);
	clReleaseKernel(k);
	clReleaseMemObject(ia);
	clReleaseMemObject(ib);
	clReleaseMemObject(b);
}

int main(void)
{
	cl_platform_id plat = need_vgpud_platform();
	cl_device_id d = NULL;
	OK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &d, NULL));
	cl_int err;
	ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &err);
	OK(err);
	q = clCreateCommandQueue(ctx, d, 0, &err);
	OK(err);
	if (ctx == NULL || q == NULL)
		return 1;
	device_queries(d);
	formats();
	plane();
	in_place();
	kernels(d);
	OK(clFinish(q));
	clReleaseCommandQueue(q);
	clReleaseContext(ctx);
	printf("images: %d failures\n", failures);
	return failures;
}

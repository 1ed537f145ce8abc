/* image.c: images and samplers (docs/icd.md "Images").
 *
 * An image is a buffer of the daemon's whose bytes are the image's pixels
 * packed (rows of width pixels without padding, docs/ABI.md "Images"),
 * with the image's description in its _cl_mem. Every image command is a
 * buffer command on that layout: a read or write of a region moves its
 * rows through the arena as a rectangle of a buffer does, a copy is a
 * buffer copy per row (one in all where rows are contiguous on both
 * sides), a fill converts the colour to one pixel and fills rows with it,
 * a mapping is rows read into host memory and written back at the unmap.
 * A launch passes an image as the buffer plus a descriptor, and a sampler
 * by value; the device makes its own image objects for the kernel. The
 * formats and limits are those of the device's image section (abi 1.8);
 * a device without one has no images, and every entry here answers as
 * OpenCL says for a context whose devices have none.
 *
 * An image made from a buffer (CL_MEM_OBJECT_IMAGE1D_BUFFER, abi 1.10)
 * is a 1D image whose _cl_mem names the buffer's daemon buffer, as a
 * sub-buffer at origin 0 does: the pixels are the buffer's first bytes,
 * so what one writes the other reads, with no copy anywhere. Its formats
 * and width limit are the image section's buffer part. */
#define _GNU_SOURCE
#include "icd.h"

#include <stdlib.h>
#include <string.h>

/* ---- Formats -------------------------------------------------------- */

static size_t channels(cl_channel_order o)
{
	switch (o) {
	case CL_R:
	case CL_A:
	case CL_INTENSITY:
	case CL_LUMINANCE: return 1;
	case CL_RG:
	case CL_RA: return 2;
	case CL_RGBA:
	case CL_BGRA:
	case CL_ARGB: return 4;
	}
	return 0;
}

static size_t channel_size(cl_channel_type t)
{
	switch (t) {
	case CL_SNORM_INT8:
	case CL_UNORM_INT8:
	case CL_SIGNED_INT8:
	case CL_UNSIGNED_INT8: return 1;
	case CL_SNORM_INT16:
	case CL_UNORM_INT16:
	case CL_SIGNED_INT16:
	case CL_UNSIGNED_INT16:
	case CL_HALF_FLOAT: return 2;
	case CL_SIGNED_INT32:
	case CL_UNSIGNED_INT32:
	case CL_FLOAT: return 4;
	}
	return 0;
}

/* formats_of is the device's formats for images of type t: those of
 * its image section (every one of abi.PortableImageFormats, a channel
 * order of 1, 2 or 4 channels), or of its buffer part for images made
 * from buffers; 0 formats without them. */
static uint32_t formats_of(const struct _cl_device_id *d, cl_mem_object_type t, const struct vgpu_image_format **fs)
{
	const struct vgpu_image_info *ii = vgpu_device_images(d, fs);
	if (ii == NULL)
		return 0;
	if (t != CL_MEM_OBJECT_IMAGE1D_BUFFER)
		return ii->format_count;
	uint32_t n = 0; /* stays 0 without images made from buffers */
	vgpu_device_image_buffers(d, fs, &n);
	return n;
}

static int format_offered(const struct _cl_device_id *d, cl_mem_object_type t, const cl_image_format *f)
{
	const struct vgpu_image_format *fs;
	uint32_t n = formats_of(d, t, &fs);
	for (uint32_t i = 0; i < n; i++)
		if (fs[i].order == f->image_channel_order && fs[i].data_type == f->image_channel_data_type)
			return 1;
	return 0;
}

int vgpu_image_type_name(const char *t)
{
	static const char *const images[] = {"image1d_t", "image1d_array_t", "image2d_t", "image2d_array_t",
					     "image3d_t"};
	for (size_t i = 0; i < sizeof images / sizeof images[0]; i++)
		if (strcmp(t, images[i]) == 0)
			return VGPU_PARAM_IMAGE;
	if (strcmp(t, "image1d_buffer_t") == 0)
		return VGPU_PARAM_IMAGE_BUFFER;
	return strcmp(t, "sampler_t") == 0 ? VGPU_PARAM_SAMPLER : 0;
}

cl_int CL_API_CALL vgpu_clGetSupportedImageFormats(cl_context context, cl_mem_flags flags,
						   cl_mem_object_type type, cl_uint num_entries,
						   cl_image_format *formats, cl_uint *num_formats)
{
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL)
		return CL_INVALID_CONTEXT;
	const struct vgpu_image_format *fs;
	uint32_t nfs = formats_of(ctx->dev, type, &fs);
	PUT(ctx);
	/* CL_MEM_KERNEL_READ_AND_WRITE (2.0) asks for formats of read-write
	 * image parameters, which the vGPU does not offer: none. */
	if (mem_check_flags(flags & ~(cl_mem_flags)CL_MEM_KERNEL_READ_AND_WRITE) != CL_SUCCESS ||
	    (num_entries == 0 && formats != NULL))
		return CL_INVALID_VALUE;
	cl_uint n = 0;
	switch (type) {
	case CL_MEM_OBJECT_IMAGE1D:
	case CL_MEM_OBJECT_IMAGE1D_ARRAY:
	case CL_MEM_OBJECT_IMAGE2D:
	case CL_MEM_OBJECT_IMAGE2D_ARRAY:
	case CL_MEM_OBJECT_IMAGE1D_BUFFER:
		n = (flags & CL_MEM_KERNEL_READ_AND_WRITE) == 0 ? nfs : 0;
		break;
	case CL_MEM_OBJECT_IMAGE3D:
		/* No cl_khr_3d_image_writes: 3D formats only for kernels that
		 * read (CL_MEM_READ_ONLY; flags 0 are CL_MEM_READ_WRITE), as
		 * OpenCL 3.0 asks of a device without 3D image writes. */
		n = (flags & (CL_MEM_KERNEL_READ_AND_WRITE | CL_MEM_WRITE_ONLY)) == 0 && (flags & CL_MEM_READ_ONLY) != 0
			    ? nfs
			    : 0;
		break;
	default: return CL_INVALID_VALUE;
	}
	for (cl_uint i = 0; formats != NULL && i < n && i < num_entries; i++)
		formats[i] = (cl_image_format){fs[i].order, fs[i].data_type};
	if (num_formats != NULL)
		*num_formats = n;
	return CL_SUCCESS;
}

/* ---- Creation ------------------------------------------------------- */

/* extent_of sets an image's extent as (width, rows, slices) from its
 * description; 0 for a type it does not make. */
static int extent_of(const cl_image_desc *d, size_t ext[3])
{
	switch (d->image_type) {
	case CL_MEM_OBJECT_IMAGE1D:
	case CL_MEM_OBJECT_IMAGE1D_BUFFER: ext[0] = d->image_width, ext[1] = 1, ext[2] = 1; break;
	case CL_MEM_OBJECT_IMAGE1D_ARRAY: ext[0] = d->image_width, ext[1] = d->image_array_size, ext[2] = 1; break;
	case CL_MEM_OBJECT_IMAGE2D: ext[0] = d->image_width, ext[1] = d->image_height, ext[2] = 1; break;
	case CL_MEM_OBJECT_IMAGE2D_ARRAY:
		ext[0] = d->image_width, ext[1] = d->image_height, ext[2] = d->image_array_size;
		break;
	case CL_MEM_OBJECT_IMAGE3D: ext[0] = d->image_width, ext[1] = d->image_height, ext[2] = d->image_depth; break;
	default: return 0;
	}
	return 1;
}

/* within_limits checks an extent against the device's image section
 * (images made from buffers: its buffer part's max_buffer_size). */
static int within_limits(const struct _cl_device_id *dev, const struct vgpu_image_info *ii, cl_mem_object_type t,
			 const size_t ext[3])
{
	uint64_t max[3] = {ii->max_plane[0], ii->max_plane[1], 1};
	switch (t) {
	case CL_MEM_OBJECT_IMAGE1D_BUFFER: max[0] = vgpu_device_image_buffers(dev, NULL, NULL); break;
	case CL_MEM_OBJECT_IMAGE1D_ARRAY: max[1] = ii->max_array_size; break;
	case CL_MEM_OBJECT_IMAGE2D_ARRAY: max[2] = ii->max_array_size; break;
	case CL_MEM_OBJECT_IMAGE3D: memcpy(max, ii->max_volume, sizeof max); break;
	}
	for (int i = 0; i < 3; i++)
		if (ext[i] == 0 || ext[i] > max[i])
			return 0;
	return 1;
}

/* host_pitches are the strides, in bytes, of an image's rows and slices
 * (in extent terms: a 1D array's layers are its rows) in host memory laid
 * out with OpenCL's row and slice pitches (0: tight). 0, or -1 when the
 * pitches are too small or not multiples of what they step over. */
static int host_pitches(const struct vgpu_image *im, const size_t region[3], size_t rp, size_t sp, size_t *row,
			size_t *slice)
{
	size_t tight = region[0] * im->elem;
	if (im->type == CL_MEM_OBJECT_IMAGE1D_ARRAY) {
		/* A layer is a row: its stride is the slice pitch. */
		*row = sp != 0 ? sp : rp != 0 ? rp : tight;
		*slice = *row * region[1];
		return *row < tight ? -1 : 0;
	}
	*row = rp != 0 ? rp : tight;
	*slice = sp != 0 ? sp : *row * region[1];
	if (*row < tight || *slice < *row * region[1])
		return -1;
	return 0;
}

/* upload writes the host's pixels (pitches as host_pitches gives) into
 * the new image m, all staged before it returns. ctx locked. */
static cl_int upload(cl_context ctx, cl_mem m, const uint8_t *host, size_t hrow, size_t hslice)
{
	const struct vgpu_image *im = m->image;
	size_t rowlen = im->row, rows = im->extent[1] * im->extent[2];
	int tight = hrow == rowlen && hslice == rowlen * im->extent[1];
	if (!tight && rows > (1u << 20))
		return CL_OUT_OF_RESOURCES;
	struct _cl_event *ev = new_xfer(ctx, NULL, 0, m, 1, tight ? 1 : rows);
	if (ev == NULL)
		return CL_OUT_OF_HOST_MEMORY;
	if (tight) {
		xfer_seg(ev, 0, 0, host, m->size);
	} else {
		size_t i = 0;
		for (size_t z = 0; z < im->extent[2]; z++)
			for (size_t y = 0; y < im->extent[1]; y++, i++)
				xfer_seg(ev, i, z * im->slice + y * im->row, host + z * hslice + y * hrow, rowlen);
	}
	IREF(ev);
	vgpu_submit(ev, 0, NULL, 0, NULL);
	cl_int st = ev->status;
	PUT(ev);
	if (st < 0)
		return st == CL_OUT_OF_HOST_MEMORY ? CL_OUT_OF_HOST_MEMORY : CL_OUT_OF_RESOURCES;
	return CL_SUCCESS;
}

/* check_image validates a creation: format, description, limits, host
 * pointer and pitches; it fills im. buf is the buffer an image is made
 * from (desc->buffer, a buffer of the context), else NULL. CL_SUCCESS or
 * the error. */
static cl_int check_image(const struct _cl_device_id *dev, cl_mem_flags flags, const cl_image_format *format,
			  const cl_image_desc *desc, const struct _cl_mem *buf, void *host_ptr, struct vgpu_image *im)
{
	const struct vgpu_image_format *fs;
	const struct vgpu_image_info *ii = vgpu_device_images(dev, &fs);
	if (ii == NULL)
		return CL_INVALID_OPERATION; /* "no devices in context that support images" */
	cl_int err = mem_check_flags(flags);
	if (err != CL_SUCCESS)
		return err;
	if (format == NULL || channels(format->image_channel_order) == 0 ||
	    channel_size(format->image_channel_data_type) == 0)
		return CL_INVALID_IMAGE_FORMAT_DESCRIPTOR;
	if (desc != NULL && desc->buffer != NULL && desc->image_type == CL_MEM_OBJECT_IMAGE2D)
		return CL_INVALID_OPERATION; /* no cl_khr_image2d_from_buffer */
	int from_buffer = desc != NULL && desc->image_type == CL_MEM_OBJECT_IMAGE1D_BUFFER;
	/* An image made from a buffer starts at the daemon buffer's first
	 * byte (an image descriptor has no offset): not on a sub-buffer
	 * that starts further in. */
	if (desc == NULL || desc->num_mip_levels != 0 || desc->num_samples != 0 ||
	    (desc->buffer != NULL) != from_buffer || (from_buffer && (buf == NULL || buf->origin != 0)) ||
	    !extent_of(desc, im->extent))
		return CL_INVALID_IMAGE_DESCRIPTOR;
	if (from_buffer && (flags & (CL_MEM_USE_HOST_PTR | CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR)) != 0)
		return CL_INVALID_VALUE; /* inherited from the buffer, never given */
	if (!within_limits(dev, ii, desc->image_type, im->extent))
		return CL_INVALID_IMAGE_SIZE;
	if (!format_offered(dev, desc->image_type, format))
		return CL_IMAGE_FORMAT_NOT_SUPPORTED;
	if ((host_ptr == NULL) != ((flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR)) == 0))
		return CL_INVALID_HOST_PTR;
	if (host_ptr == NULL && (desc->image_row_pitch != 0 || desc->image_slice_pitch != 0))
		return CL_INVALID_IMAGE_DESCRIPTOR;
	im->type = desc->image_type;
	im->format = *format;
	im->desc = *desc;
	im->elem = channels(format->image_channel_order) * channel_size(format->image_channel_data_type);
	im->row = im->extent[0] * im->elem;
	im->slice = im->row * im->extent[1];
	if (from_buffer && im->row > buf->size)
		return CL_INVALID_IMAGE_SIZE;
	if (host_ptr != NULL) {
		size_t row, slice;
		if ((desc->image_row_pitch != 0 && desc->image_row_pitch % im->elem != 0) ||
		    host_pitches(im, im->extent, desc->image_row_pitch, desc->image_slice_pitch, &row, &slice) != 0 ||
		    (im->type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? row % im->elem : slice % row) != 0)
			return CL_INVALID_IMAGE_DESCRIPTOR;
		im->desc.image_row_pitch = row;
		im->desc.image_slice_pitch = slice;
	}
	return CL_SUCCESS;
}

/* create_image makes an image; with_props: by clCreateImageWithProperties
 * with a list (CL_MEM_PROPERTIES then answers it, empty). */
static cl_mem create_image(cl_context context, int with_props, cl_mem_flags flags, const cl_image_format *format,
			   const cl_image_desc *desc, void *host_ptr, cl_int *errcode_ret)
{
	cl_mem m = NULL;
	struct vgpu_image im = {0};
	cl_context ctx = GET(context, VGPU_CONTEXT);
	/* The buffer an image is made from: one of this context's, not an
	 * image. */
	cl_mem buf = ctx != NULL && desc != NULL && desc->buffer != NULL ? GET(desc->buffer, VGPU_MEM) : NULL;
	if (buf != NULL && (buf->ctx != ctx || buf->image != NULL)) {
		PUT(buf);
		buf = NULL;
	}
	cl_int err = ctx == NULL ? CL_INVALID_CONTEXT : check_image(ctx->dev, flags, format, desc, buf, host_ptr, &im);
	if (err == CL_SUCCESS && im.slice * im.extent[2] > ctx->dev->max_alloc)
		err = CL_INVALID_IMAGE_SIZE;
	if (err == CL_SUCCESS && buf != NULL) {
		/* Made on the buffer's daemon buffer, as a sub-buffer is. */
		m = vgpu_mem_derive(buf, flags, 0, im.row, &err);
		if (m != NULL) {
			m->with_props = with_props;
			m->image_of = im;
			m->image = &m->image_of;
			vgpu_obj_publish(&m->obj);
		}
	} else if (err == CL_SUCCESS) {
		m = mem_create(context, with_props, CL_SUCCESS, flags & ~(cl_mem_flags)(CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR),
			       im.slice * im.extent[2], NULL, &err);
	}
	if (buf != NULL)
		PUT(buf);
	if (m != NULL && m->parent == NULL) {
		ctx_lock(ctx);
		m->image_of = im;
		m->image = &m->image_of;
		m->flags |= flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR);
		if (flags & CL_MEM_USE_HOST_PTR)
			m->host_ptr = host_ptr;
		if (host_ptr != NULL)
			err = upload(ctx, m, host_ptr, im.desc.image_row_pitch, im.desc.image_slice_pitch);
		ctx_unlock(ctx);
		if (err != CL_SUCCESS) {
			vgpu_release(m, VGPU_MEM, CL_INVALID_MEM_OBJECT, vgpu_put_locked);
			m = NULL;
		}
	}
	if (ctx != NULL)
		PUT(ctx);
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return m;
}

cl_mem CL_API_CALL vgpu_clCreateImage(cl_context context, cl_mem_flags flags, const cl_image_format *format,
				      const cl_image_desc *desc, void *host_ptr, cl_int *errcode_ret)
{
	return create_image(context, 0, flags, format, desc, host_ptr, errcode_ret);
}

cl_mem CL_API_CALL vgpu_clCreateImageWithProperties(cl_context context, const cl_mem_properties *properties,
						    cl_mem_flags flags, const cl_image_format *format,
						    const cl_image_desc *desc, void *host_ptr, cl_int *errcode_ret)
{
	if (properties != NULL && properties[0] != 0) {
		/* OpenCL 3.0 defines no image property. */
		if (errcode_ret != NULL)
			*errcode_ret = CL_INVALID_PROPERTY;
		return NULL;
	}
	return create_image(context, properties != NULL, flags, format, desc, host_ptr, errcode_ret);
}

cl_mem CL_API_CALL vgpu_clCreateImage2D(cl_context context, cl_mem_flags flags, const cl_image_format *format,
					size_t w, size_t h, size_t pitch, void *host_ptr, cl_int *errcode_ret)
{
	cl_image_desc d = {.image_type = CL_MEM_OBJECT_IMAGE2D, .image_width = w, .image_height = h,
			   .image_row_pitch = pitch};
	return create_image(context, 0, flags, format, &d, host_ptr, errcode_ret);
}

cl_mem CL_API_CALL vgpu_clCreateImage3D(cl_context context, cl_mem_flags flags, const cl_image_format *format,
					size_t w, size_t h, size_t depth, size_t rp, size_t sp, void *host_ptr,
					cl_int *errcode_ret)
{
	cl_image_desc d = {.image_type = CL_MEM_OBJECT_IMAGE3D, .image_width = w, .image_height = h,
			   .image_depth = depth, .image_row_pitch = rp, .image_slice_pitch = sp};
	return create_image(context, 0, flags, format, &d, host_ptr, errcode_ret);
}

cl_int CL_API_CALL vgpu_clGetImageInfo(cl_mem image, cl_image_info param, size_t size, void *value, size_t *ret)
{
	cl_mem m = GET(image, VGPU_MEM);
	if (m == NULL)
		return CL_INVALID_MEM_OBJECT;
	const struct vgpu_image *im = m->image;
	union {
		cl_image_format f;
		size_t sz;
		cl_mem m;
		cl_uint u;
	} v;
	size_t n = 0;
	cl_int err = im == NULL ? CL_INVALID_MEM_OBJECT : CL_SUCCESS;
	cl_mem_object_type t = im != NULL ? im->type : 0;
	switch (err == CL_SUCCESS ? param : 0) {
	case 0: break;
	case CL_IMAGE_FORMAT: v.f = im->format; n = sizeof v.f; break;
	case CL_IMAGE_ELEMENT_SIZE: v.sz = im->elem; n = sizeof v.sz; break;
	case CL_IMAGE_ROW_PITCH: v.sz = im->row; n = sizeof v.sz; break;
	case CL_IMAGE_SLICE_PITCH:
		v.sz = t == CL_MEM_OBJECT_IMAGE1D_ARRAY ? im->row
		       : t == CL_MEM_OBJECT_IMAGE2D_ARRAY || t == CL_MEM_OBJECT_IMAGE3D ? im->slice
											: 0;
		n = sizeof v.sz;
		break;
	case CL_IMAGE_WIDTH: v.sz = im->extent[0]; n = sizeof v.sz; break;
	case CL_IMAGE_HEIGHT:
		v.sz = t == CL_MEM_OBJECT_IMAGE2D || t == CL_MEM_OBJECT_IMAGE2D_ARRAY || t == CL_MEM_OBJECT_IMAGE3D
			       ? im->extent[1]
			       : 0;
		n = sizeof v.sz;
		break;
	case CL_IMAGE_DEPTH: v.sz = t == CL_MEM_OBJECT_IMAGE3D ? im->extent[2] : 0; n = sizeof v.sz; break;
	case CL_IMAGE_ARRAY_SIZE:
		v.sz = t == CL_MEM_OBJECT_IMAGE1D_ARRAY ? im->extent[1] : t == CL_MEM_OBJECT_IMAGE2D_ARRAY ? im->extent[2] : 0;
		n = sizeof v.sz;
		break;
	case CL_IMAGE_BUFFER: v.m = t == CL_MEM_OBJECT_IMAGE1D_BUFFER ? m->parent : NULL; n = sizeof v.m; break;
	case CL_IMAGE_NUM_MIP_LEVELS:
	case CL_IMAGE_NUM_SAMPLES: v.u = 0; n = sizeof v.u; break;
	default: err = CL_INVALID_VALUE; break;
	}
	if (err == CL_SUCCESS)
		err = vgpu_info(&v, n, size, value, ret);
	cl_context ctx = m->ctx;
	ENTER(ctx);
	PUT(m);
	LEAVE(ctx);
	return err;
}

void vgpu_image_desc(const struct _cl_mem *m, struct vgpu_image_desc *d)
{
	const struct vgpu_image *im = m->image;
	*d = (struct vgpu_image_desc){.buffer = m->id, .type = im->type, .order = im->format.image_channel_order,
				      .data_type = im->format.image_channel_data_type, .width = im->extent[0]};
	switch (im->type) {
	case CL_MEM_OBJECT_IMAGE1D_ARRAY: d->array_size = im->extent[1]; break;
	case CL_MEM_OBJECT_IMAGE2D: d->height = im->extent[1]; break;
	case CL_MEM_OBJECT_IMAGE2D_ARRAY:
		d->height = im->extent[1];
		d->array_size = im->extent[2];
		break;
	case CL_MEM_OBJECT_IMAGE3D:
		d->height = im->extent[1];
		d->depth = im->extent[2];
		break;
	}
}

/* ---- Regions -------------------------------------------------------- */

/* region_ok checks an origin and region of image im: every region size
 * at least 1, the sizes beyond the type's dimensions 1 and their origins
 * 0, and the region inside the image. */
static int region_ok(const struct vgpu_image *im, const size_t *origin, const size_t *region)
{
	if (origin == NULL || region == NULL)
		return 0;
	for (int i = 0; i < 3; i++)
		if (region[i] == 0 || origin[i] > im->extent[i] || region[i] > im->extent[i] - origin[i])
			return 0;
	return 1;
}

/* image_off is the offset in an image's buffer of pixel origin + (0, y, z). */
static size_t image_off(const struct vgpu_image *im, const size_t *origin, size_t y, size_t z)
{
	return (origin[2] + z) * im->slice + (origin[1] + y) * im->row + origin[0] * im->elem;
}

/* rows_xfer is a staged transfer of region's rows between image m and host
 * memory laid out with row and slice strides hrow and hslice (bytes):
 * one piece in all, one per slice or one per row, as the rows lie
 * contiguous on both sides. NULL with *err set on failure. */
static struct _cl_event *rows_xfer(struct enq *e, cl_command_type type, cl_mem m, int write, const size_t *origin,
				   const size_t *region, uint8_t *host, size_t hrow, size_t hslice, cl_int *err)
{
	const struct vgpu_image *im = m->image;
	size_t rowlen = region[0] * im->elem;
	int whole_rows = region[0] == im->extent[0] && hrow == rowlen;
	int whole = whole_rows && region[1] == im->extent[1] && hslice == rowlen * region[1];
	size_t n = whole ? 1 : whole_rows ? region[2] : region[1] * region[2];
	if (n > (1u << 20)) {
		*err = CL_OUT_OF_RESOURCES;
		return NULL;
	}
	struct _cl_event *ev = new_xfer(e->ctx, e->q, type, m, write, n);
	if (ev == NULL) {
		*err = CL_OUT_OF_HOST_MEMORY;
		return NULL;
	}
	if (whole) {
		xfer_seg(ev, 0, image_off(im, origin, 0, 0), host, rowlen * region[1] * region[2]);
	} else if (whole_rows) {
		for (size_t z = 0; z < region[2]; z++)
			xfer_seg(ev, z, image_off(im, origin, 0, z), host + z * hslice, rowlen * region[1]);
	} else {
		size_t i = 0;
		for (size_t z = 0; z < region[2]; z++)
			for (size_t y = 0; y < region[1]; y++, i++)
				xfer_seg(ev, i, image_off(im, origin, y, z), host + z * hslice + y * hrow, rowlen);
	}
	return ev;
}

static cl_int read_write(cl_command_queue queue, cl_mem image, int write, cl_bool blocking, const size_t *origin,
			 const size_t *region, size_t rp, size_t sp, void *ptr, cl_uint n, const cl_event *wl,
			 cl_event *event)
{
	struct enq e;
	cl_mem m = NULL;
	size_t hrow = 0, hslice = 0;
	cl_int err = enq_begin(&e, queue, n, wl);
	if (err == CL_SUCCESS)
		err = get_image(&e, image, &m);
	if (err == CL_SUCCESS && (ptr == NULL || !region_ok(m->image, origin, region) ||
				  host_pitches(m->image, region, rp, sp, &hrow, &hslice) != 0))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS &&
	    (m->flags & (write ? CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS : CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_NO_ACCESS)))
		err = CL_INVALID_OPERATION;
	if (err == CL_SUCCESS) {
		struct _cl_event *ev = rows_xfer(&e, write ? CL_COMMAND_WRITE_IMAGE : CL_COMMAND_READ_IMAGE, m, write,
						 origin, region, ptr, hrow, hslice, &err);
		if (ev != NULL)
			err = vgpu_submit(ev, n, wl, blocking, event);
	}
	if (m != NULL)
		PUT(m);
	return enq_end(&e, err);
}

cl_int CL_API_CALL vgpu_clEnqueueReadImage(cl_command_queue queue, cl_mem image, cl_bool blocking,
					   const size_t *origin, const size_t *region, size_t rp, size_t sp, void *ptr,
					   cl_uint n, const cl_event *wl, cl_event *ev)
{
	return read_write(queue, image, 0, blocking, origin, region, rp, sp, ptr, n, wl, ev);
}

cl_int CL_API_CALL vgpu_clEnqueueWriteImage(cl_command_queue queue, cl_mem image, cl_bool blocking,
					    const size_t *origin, const size_t *region, size_t rp, size_t sp,
					    const void *ptr, cl_uint n, const cl_event *wl, cl_event *ev)
{
	return read_write(queue, image, 1, blocking, origin, region, rp, sp, (void *)ptr, n, wl, ev);
}

/* ---- Copies and fills ----------------------------------------------- */

static struct vgpu_side image_side(cl_mem m, const size_t *origin)
{
	return (struct vgpu_side){m, image_off(m->image, origin, 0, 0), m->image->row, m->image->slice};
}

static void fill_req(void *body, const struct vgpu_side *s, const struct vgpu_side *d, size_t so, size_t dof, size_t len,
		     uint64_t event, const void *arg)
{
	(void)d, (void)dof;
	struct vgpu_icdp_fill *f = body;
	*f = (struct vgpu_icdp_fill){.buffer = s->m->id, .pattern_len = (uint32_t)s->m->image->elem, .offset = so,
				     .length = len, .event = event};
	memcpy(f->pattern, arg, s->m->image->elem);
}

/* overlap reports whether two regions of one image overlap. */
static int overlap(const size_t *a, const size_t *b, const size_t *region)
{
	for (int i = 0; i < 3; i++)
		if (a[i] >= b[i] + region[i] || b[i] >= a[i] + region[i])
			return 0;
	return 1;
}

cl_int CL_API_CALL vgpu_clEnqueueCopyImage(cl_command_queue queue, cl_mem src, cl_mem dst, const size_t *so,
					   const size_t *dor, const size_t *region, cl_uint n, const cl_event *wl,
					   cl_event *event)
{
	struct enq e;
	cl_mem s = NULL, d = NULL;
	cl_int err = enq_begin(&e, queue, n, wl);
	if (err == CL_SUCCESS)
		err = get_image(&e, src, &s);
	if (err == CL_SUCCESS)
		err = get_image(&e, dst, &d);
	if (err == CL_SUCCESS &&
	    (s->image->format.image_channel_order != d->image->format.image_channel_order ||
	     s->image->format.image_channel_data_type != d->image->format.image_channel_data_type))
		err = CL_IMAGE_FORMAT_MISMATCH;
	if (err == CL_SUCCESS && (!region_ok(s->image, so, region) || !region_ok(d->image, dor, region)))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS && s == d && overlap(so, dor, region))
		err = CL_MEM_COPY_OVERLAP;
	if (err == CL_SUCCESS) {
		struct vgpu_side a = image_side(s, so), b = image_side(d, dor);
		err = vgpu_copy_rows(&e, CL_COMMAND_COPY_IMAGE, &a, &b, region[0] * s->image->elem, region, n, wl, event);
	}
	if (s != NULL)
		PUT(s);
	if (d != NULL)
		PUT(d);
	return enq_end(&e, err);
}

/* image_buffer copies between an image's region and a buffer's bytes at
 * off, packed (to_buffer: from the image). */
static cl_int image_buffer(cl_command_queue queue, cl_mem image, cl_mem buffer, int to_buffer, const size_t *origin,
			   const size_t *region, size_t off, cl_uint n, const cl_event *wl, cl_event *event)
{
	struct enq e;
	cl_mem im = NULL, b = NULL;
	cl_int err = enq_begin(&e, queue, n, wl);
	if (err == CL_SUCCESS)
		err = get_image(&e, image, &im);
	if (err == CL_SUCCESS)
		err = get_mem(&e, buffer, &b);
	size_t rowlen = 0, total = 0;
	if (err == CL_SUCCESS && !region_ok(im->image, origin, region))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS) {
		rowlen = region[0] * im->image->elem;
		total = rowlen * region[1] * region[2];
		if (off > b->size || total > b->size - off)
			err = CL_INVALID_VALUE;
	}
	if (err == CL_SUCCESS) {
		struct vgpu_side is = image_side(im, origin);
		struct vgpu_side bs = {b, b->origin + off, rowlen, rowlen * region[1]};
		err = to_buffer ? vgpu_copy_rows(&e, CL_COMMAND_COPY_IMAGE_TO_BUFFER, &is, &bs, rowlen, region, n, wl, event)
				: vgpu_copy_rows(&e, CL_COMMAND_COPY_BUFFER_TO_IMAGE, &bs, &is, rowlen, region, n, wl, event);
	}
	if (im != NULL)
		PUT(im);
	if (b != NULL)
		PUT(b);
	return enq_end(&e, err);
}

cl_int CL_API_CALL vgpu_clEnqueueCopyImageToBuffer(cl_command_queue queue, cl_mem src, cl_mem dst,
						   const size_t *so, const size_t *region, size_t doff, cl_uint n,
						   const cl_event *wl, cl_event *ev)
{
	return image_buffer(queue, src, dst, 1, so, region, doff, n, wl, ev);
}

cl_int CL_API_CALL vgpu_clEnqueueCopyBufferToImage(cl_command_queue queue, cl_mem src, cl_mem dst, size_t soff,
						   const size_t *dor, const size_t *region, cl_uint n,
						   const cl_event *wl, cl_event *ev)
{
	return image_buffer(queue, dst, src, 0, dor, region, soff, n, wl, ev);
}

/* half_of converts a float to IEEE half precision, rounding to nearest
 * even (overflow to infinity, NaN kept a NaN). */
static uint16_t half_of(float f)
{
	uint32_t x;
	memcpy(&x, &f, sizeof x);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t exp = (x >> 23) & 0xff, man = x & 0x7fffff;
	if (exp == 0xff)
		return sign | 0x7c00 | (man != 0 ? 0x200 : 0);
	int e = (int)exp - 127 + 15;
	if (e >= 0x1f)
		return sign | 0x7c00;
	if (e <= 0) {
		if (e < -10)
			return sign;
		man |= 0x800000;
		uint32_t shift = (uint32_t)(14 - e);
		uint32_t h = man >> shift, rest = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
		if (rest > halfway || (rest == halfway && (h & 1)))
			h++;
		return sign | (uint16_t)h;
	}
	uint32_t h = ((uint32_t)e << 10) | (man >> 13), rest = man & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++; /* may carry into the exponent, up to infinity: right */
	return sign | (uint16_t)h;
}

/* clampf clamps v to [lo, hi]; a NaN becomes 0 (then clamped). */
static float clampf(float v, float lo, float hi)
{
	if (v != v)
		v = 0;
	return v < lo ? lo : v > hi ? hi : v;
}

/* rne rounds |x| < 2^23 to the nearest integer, ties to even (the
 * default rounding of the addition), without the C library's libm. */
static float rne(float x)
{
	const float big = 8388608.0f; /* 2^23 */
	return x >= 0 ? (x + big) - big : -((-x + big) - big);
}

/* pack_color converts a fill colour (float4 for normalized and float
 * types, int4 or uint4 for integer ones) to one pixel of format f, with
 * OpenCL's conversions (round to nearest even, saturating). */
static void pack_color(const cl_image_format *f, const void *color, uint8_t *out)
{
	float c[4];
	int32_t ci[4];
	uint32_t cu[4];
	memcpy(c, color, sizeof c);
	memcpy(ci, color, sizeof ci);
	memcpy(cu, color, sizeof cu);
	/* The channels in memory order. */
	int idx[4] = {0, 1, 2, 3};
	if (f->image_channel_order == CL_BGRA)
		idx[0] = 2, idx[2] = 0;
	else if (f->image_channel_order == CL_ARGB)
		idx[0] = 3, idx[1] = 0, idx[2] = 1, idx[3] = 2;
	else if (f->image_channel_order == CL_A)
		idx[0] = 3;
	else if (f->image_channel_order == CL_RA)
		idx[1] = 3;
	size_t nch = channels(f->image_channel_order), sz = channel_size(f->image_channel_data_type);
	for (size_t i = 0; i < nch; i++) {
		int k = idx[i];
		float v = c[k];
		uint8_t *p = out + i * sz;
		union {
			uint8_t u8;
			int8_t s8;
			uint16_t u16;
			int16_t s16;
			uint32_t u32;
			int32_t s32;
			float f;
		} u;
		switch (f->image_channel_data_type) {
		case CL_UNORM_INT8: u.u8 = (uint8_t)rne(clampf(v, 0, 1) * 255); break;
		case CL_UNORM_INT16: u.u16 = (uint16_t)rne(clampf(v, 0, 1) * 65535); break;
		case CL_SNORM_INT8: u.s8 = (int8_t)rne(clampf(v, -1, 1) * 127); break;
		case CL_SNORM_INT16: u.s16 = (int16_t)rne(clampf(v, -1, 1) * 32767); break;
		case CL_HALF_FLOAT: u.u16 = half_of(v); break;
		case CL_FLOAT: u.f = v; break;
		case CL_SIGNED_INT8: u.s8 = (int8_t)(ci[k] < -128 ? -128 : ci[k] > 127 ? 127 : ci[k]); break;
		case CL_SIGNED_INT16: u.s16 = (int16_t)(ci[k] < -32768 ? -32768 : ci[k] > 32767 ? 32767 : ci[k]); break;
		case CL_SIGNED_INT32: u.s32 = ci[k]; break;
		case CL_UNSIGNED_INT8: u.u8 = (uint8_t)(cu[k] > 255 ? 255 : cu[k]); break;
		case CL_UNSIGNED_INT16: u.u16 = (uint16_t)(cu[k] > 65535 ? 65535 : cu[k]); break;
		case CL_UNSIGNED_INT32: u.u32 = cu[k]; break;
		default: u.u32 = 0; break;
		}
		memcpy(p, &u, sz);
	}
}

cl_int CL_API_CALL vgpu_clEnqueueFillImage(cl_command_queue queue, cl_mem image, const void *color,
					   const size_t *origin, const size_t *region, cl_uint n, const cl_event *wl,
					   cl_event *event)
{
	struct enq e;
	cl_mem m = NULL;
	cl_int err = enq_begin(&e, queue, n, wl);
	if (err == CL_SUCCESS)
		err = get_image(&e, image, &m);
	if (err == CL_SUCCESS && (color == NULL || !region_ok(m->image, origin, region)))
		err = CL_INVALID_VALUE;
	if (err == CL_SUCCESS) {
		/* Every format offered has a pixel of 1, 2, 4, 8 or 16
		 * bytes: a fill pattern. */
		uint8_t px[16] = {0};
		pack_color(&m->image->format, color, px);
		struct vgpu_side s = image_side(m, origin);
		err = vgpu_rows_cmd(&e, CL_COMMAND_FILL_IMAGE, VGPU_ICDP_OP_FILL,
			       sizeof(struct vgpu_icdp_header) + sizeof(struct vgpu_icdp_fill), &s, NULL,
			       region[0] * m->image->elem, region, fill_req, px, n, wl, event);
	}
	if (m != NULL)
		PUT(m);
	return enq_end(&e, err);
}

/* ---- Mappings ------------------------------------------------------- */

static void map_free(struct vgpu_map *map)
{
	if (map->hm != NULL)
		vgpu_hostmem_put(map->hm);
	free(map);
}

void *CL_API_CALL vgpu_clEnqueueMapImage(cl_command_queue queue, cl_mem image, cl_bool blocking, cl_map_flags flags,
					 const size_t *origin, const size_t *region, size_t *rp, size_t *sp,
					 cl_uint n, const cl_event *wl, cl_event *event, cl_int *errcode_ret)
{
	struct enq e;
	cl_mem m = NULL;
	void *ptr = NULL;
	struct vgpu_map *map = NULL;
	cl_int err = enq_begin(&e, queue, n, wl);
	if (err == CL_SUCCESS)
		err = get_image(&e, image, &m);
	if (err == CL_SUCCESS) {
		cl_mem_object_type t = m->image->type;
		int need_slice = t == CL_MEM_OBJECT_IMAGE3D || t == CL_MEM_OBJECT_IMAGE2D_ARRAY ||
				 t == CL_MEM_OBJECT_IMAGE1D_ARRAY;
		if (!region_ok(m->image, origin, region) || rp == NULL || (need_slice && sp == NULL))
			err = CL_INVALID_VALUE;
	}
	if (err == CL_SUCCESS)
		err = map_check(m, flags);
	if (err == CL_SUCCESS && (map = calloc(1, sizeof *map)) == NULL)
		err = CL_OUT_OF_HOST_MEMORY;
	if (err != CL_SUCCESS)
		goto out;
	const struct vgpu_image *im = m->image;
	size_t rowlen = region[0] * im->elem;
	map->rect = 1;
	map->flags = flags;
	memcpy(map->origin, origin, sizeof map->origin);
	memcpy(map->region, region, sizeof map->region);
	if (m->flags & CL_MEM_USE_HOST_PTR) {
		/* The application's own memory, laid out as it gave it. */
		map->row_pitch = im->desc.image_row_pitch;
		map->slice_pitch = im->type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? im->desc.image_row_pitch * im->extent[1]
									     : im->desc.image_slice_pitch;
		map->ptr = (uint8_t *)m->host_ptr + origin[2] * map->slice_pitch + origin[1] * map->row_pitch +
			   origin[0] * im->elem;
	} else {
		if ((map->hm = vgpu_hostmem_new(rowlen * region[1] * region[2])) == NULL) {
			free(map);
			err = CL_OUT_OF_HOST_MEMORY;
			goto out;
		}
		map->ptr = map->hm->p;
		map->row_pitch = rowlen;
		map->slice_pitch = rowlen * region[1];
	}
	if ((flags & CL_MAP_WRITE_INVALIDATE_REGION) == 0) {
		struct _cl_event *ev = rows_xfer(&e, CL_COMMAND_MAP_IMAGE, m, 0, origin, region, map->ptr,
						 map->row_pitch, map->slice_pitch, &err);
		if (ev != NULL) {
			if (map->hm != NULL) {
				ev->hm = map->hm;
				map->hm->refs++;
			}
			err = vgpu_submit(ev, n, wl, blocking, event);
		}
	} else {
		err = enq_marker(&e, CL_COMMAND_MAP_IMAGE, n, wl, blocking, event);
	}
	if (err != CL_SUCCESS) {
		map_free(map);
		goto out;
	}
	map->next = m->maps;
	m->maps = map;
	m->map_count++;
	ptr = map->ptr;
	/* OpenCL's pitches: a 1D array's layers step by the slice pitch. */
	*rp = map->row_pitch;
	if (sp != NULL)
		*sp = im->type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? map->row_pitch
		      : im->type == CL_MEM_OBJECT_IMAGE2D_ARRAY || im->type == CL_MEM_OBJECT_IMAGE3D ? map->slice_pitch
												     : 0;
out:
	if (m != NULL)
		PUT(m);
	err = enq_end(&e, err);
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return ptr;
}

cl_int vgpu_image_unmap(struct enq *e, cl_mem m, struct vgpu_map *map, cl_uint n, const cl_event *wl, cl_event *event)
{
	cl_int err = CL_SUCCESS;
	struct _cl_event *ev = rows_xfer(e, CL_COMMAND_UNMAP_MEM_OBJECT, m, 1, map->origin, map->region, map->ptr,
					 map->row_pitch, map->slice_pitch, &err);
	if (ev == NULL)
		return err;
	if (map->hm != NULL) {
		ev->hm = map->hm;
		map->hm->refs++;
	}
	return vgpu_submit(ev, n, wl, 0, event);
}

/* ---- Samplers ------------------------------------------------------- */

static cl_sampler create_sampler(cl_context context, cl_bool norm, cl_addressing_mode am, cl_filter_mode fm,
				 const cl_sampler_properties *props, size_t nprops, cl_int *errcode_ret)
{
	cl_sampler s = NULL;
	cl_int err = CL_SUCCESS;
	cl_context ctx = GET(context, VGPU_CONTEXT);
	if (ctx == NULL) {
		err = CL_INVALID_CONTEXT;
	} else if (vgpu_device_images(ctx->dev, NULL) == NULL) {
		err = CL_INVALID_OPERATION;
	} else if ((norm != CL_TRUE && norm != CL_FALSE) || am < CL_ADDRESS_NONE || am > CL_ADDRESS_MIRRORED_REPEAT ||
		   (fm != CL_FILTER_NEAREST && fm != CL_FILTER_LINEAR) ||
		   /* OpenCL: repeat modes need normalized coordinates. */
		   (!norm && (am == CL_ADDRESS_REPEAT || am == CL_ADDRESS_MIRRORED_REPEAT))) {
		err = CL_INVALID_VALUE;
	} else if ((s = calloc(1, sizeof *s)) == NULL) {
		err = CL_OUT_OF_HOST_MEMORY;
	} else {
		vgpu_obj_init(&s->obj, VGPU_SAMPLER);
		s->ctx = ctx;
		IREF(ctx);
		s->normalized = norm;
		s->addressing = am;
		s->filter = fm;
		if (nprops > 0)
			memcpy(s->props, props, nprops * sizeof *props);
		s->nprops = nprops;
		vgpu_obj_publish(&s->obj);
	}
	if (ctx != NULL)
		PUT(ctx);
	if (errcode_ret != NULL)
		*errcode_ret = err;
	return s;
}

cl_sampler CL_API_CALL vgpu_clCreateSampler(cl_context context, cl_bool normalized, cl_addressing_mode am,
					    cl_filter_mode fm, cl_int *errcode_ret)
{
	return create_sampler(context, normalized, am, fm, NULL, 0, errcode_ret);
}

cl_sampler CL_API_CALL vgpu_clCreateSamplerWithProperties(cl_context context, const cl_sampler_properties *props,
							  cl_int *errcode_ret)
{
	cl_bool norm = CL_TRUE;
	cl_addressing_mode am = CL_ADDRESS_CLAMP;
	cl_filter_mode fm = CL_FILTER_NEAREST;
	size_t n = 0;
	int seen = 0;
	for (; props != NULL && props[n] != 0; n += 2) {
		int bit = props[n] == CL_SAMPLER_NORMALIZED_COORDS ? 1
			  : props[n] == CL_SAMPLER_ADDRESSING_MODE  ? 2
			  : props[n] == CL_SAMPLER_FILTER_MODE      ? 4
								    : 0;
		if (bit == 0 || (seen & bit) != 0 || n + 2 > 6) {
			if (errcode_ret != NULL)
				*errcode_ret = CL_INVALID_VALUE;
			return NULL;
		}
		seen |= bit;
		if (bit == 1)
			norm = (cl_bool)props[n + 1];
		else if (bit == 2)
			am = (cl_addressing_mode)props[n + 1];
		else
			fm = (cl_filter_mode)props[n + 1];
	}
	return create_sampler(context, norm, am, fm, props, props != NULL ? n + 1 : 0, errcode_ret);
}

void vgpu_sampler_destroy(cl_sampler s)
{
	cl_context ctx = s->ctx;
	free(s);
	PUT(ctx);
}

cl_int CL_API_CALL vgpu_clRetainSampler(cl_sampler s)
{
	return vgpu_retain(s, VGPU_SAMPLER, CL_INVALID_SAMPLER);
}

cl_int CL_API_CALL vgpu_clReleaseSampler(cl_sampler s)
{
	return vgpu_release(s, VGPU_SAMPLER, CL_INVALID_SAMPLER, vgpu_put_locked);
}

cl_int CL_API_CALL vgpu_clGetSamplerInfo(cl_sampler sampler, cl_sampler_info p, size_t size, void *value, size_t *ret)
{
	cl_sampler s = GET(sampler, VGPU_SAMPLER);
	if (s == NULL)
		return CL_INVALID_SAMPLER;
	union {
		cl_uint u;
		cl_context c;
		cl_bool b;
		cl_addressing_mode a;
		cl_filter_mode f;
	} v;
	size_t n = 0;
	cl_int err = CL_SUCCESS;
	switch (p) {
	case CL_SAMPLER_REFERENCE_COUNT: v.u = vgpu_obj_refs(&s->obj); n = sizeof v.u; break;
	case CL_SAMPLER_CONTEXT: v.c = s->ctx; n = sizeof v.c; break;
	case CL_SAMPLER_NORMALIZED_COORDS: v.b = s->normalized; n = sizeof v.b; break;
	case CL_SAMPLER_ADDRESSING_MODE: v.a = s->addressing; n = sizeof v.a; break;
	case CL_SAMPLER_FILTER_MODE: v.f = s->filter; n = sizeof v.f; break;
	case CL_SAMPLER_PROPERTIES:
		err = vgpu_info(s->props, s->nprops * sizeof s->props[0], size, value, ret);
		goto out;
	default: err = CL_INVALID_VALUE; goto out;
	}
	err = vgpu_info(&v, n, size, value, ret);
out:;
	cl_context ctx = s->ctx;
	ENTER(ctx);
	PUT(s);
	LEAVE(ctx);
	return err;
}

//go:build cgo

package gpu

/*
#include "opencl_cgo.h"

// vg_image makes an image of the given type, format and extent; one made
// from a buffer (CL_MEM_OBJECT_IMAGE1D_BUFFER) on buf.
static cl_int vg_image(cl_context ctx, cl_uint type, cl_uint order, cl_uint dtype,
		size_t w, size_t h, size_t d, size_t layers, cl_mem buf, cl_mem *out) {
	cl_image_format f = {order, dtype};
	cl_image_desc desc = {0};
	desc.image_type = type;
	desc.image_width = w;
	desc.image_height = h;
	desc.image_depth = d;
	desc.image_array_size = layers;
	desc.buffer = buf;
	cl_int err = CL_SUCCESS;
	*out = clCreateImage(ctx, CL_MEM_READ_WRITE, &f, &desc, NULL, &err);
	return err;
}

static cl_int vg_image_element(cl_mem img, size_t *n) {
	return clGetImageInfo(img, CL_IMAGE_ELEMENT_SIZE, sizeof *n, n, NULL);
}

// vg_image_copy copies the packed pixels of buf into img (in) or img's
// into buf, behind the queue's earlier work.
static cl_int vg_image_copy(cl_command_queue q, cl_mem buf, cl_mem img, int in,
		size_t r0, size_t r1, size_t r2, cl_event *ev) {
	size_t origin[3] = {0, 0, 0};
	size_t region[3] = {r0, r1, r2};
	if (in) {
		return clEnqueueCopyBufferToImage(q, buf, img, 0, origin, region, 0, NULL, ev);
	}
	return clEnqueueCopyImageToBuffer(q, img, buf, origin, region, 0, 0, NULL, ev);
}

static cl_int vg_sampler(cl_context ctx, cl_bool norm, cl_uint addr, cl_uint filter, cl_sampler *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateSampler(ctx, norm, addr, filter, &err);
	return err;
}

static cl_int vg_set_image_arg(cl_kernel k, cl_uint i, cl_mem m) {
	return clSetKernelArg(k, i, sizeof(cl_mem), &m);
}

static cl_int vg_set_sampler_arg(cl_kernel k, cl_uint i, cl_sampler s) {
	return clSetKernelArg(k, i, sizeof(cl_sampler), &s);
}

static cl_int vg_formats(cl_context ctx, cl_mem_object_type type, cl_uint cap, cl_image_format *out, cl_uint *n) {
	return clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, type, cap, out, n);
}

static cl_context vg_probe_context(cl_device_id d, cl_int *err) {
	return clCreateContext(NULL, 1, &d, NULL, NULL, err);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// launchImages is what a launch with image or sampler arguments made for
// itself: the device images its buffers are copied into (and back out of,
// where the kernel may write them) and its samplers. They are released
// once the launch is enqueued (the runtime keeps them while its commands
// use them); tail is the event of the launch's last copy back, which
// whoever waits for the launch waits for too.
type launchImages struct {
	images   []launchImage
	samplers []C.cl_sampler
	tail     C.cl_event
}

type launchImage struct {
	buf    *buffer
	img    C.cl_mem
	region [3]uint64
	onBuf  bool // made on the buffer (ImageType1DBuffer): no copies
	back   bool // the kernel may write it: copy it back
}

// maxImageFormats bounds the formats read from a device.
const maxImageFormats = 512

// imageCaps reads a device's image limits; the formats, which need a
// context, are imageFormats' (Devices and Open fill them in).
func imageCaps(d C.cl_device_id) (ImageCaps, error) {
	var c ImageCaps
	var support C.cl_bool
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, C.CL_DEVICE_IMAGE_SUPPORT, C.size_t(unsafe.Sizeof(support)), unsafe.Pointer(&support), nil)); err != nil {
		return c, err
	}
	if support == C.CL_FALSE {
		return c, nil
	}
	for _, q := range []struct {
		param C.cl_device_info
		size  uintptr
		dst   *uint64
	}{
		{C.CL_DEVICE_IMAGE2D_MAX_WIDTH, unsafe.Sizeof(C.size_t(0)), &c.Max2D[0]},
		{C.CL_DEVICE_IMAGE2D_MAX_HEIGHT, unsafe.Sizeof(C.size_t(0)), &c.Max2D[1]},
		{C.CL_DEVICE_IMAGE3D_MAX_WIDTH, unsafe.Sizeof(C.size_t(0)), &c.Max3D[0]},
		{C.CL_DEVICE_IMAGE3D_MAX_HEIGHT, unsafe.Sizeof(C.size_t(0)), &c.Max3D[1]},
		{C.CL_DEVICE_IMAGE3D_MAX_DEPTH, unsafe.Sizeof(C.size_t(0)), &c.Max3D[2]},
		{C.CL_DEVICE_IMAGE_MAX_ARRAY_SIZE, unsafe.Sizeof(C.size_t(0)), &c.MaxArraySize},
		{C.CL_DEVICE_MAX_READ_IMAGE_ARGS, 4, &c.MaxReadArgs},
		{C.CL_DEVICE_MAX_WRITE_IMAGE_ARGS, 4, &c.MaxWriteArgs},
		{C.CL_DEVICE_MAX_SAMPLERS, 4, &c.MaxSamplers},
		{C.CL_DEVICE_IMAGE_MAX_BUFFER_SIZE, unsafe.Sizeof(C.size_t(0)), &c.MaxBufferSize},
	} {
		var u32 C.cl_uint
		var u64 C.cl_ulong
		var code C.cl_int
		if q.size == 4 {
			code = C.clGetDeviceInfo(d, q.param, 4, unsafe.Pointer(&u32), nil)
			u64 = C.cl_ulong(u32)
		} else {
			code = C.clGetDeviceInfo(d, q.param, 8, unsafe.Pointer(&u64), nil)
		}
		if err := clErr("clGetDeviceInfo", code); err != nil {
			return ImageCaps{}, fmt.Errorf("device info %#x: %w", int(q.param), err)
		}
		*q.dst = uint64(u64)
	}
	c.Supported = true
	return c, nil
}

// imageFormats fills in c's formats from context ctx, of one device: of
// 2D images and of images made from buffers a kernel may read and write.
func imageFormats(ctx C.cl_context, c *ImageCaps) error {
	var err error
	if c.Formats, err = formatsOf(ctx, C.CL_MEM_OBJECT_IMAGE2D); err != nil {
		return err
	}
	if c.MaxBufferSize == 0 {
		return nil
	}
	c.BufferFormats, err = formatsOf(ctx, C.CL_MEM_OBJECT_IMAGE1D_BUFFER)
	return err
}

// formatsOf lists the formats of images of type typ a kernel may read
// and write (CL_MEM_READ_WRITE) in context ctx.
func formatsOf(ctx C.cl_context, typ C.cl_mem_object_type) ([]ImageFormat, error) {
	var n C.cl_uint
	if err := clErr("clGetSupportedImageFormats", C.vg_formats(ctx, typ, 0, nil, &n)); err != nil {
		return nil, err
	}
	n = min(n, maxImageFormats)
	if n == 0 {
		return nil, nil
	}
	fs := make([]C.cl_image_format, n)
	if err := clErr("clGetSupportedImageFormats", C.vg_formats(ctx, typ, n, &fs[0], nil)); err != nil {
		return nil, err
	}
	out := make([]ImageFormat, 0, n)
	for _, f := range fs {
		out = append(out, ImageFormat{Order: uint32(f.image_channel_order), DataType: uint32(f.image_channel_data_type)})
	}
	return out, nil
}

// probeFormats is imageFormats of device d in a context of its own, for
// Devices, which has none (Open asks its device's context instead).
func probeFormats(d C.cl_device_id, c *ImageCaps) error {
	var code C.cl_int
	ctx := C.vg_probe_context(d, &code)
	if err := clErr("clCreateContext", code); err != nil {
		return fmt.Errorf("image formats: %w", err)
	}
	defer C.clReleaseContext(ctx)
	return imageFormats(ctx, c)
}

// imageArg makes the device image for image argument a of launch li and
// sets it as argument i of k. The buffer must hold the packed image. An
// image made from a buffer is made on the buffer, the others are copied
// in and out. q.mu must be held.
func (q *queue) imageArg(k *kernel, i int, a Arg, li *launchImages) error {
	b, err := q.checkBuffer("image argument", a.Buffer)
	if err != nil {
		return err
	}
	r, err := a.Image.Region()
	if err != nil {
		return err
	}
	var img, on C.cl_mem
	onBuf := a.Image.Type == ImageType1DBuffer
	if onBuf {
		on = b.mem
	}
	if err := clErr("clCreateImage", C.vg_image(q.dev.ctx, C.cl_uint(a.Image.Type), C.cl_uint(a.Image.Order), C.cl_uint(a.Image.DataType),
		C.size_t(a.Image.Width), C.size_t(a.Image.Height), C.size_t(a.Image.Depth), C.size_t(a.Image.ArraySize), on, &img)); err != nil {
		return fmt.Errorf("image %dx%dx%d: %w", r[0], r[1], r[2], err)
	}
	var elem C.size_t
	if err := clErr("clGetImageInfo", C.vg_image_element(img, &elem)); err != nil {
		C.clReleaseMemObject(img)
		return err
	}
	if need, ok := imageBytes(uint64(elem), r); !ok || need > b.size {
		C.clReleaseMemObject(img)
		return fmt.Errorf("image %dx%dx%d of %d-byte pixels in a %d-byte buffer: %w", r[0], r[1], r[2], elem, b.size, ErrOutOfRange)
	}
	li.images = append(li.images, launchImage{buf: b, img: img, region: r, onBuf: onBuf,
		back: !onBuf && k.access[i] != C.CL_KERNEL_ARG_ACCESS_READ_ONLY})
	return clErr("clSetKernelArg", C.vg_set_image_arg(k.k, C.cl_uint(i), img))
}

// imageBytes is the size of a packed image of region r with elem-byte
// pixels, false if it overflows.
func imageBytes(elem uint64, r [3]uint64) (uint64, bool) {
	n := elem
	for _, v := range r {
		if v != 0 && n > ^uint64(0)/v {
			return 0, false
		}
		n *= v
	}
	return n, true
}

// samplerArg makes the sampler of argument a and sets it as argument i
// of k. q.mu must be held.
func (q *queue) samplerArg(k *kernel, i int, a Arg, li *launchImages) error {
	if err := a.Sampler.Check(); err != nil {
		return err
	}
	norm := C.cl_bool(C.CL_FALSE)
	if a.Sampler.Normalized {
		norm = C.CL_TRUE
	}
	var s C.cl_sampler
	if err := clErr("clCreateSampler", C.vg_sampler(q.dev.ctx, norm, C.cl_uint(a.Sampler.Addressing), C.cl_uint(a.Sampler.Filter), &s)); err != nil {
		return err
	}
	li.samplers = append(li.samplers, s)
	return clErr("clSetKernelArg", C.vg_set_sampler_arg(k.k, C.cl_uint(i), s))
}

// copyIn enqueues the copies of every image's buffer into its image,
// ahead of the kernel. q.mu must be held.
func (li *launchImages) copyIn(q *queue) error {
	for _, im := range li.images {
		if im.onBuf {
			continue
		}
		if err := clErr("clEnqueueCopyBufferToImage", C.vg_image_copy(q.q, im.buf.mem, im.img, 1,
			C.size_t(im.region[0]), C.size_t(im.region[1]), C.size_t(im.region[2]), nil)); err != nil {
			return fmt.Errorf("image argument: %w", err)
		}
	}
	return nil
}

// copyBack enqueues, behind the kernel, the copies of every image the
// kernel may write into its buffer, and keeps the last one's event in
// li.tail. q.mu must be held.
func (li *launchImages) copyBack(q *queue) error {
	for _, im := range li.images {
		if !im.back {
			continue
		}
		if li.tail != nil {
			C.clReleaseEvent(li.tail)
			li.tail = nil
		}
		if err := clErr("clEnqueueCopyImageToBuffer", C.vg_image_copy(q.q, im.buf.mem, im.img, 0,
			C.size_t(im.region[0]), C.size_t(im.region[1]), C.size_t(im.region[2]), &li.tail)); err != nil {
			return fmt.Errorf("image argument: %w", err)
		}
	}
	return nil
}

// release lets go of the launch's images and samplers (the runtime keeps
// those its enqueued commands use). The tail event stays.
func (li *launchImages) release() {
	for _, im := range li.images {
		C.clReleaseMemObject(im.img)
	}
	for _, s := range li.samplers {
		C.clReleaseSampler(s)
	}
	li.images, li.samplers = nil, nil
}

// waitTail waits for the launch's last copy back, if any, and releases
// its event.
func waitTail(tail C.cl_event) error {
	if tail == nil {
		return nil
	}
	err := clErr("clWaitForEvents", C.clWaitForEvents(1, &tail))
	C.clReleaseEvent(tail)
	if err != nil {
		return fmt.Errorf("image copy back: %w", err)
	}
	return nil
}

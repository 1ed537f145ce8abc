package abi

import (
	"fmt"
	"slices"
)

// Images (1.8, FeatureImages; docs/ABI.md "Images"). An image is an
// ordinary buffer holding its pixels packed: rows of width pixels without
// padding, height rows to a slice, depth slices (array_size layers for an
// array type), from the buffer's first byte. A launch names an image
// argument by its buffer and an image descriptor; the device makes a
// device image of it for the kernel, so every device model reads the same
// layout and an image migrates, reallocates and survives an upgrade as a
// buffer does.

// Image object types (OpenCL's CL_MEM_OBJECT_IMAGE*).
const (
	ImageType2D      uint32 = 0x10F1
	ImageType3D      uint32 = 0x10F2
	ImageType2DArray uint32 = 0x10F3
	ImageType1D      uint32 = 0x10F4
	ImageType1DArray uint32 = 0x10F5
	// ImageType1DBuffer (1.10, FeatureImageBuffers) is OpenCL's image
	// made from a buffer (CL_MEM_OBJECT_IMAGE1D_BUFFER): a 1D image
	// whose pixels are the named buffer's first bytes, as every image's
	// are; its width is bounded by the image section's max_buffer_size
	// instead of the plane's width.
	ImageType1DBuffer uint32 = 0x10F6
)

// ImageDescSize is the size of an image descriptor in a launch descriptor.
const ImageDescSize = 48

// MaxImageExtent bounds each of an image descriptor's sizes, whatever
// the device reports (the device checks its own limits), so that an
// image's size in bytes never overflows.
const MaxImageExtent = 1 << 16

// MaxImageBufferExtent bounds the width of an image made from a buffer
// (ImageType1DBuffer) likewise: at most 2 GiB of 16-byte pixels.
const MaxImageBufferExtent = 1 << 27

// ImageDesc describes an image argument (docs/ABI.md "Images").
//
//	off size field
//	0   4    buffer handle (nonzero)
//	4   4    image type (ImageType*)
//	8   4    channel order (OpenCL's CL_R, CL_RGBA, ...)
//	12  4    channel data type (OpenCL's CL_UNORM_INT8, ...)
//	16  8    width (1..MaxImageExtent; ImageType1DBuffer 1..MaxImageBufferExtent)
//	24  8    height: 1D types 0 or 1, else 1..MaxImageExtent
//	32  8    depth: 3D 1..MaxImageExtent, else 0 or 1
//	40  8    array_size: array types 1..MaxImageExtent, else 0 or 1
type ImageDesc struct {
	Buffer    uint32
	Type      uint32
	Order     uint32
	DataType  uint32
	Width     uint64
	Height    uint64
	Depth     uint64
	ArraySize uint64
}

// ImageFormat is a channel order and data type, OpenCL's values; in the
// device-information blob's image section, one per supported format:
//
//	off size field
//	0   4    channel order
//	4   4    channel data type
type ImageFormat struct {
	Order    uint32
	DataType uint32
}

// ImageFormatSize is the size of an ImageFormat record.
const ImageFormatSize = 8

// Marshal writes f into b (ImageFormatSize bytes).
func (f *ImageFormat) Marshal(b []byte) {
	le.PutUint32(b[0:], f.Order)
	le.PutUint32(b[4:], f.DataType)
}

// Format is the image's channel order and data type.
func (d *ImageDesc) Format() ImageFormat { return ImageFormat{d.Order, d.DataType} }

// Channel orders and data types the ABI knows (OpenCL 1.2's, section
// 5.3.1.1). A format is one of each whose pixel size PixelSize knows.
const (
	OrderR         uint32 = 0x10B0
	OrderA         uint32 = 0x10B1
	OrderRG        uint32 = 0x10B2
	OrderRA        uint32 = 0x10B3
	OrderRGB       uint32 = 0x10B4
	OrderRGBA      uint32 = 0x10B5
	OrderBGRA      uint32 = 0x10B6
	OrderARGB      uint32 = 0x10B7
	OrderIntensity uint32 = 0x10B8
	OrderLuminance uint32 = 0x10B9
	OrderRx        uint32 = 0x10BA
	OrderRGx       uint32 = 0x10BB
	OrderRGBx      uint32 = 0x10BC

	SnormInt8      uint32 = 0x10D0
	SnormInt16     uint32 = 0x10D1
	UnormInt8      uint32 = 0x10D2
	UnormInt16     uint32 = 0x10D3
	UnormShort565  uint32 = 0x10D4
	UnormShort555  uint32 = 0x10D5
	UnormInt101010 uint32 = 0x10D6
	SignedInt8     uint32 = 0x10D7
	SignedInt16    uint32 = 0x10D8
	SignedInt32    uint32 = 0x10D9
	UnsignedInt8   uint32 = 0x10DA
	UnsignedInt16  uint32 = 0x10DB
	UnsignedInt32  uint32 = 0x10DC
	HalfFloat      uint32 = 0x10DD
	Float          uint32 = 0x10DE
)

// PixelSize returns the bytes of one pixel of f, false for a format
// outside OpenCL 1.2's (or a packed type with an order it does not
// pack).
func (f ImageFormat) PixelSize() (uint64, bool) {
	var channels uint64
	switch f.Order {
	case OrderR, OrderA, OrderIntensity, OrderLuminance, OrderRx:
		channels = 1
	case OrderRG, OrderRA, OrderRGx:
		channels = 2
	case OrderRGB, OrderRGBx:
		channels = 3
	case OrderRGBA, OrderBGRA, OrderARGB:
		channels = 4
	default:
		return 0, false
	}
	switch f.DataType {
	case UnormShort565, UnormShort555:
		return 2, f.Order == OrderRGB || f.Order == OrderRGBx
	case UnormInt101010:
		return 4, f.Order == OrderRGB || f.Order == OrderRGBx
	case SnormInt8, UnormInt8, SignedInt8, UnsignedInt8:
		return channels, f.Order != OrderRGB && f.Order != OrderRGBx
	case SnormInt16, UnormInt16, SignedInt16, UnsignedInt16, HalfFloat:
		return 2 * channels, f.Order != OrderRGB && f.Order != OrderRGBx
	case SignedInt32, UnsignedInt32, Float:
		return 4 * channels, f.Order != OrderRGB && f.Order != OrderRGBx
	}
	return 0, false
}

// PortableImageFormats are the formats a vGPU may offer: those OpenCL
// 2.0 and later require of every device with images for kernels that
// read and write (CL_R, CL_RG and CL_RGBA with every 8-, 16- and 32-bit
// type, and CL_BGRA UNORM_INT8). The device offers those of them the
// physical device supports, so that a live migration to another device
// model finds the guest's formats there too.
var PortableImageFormats = func() []ImageFormat {
	var fs []ImageFormat
	for _, o := range []uint32{OrderR, OrderRG, OrderRGBA} {
		for _, t := range []uint32{UnormInt8, UnormInt16, SnormInt8, SnormInt16, SignedInt8, SignedInt16, SignedInt32,
			UnsignedInt8, UnsignedInt16, UnsignedInt32, HalfFloat, Float} {
			fs = append(fs, ImageFormat{o, t})
		}
	}
	return append(fs, ImageFormat{OrderBGRA, UnormInt8})
}()

// PortableImageFormat reports whether f is one of PortableImageFormats.
func PortableImageFormat(f ImageFormat) bool { return slices.Contains(PortableImageFormats, f) }

// Region is the image's extent as (width, rows, slices or layers), each
// at least 1.
func (d *ImageDesc) Region() [3]uint64 {
	switch d.Type {
	case ImageType1D, ImageType1DBuffer:
		return [3]uint64{d.Width, 1, 1}
	case ImageType1DArray:
		return [3]uint64{d.Width, d.ArraySize, 1}
	case ImageType2D:
		return [3]uint64{d.Width, d.Height, 1}
	case ImageType2DArray:
		return [3]uint64{d.Width, d.Height, d.ArraySize}
	}
	return [3]uint64{d.Width, d.Height, d.Depth}
}

// Bytes is the size of the packed image. check has bounded the extents,
// so it does not overflow.
func (d *ImageDesc) Bytes() uint64 {
	px, _ := d.Format().PixelSize()
	r := d.Region()
	return px * r[0] * r[1] * r[2]
}

// check reports the first field out of range.
func (d *ImageDesc) check() error {
	ext := func(v uint64) bool { return v >= 1 && v <= MaxImageExtent }
	unused := func(v uint64) bool { return v <= 1 }
	var ok bool
	width := ext(d.Width)
	switch d.Type {
	case ImageType1D:
		ok = unused(d.Height) && unused(d.Depth) && unused(d.ArraySize)
	case ImageType1DBuffer:
		ok = unused(d.Height) && unused(d.Depth) && unused(d.ArraySize)
		width = d.Width >= 1 && d.Width <= MaxImageBufferExtent
	case ImageType1DArray:
		ok = unused(d.Height) && unused(d.Depth) && ext(d.ArraySize)
	case ImageType2D:
		ok = ext(d.Height) && unused(d.Depth) && unused(d.ArraySize)
	case ImageType2DArray:
		ok = ext(d.Height) && unused(d.Depth) && ext(d.ArraySize)
	case ImageType3D:
		ok = ext(d.Height) && ext(d.Depth) && unused(d.ArraySize)
	default:
		return fmt.Errorf("image type %#x: %w", d.Type, ErrMalformed)
	}
	switch {
	case d.Buffer == 0:
		return fmt.Errorf("image in buffer 0: %w", ErrMalformed)
	case !ok || !width:
		return fmt.Errorf("image of type %#x, %dx%dx%d, %d layers: %w", d.Type, d.Width, d.Height, d.Depth, d.ArraySize, ErrMalformed)
	}
	if _, known := d.Format().PixelSize(); !known {
		return fmt.Errorf("image format %#x/%#x: %w", d.Order, d.DataType, ErrMalformed)
	}
	return nil
}

// Marshal writes d into b (ImageDescSize bytes).
func (d *ImageDesc) Marshal(b []byte) {
	_ = b[ImageDescSize-1]
	le.PutUint32(b[0:], d.Buffer)
	le.PutUint32(b[4:], d.Type)
	le.PutUint32(b[8:], d.Order)
	le.PutUint32(b[12:], d.DataType)
	le.PutUint64(b[16:], d.Width)
	le.PutUint64(b[24:], d.Height)
	le.PutUint64(b[32:], d.Depth)
	le.PutUint64(b[40:], d.ArraySize)
}

// UnmarshalImageDesc decodes and checks an image descriptor of
// ImageDescSize bytes.
func UnmarshalImageDesc(b []byte) (ImageDesc, error) {
	if len(b) < ImageDescSize {
		return ImageDesc{}, fmt.Errorf("image descriptor of %d bytes: %w", len(b), ErrMalformed)
	}
	d := ImageDesc{Buffer: le.Uint32(b[0:]), Type: le.Uint32(b[4:]), Order: le.Uint32(b[8:]), DataType: le.Uint32(b[12:]),
		Width: le.Uint64(b[16:]), Height: le.Uint64(b[24:]), Depth: le.Uint64(b[32:]), ArraySize: le.Uint64(b[40:])}
	return d, d.check()
}

// Sampler addressing and filter modes (OpenCL's values).
const (
	AddressNone           uint32 = 0x1130
	AddressClampToEdge    uint32 = 0x1131
	AddressClamp          uint32 = 0x1132
	AddressRepeat         uint32 = 0x1133
	AddressMirroredRepeat uint32 = 0x1134
	FilterNearest         uint32 = 0x1140
	FilterLinear          uint32 = 0x1141
)

// SamplerDesc is a sampler argument, packed in the argument's value
// (docs/ABI.md "Images"): bits 0..15 the addressing mode, 16..31 the
// filter mode, bit 32 normalized coordinates; the rest 0.
type SamplerDesc struct {
	Normalized bool
	Addressing uint32
	Filter     uint32
}

// Value packs s.
func (s SamplerDesc) Value() uint64 {
	v := uint64(s.Addressing&0xffff) | uint64(s.Filter&0xffff)<<16
	if s.Normalized {
		v |= 1 << 32
	}
	return v
}

// UnpackSampler decodes and checks a sampler argument's value.
func UnpackSampler(v uint64) (SamplerDesc, error) {
	s := SamplerDesc{Addressing: uint32(v & 0xffff), Filter: uint32(v >> 16 & 0xffff), Normalized: v>>32&1 == 1}
	switch {
	case v>>33 != 0:
		return s, fmt.Errorf("sampler %#x: reserved bits: %w", v, ErrMalformed)
	case s.Addressing < AddressNone || s.Addressing > AddressMirroredRepeat:
		return s, fmt.Errorf("sampler addressing mode %#x: %w", s.Addressing, ErrMalformed)
	case s.Filter != FilterNearest && s.Filter != FilterLinear:
		return s, fmt.Errorf("sampler filter mode %#x: %w", s.Filter, ErrMalformed)
	}
	return s, nil
}

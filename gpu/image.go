package gpu

import "fmt"

// Image describes an image kernel argument whose pixels live in an
// ordinary buffer (Arg.Buffer), packed: rows of Width pixels with no
// padding, Height rows to a slice, Depth slices (ArraySize layers for an
// array type), starting at the buffer's first byte. vgpud keeps images
// so, as buffers, so that everything that carries a buffer (contexts,
// quotas, migration across device models, upgrade in place) carries an
// image too, in a layout every device reads the same way. A device that
// has image objects of its own makes one for the launch, copies the
// buffer into it, runs the kernel and copies it back where the kernel
// may write it (docs/architecture.md "Images").
//
// An image made from a buffer (ImageType1DBuffer, a kernel's
// image1d_buffer_t) is the buffer itself to such a device: it makes its
// image on the buffer, without a copy either way.
//
// The values are OpenCL's: Type a CL_MEM_OBJECT_IMAGE* (1D, 1D array, 2D,
// 2D array, 3D or 1D buffer), Order a channel order
// (CL_R, CL_RGBA, ...), DataType a channel data type (CL_UNORM_INT8,
// CL_FLOAT, ...). Unused sizes (Height of a 1D image, Depth of a 2D one,
// ArraySize of a type that is not an array) are 0 or 1.
type Image struct {
	Type      uint32
	Order     uint32
	DataType  uint32
	Width     uint64
	Height    uint64
	Depth     uint64
	ArraySize uint64
}

// OpenCL's image object types (CL_MEM_OBJECT_IMAGE*).
const (
	ImageType2D      = 0x10F1
	ImageType3D      = 0x10F2
	ImageType2DArray = 0x10F3
	ImageType1D      = 0x10F4
	ImageType1DArray = 0x10F5
	// ImageType1DBuffer is an image made from a buffer: a 1D image on
	// the buffer's first bytes (CL_MEM_OBJECT_IMAGE1D_BUFFER).
	ImageType1DBuffer = 0x10F6
)

// Region returns the image's extent as OpenCL's origin-relative region
// (width, rows, slices or layers), or an error for a type this package
// does not take or sizes that do not fit it.
func (im *Image) Region() ([3]uint64, error) {
	one := func(v uint64) bool { return v <= 1 }
	var r [3]uint64
	switch im.Type {
	case ImageType1D, ImageType1DBuffer:
		r = [3]uint64{im.Width, 1, 1}
		if !one(im.Height) || !one(im.Depth) || !one(im.ArraySize) {
			return r, fmt.Errorf("1D image with height %d, depth %d, array size %d: %w", im.Height, im.Depth, im.ArraySize, ErrInvalidArgument)
		}
	case ImageType1DArray:
		r = [3]uint64{im.Width, im.ArraySize, 1}
		if !one(im.Height) || !one(im.Depth) {
			return r, fmt.Errorf("1D image array with height %d, depth %d: %w", im.Height, im.Depth, ErrInvalidArgument)
		}
	case ImageType2D:
		r = [3]uint64{im.Width, im.Height, 1}
		if !one(im.Depth) || !one(im.ArraySize) {
			return r, fmt.Errorf("2D image with depth %d, array size %d: %w", im.Depth, im.ArraySize, ErrInvalidArgument)
		}
	case ImageType2DArray:
		r = [3]uint64{im.Width, im.Height, im.ArraySize}
		if !one(im.Depth) {
			return r, fmt.Errorf("2D image array with depth %d: %w", im.Depth, ErrInvalidArgument)
		}
	case ImageType3D:
		r = [3]uint64{im.Width, im.Height, im.Depth}
		if !one(im.ArraySize) {
			return r, fmt.Errorf("3D image with array size %d: %w", im.ArraySize, ErrInvalidArgument)
		}
	default:
		return r, fmt.Errorf("image type %#x: %w", im.Type, ErrUnsupported)
	}
	for i, v := range r {
		if v == 0 {
			return r, fmt.Errorf("image extent %d is 0: %w", i, ErrInvalidArgument)
		}
	}
	return r, nil
}

// Sampler is a sampler kernel argument: OpenCL's three sampler
// properties, with OpenCL's values (CL_ADDRESS_*, CL_FILTER_*).
type Sampler struct {
	Normalized bool
	Addressing uint32
	Filter     uint32
}

// OpenCL's addressing and filter modes.
const (
	AddressNone           = 0x1130
	AddressClampToEdge    = 0x1131
	AddressClamp          = 0x1132
	AddressRepeat         = 0x1133
	AddressMirroredRepeat = 0x1134
	FilterNearest         = 0x1140
	FilterLinear          = 0x1141
)

// Check reports a mode outside OpenCL's.
func (s *Sampler) Check() error {
	if s.Addressing < AddressNone || s.Addressing > AddressMirroredRepeat {
		return fmt.Errorf("sampler addressing mode %#x: %w", s.Addressing, ErrInvalidArgument)
	}
	if s.Filter != FilterNearest && s.Filter != FilterLinear {
		return fmt.Errorf("sampler filter mode %#x: %w", s.Filter, ErrInvalidArgument)
	}
	return nil
}

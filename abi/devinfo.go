package abi

import (
	"fmt"
	"slices"
	"strings"
)

// Sizes and limits of the device-information blob (docs/ABI.md
// "Device-information blob", ABI 1.4).
const (
	// DeviceInfoVersion is the blob's version field in 1.4; the blob of
	// DeviceInfoVersionImages (1.8) adds the image section, written
	// only to a guest that asks for it.
	DeviceInfoVersion       = 1
	DeviceInfoVersionImages = 2
	// DeviceInfoVersionIL (1.9) is version 2 with the fixed part's word
	// at offset 4 the il word (DeviceILSPIRV), 0 in earlier versions.
	DeviceInfoVersionIL = 3
	// DeviceInfoVersionImageBuffers (1.10) is version 3 with the image
	// section followed by its buffer part (ImageInfo's MaxBufferSize
	// and BufferFormats).
	DeviceInfoVersionImageBuffers = 4
	// ImageBufferInfoFixedSize is the fixed part of the buffer part; 8
	// bytes per format follow it.
	ImageBufferInfoFixedSize = 16
	// DeviceILSPIRV, in the il word: the device builds SPIR-V modules of
	// versions 1.0 to 1.2 (program-build with FlagIL). Other bits are 0.
	DeviceILSPIRV = 1 << 0
	// ImageInfoFixedSize is the fixed part of the image section
	// (ImageInfo); 8 bytes per format follow it.
	ImageInfoFixedSize = 80
	// MaxImageFormats bounds the image section's formats.
	MaxImageFormats = 128
	// DeviceInfoFixedSize is the fixed part (DeviceInfoRecord); the
	// extension list follows it.
	DeviceInfoFixedSize = 200
	// MaxDeviceInfoLen bounds the whole blob, so it always fits one page:
	// the extension list is at most MaxDeviceInfoLen-DeviceInfoFixedSize
	// bytes.
	MaxDeviceInfoLen = PageSize
)

// Indices of DeviceInfo's vector-width arrays, in OpenCL's order of
// CL_DEVICE_PREFERRED_VECTOR_WIDTH_* and CL_DEVICE_NATIVE_VECTOR_WIDTH_*.
const (
	VecChar = iota
	VecShort
	VecInt
	VecLong
	VecFloat
	VecDouble
	VecHalf
	NumVecWidths
)

// PassThroughExtensions are the OpenCL C extensions the device may list in
// the device-information blob (docs/ABI.md "Device-information blob"):
// pure kernel-language features that reach the physical compiler
// unchanged, needing nothing of the vGPU. The device lists those of them
// the physical device reports. Nothing about images, GL, SPIR or IL, SVM,
// sub-groups, device-side enqueue or the ICD belongs here.
var PassThroughExtensions = [...]string{
	"cl_khr_byte_addressable_store",
	"cl_khr_fp16",
	"cl_khr_fp64",
	"cl_khr_global_int32_base_atomics",
	"cl_khr_global_int32_extended_atomics",
	"cl_khr_int64_base_atomics",
	"cl_khr_int64_extended_atomics",
	"cl_khr_local_int32_base_atomics",
	"cl_khr_local_int32_extended_atomics",
}

// PassThroughExtension reports whether name is one of PassThroughExtensions.
func PassThroughExtension(name string) bool {
	for _, e := range PassThroughExtensions {
		if e == name {
			return true
		}
	}
	return false
}

// DeviceInfoQuery asks for the device-information blob (DeviceInfo),
// written into guest RAM through a scatter-gather list when it fits
// (docs/ABI.md "device-info", ABI 1.4).
//
//	off size field
//	0   4    sg_count: entries in the first scatter-gather table (1..256)
//	4   4    version: the blob version wanted; 0 (reserved before 1.8) or
//	         DeviceInfoVersion: 1; DeviceInfoVersionImages: 2 (1.8);
//	         DeviceInfoVersionIL: 3 (1.9); DeviceInfoVersionImageBuffers: 4 (1.10)
//	8   8    length: room in bytes (nonzero; the data entries must add up to it)
//	16  8    sg_gpa: guest-physical address of the first table (16-byte aligned)
type DeviceInfoQuery struct {
	SGCount uint32
	Version uint32
	Length  uint64
	SGAddr  uint64
}

// BlobVersion is the blob version q asks for.
func (q *DeviceInfoQuery) BlobVersion() uint32 { return max(q.Version, DeviceInfoVersion) }

// Op is OpDeviceInfo.
func (*DeviceInfoQuery) Op() Opcode { return OpDeviceInfo }

// fields walks the layout above.
func (q *DeviceInfoQuery) fields(f fieldCodec) fieldCodec {
	return f.u32(&q.SGCount).u32(&q.Version).u64(&q.Length).u64(&q.SGAddr)
}

// check reports the first field out of range.
func (q *DeviceInfoQuery) check(fieldCodec) error {
	switch {
	case q.SGCount == 0 || q.SGCount > PageSize/SGEntrySize:
		return fmt.Errorf("sg_count %d: %w", q.SGCount, ErrMalformed)
	case q.Version > DeviceInfoVersionImageBuffers:
		return fmt.Errorf("blob version %d: %w", q.Version, ErrMalformed)
	case q.Length == 0:
		return fmt.Errorf("length 0: %w", ErrMalformed)
	case q.SGAddr%SGEntrySize != 0:
		return fmt.Errorf("sg_gpa %#x misaligned: %w", q.SGAddr, ErrMalformed)
	}
	return nil
}

// DeviceInfoRecord is the fixed part of the device-information blob
// (docs/ABI.md "Device-information blob"); ExtensionsLen bytes of
// extension list follow it.
//
//	off size field
//	0   4    version, DeviceInfoVersion
//	4   4    il: DeviceIL* bits from version 3; 0 before
//	8   24   max_work_item_sizes[3]
//	32  8    local_mem_size
//	40  8    max_constant_buffer_size
//	48  8    max_constant_args
//	56  8    max_parameter_size
//	64  8    mem_base_addr_align (bits)
//	72  8    min_data_type_align_size
//	80  8    max_clock_frequency (MHz)
//	88  8    address_bits
//	96  8    single_fp_config
//	104 8    double_fp_config (0: no fp64)
//	112 8    half_fp_config (0: no fp16)
//	120 8    profiling_timer_resolution (ns)
//	128 8    printf_buffer_size
//	136 28   preferred_vector_width[7] (Vec* order)
//	164 28   native_vector_width[7]
//	192 4    endian_little (0 or 1)
//	196 4    extensions_len
type DeviceInfoRecord struct {
	Version                  uint32
	IL                       uint32
	MaxWorkItemSizes         [3]uint64
	LocalMemSize             uint64
	MaxConstantBufferSize    uint64
	MaxConstantArgs          uint64
	MaxParameterSize         uint64
	MemBaseAddrAlign         uint64
	MinDataTypeAlignSize     uint64
	MaxClockFrequency        uint64
	AddressBits              uint64
	SingleFPConfig           uint64
	DoubleFPConfig           uint64
	HalfFPConfig             uint64
	ProfilingTimerResolution uint64
	PrintfBufferSize         uint64
	PreferredVectorWidth     [NumVecWidths]uint32
	NativeVectorWidth        [NumVecWidths]uint32
	EndianLittle             uint32
	ExtensionsLen            uint32
}

// Marshal writes r into b (at least DeviceInfoFixedSize bytes).
func (r *DeviceInfoRecord) Marshal(b []byte) {
	_ = b[DeviceInfoFixedSize-1]
	le.PutUint32(b[0:], r.Version)
	le.PutUint32(b[4:], r.IL)
	for i, v := range r.MaxWorkItemSizes {
		le.PutUint64(b[8+8*i:], v)
	}
	for i, v := range r.u64s() {
		le.PutUint64(b[32+8*i:], *v)
	}
	for i := range NumVecWidths {
		le.PutUint32(b[136+4*i:], r.PreferredVectorWidth[i])
		le.PutUint32(b[164+4*i:], r.NativeVectorWidth[i])
	}
	le.PutUint32(b[192:], r.EndianLittle)
	le.PutUint32(b[196:], r.ExtensionsLen)
}

// u64s lists the u64 fields from offset 32 on, in wire order.
func (r *DeviceInfoRecord) u64s() []*uint64 {
	return []*uint64{&r.LocalMemSize, &r.MaxConstantBufferSize, &r.MaxConstantArgs, &r.MaxParameterSize,
		&r.MemBaseAddrAlign, &r.MinDataTypeAlignSize, &r.MaxClockFrequency, &r.AddressBits,
		&r.SingleFPConfig, &r.DoubleFPConfig, &r.HalfFPConfig, &r.ProfilingTimerResolution, &r.PrintfBufferSize}
}

// DeviceInfo is the decoded device-information blob the device-info
// command writes (docs/ABI.md "Device-information blob"): the OpenCL
// device properties of the physical device as the instance's profile
// restricts them. The values are fixed for an instance on one device; a
// live migration to another device model may change them.
type DeviceInfo struct {
	MaxWorkItemSizes         [3]uint64
	LocalMemSize             uint64 // bytes of __local memory
	MaxConstantBufferSize    uint64 // bytes
	MaxConstantArgs          uint64
	MaxParameterSize         uint64 // bytes of kernel arguments
	MemBaseAddrAlign         uint64 // bits
	MinDataTypeAlignSize     uint64 // bytes
	MaxClockFrequency        uint64 // MHz
	AddressBits              uint64
	SingleFPConfig           uint64 // cl_device_fp_config bits
	DoubleFPConfig           uint64 // 0: no fp64
	HalfFPConfig             uint64 // 0: no fp16
	ProfilingTimerResolution uint64 // ns
	PrintfBufferSize         uint64 // bytes
	PreferredVectorWidth     [NumVecWidths]uint32
	NativeVectorWidth        [NumVecWidths]uint32
	EndianLittle             bool
	// Extensions are OpenCL C extension names, each made of
	// [A-Za-z0-9_], distinct; on the wire they are joined by single
	// spaces.
	Extensions []string
	// Version is 0 for the 1.4 blob (DeviceInfoVersion encodes it too;
	// UnmarshalDeviceInfo leaves it 0), DeviceInfoVersionImages for the
	// 1.8 blob, which adds Images, DeviceInfoVersionIL for the 1.9 blob,
	// which adds IL, DeviceInfoVersionImageBuffers for the 1.10 blob,
	// which adds the image section's buffer part.
	Version uint32
	Images  ImageInfo
	// IL is the il word's DeviceIL* bits (from version 3).
	IL uint32
}

// ImageInfo is the image section of a DeviceInfoVersionImages blob
// (docs/ABI.md "Images"), at the first 8-byte boundary after the
// extension list.
//
//	off size field
//	0   4    image_support (0 or 1; 0: every other field 0)
//	4   4    format_count (0..MaxImageFormats)
//	8   16   max_plane: image2d_max_width, _height
//	24  24   max_volume: image3d_max_width, _height, _depth
//	48  8    image_max_array_size
//	56  8    max_read_image_args
//	64  8    max_write_image_args
//	72  8    max_samplers
//	80  8*n  formats {u32 channel order, u32 channel data type}, distinct,
//	         each one of PortableImageFormats
//
// In a DeviceInfoVersionImageBuffers blob the buffer part follows, at
// offset 80+8n, for images made from buffers (ImageType1DBuffer):
//
//	off size field
//	0   8    max_buffer_size: image_max_buffer_size in pixels
//	         (0..MaxImageBufferExtent; 0: no images made from buffers)
//	8   4    buffer_format_count (0..MaxImageFormats; 0 iff
//	         max_buffer_size is 0)
//	12  4    0
//	16  8*m  formats of such images, as above
type ImageInfo struct {
	Supported    bool
	MaxPlane     [2]uint64
	MaxVolume    [3]uint64
	MaxArraySize uint64
	MaxReadArgs  uint64
	MaxWriteArgs uint64
	MaxSamplers  uint64
	Formats      []ImageFormat
	// MaxBufferSize and BufferFormats are the buffer part (version 4):
	// images made from buffers, none where MaxBufferSize is 0.
	MaxBufferSize uint64
	BufferFormats []ImageFormat
}

// As returns d as the blob of version v (DeviceInfoVersion up to
// DeviceInfoVersionImageBuffers; 0 is DeviceInfoVersion) carries it: its
// Version v (0 for the 1.4 blob), and what the versions before v lack
// cleared (the image section before 2, the il word before 3, the
// section's buffer part before 4), so that one DeviceInfo of the newest
// version marshals as any.
func (d DeviceInfo) As(v uint32) DeviceInfo {
	if v < DeviceInfoVersionImageBuffers {
		d.Images.MaxBufferSize, d.Images.BufferFormats = 0, nil
	}
	if v < DeviceInfoVersionIL {
		d.IL = 0
	}
	if v < DeviceInfoVersionImages {
		d.Images, v = ImageInfo{}, 0
	}
	d.Version = v
	return d
}

// Size is the encoded size of d in bytes.
func (d *DeviceInfo) Size() uint64 {
	n := DeviceInfoFixedSize + uint64(len(strings.Join(d.Extensions, " ")))
	if d.Version >= DeviceInfoVersionImages {
		n = (n+7)&^7 + ImageInfoFixedSize + ImageFormatSize*uint64(len(d.Images.Formats))
	}
	if d.Version >= DeviceInfoVersionImageBuffers {
		n += ImageBufferInfoFixedSize + ImageFormatSize*uint64(len(d.Images.BufferFormats))
	}
	return n
}

// ImageInfoRecord is the fixed part of the image section (ImageInfo's
// layout above); format_count ImageFormat records follow it.
type ImageInfoRecord struct {
	ImageSupport uint32
	FormatCount  uint32
	MaxPlane     [2]uint64
	MaxVolume    [3]uint64
	MaxArraySize uint64
	MaxReadArgs  uint64
	MaxWriteArgs uint64
	MaxSamplers  uint64
}

// Marshal writes r into b (at least ImageInfoFixedSize bytes).
func (r *ImageInfoRecord) Marshal(b []byte) {
	_ = b[ImageInfoFixedSize-1]
	le.PutUint32(b[0:], r.ImageSupport)
	le.PutUint32(b[4:], r.FormatCount)
	for i, v := range r.u64s() {
		le.PutUint64(b[8+8*i:], *v)
	}
}

// u64s lists the u64 fields in wire order, from offset 8.
func (r *ImageInfoRecord) u64s() []*uint64 {
	return []*uint64{&r.MaxPlane[0], &r.MaxPlane[1], &r.MaxVolume[0], &r.MaxVolume[1], &r.MaxVolume[2],
		&r.MaxArraySize, &r.MaxReadArgs, &r.MaxWriteArgs, &r.MaxSamplers}
}

// ImageBufferInfoRecord is the fixed part of the image section's
// buffer part (ImageInfo's layout); buffer_format_count ImageFormat
// records follow it.
type ImageBufferInfoRecord struct {
	MaxBufferSize     uint64
	BufferFormatCount uint32
	Reserved          uint32
}

// Marshal writes r into b (at least ImageBufferInfoFixedSize bytes).
func (r *ImageBufferInfoRecord) Marshal(b []byte) {
	_ = b[ImageBufferInfoFixedSize-1]
	le.PutUint64(b[0:], r.MaxBufferSize)
	le.PutUint32(b[8:], r.BufferFormatCount)
	le.PutUint32(b[12:], r.Reserved)
}

// record is im's fixed part.
func (im *ImageInfo) record() ImageInfoRecord {
	r := ImageInfoRecord{FormatCount: uint32(len(im.Formats)), MaxPlane: im.MaxPlane, MaxVolume: im.MaxVolume,
		MaxArraySize: im.MaxArraySize, MaxReadArgs: im.MaxReadArgs, MaxWriteArgs: im.MaxWriteArgs, MaxSamplers: im.MaxSamplers}
	if im.Supported {
		r.ImageSupport = 1
	}
	return r
}

// check reports an image section that cannot be represented; the
// buffer part only where buffers (a version-4 blob) is true, which must
// otherwise be empty.
func (im *ImageInfo) check(buffers bool) error {
	if len(im.Formats) > MaxImageFormats || len(im.BufferFormats) > MaxImageFormats {
		return fmt.Errorf("device info: %d image formats, %d for images from buffers: %w", len(im.Formats), len(im.BufferFormats), ErrMalformed)
	}
	if (im.MaxBufferSize == 0) != (len(im.BufferFormats) == 0) || im.MaxBufferSize > MaxImageBufferExtent ||
		!buffers && im.MaxBufferSize != 0 {
		return fmt.Errorf("device info: images from buffers of %d pixels in %d formats: %w", im.MaxBufferSize, len(im.BufferFormats), ErrMalformed)
	}
	if !im.Supported {
		r := im.record()
		if len(im.Formats) > 0 || im.MaxBufferSize != 0 || slices.ContainsFunc(r.u64s(), func(v *uint64) bool { return *v != 0 }) {
			return fmt.Errorf("device info: image limits without image support: %w", ErrMalformed)
		}
		return nil
	}
	for _, fs := range [][]ImageFormat{im.Formats, im.BufferFormats} {
		for i, f := range fs {
			if !PortableImageFormat(f) || slices.Contains(fs[:i], f) {
				return fmt.Errorf("device info: image format %#x/%#x: %w", f.Order, f.DataType, ErrMalformed)
			}
		}
	}
	return nil
}

// marshal writes the section into b (ImageInfoFixedSize + ImageFormatSize
// per format), and where buffers the buffer part after it.
func (im *ImageInfo) marshal(b []byte, buffers bool) {
	r := im.record()
	r.Marshal(b)
	for i := range im.Formats {
		im.Formats[i].Marshal(b[ImageInfoFixedSize+ImageFormatSize*i:])
	}
	if !buffers {
		return
	}
	b = b[ImageInfoFixedSize+ImageFormatSize*len(im.Formats):]
	br := ImageBufferInfoRecord{MaxBufferSize: im.MaxBufferSize, BufferFormatCount: uint32(len(im.BufferFormats))}
	br.Marshal(b)
	for i := range im.BufferFormats {
		im.BufferFormats[i].Marshal(b[ImageBufferInfoFixedSize+ImageFormatSize*i:])
	}
}

// unmarshalImageInfo decodes and checks the section at the start of b,
// with its buffer part where buffers, returning its size.
func unmarshalImageInfo(b []byte, buffers bool) (ImageInfo, uint64, error) {
	if len(b) < ImageInfoFixedSize {
		return ImageInfo{}, 0, fmt.Errorf("device info: image section in %d bytes: %w", len(b), ErrMalformed)
	}
	r := ImageInfoRecord{ImageSupport: le.Uint32(b[0:]), FormatCount: le.Uint32(b[4:])}
	n := uint64(r.FormatCount)
	if r.ImageSupport > 1 || n > MaxImageFormats || ImageInfoFixedSize+ImageFormatSize*n > uint64(len(b)) {
		return ImageInfo{}, 0, fmt.Errorf("device info: image support %d, %d formats in %d bytes: %w", r.ImageSupport, n, len(b), ErrMalformed)
	}
	for i, v := range r.u64s() {
		*v = le.Uint64(b[8+8*i:])
	}
	im := ImageInfo{Supported: r.ImageSupport == 1, MaxPlane: r.MaxPlane, MaxVolume: r.MaxVolume, MaxArraySize: r.MaxArraySize,
		MaxReadArgs: r.MaxReadArgs, MaxWriteArgs: r.MaxWriteArgs, MaxSamplers: r.MaxSamplers}
	im.Formats = unmarshalFormats(b[ImageInfoFixedSize:], n)
	size := ImageInfoFixedSize + ImageFormatSize*n
	if buffers {
		p := b[size:]
		if len(p) < ImageBufferInfoFixedSize {
			return ImageInfo{}, 0, fmt.Errorf("device info: image buffer part in %d bytes: %w", len(p), ErrMalformed)
		}
		m := uint64(le.Uint32(p[8:]))
		if m > MaxImageFormats || le.Uint32(p[12:]) != 0 || ImageBufferInfoFixedSize+ImageFormatSize*m > uint64(len(p)) {
			return ImageInfo{}, 0, fmt.Errorf("device info: image buffer part of %d formats in %d bytes: %w", m, len(p), ErrMalformed)
		}
		im.MaxBufferSize = le.Uint64(p[0:])
		im.BufferFormats = unmarshalFormats(p[ImageBufferInfoFixedSize:], m)
		size += ImageBufferInfoFixedSize + ImageFormatSize*m
	}
	return im, size, im.check(buffers)
}

// unmarshalFormats decodes n format records from b, which holds them.
func unmarshalFormats(b []byte, n uint64) []ImageFormat {
	var fs []ImageFormat
	for i := range n {
		o := ImageFormatSize * i
		fs = append(fs, ImageFormat{le.Uint32(b[o:]), le.Uint32(b[o+4:])})
	}
	return fs
}

// Marshal encodes d. It fails if d cannot be represented: an extension
// name that is empty, holds a byte outside [A-Za-z0-9_] or repeats, or a
// blob over MaxDeviceInfoLen bytes.
func (d *DeviceInfo) Marshal() ([]byte, error) {
	seen := make(map[string]bool, len(d.Extensions))
	for _, e := range d.Extensions {
		if !extensionName(e) || seen[e] {
			return nil, fmt.Errorf("device info: extension %q: %w", e, ErrMalformed)
		}
		seen[e] = true
	}
	ext := strings.Join(d.Extensions, " ")
	if DeviceInfoFixedSize+len(ext) > MaxDeviceInfoLen {
		return nil, fmt.Errorf("device info: %d bytes of extensions: %w", len(ext), ErrMalformed)
	}
	ver := uint32(DeviceInfoVersion)
	switch d.Version {
	case 0, DeviceInfoVersion:
	case DeviceInfoVersionImages, DeviceInfoVersionIL, DeviceInfoVersionImageBuffers:
		ver = d.Version
		if d.IL&^DeviceILSPIRV != 0 || d.IL != 0 && ver < DeviceInfoVersionIL {
			return nil, fmt.Errorf("device info: il %#x in version %d: %w", d.IL, ver, ErrMalformed)
		}
		if err := d.Images.check(ver >= DeviceInfoVersionImageBuffers); err != nil {
			return nil, err
		}
		if d.Size() > MaxDeviceInfoLen {
			return nil, fmt.Errorf("device info: %d bytes: %w", d.Size(), ErrMalformed)
		}
	default:
		return nil, fmt.Errorf("device info: version %d: %w", d.Version, ErrMalformed)
	}
	r := DeviceInfoRecord{Version: ver, MaxWorkItemSizes: d.MaxWorkItemSizes,
		LocalMemSize: d.LocalMemSize, MaxConstantBufferSize: d.MaxConstantBufferSize, MaxConstantArgs: d.MaxConstantArgs,
		MaxParameterSize: d.MaxParameterSize, MemBaseAddrAlign: d.MemBaseAddrAlign, MinDataTypeAlignSize: d.MinDataTypeAlignSize,
		MaxClockFrequency: d.MaxClockFrequency, AddressBits: d.AddressBits, SingleFPConfig: d.SingleFPConfig,
		DoubleFPConfig: d.DoubleFPConfig, HalfFPConfig: d.HalfFPConfig, ProfilingTimerResolution: d.ProfilingTimerResolution,
		PrintfBufferSize: d.PrintfBufferSize, PreferredVectorWidth: d.PreferredVectorWidth, NativeVectorWidth: d.NativeVectorWidth,
		ExtensionsLen: uint32(len(ext)), IL: d.IL}
	if d.EndianLittle {
		r.EndianLittle = 1
	}
	b := make([]byte, d.Size())
	r.Marshal(b)
	copy(b[DeviceInfoFixedSize:], ext)
	if ver >= DeviceInfoVersionImages {
		d.Images.marshal(b[(DeviceInfoFixedSize+len(ext)+7)&^7:], ver >= DeviceInfoVersionImageBuffers)
	}
	return b, nil
}

// UnmarshalDeviceInfo decodes and validates a device-information blob. b
// may be longer than the blob (the room the guest gave); only
// DeviceInfoFixedSize + extensions_len bytes are read. It fails on a
// version other than 1 to 4, a nonzero il word before version 3 or one
// with bits other than DeviceILSPIRV, an endian_little other than 0 or 1, a blob over MaxDeviceInfoLen bytes or
// beyond b, and an extension list that is not distinct names of
// [A-Za-z0-9_] joined by single spaces.
func UnmarshalDeviceInfo(b []byte) (DeviceInfo, error) {
	if len(b) < DeviceInfoFixedSize {
		return DeviceInfo{}, fmt.Errorf("device info: %d bytes: %w", len(b), ErrMalformed)
	}
	ver, res, endian, n := le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[192:]), uint64(le.Uint32(b[196:]))
	switch {
	case ver < DeviceInfoVersion || ver > DeviceInfoVersionImageBuffers:
		return DeviceInfo{}, fmt.Errorf("device info: version %d: %w", ver, ErrMalformed)
	case ver < DeviceInfoVersionIL && res != 0:
		return DeviceInfo{}, fmt.Errorf("device info: reserved word %#x: %w", res, ErrMalformed)
	case res&^DeviceILSPIRV != 0:
		return DeviceInfo{}, fmt.Errorf("device info: il word %#x: %w", res, ErrMalformed)
	case endian > 1:
		return DeviceInfo{}, fmt.Errorf("device info: endian_little %d: %w", endian, ErrMalformed)
	case n > MaxDeviceInfoLen-DeviceInfoFixedSize || DeviceInfoFixedSize+n > uint64(len(b)):
		return DeviceInfo{}, fmt.Errorf("device info: extensions_len %d with %d bytes: %w", n, len(b), ErrMalformed)
	}
	var r DeviceInfoRecord
	for i := range r.MaxWorkItemSizes {
		r.MaxWorkItemSizes[i] = le.Uint64(b[8+8*i:])
	}
	for i, v := range r.u64s() {
		*v = le.Uint64(b[32+8*i:])
	}
	for i := range NumVecWidths {
		r.PreferredVectorWidth[i] = le.Uint32(b[136+4*i:])
		r.NativeVectorWidth[i] = le.Uint32(b[164+4*i:])
	}
	d := DeviceInfo{MaxWorkItemSizes: r.MaxWorkItemSizes,
		LocalMemSize: r.LocalMemSize, MaxConstantBufferSize: r.MaxConstantBufferSize, MaxConstantArgs: r.MaxConstantArgs,
		MaxParameterSize: r.MaxParameterSize, MemBaseAddrAlign: r.MemBaseAddrAlign, MinDataTypeAlignSize: r.MinDataTypeAlignSize,
		MaxClockFrequency: r.MaxClockFrequency, AddressBits: r.AddressBits, SingleFPConfig: r.SingleFPConfig,
		DoubleFPConfig: r.DoubleFPConfig, HalfFPConfig: r.HalfFPConfig, ProfilingTimerResolution: r.ProfilingTimerResolution,
		PrintfBufferSize: r.PrintfBufferSize, PreferredVectorWidth: r.PreferredVectorWidth, NativeVectorWidth: r.NativeVectorWidth,
		EndianLittle: endian == 1}
	if ver >= DeviceInfoVersionImages {
		d.Version, d.IL = ver, res
		at := (DeviceInfoFixedSize + n + 7) &^ 7
		if at > uint64(len(b)) || !allZero(b[DeviceInfoFixedSize+n:at]) {
			return DeviceInfo{}, fmt.Errorf("device info: no image section in %d bytes, or padding before it not zero: %w", len(b), ErrMalformed)
		}
		im, size, err := unmarshalImageInfo(b[at:], ver >= DeviceInfoVersionImageBuffers)
		if err != nil {
			return DeviceInfo{}, err
		}
		if at+size > MaxDeviceInfoLen {
			return DeviceInfo{}, fmt.Errorf("device info: %d bytes: %w", at+size, ErrMalformed)
		}
		d.Images = im
	}
	if n > 0 {
		list := string(b[DeviceInfoFixedSize : DeviceInfoFixedSize+n])
		d.Extensions = strings.Split(list, " ")
		seen := make(map[string]bool, len(d.Extensions))
		for _, e := range d.Extensions {
			if !extensionName(e) || seen[e] {
				return DeviceInfo{}, fmt.Errorf("device info: extension list %q: %w", list, ErrMalformed)
			}
			seen[e] = true
		}
	}
	return d, nil
}

// extensionName reports whether s is a nonempty run of [A-Za-z0-9_].
func extensionName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

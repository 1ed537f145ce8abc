package abi

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testDeviceInfo() DeviceInfo {
	return DeviceInfo{
		MaxWorkItemSizes: [3]uint64{256, 128, 64}, LocalMemSize: 32 << 10, MaxConstantBufferSize: 64 << 10,
		MaxConstantArgs: 8, MaxParameterSize: 1024, MemBaseAddrAlign: 1024, MinDataTypeAlignSize: 128,
		MaxClockFrequency: 2100, AddressBits: 64, SingleFPConfig: 0x3f, DoubleFPConfig: 0x3f, HalfFPConfig: 0,
		ProfilingTimerResolution: 1, PrintfBufferSize: 1 << 20,
		PreferredVectorWidth: [NumVecWidths]uint32{16, 8, 4, 2, 4, 2, 0},
		NativeVectorWidth:    [NumVecWidths]uint32{16, 8, 4, 2, 4, 2, 0},
		EndianLittle:         true,
		Extensions:           []string{"cl_khr_fp64", "cl_khr_byte_addressable_store"},
	}
}

// testImageInfo is testDeviceInfo with the image section (1.8).
func testImageInfo() DeviceInfo {
	d := testDeviceInfo()
	d.Version = DeviceInfoVersionImages
	d.Images = ImageInfo{Supported: true, MaxPlane: [2]uint64{16384, 8192}, MaxVolume: [3]uint64{2048, 1024, 512},
		MaxArraySize: 2048, MaxReadArgs: 128, MaxWriteArgs: 64, MaxSamplers: 16,
		Formats: []ImageFormat{{OrderRGBA, UnormInt8}, {OrderR, Float}, {OrderBGRA, UnormInt8}}}
	return d
}

func TestDeviceInfoImagesRoundTrip(t *testing.T) {
	d := testImageInfo()
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// The section starts at the first 8-byte boundary after the list.
	at := (DeviceInfoFixedSize + len("cl_khr_fp64 cl_khr_byte_addressable_store") + 7) &^ 7
	if len(b) != at+ImageInfoFixedSize+3*8 || uint64(len(b)) != d.Size() || le.Uint32(b[0:]) != DeviceInfoVersionImages {
		t.Fatalf("Marshal() = %d bytes, version %d; Size() %d, want %d", len(b), le.Uint32(b), d.Size(), at+ImageInfoFixedSize+24)
	}
	for off, want := range map[int]uint64{8: 16384, 16: 8192, 24: 2048, 32: 1024, 40: 512, 48: 2048, 56: 128, 64: 64, 72: 16} {
		if got := le.Uint64(b[at+off:]); got != want {
			t.Errorf("image section u64 at %d = %d, want %d", off, got, want)
		}
	}
	for off, want := range map[int]uint32{0: 1, 4: 3, 80: OrderRGBA, 84: UnormInt8, 88: OrderR, 92: Float, 96: OrderBGRA} {
		if got := le.Uint32(b[at+off:]); got != want {
			t.Errorf("image section u32 at %d = %#x, want %#x", off, got, want)
		}
	}
	got, err := UnmarshalDeviceInfo(append(b, make([]byte, 64)...))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	none := testDeviceInfo()
	none.Version = DeviceInfoVersionImages
	nb, err := none.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := UnmarshalDeviceInfo(nb); err != nil || got.Images.Supported || got.Version != DeviceInfoVersionImages {
		t.Errorf("a device without images: %+v, %v", got, err)
	}
	for name, mod := range map[string]func(*DeviceInfo){
		"limits without support":  func(d *DeviceInfo) { d.Images.Supported = false; d.Images.Formats = nil },
		"formats without support": func(d *DeviceInfo) { d.Images = ImageInfo{Formats: d.Images.Formats} },
		"format not portable":     func(d *DeviceInfo) { d.Images.Formats[0] = ImageFormat{OrderARGB, UnormInt8} },
		"format twice":            func(d *DeviceInfo) { d.Images.Formats[2] = d.Images.Formats[0] },
		"too many formats":        func(d *DeviceInfo) { d.Images.Formats = make([]ImageFormat, MaxImageFormats+1) },
		"version 5":               func(d *DeviceInfo) { d.Version = 5 },
		"buffer part in version 2": func(d *DeviceInfo) {
			d.Images.MaxBufferSize, d.Images.BufferFormats = 65536, d.Images.Formats[:1]
		},
		"il in version 2": func(d *DeviceInfo) { d.IL = DeviceILSPIRV },
	} {
		d := testImageInfo()
		mod(&d)
		if _, err := d.Marshal(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Marshal() = %v, want ErrMalformed", name, err)
		}
	}
	for name, mod := range map[string]func(b []byte){
		"support 2":              func(b []byte) { le.PutUint32(b[at:], 2) },
		"formats beyond":         func(b []byte) { le.PutUint32(b[at+4:], 4) },
		"format not portable":    func(b []byte) { le.PutUint32(b[at+80:], OrderARGB) },
		"limits without support": func(b []byte) { le.PutUint32(b[at:], 0); le.PutUint32(b[at+4:], 0) },
	} {
		bb := append([]byte(nil), b...)
		mod(bb)
		if _, err := UnmarshalDeviceInfo(bb); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: UnmarshalDeviceInfo = %v, want ErrMalformed", name, err)
		}
	}
	if _, err := UnmarshalDeviceInfo(b[:at+ImageInfoFixedSize-1]); !errors.Is(err, ErrMalformed) {
		t.Errorf("a cut image section: UnmarshalDeviceInfo = %v, want ErrMalformed", err)
	}
}

// TestDeviceInfoILRoundTrip: the 1.9 blob is the 1.8 one with the il
// word at offset 4; earlier versions keep it 0, and a bit not defined is
// refused both ways.
func TestDeviceInfoILRoundTrip(t *testing.T) {
	d := testImageInfo()
	v2, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d.Version, d.IL = DeviceInfoVersionIL, DeviceILSPIRV
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if le.Uint32(b[0:]) != DeviceInfoVersionIL || le.Uint32(b[4:]) != DeviceILSPIRV || string(b[8:]) != string(v2[8:]) {
		t.Fatalf("version 3 blob: version %d, il %#x; the rest differs from version 2's: %v", le.Uint32(b), le.Uint32(b[4:]), string(b[8:]) != string(v2[8:]))
	}
	got, err := UnmarshalDeviceInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	d.IL = 0
	if b0, err := d.Marshal(); err != nil || le.Uint32(b0[4:]) != 0 {
		t.Errorf("version 3 without SPIR-V: il %#x, %v", le.Uint32(b0[4:]), err)
	}
	d.IL = 2
	if _, err := d.Marshal(); !errors.Is(err, ErrMalformed) {
		t.Errorf("il bit 1: Marshal = %v, want ErrMalformed", err)
	}
	for name, mod := range map[string]func(b []byte){
		"il bit 1":        func(b []byte) { le.PutUint32(b[4:], 2) },
		"il in version 2": func(b []byte) { le.PutUint32(b[0:], DeviceInfoVersionImages) },
		"version 5":       func(b []byte) { le.PutUint32(b[0:], 5) },
	} {
		bb := append([]byte(nil), b...)
		mod(bb)
		if _, err := UnmarshalDeviceInfo(bb); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: UnmarshalDeviceInfo = %v, want ErrMalformed", name, err)
		}
	}
	if err := (&DeviceInfoQuery{SGCount: 1, Version: DeviceInfoVersionImageBuffers + 1, Length: 1}).check(fieldCodec{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a query for version 5: %v, want ErrMalformed", err)
	}
}

// TestDeviceInfoImageBuffersRoundTrip: the 1.10 blob is the 1.9 one with
// the buffer part after the image section's formats; its limit and
// formats are checked both ways.
func TestDeviceInfoImageBuffersRoundTrip(t *testing.T) {
	d := testImageInfo()
	d.Version, d.IL = DeviceInfoVersionIL, DeviceILSPIRV
	v3, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d.Version = DeviceInfoVersionImageBuffers
	d.Images.MaxBufferSize = 1 << 20
	d.Images.BufferFormats = []ImageFormat{{OrderRGBA, Float}, {OrderR, UnsignedInt8}}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	at := len(v3)
	if len(b) != at+ImageBufferInfoFixedSize+2*ImageFormatSize || uint64(len(b)) != d.Size() || string(b[4:at]) != string(v3[4:]) {
		t.Fatalf("version 4 blob: %d bytes, Size() %d, want version 3's %d and the buffer part", len(b), d.Size(), at)
	}
	if le.Uint64(b[at:]) != 1<<20 || le.Uint32(b[at+8:]) != 2 || le.Uint32(b[at+12:]) != 0 ||
		le.Uint32(b[at+16:]) != OrderRGBA || le.Uint32(b[at+20:]) != Float || le.Uint32(b[at+24:]) != OrderR {
		t.Errorf("buffer part % x", b[at:])
	}
	got, err := UnmarshalDeviceInfo(append(b, make([]byte, 32)...))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	none := d
	none.Images.MaxBufferSize, none.Images.BufferFormats = 0, nil
	if nb, err := none.Marshal(); err != nil || len(nb) != at+ImageBufferInfoFixedSize {
		t.Errorf("no images from buffers: %d bytes, %v", len(nb), err)
	}
	for name, mod := range map[string]func(*DeviceInfo){
		"size without formats": func(d *DeviceInfo) { d.Images.BufferFormats = nil },
		"formats without size": func(d *DeviceInfo) { d.Images.MaxBufferSize = 0 },
		"too wide":             func(d *DeviceInfo) { d.Images.MaxBufferSize = MaxImageBufferExtent + 1 },
		"format not portable":  func(d *DeviceInfo) { d.Images.BufferFormats[1] = ImageFormat{OrderARGB, UnormInt8} },
		"format twice":         func(d *DeviceInfo) { d.Images.BufferFormats[1] = d.Images.BufferFormats[0] },
		"without images": func(d *DeviceInfo) {
			d.Images = ImageInfo{MaxBufferSize: 1, BufferFormats: d.Images.BufferFormats[:1]}
		},
	} {
		d := d
		d.Images.BufferFormats = slices.Clone(d.Images.BufferFormats)
		mod(&d)
		if _, err := d.Marshal(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Marshal() = %v, want ErrMalformed", name, err)
		}
	}
	for name, mod := range map[string]func(b []byte){
		"formats beyond": func(b []byte) { le.PutUint32(b[at+8:], 3) },
		"reserved word":  func(b []byte) { le.PutUint32(b[at+12:], 1) },
		"too wide":       func(b []byte) { le.PutUint64(b[at:], MaxImageBufferExtent+1) },
		"no size":        func(b []byte) { le.PutUint64(b[at:], 0) },
		"not portable":   func(b []byte) { le.PutUint32(b[at+16:], OrderARGB) },
	} {
		bb := append([]byte(nil), b...)
		mod(bb)
		if _, err := UnmarshalDeviceInfo(bb[:len(b)]); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: UnmarshalDeviceInfo = %v, want ErrMalformed", name, err)
		}
	}
	if _, err := UnmarshalDeviceInfo(b[:at+ImageBufferInfoFixedSize-1]); !errors.Is(err, ErrMalformed) {
		t.Errorf("a cut buffer part: UnmarshalDeviceInfo = %v, want ErrMalformed", err)
	}
}

func TestDeviceInfoRoundTrip(t *testing.T) {
	d := testDeviceInfo()
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ext := "cl_khr_fp64 cl_khr_byte_addressable_store"
	if uint64(len(b)) != d.Size() || len(b) != DeviceInfoFixedSize+len(ext) {
		t.Errorf("Marshal() = %d bytes, Size() = %d, want %d", len(b), d.Size(), DeviceInfoFixedSize+len(ext))
	}
	// Pin the layout of docs/ABI.md "Device-information blob".
	for off, want := range map[int]uint64{8: 256, 16: 128, 24: 64, 32: 32 << 10, 40: 64 << 10, 48: 8, 56: 1024,
		64: 1024, 72: 128, 80: 2100, 88: 64, 96: 0x3f, 104: 0x3f, 112: 0, 120: 1, 128: 1 << 20} {
		if got := le.Uint64(b[off:]); got != want {
			t.Errorf("blob u64 at %d = %d, want %d", off, got, want)
		}
	}
	for off, want := range map[int]uint32{0: DeviceInfoVersion, 4: 0, 136: 16, 136 + 4*VecDouble: 2, 164 + 4*VecInt: 4,
		164 + 4*VecHalf: 0, 192: 1, 196: uint32(len(ext))} {
		if got := le.Uint32(b[off:]); got != want {
			t.Errorf("blob u32 at %d = %d, want %d", off, got, want)
		}
	}
	if got := string(b[DeviceInfoFixedSize:]); got != ext {
		t.Errorf("extension list = %q, want %q", got, ext)
	}
	// The guest's room may be larger than the blob.
	d2, err := UnmarshalDeviceInfo(append(b, make([]byte, 100)...))
	if err != nil {
		t.Fatalf("UnmarshalDeviceInfo = %v", err)
	}
	if diff := cmp.Diff(d, d2); diff != "" {
		t.Errorf("device info round trip (-want +got):\n%s", diff)
	}
	empty := DeviceInfo{}
	eb, err := empty.Marshal()
	if err != nil || len(eb) != DeviceInfoFixedSize {
		t.Fatalf("empty Marshal() = %d bytes, %v", len(eb), err)
	}
	if got, err := UnmarshalDeviceInfo(eb); err != nil || got.Extensions != nil || got.EndianLittle {
		t.Errorf("UnmarshalDeviceInfo(empty) = %+v, %v", got, err)
	}
}

func TestDeviceInfoMarshalRejects(t *testing.T) {
	for name, mod := range map[string]func(*DeviceInfo){
		"empty name":     func(d *DeviceInfo) { d.Extensions = append(d.Extensions, "") },
		"space in name":  func(d *DeviceInfo) { d.Extensions[0] = "cl_khr fp64" },
		"NUL in name":    func(d *DeviceInfo) { d.Extensions[0] = "cl\x00" },
		"duplicate name": func(d *DeviceInfo) { d.Extensions = append(d.Extensions, "cl_khr_fp64") },
		"too long":       func(d *DeviceInfo) { d.Extensions = []string{strings.Repeat("x", MaxDeviceInfoLen)} },
	} {
		d := testDeviceInfo()
		mod(&d)
		if _, err := d.Marshal(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Marshal() = %v, want ErrMalformed", name, err)
		}
	}
	d := DeviceInfo{Extensions: []string{strings.Repeat("x", MaxDeviceInfoLen-DeviceInfoFixedSize)}}
	if b, err := d.Marshal(); err != nil || len(b) != MaxDeviceInfoLen {
		t.Errorf("Marshal(largest) = %d bytes, %v", len(b), err)
	}
}

func TestDeviceInfoUnmarshalRejects(t *testing.T) {
	d := testDeviceInfo()
	good, _ := d.Marshal()
	setExt := func(b []byte, s string) []byte {
		le.PutUint32(b[196:], uint32(len(s)))
		return append(b[:DeviceInfoFixedSize], s...)
	}
	for name, mod := range map[string]func(b []byte) []byte{
		"short":             func(b []byte) []byte { return b[:DeviceInfoFixedSize-1] },
		"version 0":         func(b []byte) []byte { le.PutUint32(b[0:], 0); return b },
		"version 2":         func(b []byte) []byte { le.PutUint32(b[0:], 2); return b },
		"reserved":          func(b []byte) []byte { b[5] = 1; return b },
		"endian 2":          func(b []byte) []byte { le.PutUint32(b[192:], 2); return b },
		"list beyond room":  func(b []byte) []byte { return b[:len(b)-1] },
		"list over max":     func(b []byte) []byte { return setExt(b, strings.Repeat("x", MaxDeviceInfoLen-DeviceInfoFixedSize+1)) },
		"leading space":     func(b []byte) []byte { return setExt(b, " cl_khr_fp64") },
		"trailing space":    func(b []byte) []byte { return setExt(b, "cl_khr_fp64 ") },
		"double space":      func(b []byte) []byte { return setExt(b, "cl_khr_fp64  cl_khr_fp16") },
		"NUL terminated":    func(b []byte) []byte { return setExt(b, "cl_khr_fp64\x00") },
		"bad byte":          func(b []byte) []byte { return setExt(b, "cl_khr-fp64") },
		"repeated name":     func(b []byte) []byte { return setExt(b, "cl_khr_fp64 cl_khr_fp64") },
		"extensions_len 2G": func(b []byte) []byte { le.PutUint32(b[196:], 1<<31); return b },
	} {
		b := mod(append([]byte(nil), good...))
		if got, err := UnmarshalDeviceInfo(b); !errors.Is(err, ErrMalformed) || got.Extensions != nil {
			t.Errorf("%s: UnmarshalDeviceInfo = %+v, %v, want ErrMalformed", name, got, err)
		}
	}
}

func TestDeviceInfoQueryLayout(t *testing.T) {
	c := NewCommand(&DeviceInfoQuery{SGCount: 0x22, Length: 0x3333333333333333, SGAddr: 0x4444444444444440}, 0, 0)
	if le.Uint32(c.Payload[0:]) != 0x22 || le.Uint32(c.Payload[4:]) != 0 || le.Uint64(c.Payload[8:]) != 0x3333333333333333 ||
		le.Uint64(c.Payload[16:]) != 0x4444444444444440 || !allZero(c.Payload[24:]) {
		t.Errorf("device-info payload = % x", c.Payload)
	}
	q, err := DecodeAs[*DeviceInfoQuery](&c)
	if err != nil || q.SGCount != 0x22 || q.Length != 0x3333333333333333 || q.SGAddr != 0x4444444444444440 {
		t.Errorf("DecodeAs[*DeviceInfoQuery] = %+v, %v", q, err)
	}
	for name, q := range map[string]*DeviceInfoQuery{
		"sg count 0":    {Length: 16},
		"sg count 257":  {SGCount: 257, Length: 16},
		"length 0":      {SGCount: 1},
		"sg misaligned": {SGCount: 1, Length: 16, SGAddr: 8},
	} {
		c := NewCommand(q, 0, 0)
		if _, err := DecodePayload(&c); StatusOf(err) != StatusInvalidArgument {
			t.Errorf("%s: DecodePayload = %v, want StatusInvalidArgument", name, err)
		}
	}
	for v := range uint32(5) {
		c := NewCommand(&DeviceInfoQuery{SGCount: 1, Length: 16, Version: v}, 0, 0)
		q, err := DecodeAs[*DeviceInfoQuery](&c)
		if err != nil || q.BlobVersion() != max(v, 1) {
			t.Errorf("version %d: DecodeAs = %+v, %v", v, q, err)
		}
	}
	for _, off := range []int{4, 24, 47} {
		c := NewCommand(&DeviceInfoQuery{SGCount: 1, Length: 16}, 0, 0)
		c.Payload[off] = 5
		if _, err := DecodePayload(&c); StatusOf(err) != StatusInvalidArgument {
			t.Errorf("payload byte %d = 5: DecodePayload = %v, want StatusInvalidArgument", off, err)
		}
	}
}

func TestPassThroughExtensions(t *testing.T) {
	for _, e := range PassThroughExtensions {
		if !extensionName(e) || !PassThroughExtension(e) {
			t.Errorf("PassThroughExtensions holds %q", e)
		}
	}
	for _, e := range []string{"cl_khr_icd", "cl_khr_3d_image_writes", "cl_khr_spir", "cl_khr_il_program", "cl_khr_subgroups", "cl_khr_gl_sharing", ""} {
		if PassThroughExtension(e) {
			t.Errorf("PassThroughExtension(%q) = true", e)
		}
	}
}

// TestMaxLaunchParamBytes checks the bound against the descriptor format:
// 15 scalars of MaxLaunchParamBytes in all fit one descriptor, and one
// byte more spread over any count of scalars by offset does not (inline
// scalars carry at most 8 bytes for an entry's 16, so they never help).
func TestMaxLaunchParamBytes(t *testing.T) {
	fits := func(sizes []int) bool {
		d := LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{1}, Kernel: "k"}
		for _, n := range sizes {
			d.Args = append(d.Args, KernelArg{Kind: ArgScalar, Bytes: make([]byte, n)})
		}
		_, err := d.Marshal()
		return err == nil
	}
	split := func(total, n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = total / n
			if i < total%n {
				s[i]++
			}
		}
		return s
	}
	if !fits(append(split(14*MaxScalarSize, 14), MaxLaunchParamBytes-14*MaxScalarSize)) {
		t.Errorf("%d bytes in 15 scalars do not fit a descriptor", MaxLaunchParamBytes)
	}
	for n := 1; n <= MaxKernelArgs; n++ {
		if MaxLaunchParamBytes+1 <= n*MaxScalarSize && fits(split(MaxLaunchParamBytes+1, n)) {
			t.Errorf("%d bytes in %d scalars fit a descriptor", MaxLaunchParamBytes+1, n)
		}
	}
}

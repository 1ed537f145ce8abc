package abi

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEveryOpcodeHasNameAndPayload(t *testing.T) {
	for op := Opcode(0); int(op) < NumOpcodes; op++ {
		if opcodeNames[op] == "" {
			t.Errorf("opcode %d has no name", op)
		}
		c := Command{Opcode: op}
		p, err := DecodePayload(&c)
		if p == nil && err == nil {
			t.Errorf("DecodePayload(%v) = nil, nil", op)
		}
		if p != nil && p.Op() != op {
			t.Errorf("DecodePayload(%v).Op() = %v", op, p.Op())
		}
	}
	if _, err := DecodePayload(&Command{Opcode: Opcode(NumOpcodes)}); StatusOf(err) != StatusInvalidOpcode {
		t.Errorf("DecodePayload(undefined) status = %v, want %v", StatusOf(err), StatusInvalidOpcode)
	}
}

func TestEveryStatusHasName(t *testing.T) {
	for s := Status(0); int(s) < NumStatus; s++ {
		if statusNames[s] == "" {
			t.Errorf("status %d has no name", s)
		}
	}
}

func TestCommandRoundTrip(t *testing.T) {
	payloads := []Payload{
		&Nop{},
		&BufferCreate{Handle: 7, Flags: BufferReadOnly, Size: 1 << 20},
		&BufferFree{Handle: 7},
		&Copy{ToDevice: true, Handle: 3, SGCount: 2, Offset: 64, Length: 8192, SGAddr: 0x10000},
		&Copy{Handle: 3, SGCount: 256, Offset: 0, Length: 1, SGAddr: 0x20010},
		&ProgramBuild{Handle: 1, SrcCount: 1, SrcLen: 100, SrcSGAddr: 0x3000, OptsAddr: 0x4000, OptsLen: 10, LogLen: 4096, LogAddr: 0x5000},
		&ProgramFree{Handle: 1},
		&Launch{Program: 1, DescLen: 200, DescAddr: 0x6008},
		&Launch{Program: 1, DescLen: 200, DescAddr: 0x6008, Printf: 9},
		&Fence{Addr: 0x7000, Value: 42},
		&ProgramInfoQuery{Handle: 2, SGCount: 3, Length: 9000, SGAddr: 0x8010},
		&BufferCopy{Src: 1, Dst: 2, SrcOffset: 8, DstOffset: 16, Length: 64},
		&BufferCopy{Src: 1, Dst: 1, SrcOffset: 0, DstOffset: 64, Length: 64},
		&BufferFill{Handle: 4, PatternLen: 16, Offset: 32, Length: 4096, PatternAddr: 0x9ff0},
		&ContextCreate{ID: 1, Slots: 64, Ring: 0x10000, Compl: 0x11000, Shadow: 0x11ffc, MemLimit: 1 << 20},
		&ContextCreate{ID: MaxContexts, Slots: MaxRingSlots, Ring: 0x40, Compl: 0x20, Shadow: 4},
		&ContextDestroy{ID: 3},
	}
	for _, p := range payloads {
		c := NewCommand(p, 0, 0xdeadbeef)
		var b [CommandSize]byte
		c.Marshal(b[:])
		c2, err := UnmarshalCommand(b[:])
		if err != nil {
			t.Fatalf("UnmarshalCommand(%v) = %v", p.Op(), err)
		}
		if c2.Tag != 0xdeadbeef || c2.Opcode != p.Op() {
			t.Errorf("UnmarshalCommand(%v) = %+v", p.Op(), c2)
		}
		p2, err := DecodePayload(&c2)
		if err != nil {
			t.Fatalf("DecodePayload(%v) = %v", p.Op(), err)
		}
		if d := cmp.Diff(p, p2); d != "" {
			t.Errorf("payload %v round trip (-want +got):\n%s", p.Op(), d)
		}
	}
}

// TestLayout pins the wire offsets documented in docs/ABI.md.
func TestLayout(t *testing.T) {
	c := NewCommand(&Copy{ToDevice: true, Handle: 0x11111111, SGCount: 0x22, Offset: 0x3333333333333333,
		Length: 0x4444444444444444 - 0x3333333333333333, SGAddr: 0x5555555555555550}, FlagNondeterministic, 0x6666666666666666)
	var b [CommandSize]byte
	c.Marshal(b[:])
	checks := []struct {
		off  int
		want uint64
		size int
	}{
		{0, uint64(OpCopyToDev), 2}, {2, uint64(FlagNondeterministic), 2}, {4, 0, 4}, {8, 0x6666666666666666, 8},
		{16, 0x11111111, 4}, {20, 0x22, 4}, {24, 0x3333333333333333, 8}, {40, 0x5555555555555550, 8},
	}
	for _, c := range checks {
		var got uint64
		switch c.size {
		case 2:
			got = uint64(le.Uint16(b[c.off:]))
		case 4:
			got = uint64(le.Uint32(b[c.off:]))
		case 8:
			got = le.Uint64(b[c.off:])
		}
		if got != c.want {
			t.Errorf("command byte %d = %#x, want %#x", c.off, got, c.want)
		}
	}
	r := Completion{Seq: 1, Tag: 2, Status: StatusBuildFailed, Opcode: OpLaunch, Detail: 5}
	var rb [ComplSize]byte
	r.Marshal(rb[:])
	if le.Uint64(rb[0:]) != 1 || le.Uint64(rb[8:]) != 2 || le.Uint32(rb[16:]) != 7 || le.Uint16(rb[20:]) != 7 || le.Uint64(rb[24:]) != 5 {
		t.Errorf("completion layout = % x", rb)
	}
	r2, err := UnmarshalCompletion(rb[:])
	if err != nil || r2 != r {
		t.Errorf("UnmarshalCompletion = %+v, %v, want %+v", r2, err, r)
	}
	e := SGEntry{Addr: 0x1000, Len: 4096, Flags: SGChain}
	var eb [SGEntrySize]byte
	e.Marshal(eb[:])
	if le.Uint64(eb[0:]) != 0x1000 || le.Uint32(eb[8:]) != 4096 || le.Uint32(eb[12:]) != SGChain {
		t.Errorf("sg entry layout = % x", eb)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		p    Payload
	}{
		{"buffer handle 0", &BufferCreate{Handle: 0, Size: 1}},
		{"buffer size 0", &BufferCreate{Handle: 1}},
		{"buffer both ro and wo", &BufferCreate{Handle: 1, Size: 1, Flags: BufferReadOnly | BufferWriteOnly}},
		{"copy length 0", &Copy{Handle: 1, SGCount: 1, SGAddr: 16}},
		{"copy overflow", &Copy{Handle: 1, SGCount: 1, Offset: ^uint64(0), Length: 2}},
		{"copy sg misaligned", &Copy{Handle: 1, SGCount: 1, Length: 1, SGAddr: 8}},
		{"copy sg count", &Copy{Handle: 1, SGCount: 257, Length: 1}},
		{"source too long", &ProgramBuild{Handle: 1, SrcCount: 1, SrcLen: MaxSourceLen + 1}},
		{"options too long", &ProgramBuild{Handle: 1, SrcCount: 1, SrcLen: 1, OptsLen: MaxOptionsLen + 1}},
		{"launch short desc", &Launch{Program: 1, DescLen: 10}},
		{"fence misaligned", &Fence{Addr: 4}},
		{"info program 0", &ProgramInfoQuery{SGCount: 1, Length: 16}},
		{"info sg count 0", &ProgramInfoQuery{Handle: 1, Length: 16}},
		{"info sg count 257", &ProgramInfoQuery{Handle: 1, SGCount: 257, Length: 16}},
		{"info length 0", &ProgramInfoQuery{Handle: 1, SGCount: 1}},
		{"info sg misaligned", &ProgramInfoQuery{Handle: 1, SGCount: 1, Length: 16, SGAddr: 8}},
		{"buffer copy src 0", &BufferCopy{Dst: 1, Length: 1}},
		{"buffer copy dst 0", &BufferCopy{Src: 1, Length: 1}},
		{"buffer copy length 0", &BufferCopy{Src: 1, Dst: 2}},
		{"buffer copy src overflow", &BufferCopy{Src: 1, Dst: 2, SrcOffset: ^uint64(0), Length: 2}},
		{"buffer copy dst overflow", &BufferCopy{Src: 1, Dst: 2, DstOffset: ^uint64(0) - 1, Length: 2}},
		{"buffer copy overlap", &BufferCopy{Src: 3, Dst: 3, SrcOffset: 0, DstOffset: 63, Length: 64}},
		{"buffer copy overlap backwards", &BufferCopy{Src: 3, Dst: 3, SrcOffset: 10, DstOffset: 0, Length: 11}},
		{"buffer copy same range", &BufferCopy{Src: 3, Dst: 3, Length: 1}},
		{"fill handle 0", &BufferFill{PatternLen: 1, Length: 1}},
		{"fill pattern 0", &BufferFill{Handle: 1, Length: 1}},
		{"fill pattern 3", &BufferFill{Handle: 1, PatternLen: 3, Length: 3}},
		{"fill pattern 256", &BufferFill{Handle: 1, PatternLen: 256, Length: 256}},
		{"fill length 0", &BufferFill{Handle: 1, PatternLen: 1}},
		{"fill offset unaligned", &BufferFill{Handle: 1, PatternLen: 4, Offset: 2, Length: 4}},
		{"fill length unaligned", &BufferFill{Handle: 1, PatternLen: 4, Length: 6}},
		{"fill overflow", &BufferFill{Handle: 1, PatternLen: 1, Offset: ^uint64(0), Length: 1}},
		{"fill pattern crosses page", &BufferFill{Handle: 1, PatternLen: 8, Length: 8, PatternAddr: 0x1ffc}},
	}
	for _, tt := range tests {
		c := NewCommand(tt.p, 0, 0)
		if _, err := DecodePayload(&c); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: DecodePayload = %v, want ErrMalformed", tt.name, err)
		}
	}
	var b [CommandSize]byte
	le.PutUint32(b[4:], 1)
	if _, err := UnmarshalCommand(b[:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("UnmarshalCommand(reserved set) = %v, want ErrMalformed", err)
	}
}

func TestLaunchDescRoundTrip(t *testing.T) {
	d := LaunchDesc{
		WorkDim:    2,
		GlobalSize: [3]uint64{256, 256, 0},
		LocalSize:  [3]uint64{16, 16, 0},
		Kernel:     "matmul",
		Args: []KernelArg{
			{Kind: ArgBuffer, Handle: 1},
			{Kind: ArgScalar, Bytes: []byte{1, 2, 3, 4}},
			{Kind: ArgScalar, Bytes: make([]byte, 16)},
			{Kind: ArgLocal, Local: 1024},
		},
	}
	d.Args[2].Bytes[3] = 9
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := UnmarshalLaunchDesc(b)
	if err != nil {
		t.Fatalf("UnmarshalLaunchDesc = %v", err)
	}
	if diff := cmp.Diff(d, d2); diff != "" {
		t.Errorf("launch descriptor round trip (-want +got):\n%s", diff)
	}
}

// testImageArg is an image argument: a 2D RGBA8 image in buffer 3.
func testImageArg() KernelArg {
	im := ImageDesc{Buffer: 3, Type: ImageType2D, Order: OrderRGBA, DataType: UnormInt8, Width: 640, Height: 480}
	return KernelArg{Kind: ArgImage, Handle: 3, Image: im}
}

func TestLaunchDescImages(t *testing.T) {
	arr := ImageDesc{Buffer: 4, Type: ImageType2DArray, Order: OrderR, DataType: Float, Width: 8, Height: 4, ArraySize: 3}
	d := LaunchDesc{WorkDim: 2, GlobalSize: [3]uint64{640, 480}, Kernel: "blur", Args: []KernelArg{
		testImageArg(),
		{Kind: ArgSampler, Sampler: SamplerDesc{Normalized: true, Addressing: AddressClampToEdge, Filter: FilterLinear}},
		{Kind: ArgScalar, Bytes: []byte{7}},
		{Kind: ArgImage, Handle: 4, Image: arr},
	}}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Pin the layout: the first image descriptor follows the argument
	// table, 8-byte aligned; the sampler is packed in its value.
	table := LaunchHeaderSize + 4*ArgDescSize
	if le.Uint32(b[LaunchHeaderSize:]) != ArgImage || le.Uint32(b[LaunchHeaderSize+4:]) != ImageDescSize ||
		le.Uint64(b[LaunchHeaderSize+8:]) != uint64(table) {
		t.Errorf("image argument = % x", b[LaunchHeaderSize:LaunchHeaderSize+16])
	}
	if v := le.Uint64(b[LaunchHeaderSize+ArgDescSize+8:]); v != 1<<32|uint64(FilterLinear)<<16|uint64(AddressClampToEdge) {
		t.Errorf("sampler value = %#x", v)
	}
	for off, want := range map[int]uint64{0: 3 | uint64(ImageType2D)<<32, 8: uint64(OrderRGBA) | uint64(UnormInt8)<<32, 16: 640, 24: 480, 32: 0, 40: 0} {
		if got := le.Uint64(b[table+off:]); got != want {
			t.Errorf("image descriptor u64 at %d = %#x, want %#x", off, got, want)
		}
	}
	got, err := UnmarshalLaunchDesc(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if h, ok := got.Args[3].BufferHandle(); !ok || h != 4 || arr.Bytes() != 8*4*3*4 {
		t.Errorf("BufferHandle = %d, %t; Bytes = %d", h, ok, arr.Bytes())
	}
	for name, mod := range map[string]func(b []byte){
		"image type unknown":   func(b []byte) { le.PutUint32(b[table+4:], 0x10F7) },
		"image order unknown":  func(b []byte) { le.PutUint32(b[table+8:], 0x10C0) },
		"packed type, RGBA":    func(b []byte) { le.PutUint32(b[table+12:], UnormShort565) },
		"image buffer 0":       func(b []byte) { le.PutUint32(b[table:], 0) },
		"image width 0":        func(b []byte) { le.PutUint64(b[table+16:], 0) },
		"image too wide":       func(b []byte) { le.PutUint64(b[table+16:], MaxImageExtent+1) },
		"2D image with depth":  func(b []byte) { le.PutUint64(b[table+32:], 2) },
		"image size 40":        func(b []byte) { le.PutUint32(b[LaunchHeaderSize+4:], 40) },
		"image misaligned":     func(b []byte) { le.PutUint64(b[LaunchHeaderSize+8:], uint64(table+4)) },
		"image in the table":   func(b []byte) { le.PutUint64(b[LaunchHeaderSize+8:], LaunchHeaderSize) },
		"image beyond":         func(b []byte) { le.PutUint64(b[LaunchHeaderSize+8:], uint64(len(b)-40)) },
		"sampler reserved bit": func(b []byte) { b[LaunchHeaderSize+ArgDescSize+8+5] = 1 },
		"sampler addressing":   func(b []byte) { le.PutUint16(b[LaunchHeaderSize+ArgDescSize+8:], 0x1135) },
		"sampler filter":       func(b []byte) { le.PutUint16(b[LaunchHeaderSize+ArgDescSize+10:], 0x1142) },
		"sampler with a size":  func(b []byte) { le.PutUint32(b[LaunchHeaderSize+ArgDescSize+4:], 4) },
	} {
		bb := append([]byte(nil), b...)
		mod(bb)
		if _, err := UnmarshalLaunchDesc(bb); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: UnmarshalLaunchDesc = %v, want ErrMalformed", name, err)
		}
	}
}

// TestImageBufferDesc: an image made from a buffer (1.10) is 1D, its
// width bounded by MaxImageBufferExtent rather than MaxImageExtent.
func TestImageBufferDesc(t *testing.T) {
	for _, c := range []struct {
		name string
		d    ImageDesc
		ok   bool
	}{
		{"wide", ImageDesc{Buffer: 1, Type: ImageType1DBuffer, Order: OrderRGBA, DataType: Float, Width: MaxImageBufferExtent}, true},
		{"narrow, unused 1s", ImageDesc{Buffer: 1, Type: ImageType1DBuffer, Order: OrderR, DataType: UnormInt8, Width: 1, Height: 1, Depth: 1, ArraySize: 1}, true},
		{"too wide", ImageDesc{Buffer: 1, Type: ImageType1DBuffer, Order: OrderR, DataType: UnormInt8, Width: MaxImageBufferExtent + 1}, false},
		{"width 0", ImageDesc{Buffer: 1, Type: ImageType1DBuffer, Order: OrderR, DataType: UnormInt8}, false},
		{"with height", ImageDesc{Buffer: 1, Type: ImageType1DBuffer, Order: OrderR, DataType: UnormInt8, Width: 4, Height: 2}, false},
		{"with layers", ImageDesc{Buffer: 1, Type: ImageType1DBuffer, Order: OrderR, DataType: UnormInt8, Width: 4, ArraySize: 2}, false},
		{"1D as wide", ImageDesc{Buffer: 1, Type: ImageType1D, Order: OrderR, DataType: UnormInt8, Width: MaxImageExtent + 1}, false},
	} {
		b := make([]byte, ImageDescSize)
		c.d.Marshal(b)
		got, err := UnmarshalImageDesc(b)
		if (err == nil) != c.ok || c.ok && got != c.d {
			t.Errorf("%s: UnmarshalImageDesc = %+v, %v; want ok %t", c.name, got, err, c.ok)
		}
		if c.ok && (got.Region() != [3]uint64{c.d.Width, 1, 1} || got.Bytes() != c.d.Width*map[uint32]uint64{Float: 16, UnormInt8: 1}[c.d.DataType]) {
			t.Errorf("%s: Region %v, Bytes %d", c.name, got.Region(), got.Bytes())
		}
	}
}

func TestPixelSize(t *testing.T) {
	for _, c := range []struct {
		f    ImageFormat
		size uint64
		ok   bool
	}{
		{ImageFormat{OrderRGBA, UnormInt8}, 4, true}, {ImageFormat{OrderR, Float}, 4, true}, {ImageFormat{OrderRG, HalfFloat}, 4, true},
		{ImageFormat{OrderRGBA, Float}, 16, true}, {ImageFormat{OrderRGB, UnormShort565}, 2, true}, {ImageFormat{OrderRGBx, UnormInt101010}, 4, true},
		{ImageFormat{OrderRGB, UnormInt8}, 0, false}, {ImageFormat{OrderRGBA, UnormShort555}, 0, false}, {ImageFormat{0x10BD, UnormInt8}, 0, false},
	} {
		if size, ok := c.f.PixelSize(); ok != c.ok || ok && size != c.size {
			t.Errorf("%#x/%#x: PixelSize = %d, %t, want %d, %t", c.f.Order, c.f.DataType, size, ok, c.size, c.ok)
		}
	}
	for _, f := range PortableImageFormats {
		if _, ok := f.PixelSize(); !ok {
			t.Errorf("portable format %#x/%#x has no pixel size", f.Order, f.DataType)
		}
	}
}

func TestLaunchDescRejects(t *testing.T) {
	good := LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{64}, Kernel: "k"}
	tests := []struct {
		name string
		mod  func(*LaunchDesc)
	}{
		{"dim 0", func(d *LaunchDesc) { d.WorkDim = 0 }},
		{"dim 4", func(d *LaunchDesc) { d.WorkDim = 4 }},
		{"global 0", func(d *LaunchDesc) { d.GlobalSize[0] = 0 }},
		{"unused dim set", func(d *LaunchDesc) { d.GlobalSize[2] = 1 }},
		{"local does not divide", func(d *LaunchDesc) { d.LocalSize[0] = 7 }},
		{"bad name", func(d *LaunchDesc) { d.Kernel = "9lives" }},
		{"offset overflow", func(d *LaunchDesc) { d.GlobalOffset[0] = ^uint64(0) }},
	}
	for _, tt := range tests {
		d := good
		tt.mod(&d)
		b, err := d.Marshal()
		if err != nil {
			continue // rejected on the encoding side already
		}
		if _, err := UnmarshalLaunchDesc(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: UnmarshalLaunchDesc = %v, want ErrMalformed", tt.name, err)
		}
	}
}

func TestStatusOf(t *testing.T) {
	err := Errorf(StatusNotFound, "buffer %d", 3)
	if got := StatusOf(errors.Join(errors.New("x"), err)); got != StatusNotFound {
		t.Errorf("StatusOf(joined) = %v, want %v", got, StatusNotFound)
	}
	if !errors.Is(err, StatusNotFound.Error()) {
		t.Errorf("errors.Is(%v, StatusNotFound) = false", err)
	}
	if errors.Is(err, ErrMalformed) {
		t.Errorf("errors.Is(%v, ErrMalformed) = true", err)
	}
	if StatusOf(nil) != StatusOK || StatusOf(errors.New("x")) != StatusInternal {
		t.Errorf("StatusOf(nil / plain) wrong")
	}
}

func TestSeqOfWraps(t *testing.T) {
	for _, tt := range []struct{ idx, want uint64 }{{0, 1}, {41, 42}, {1<<32 - 1, 1 << 32}, {1 << 32, 1}, {1<<32 + 5, 6}} {
		if got := SeqOf(tt.idx); got != tt.want {
			t.Errorf("SeqOf(%d) = %d, want %d", tt.idx, got, tt.want)
		}
	}
}

// TestDecodeAs: a payload decodes only as its opcode's type; any other
// type is refused with StatusInvalidOpcode, never taken for one.
func TestDecodeAs(t *testing.T) {
	c := NewCommand(&Launch{Program: 1, DescLen: LaunchHeaderSize, DescAddr: 0x1000}, 0, 7)
	if l, err := DecodeAs[*Launch](&c); err != nil || l.Program != 1 {
		t.Errorf("DecodeAs[*Launch](launch) = %+v, %v", l, err)
	}
	if cp, err := DecodeAs[*Copy](&c); cp != nil || StatusOf(err) != StatusInvalidOpcode {
		t.Errorf("DecodeAs[*Copy](launch) = %+v, %v, want nil with %v", cp, err, StatusInvalidOpcode)
	}
	for _, op := range []Opcode{OpCopyToDev, OpCopyFromDev} {
		c := NewCommand(&Copy{ToDevice: op == OpCopyToDev, Handle: 2, SGCount: 1, Length: 8, SGAddr: 0x2000}, 0, 0)
		if cp, err := DecodeAs[*Copy](&c); err != nil || cp.ToDevice != (op == OpCopyToDev) {
			t.Errorf("DecodeAs[*Copy](%v) = %+v, %v", op, cp, err)
		}
	}
}

// TestNewPayloadLayout pins the 1.4 payload offsets of docs/ABI.md.
func TestNewPayloadLayout(t *testing.T) {
	tests := []struct {
		p     Payload
		words map[int]uint64 // offset -> value, 4- or 8-byte by the value's field
		sizes map[int]int
	}{
		{&ProgramInfoQuery{Handle: 0x11111111, SGCount: 0x22, Length: 0x3333333333333333, SGAddr: 0x4444444444444440},
			map[int]uint64{0: 0x11111111, 4: 0x22, 8: 0x3333333333333333, 16: 0x4444444444444440},
			map[int]int{0: 4, 4: 4, 8: 8, 16: 8}},
		{&BufferCopy{Src: 0x11111111, Dst: 0x22222222, SrcOffset: 0x3333, DstOffset: 0x4444, Length: 0x5555},
			map[int]uint64{0: 0x11111111, 4: 0x22222222, 8: 0x3333, 16: 0x4444, 24: 0x5555},
			map[int]int{0: 4, 4: 4, 8: 8, 16: 8, 24: 8}},
		{&BufferFill{Handle: 0x11111111, PatternLen: 0x40, Offset: 0x3340, Length: 0x4440, PatternAddr: 0x5555555555555000},
			map[int]uint64{0: 0x11111111, 4: 0x40, 8: 0x3340, 16: 0x4440, 24: 0x5555555555555000},
			map[int]int{0: 4, 4: 4, 8: 8, 16: 8, 24: 8}},
	}
	for _, tt := range tests {
		c := NewCommand(tt.p, 0, 0)
		for off, want := range tt.words {
			var got uint64
			if tt.sizes[off] == 4 {
				got = uint64(le.Uint32(c.Payload[off:]))
			} else {
				got = le.Uint64(c.Payload[off:])
			}
			if got != want {
				t.Errorf("%v payload byte %d = %#x, want %#x", tt.p.Op(), off, got, want)
			}
		}
		if !allZero(c.Payload[32:]) {
			t.Errorf("%v payload reserved bytes = % x", tt.p.Op(), c.Payload[32:])
		}
	}
}

func testProgramInfo() ProgramInfo {
	return ProgramInfo{Kernels: []KernelInfo{
		{Name: "add", WorkGroupSize: 4096, PreferredMultiple: 8, LocalMemSize: 0, PrivateMemSize: 16,
			Args: []KernelArgInfo{
				{AddressQualifier: ArgAddressGlobal, AccessQualifier: ArgAccessNone, TypeQualifier: ArgTypeConst | ArgTypeRestrict, TypeName: "float*", Name: "a"},
				{AddressQualifier: ArgAddressGlobal, AccessQualifier: ArgAccessNone, TypeName: "float*", Name: "out"},
				{AddressQualifier: ArgAddressPrivate, AccessQualifier: ArgAccessNone, TypeName: "uint", Name: "n"},
			}},
		{Name: "empty", WorkGroupSize: 256, PreferredMultiple: 1, CompileWorkGroupSize: [3]uint64{64, 1, 1}},
		{Name: "scale", WorkGroupSize: 1024, LocalMemSize: 512,
			Args: []KernelArgInfo{{AddressQualifier: ArgAddressLocal, AccessQualifier: ArgAccessNone, TypeName: "float4*", Name: "tmp"}}},
	}}
}

func TestProgramInfoRoundTrip(t *testing.T) {
	p := testProgramInfo()
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(ProgramInfoHeaderSize + 3*KernelInfoSize + 4*ArgInfoSize); uint64(len(b)) != want || p.Size() != want {
		t.Errorf("Marshal() = %d bytes, Size() = %d, want %d", len(b), p.Size(), want)
	}
	// Pin the layout: header, first kernel record, its first argument.
	if le.Uint32(b[0:]) != 3 || le.Uint32(b[4:]) != 0 || le.Uint64(b[8:]) != uint64(len(b)) {
		t.Errorf("header = % x", b[:16])
	}
	k := b[16:]
	if string(k[:4]) != "add\x00" || le.Uint32(k[64:]) != 3 || le.Uint64(k[72:]) != 4096 || le.Uint64(k[80:]) != 8 || le.Uint64(k[96:]) != 16 {
		t.Errorf("kernel record = % x", k[:KernelInfoSize])
	}
	a := b[16+KernelInfoSize:]
	if le.Uint32(a[0:]) != ArgAddressGlobal || le.Uint32(a[4:]) != ArgAccessNone || le.Uint32(a[8:]) != 3 ||
		string(a[16:23]) != "float*\x00" || string(a[80:82]) != "a\x00" {
		t.Errorf("argument record = % x", a[:ArgInfoSize])
	}
	e := b[16+KernelInfoSize+3*ArgInfoSize:] // "empty"
	if le.Uint64(e[104:]) != 64 || le.Uint64(e[112:]) != 1 || le.Uint64(e[120:]) != 1 {
		t.Errorf("compile_work_group_size = % x", e[104:128])
	}
	// The guest's room may be larger than the blob.
	p2, err := UnmarshalProgramInfo(append(b, make([]byte, 100)...))
	if err != nil {
		t.Fatalf("UnmarshalProgramInfo = %v", err)
	}
	if d := cmp.Diff(p, p2); d != "" {
		t.Errorf("program info round trip (-want +got):\n%s", d)
	}
	empty := ProgramInfo{}
	eb, err := empty.Marshal()
	if err != nil || len(eb) != ProgramInfoHeaderSize {
		t.Fatalf("empty Marshal() = %d bytes, %v", len(eb), err)
	}
	if p, err := UnmarshalProgramInfo(eb); err != nil || len(p.Kernels) != 0 {
		t.Errorf("UnmarshalProgramInfo(empty) = %+v, %v", p, err)
	}
}

func TestProgramInfoMarshalRejects(t *testing.T) {
	for name, mod := range map[string]func(*ProgramInfo){
		"bad name":        func(p *ProgramInfo) { p.Kernels[0].Name = "9x" },
		"long name":       func(p *ProgramInfo) { p.Kernels[0].Name = "a" + string(make([]byte, 63)) },
		"unsorted":        func(p *ProgramInfo) { p.Kernels[0].Name = "zzz" },
		"duplicate":       func(p *ProgramInfo) { p.Kernels[1].Name = "add" },
		"long arg name":   func(p *ProgramInfo) { p.Kernels[0].Args[0].Name = strings.Repeat("x", 64) },
		"NUL in arg type": func(p *ProgramInfo) { p.Kernels[0].Args[0].TypeName = "a\x00b" },
	} {
		p := testProgramInfo()
		mod(&p)
		if _, err := p.Marshal(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Marshal() = %v, want ErrMalformed", name, err)
		}
	}
	if got := TruncInfoString(strings.Repeat("y", 80)); len(got) != ArgInfoNameLen-1 {
		t.Errorf("TruncInfoString(80 bytes) = %d bytes", len(got))
	}
	if got := TruncInfoString("ab\x00cd"); got != "ab" {
		t.Errorf("TruncInfoString(ab NUL cd) = %q", got)
	}
}

func TestProgramInfoUnmarshalRejects(t *testing.T) {
	p := testProgramInfo()
	good, _ := p.Marshal()
	for name, mod := range map[string]func(b []byte) []byte{
		"short":              func(b []byte) []byte { return b[:15] },
		"reserved header":    func(b []byte) []byte { b[4] = 1; return b },
		"total beyond room":  func(b []byte) []byte { return b[:len(b)-1] },
		"total too small":    func(b []byte) []byte { le.PutUint64(b[8:], 8); return b },
		"total too large":    func(b []byte) []byte { le.PutUint64(b[8:], uint64(len(b))+1); return append(b, 0) },
		"too many kernels":   func(b []byte) []byte { le.PutUint32(b[0:], 1000); return b },
		"too few kernels":    func(b []byte) []byte { le.PutUint32(b[0:], 2); return b },
		"name unterminated":  func(b []byte) []byte { copy(b[16:80], strings.Repeat("a", 64)); return b },
		"name not padded":    func(b []byte) []byte { b[16+10] = 'x'; return b },
		"name not ident":     func(b []byte) []byte { b[16] = '1'; return b },
		"kernel reserved":    func(b []byte) []byte { b[16+68] = 1; return b },
		"arg count too big":  func(b []byte) []byte { le.PutUint32(b[16+64:], 99); return b },
		"arg reserved":       func(b []byte) []byte { b[16+KernelInfoSize+12] = 1; return b },
		"arg name unpadded":  func(b []byte) []byte { b[16+KernelInfoSize+80+5] = 'q'; return b },
		"arg type unpadded":  func(b []byte) []byte { copy(b[16+KernelInfoSize+16:], strings.Repeat("t", 64)); return b },
		"kernels not sorted": func(b []byte) []byte { copy(b[16:], "zzz"); return b },
	} {
		b := mod(append([]byte(nil), good...))
		if got, err := UnmarshalProgramInfo(b); !errors.Is(err, ErrMalformed) || got.Kernels != nil {
			t.Errorf("%s: UnmarshalProgramInfo = %+v, %v, want ErrMalformed", name, got, err)
		}
	}
}

// The printf header round-trips, and a header that breaks a rule is
// refused: a length past the buffer, an unknown flag, output without
// capture, a buffer too small for the header.
func TestPrintfHeader(t *testing.T) {
	b := make([]byte, PrintfHeaderSize)
	for _, h := range []PrintfHeader{
		{},
		{Flags: PrintfCaptured},
		{Length: 1000 - PrintfHeaderSize, Dropped: 7, Flags: PrintfCaptured},
	} {
		h.Marshal(b)
		got, err := UnmarshalPrintfHeader(b, 1000)
		if err != nil || got != h {
			t.Errorf("round trip of %+v: %+v, %v", h, got, err)
		}
	}
	for _, c := range []struct {
		name string
		h    PrintfHeader
		size uint64
	}{
		{"length past the buffer", PrintfHeader{Length: 1000 - PrintfHeaderSize + 1, Flags: PrintfCaptured}, 1000},
		{"unknown flag", PrintfHeader{Flags: 2 | PrintfCaptured}, 1000},
		{"output without capture", PrintfHeader{Length: 1}, 1000},
		{"dropped without capture", PrintfHeader{Dropped: 1}, 1000},
		{"buffer smaller than the header", PrintfHeader{Flags: PrintfCaptured}, PrintfHeaderSize - 1},
	} {
		c.h.Marshal(b)
		if _, err := UnmarshalPrintfHeader(b, c.size); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", c.name, err)
		}
	}
	if _, err := UnmarshalPrintfHeader(b[:8], 1000); !errors.Is(err, ErrMalformed) {
		t.Errorf("a short header: %v", err)
	}
}

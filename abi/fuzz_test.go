package abi

import (
	"bytes"
	"testing"
)

func FuzzDecodeCommand(f *testing.F) {
	for _, p := range []Payload{&Nop{}, &BufferCreate{Handle: 1, Size: 4}, &Copy{ToDevice: true, Handle: 1, SGCount: 1, Length: 4, SGAddr: 16},
		&ProgramBuild{Handle: 1, SrcCount: 1, SrcLen: 5}, &Launch{Program: 1, DescLen: LaunchHeaderSize}, &Fence{Addr: 8, Value: 1},
		&ProgramInfoQuery{Handle: 1, SGCount: 1, Length: 4096, SGAddr: 16},
		&BufferCopy{Src: 1, Dst: 1, SrcOffset: 0, DstOffset: 8, Length: 8},
		&BufferFill{Handle: 1, PatternLen: 4, Offset: 4, Length: 8, PatternAddr: 0xffc},
		&DeviceInfoQuery{SGCount: 1, Length: 4096, SGAddr: 16},
		&ContextCreate{ID: 1, Slots: 1, Ring: 64, Compl: 128, Shadow: 4}, &ContextDestroy{ID: 1}} {
		c := NewCommand(p, 0, 1)
		var b [CommandSize]byte
		c.Marshal(b[:])
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := UnmarshalCommand(b)
		if err != nil {
			return
		}
		p, err := DecodePayload(&c)
		if err != nil {
			if p != nil {
				t.Fatalf("DecodePayload error %v with payload %+v", err, p)
			}
			return
		}
		// Decoded commands re-encode to the same bytes.
		c2 := NewCommand(p, c.Flags, c.Tag)
		var b2 [CommandSize]byte
		c2.Marshal(b2[:])
		if string(b2[:]) != string(b[:CommandSize]) {
			t.Fatalf("re-encode of %v differs:\n% x\n% x", c.Opcode, b[:CommandSize], b2)
		}
	})
}

func FuzzLaunchDesc(f *testing.F) {
	d := LaunchDesc{WorkDim: 2, GlobalSize: [3]uint64{8, 8}, LocalSize: [3]uint64{4, 4}, Kernel: "k",
		Args: []KernelArg{{Kind: ArgBuffer, Handle: 1}, {Kind: ArgScalar, Bytes: make([]byte, 12)}, {Kind: ArgLocal, Local: 64}}}
	b, _ := d.Marshal()
	f.Add(b)
	d.Args = append(d.Args, testImageArg(), KernelArg{Kind: ArgSampler, Sampler: SamplerDesc{true, AddressRepeat, FilterLinear}})
	b, _ = d.Marshal()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := UnmarshalLaunchDesc(b)
		if err != nil {
			return
		}
		b2, err := d.Marshal()
		if err != nil {
			t.Fatalf("Marshal of decoded descriptor: %v", err)
		}
		d2, err := UnmarshalLaunchDesc(b2)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		b3, _ := d2.Marshal()
		if string(b2) != string(b3) {
			t.Fatalf("decode -> marshal not stable")
		}
	})
}

func FuzzSGEntry(f *testing.F) {
	f.Add(make([]byte, SGEntrySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := UnmarshalSGEntry(b)
		if err != nil {
			return
		}
		var b2 [SGEntrySize]byte
		e.Marshal(b2[:])
		if string(b2[:]) != string(b[:SGEntrySize]) {
			t.Fatalf("sg entry re-encode differs")
		}
	})
}

func FuzzProgramInfo(f *testing.F) {
	// Small seeds: the fuzzer minimises every input that finds new
	// coverage, which takes seconds for a blob of a kilobyte.
	for _, p := range []ProgramInfo{
		{},
		{Kernels: []KernelInfo{{Name: "k", WorkGroupSize: 64}}},
		{Kernels: []KernelInfo{{Name: "a"}, {Name: "b", Args: []KernelArgInfo{{AddressQualifier: ArgAddressGlobal, TypeName: "int*", Name: "x"}}}}},
	} {
		b, _ := p.Marshal()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := UnmarshalProgramInfo(b)
		if err != nil {
			if p.Kernels != nil {
				t.Fatalf("UnmarshalProgramInfo error %v with %d kernels", err, len(p.Kernels))
			}
			return
		}
		// A decoded blob re-encodes to exactly the bytes it was read from.
		b2, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal of decoded blob: %v", err)
		}
		if uint64(len(b2)) != p.Size() || string(b2) != string(b[:len(b2)]) {
			t.Fatalf("decode -> marshal differs:\n% x\n% x", b[:min(len(b), len(b2))], b2)
		}
	})
}

func FuzzDeviceInfo(f *testing.F) {
	d := testDeviceInfo()
	b, _ := d.Marshal()
	f.Add(b)
	f.Add(b[:DeviceInfoFixedSize])
	id := testImageInfo()
	ib, _ := id.Marshal()
	f.Add(ib)
	id.Version, id.Images.MaxBufferSize, id.Images.BufferFormats = DeviceInfoVersionImageBuffers, 65536, id.Images.Formats[:2]
	bb, _ := id.Marshal()
	f.Add(bb)
	empty := DeviceInfo{}
	eb, _ := empty.Marshal()
	f.Add(eb)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := UnmarshalDeviceInfo(b)
		if err != nil {
			if d.Extensions != nil {
				t.Fatalf("UnmarshalDeviceInfo error %v with extensions %q", err, d.Extensions)
			}
			return
		}
		// A decoded blob re-encodes to exactly the bytes it was read from.
		b2, err := d.Marshal()
		if err != nil {
			t.Fatalf("Marshal of decoded blob: %v", err)
		}
		if uint64(len(b2)) != d.Size() || string(b2) != string(b[:len(b2)]) {
			t.Fatalf("decode -> marshal differs:\n% x\n% x", b[:min(len(b), len(b2))], b2)
		}
	})
}

// FuzzPrintfHeader: a header the device wrote is decoded without a panic,
// and one accepted re-encodes to the same bytes and fits its buffer.
func FuzzPrintfHeader(f *testing.F) {
	b := make([]byte, PrintfHeaderSize)
	(&PrintfHeader{Length: 5, Dropped: 1, Flags: PrintfCaptured}).Marshal(b)
	f.Add(b, uint64(64))
	f.Add(make([]byte, 3), uint64(0))
	f.Fuzz(func(t *testing.T, in []byte, size uint64) {
		h, err := UnmarshalPrintfHeader(in, size)
		if err != nil {
			return
		}
		out := make([]byte, PrintfHeaderSize)
		h.Marshal(out)
		if !bytes.Equal(out, in[:PrintfHeaderSize]) || h.Length > size-PrintfHeaderSize {
			t.Fatalf("%x (buffer %d) decoded to %+v", in, size, h)
		}
	})
}

package icdproto

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vgpud/vgpud/abi"
)

func launch() *Launch {
	l := &Launch{LaunchHead: LaunchHead{Program: 3, Flags: uint32(abi.FlagNondeterministic), WorkDim: 2,
		GlobalSize: [3]uint64{64, 8}, LocalSize: [3]uint64{8, 8}, GlobalOffset: [3]uint64{1, 2}, Event: 99}}
	l.SetKernel("vec_add")
	l.Scalars = make([]byte, 24)
	for i := range l.Scalars {
		l.Scalars[i] = byte(i + 1)
	}
	l.Args = []LaunchArg{
		{Kind: abi.ArgBuffer, Value: 7},
		{Kind: abi.ArgScalar, Size: 4, Value: 0xdeadbeef},
		{Kind: abi.ArgScalar, Size: 16, Value: 8},
		{Kind: abi.ArgLocal, Size: 256},
	}
	return l
}

// samples is one valid body per operation.
func samples() map[Op]any {
	dev := DeviceRecord{Index: 1, AbiVersion: abi.Version, Features: 3, ComputeUnits: 4, MemSize: 1 << 30,
		MaxAlloc: 1 << 28, MaxWorkGroup: 256}
	copy(dev.Profile[:], "vgpu-medium")
	copy(dev.Name[:], "pthread-cpu")
	fill := &Fill{Buffer: 4, PatternLen: 4, Offset: 16, Length: 64, Event: 5}
	copy(fill.Pattern[:], "abcd")
	return map[Op]any{
		OpHello:                  &Hello{Version: MinVersion},
		OpHello | ReplyBit:       &HelloReply{Version: MinVersion, Devices: []DeviceRecord{dev, {Index: 2}}},
		OpQueue:                  &Queue{Size: QueueHeaderSize + DefaultQueueData},
		OpQueue | ReplyBit:       &QueueReply{Status: uint32(ErrRange)},
		OpKick:                   &Kick{},
		OpDrain:                  &Drain{},
		OpDrain | ReplyBit:       &Drain{},
		OpAttach:                 &Attach{Arena: 1, Size: 1 << 20},
		OpAttach | ReplyBit:      &AttachReply{Status: uint32(ErrArena)},
		OpDeviceInfo:             &DeviceInfo{Device: 1},
		OpDeviceInfo | ReplyBit:  &DeviceInfoReply{Info: []byte("a blob")},
		OpBufferCreate:           &BufferCreate{Device: 0, Buffer: 1, Size: 4096, Flags: abi.BufferReadOnly, Event: 2},
		OpBufferFree:             &BufferFree{Buffer: 1},
		OpWrite:                  &Transfer{Buffer: 1, Arena: 2, Offset: 3, ArenaOffset: 4, Length: 5, Event: 6},
		OpRead:                   &Transfer{Buffer: 1, Arena: 2, Offset: 3, ArenaOffset: 4, Length: 5},
		OpCopy:                   &Copy{Src: 1, Dst: 2, SrcOffset: 3, DstOffset: 4, Length: 5, Event: 6},
		OpFill:                   fill,
		OpBuild:                  &Build{Device: 0, Program: 1, Arena: 1, SrcOffset: 0, SrcLen: 100, OptsLen: 4, OptsOffset: 100, OutOffset: 4096, OutCap: 8192},
		OpBuild | ReplyBit:       &BuildReply{Status: uint32(abi.StatusBuildFailed), LogLen: 40, InfoLen: 12},
		OpProgramFree:            &ProgramFree{Program: 1},
		OpProgramInfo:            &ProgramInfo{Program: 1, Arena: 1, OutOffset: 64, OutCap: 128},
		OpProgramInfo | ReplyBit: &ProgramInfoReply{InfoLen: 12},
		OpLaunch:                 launch(),
		OpFlush:                  &Flush{},
		OpWait:                   &Wait{Events: []uint64{1, 2, 3}},
		OpPoll:                   &Wait{},
		OpWait | ReplyBit:        &WaitReply{Pending: 3, Events: []EventRecord{{Event: 1, Status: 0, SubmitNs: 10, StartNs: 11, EndNs: 12}}},
		OpPoll | ReplyBit:        &WaitReply{Events: []EventRecord{{Event: 1, Status: NotComplete}}},
		OpMarker:                 &Marker{Event: 4},
		OpError:                  &Error{Code: ErrUnknownID, Message: "buffer 7: no such buffer"},
	}
}

func TestRoundTrip(t *testing.T) {
	s := samples()
	if len(s) != len(ops) {
		t.Fatalf("samples cover %d ops, the protocol has %d", len(s), len(ops))
	}
	for op, body := range s {
		t.Run(op.String(), func(t *testing.T) {
			b, err := Marshal(op, 42, body)
			if err != nil {
				t.Fatalf("Marshal(%v) = %v", op, err)
			}
			h, got, err := Unmarshal(b)
			if err != nil {
				t.Fatalf("Unmarshal(Marshal(%v)) = %v", op, err)
			}
			if want := (Header{Op: op, Len: uint32(len(b)), ID: 42}); h != want {
				t.Errorf("header = %+v, want %+v", h, want)
			}
			if diff := cmp.Diff(body, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			b2, err := Marshal(op, 42, got)
			if err != nil || !bytes.Equal(b, b2) {
				t.Errorf("re-Marshal = %x, %v; want %x", b2, err, b)
			}
		})
	}
}

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{
		{&DeviceRecord{}, DeviceRecordSize}, {&EventRecord{}, EventRecordSize}, {&LaunchHead{}, LaunchHeadSize},
		{&LaunchArg{}, LaunchArgSize}, {&Hello{}, 8}, {&Attach{}, 16}, {&BufferCreate{}, 32}, {&BufferFree{}, 8},
		{&Transfer{}, 40}, {&Copy{}, 40}, {&Fill{}, 160}, {&Build{}, 56}, {&BuildReply{}, 24},
		{&ProgramFree{}, 8}, {&ProgramInfo{}, 24}, {&ProgramInfoReply{}, 16}, {&Marker{}, 8},
		{&WaitHead{}, 8}, {&WaitReplyHead{}, 8}, {&ErrorHead{}, 8}, {&HelloReplyHead{}, 8}, {&AttachReply{}, 8},
	} {
		if got := len(AppendFixed(nil, c.v)); got != c.want {
			t.Errorf("size of %T = %d, want %d", c.v, got, c.want)
		}
	}
	if abi.KernelNameLen != 64 || abi.ProfileNameLen != 32 || abi.DeviceNameLen != 64 {
		t.Errorf("abi name lengths changed: the protocol's records depend on them")
	}
}

// TestOffsets pins a few offsets the C side and the doc rely on.
func TestOffsets(t *testing.T) {
	l := LaunchHead{Event: 0x0102030405060708}
	b := AppendFixed(nil, &l)
	if got := le.Uint64(b[152:]); got != l.Event {
		t.Errorf("launch head event at 152 = %#x", got)
	}
	d := DeviceRecord{}
	d.Name[0] = 'x'
	d.Profile[0] = 'p'
	b = AppendFixed(nil, &d)
	if b[40] != 'p' || b[72] != 'x' {
		t.Errorf("device record: profile at 40 = %q, name at 72 = %q", b[40], b[72])
	}
}

func mustMarshal(t *testing.T, op Op, body any) []byte {
	t.Helper()
	b, err := Marshal(op, 1, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnmarshalRefuses(t *testing.T) {
	hello := mustMarshal(t, OpHello, &Hello{Version: 1})
	patch := func(b []byte, off int, v ...byte) []byte {
		c := append([]byte(nil), b...)
		copy(c[off:], v)
		return c
	}
	wait := mustMarshal(t, OpWait, &Wait{Events: []uint64{1}})
	lb := mustMarshal(t, OpLaunch, launch())
	di := mustMarshal(t, OpDeviceInfo|ReplyBit, &DeviceInfoReply{Info: []byte("blob")})
	for _, c := range []struct {
		name string
		b    []byte
		want ErrCode
	}{
		{"empty", nil, ErrMalformed},
		{"short header", hello[:10], ErrMalformed},
		{"length mismatch", patch(hello, 4, 99), ErrMalformed},
		{"truncated body", patch(hello[:20], 4, 20), ErrMalformed},
		{"long body", patch(append(append([]byte(nil), hello...), 0), 4, 25), ErrMalformed},
		{"flags", patch(hello, 2, 1), ErrReserved},
		{"unknown op", patch(hello, 0, 99), ErrUnknownOp},
		{"reserved", patch(hello, 20, 1), ErrReserved},
		{"wait count beyond body", patch(wait, 16, 2), ErrMalformed},
		{"wait count huge", patch(wait, 16, 0xff, 0xff, 0xff, 0xff), ErrLimit},
		{"wait event 0", patch(wait, 24, 0), ErrMalformed},
		{"launch num_args huge", patch(lb, 16+12, 0xff, 0xff), ErrLimit},
		{"launch work_dim", patch(lb, 16+8, 4), ErrMalformed},
		{"launch kernel unterminated", patch(lb, 16+88, bytes.Repeat([]byte{'a'}, 64)...), ErrMalformed},
		{"launch kernel bad", patch(lb, 16+88, '1'), ErrMalformed},
		{"launch arg kind", patch(lb, 16+160, 9), ErrMalformed},
		{"launch scalar outside", patch(lb, 16+160+32+8, 20), ErrRange},
		{"launch scalar padding", patch(lb, 16+160+16+12, 1), ErrReserved},
		{"launch flags", patch(lb, 16+4, 2), ErrReserved},
		{"launch printf without a buffer entry last", patch(lb, 16+4, 1, 0, 1, 0), ErrMalformed},
		{"device info len beyond body", patch(di, 16+8, 5), ErrMalformed},
		{"device info len short of body", patch(di, 16+8, 3), ErrMalformed},
		{"device info len huge", patch(di, 16+8, 0x01, 0x10), ErrLimit},
		{"device info reserved", patch(di, 16+4, 1), ErrReserved},
		{"device info blob with a status", patch(di, 16, 1), ErrMalformed},
		{"device info request reserved", patch(mustMarshal(t, OpDeviceInfo, &DeviceInfo{}), 16+4, 1), ErrReserved},
		{"too big", append(patch(hello, 4, 0, 0, 2), make([]byte, MaxMessage+8)...), ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, body, err := Unmarshal(c.b)
			if err == nil || body != nil {
				t.Fatalf("Unmarshal = %v, %v; want an error", body, err)
			}
			if got := CodeOf(err); got != c.want {
				t.Errorf("Unmarshal error %v has code %v, want %v", err, got, c.want)
			}
			if !errors.Is(err, c.want) {
				t.Errorf("errors.Is(%v, %v) = false", err, c.want)
			}
		})
	}
}

func TestAppendRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		op   Op
		body any
		want ErrCode
	}{
		{"wrong body", OpHello, &Attach{Arena: 1, Size: 1}, ErrMalformed},
		{"fill pattern not power of two", OpFill, &Fill{Buffer: 1, PatternLen: 3, Length: 3}, ErrMalformed},
		{"fill length", OpFill, &Fill{Buffer: 1, PatternLen: 2, Length: 3}, ErrMalformed},
		{"fill offset", OpFill, &Fill{Buffer: 1, PatternLen: 2, Offset: 1, Length: 2}, ErrMalformed},
		{"fill pattern tail", OpFill, &Fill{Buffer: 1, PatternLen: 1, Length: 3, Pattern: [MaxPattern]byte{1, 2}}, ErrReserved},
		{"write overflow", OpWrite, &Transfer{Buffer: 1, Arena: 1, Offset: ^uint64(0), Length: 2}, ErrRange},
		{"write length 0", OpWrite, &Transfer{Buffer: 1, Arena: 1}, ErrMalformed},
		{"buffer both flags", OpBufferCreate, &BufferCreate{Buffer: 1, Size: 1, Flags: abi.BufferFlagsMask}, ErrMalformed},
		{"buffer id 0", OpBufferCreate, &BufferCreate{Size: 1}, ErrMalformed},
		{"build source too long", OpBuild, &Build{Program: 1, Arena: 1, SrcLen: abi.MaxSourceLen + 1}, ErrLimit},
		{"wait too many", OpWait, &Wait{Events: make([]uint64, MaxWaitEvents+1)}, ErrLimit},
		{"device info too big", OpDeviceInfo | ReplyBit, &DeviceInfoReply{Info: make([]byte, MaxDeviceInfo+1)}, ErrLimit},
		{"device info with a status", OpDeviceInfo | ReplyBit, &DeviceInfoReply{Status: 1, Info: []byte{1}}, ErrMalformed},
		{"error not utf-8", OpError, &Error{Code: 1, Message: "\xff"}, ErrMalformed},
		{"unknown op", Op(77), &Flush{}, ErrUnknownOp},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Marshal(c.op, 1, c.body); CodeOf(err) != c.want || err == nil {
				t.Errorf("Marshal = %v, want code %v", err, c.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	for op := range ops {
		if strings.HasPrefix(op.String(), "op(") {
			t.Errorf("op %#x has no name", uint16(op))
		}
		if op.IsReply() && !(op &^ ReplyBit).Replied() {
			t.Errorf("%v is a reply of %v, which is not replied", op, op&^ReplyBit)
		}
		if op.Replied() && !(op | ReplyBit).Known() {
			t.Errorf("%v is replied but has no reply op", op)
		}
	}
	for c := ErrCode(1); c < NumErrCodes; c++ {
		if strings.HasPrefix(c.String(), "error-code") {
			t.Errorf("error code %d has no name", c)
		}
	}
}

// TestDocListsOps checks that docs/icd-protocol.md names every operation
// with its number.
func TestDocListsOps(t *testing.T) {
	b, err := os.ReadFile("../../docs/icd-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for op := range ops {
		if op.IsReply() {
			continue
		}
		name := strings.ReplaceAll(strings.Title(strings.ReplaceAll(op.String(), "-", " ")), " ", "") //nolint:staticcheck // ASCII names
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/icd-protocol.md does not mention `%s`", name)
		}
	}
	if strings.Contains(doc, "Status: DRAFT") {
		t.Errorf("docs/icd-protocol.md still says DRAFT")
	}
}

// A launch with a printf buffer (version 3): its last entry is the
// buffer, not a kernel argument; it round-trips, and KernelArgs splits it
// off. Without the flag, every entry is the kernel's.
func TestLaunchPrintfEntry(t *testing.T) {
	l := launch()
	if args, pb := l.KernelArgs(); len(args) != 4 || pb != 0 {
		t.Fatalf("without LaunchPrintf: %d arguments, printf buffer %d", len(args), pb)
	}
	l.Flags |= LaunchPrintf
	l.Args = append(l.Args, LaunchArg{Kind: abi.ArgBuffer, Value: 12})
	l.NumArgs = uint32(len(l.Args))
	b := mustMarshal(t, OpLaunch, l)
	_, body, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	got := body.(*Launch)
	args, pb := got.KernelArgs()
	if len(args) != 4 || pb != 12 || args[3].Kind != abi.ArgLocal {
		t.Errorf("KernelArgs = %d arguments, printf buffer %d", len(args), pb)
	}
	// The printf entry may follow the most arguments a kernel takes.
	full := launch()
	full.Args = make([]LaunchArg, abi.MaxKernelArgs+1)
	for i := range full.Args {
		full.Args[i] = LaunchArg{Kind: abi.ArgBuffer, Value: uint64(i + 1)}
	}
	full.NumArgs = uint32(len(full.Args))
	full.Flags |= LaunchPrintf
	fb := mustMarshal(t, OpLaunch, full)
	if _, _, err := Unmarshal(fb); err != nil {
		t.Errorf("%d kernel arguments and the printf buffer: %v", abi.MaxKernelArgs, err)
	}
	fb[16+6] = 0 // LaunchPrintf's bit cleared: 65 kernel arguments
	if _, _, err := Unmarshal(fb); !errors.Is(err, ErrMalformed) {
		t.Errorf("%d entries without LaunchPrintf: %v, want ErrMalformed", len(full.Args), err)
	}
}

// imageLaunch is a launch with an image argument (its descriptor in the
// scalar area, naming the client's buffer 9) and a sampler (version 4).
func imageLaunch(t testing.TB) *Launch {
	l := launch()
	im := abi.ImageDesc{Buffer: 9, Type: abi.ImageType2D, Order: abi.OrderRGBA, DataType: abi.UnormInt8, Width: 64, Height: 32}
	at := len(l.Scalars)
	l.Scalars = append(l.Scalars, make([]byte, abi.ImageDescSize)...)
	im.Marshal(l.Scalars[at:])
	s := abi.SamplerDesc{Normalized: true, Addressing: abi.AddressRepeat, Filter: abi.FilterLinear}
	l.Args = append(l.Args, LaunchArg{Kind: abi.ArgImage, Size: abi.ImageDescSize, Value: uint64(at)},
		LaunchArg{Kind: abi.ArgSampler, Value: s.Value()})
	l.NumArgs = uint32(len(l.Args))
	return l
}

func TestLaunchImages(t *testing.T) {
	l := imageLaunch(t)
	b := mustMarshal(t, OpLaunch, l)
	_, body, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	got := body.(*Launch)
	im, err := got.Image(got.Args[4])
	if err != nil || im.Buffer != 9 || im.Width != 64 || im.Bytes() != 64*32*4 {
		t.Errorf("Image = %+v, %v", im, err)
	}
	if s, err := abi.UnpackSampler(got.Args[5].Value); err != nil || !s.Normalized || s.Filter != abi.FilterLinear {
		t.Errorf("sampler = %+v, %v", s, err)
	}
	arg := func(i int) int { return HeaderSize + LaunchHeadSize + LaunchArgSize*i }
	area := arg(len(l.Args))
	patch := func(off int, v ...byte) []byte {
		c := append([]byte(nil), b...)
		copy(c[off:], v)
		return c
	}
	for name, bad := range map[string][]byte{
		"image size 40":         patch(arg(4)+4, 40),
		"image beyond the area": patch(arg(4)+8, byte(len(l.Scalars)-40)),
		"image type unknown":    patch(area+24+4, 0xf6),
		"image height 0":        patch(area+24+24, 0),
		"sampler filter":        patch(arg(5)+8+2, 0x42),
		"sampler reserved bit":  patch(arg(5)+8+5, 1),
		"sampler with a size":   patch(arg(5)+4, 4),
	} {
		if _, body, err := Unmarshal(bad); err == nil || body != nil || CodeOf(err) != ErrMalformed {
			t.Errorf("%s: Unmarshal = %v, %v; want a malformed error", name, body, err)
		}
	}
}

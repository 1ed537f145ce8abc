package aggregator

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
	"pgregory.net/rapid"
)

const infoSrc = `
__kernel void zed(__global const float *restrict in, __global float *out, __local float *tmp, uint n) { }
__kernel void abc(__constant int *c) { }
`

// programInfoCmd asks for program h's blob into room bytes of scattered
// guest pages (prefilled with 0xee) and returns the command and the room's
// bytes as they are once it has run.
func (g *testGuest) programInfoCmd(h uint32, room int) (abi.Command, func() []byte) {
	table, count, pages := g.sg(bytes.Repeat([]byte{0xee}, room), room)
	read := func() []byte {
		out := make([]byte, 0, room)
		for i, p := range pages {
			out = append(out, g.get(p, min(abi.PageSize, room-i*abi.PageSize))...)
		}
		return out
	}
	return abi.NewCommand(&abi.ProgramInfoQuery{Handle: h, SGCount: count, Length: uint64(room), SGAddr: table}, 0, 0), read
}

func TestProgramInfoCommand(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "info", 1<<20)
	build, _ := g.build(1, infoSrc, 0)
	g.mustOK(g.run(build)...)

	cmd, read := g.programInfoCmd(1, 3*abi.PageSize) // 3 pages, not contiguous
	rec := g.run(cmd)[0]
	g.mustOK(rec)
	blob := read()
	info, err := abi.UnmarshalProgramInfo(blob)
	if err != nil {
		t.Fatalf("UnmarshalProgramInfo = %v", err)
	}
	if rec.Detail != info.Size() || rec.Detail != abi.ProgramInfoHeaderSize+2*abi.KernelInfoSize+5*abi.ArgInfoSize {
		t.Errorf("detail = %d, blob of %d bytes", rec.Detail, info.Size())
	}
	if !bytes.Equal(blob[rec.Detail:], bytes.Repeat([]byte{0xee}, len(blob)-int(rec.Detail))) {
		t.Errorf("the room after the blob was written")
	}
	var names []string
	for _, k := range info.Kernels {
		names = append(names, k.Name)
	}
	if !slices.Equal(names, []string{"abc", "zed"}) || len(info.Kernels[1].Args) != 4 || len(info.Kernels[0].Args) != 1 {
		t.Fatalf("kernels = %+v", info.Kernels)
	}
	z := info.Kernels[1]
	wantArgs := []abi.KernelArgInfo{
		{AddressQualifier: abi.ArgAddressGlobal, AccessQualifier: abi.ArgAccessNone, TypeQualifier: abi.ArgTypeConst | abi.ArgTypeRestrict, TypeName: "float*", Name: "in"},
		{AddressQualifier: abi.ArgAddressGlobal, AccessQualifier: abi.ArgAccessNone, TypeName: "float*", Name: "out"},
		{AddressQualifier: abi.ArgAddressLocal, AccessQualifier: abi.ArgAccessNone, TypeName: "float*", Name: "tmp"},
		{AddressQualifier: abi.ArgAddressPrivate, AccessQualifier: abi.ArgAccessNone, TypeName: "uint", Name: "n"},
	}
	if !slices.Equal(z.Args, wantArgs) || z.WorkGroupSize == 0 {
		t.Errorf("zed = %+v\nwant args %+v", z, wantArgs)
	}

	// Too little room: the size, and nothing written.
	cmd, read = g.programInfoCmd(1, 100)
	rec = g.run(cmd)[0]
	g.mustOK(rec)
	if rec.Detail != info.Size() || !bytes.Equal(read(), bytes.Repeat([]byte{0xee}, 100)) {
		t.Errorf("program-info with 100 bytes of room: detail %d, room % x", rec.Detail, read()[:16])
	}

	// Failures, in the order docs/ABI.md gives.
	table, count, _ := g.sg(nil, abi.PageSize)
	q := func(h uint32, count uint32, length, sg uint64) abi.Command {
		return abi.NewCommand(&abi.ProgramInfoQuery{Handle: h, SGCount: count, Length: length, SGAddr: sg}, 0, 0)
	}
	badTable := g.alloc(abi.PageSize)
	g.put(badTable, sgEntryBytes(abi.SGEntry{Addr: ramSize + abi.PageSize, Len: abi.PageSize}))
	flagged := q(1, count, abi.PageSize, table)
	flagged.Flags = abi.FlagNondeterministic
	for _, tt := range []struct {
		name string
		c    abi.Command
		want abi.Status
	}{
		{"nondeterministic flag", flagged, abi.StatusInvalidArgument},
		{"length 0", q(1, count, 0, table), abi.StatusInvalidArgument},
		{"unknown program before a bad list", q(7, 1, 1, ramSize*2), abi.StatusNotFound},
		{"list shorter than length", q(1, count, 2*abi.PageSize, table), abi.StatusInvalidArgument},
		{"table outside RAM", q(1, 1, abi.PageSize, ramSize+abi.PageSize), abi.StatusBadAddress},
		{"data outside RAM, blob written", q(1, 1, abi.PageSize, badTable), abi.StatusBadAddress},
		{"data outside RAM, blob too big", q(1, 1, 16, badTableOf(g, 16)), abi.StatusOK},
	} {
		if rec := g.run(tt.c)[0]; rec.Status != tt.want {
			t.Errorf("%s: status %v, want %v", tt.name, rec.Status, tt.want)
		}
	}
	// The program is gone after program-free.
	g.mustOK(g.run(abi.NewCommand(&abi.ProgramFree{Handle: 1}, 0, 0))...)
	if rec := g.run(q(1, count, abi.PageSize, table))[0]; rec.Status != abi.StatusNotFound {
		t.Errorf("program-info of a freed program: %v", rec.Status)
	}
}

func sgEntryBytes(e abi.SGEntry) []byte {
	var b [abi.SGEntrySize]byte
	e.Marshal(b[:])
	return b[:]
}

// badTableOf is a one-entry table of n bytes outside guest RAM.
func badTableOf(g *testGuest, n uint32) uint64 {
	a := g.alloc(abi.PageSize)
	g.put(a, sgEntryBytes(abi.SGEntry{Addr: ramSize + abi.PageSize, Len: n}))
	return a
}

func TestBufferCopyFillCommands(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "copyfill", 1<<20)
	other := newTestGuest(t, d, "other", 1<<20)
	g.mustOK(g.run(
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 4096}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 1024}, 0, 0),
	)...)
	other.mustOK(other.run(abi.NewCommand(&abi.BufferCreate{Handle: 3, Size: 1024}, 0, 0))...)
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i * 7)
	}
	pat := g.alloc(abi.PageSize)
	g.put(pat+abi.PageSize-8, []byte{1, 2, 3, 4, 5, 6, 7, 8}) // at the very end of its page
	bcopy := func(src, dst uint32, so, do, n uint64) abi.Command {
		return abi.NewCommand(&abi.BufferCopy{Src: src, Dst: dst, SrcOffset: so, DstOffset: do, Length: n}, 0, 0)
	}
	fill := func(h uint32, pl uint32, off, n, addr uint64) abi.Command {
		return abi.NewCommand(&abi.BufferFill{Handle: h, PatternLen: pl, Offset: off, Length: n, PatternAddr: addr}, 0, 0)
	}
	recs := g.run(g.upload(1, data),
		bcopy(1, 2, 100, 24, 1000),              // between buffers
		bcopy(1, 1, 0, 2048, 2048),              // within one, adjacent halves
		fill(2, 8, 0, 16, pat+abi.PageSize-8),   // an 8-byte pattern
		fill(2, 1, 1016, 8, pat+abi.PageSize-1)) // the last byte of the page
	g.mustOK(recs...)
	for i, want := range []uint64{4096, 1000, 2048, 16, 8} {
		if recs[i].Detail != want {
			t.Errorf("command %d (%v) detail = %d, want %d", i, recs[i].Opcode, recs[i].Detail, want)
		}
	}
	get1, read1 := g.download(1, 4096)
	get2, read2 := g.download(2, 1024)
	g.mustOK(g.run(get1, get2)...)
	want1 := append(bytes.Clone(data[:2048]), data[:2048]...)
	want2 := make([]byte, 1024)
	copy(want2[24:], data[100:1100])
	copy(want2[0:16], []byte{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8})
	copy(want2[1016:], bytes.Repeat([]byte{8}, 8))
	if got := read1(); !bytes.Equal(got, want1) {
		t.Errorf("buffer 1 after the copy within = % x..., want % x...", got[2040:2056], want1[2040:2056])
	}
	if got := read2(); !bytes.Equal(got, want2) {
		t.Errorf("buffer 2 = % x...", got[:40])
	}

	nondet := fill(2, 1, 0, 1, pat)
	nondet.Flags = abi.FlagNondeterministic
	for _, tt := range []struct {
		name string
		c    abi.Command
		want abi.Status
	}{
		{"copy overlapping, before handles", bcopy(9, 9, 0, 4, 8), abi.StatusInvalidArgument},
		{"copy unknown source", bcopy(9, 2, 0, 0, 8), abi.StatusNotFound},
		{"copy unknown destination", bcopy(1, 9, 0, 0, 8), abi.StatusNotFound},
		{"copy another instance's buffer", bcopy(3, 2, 0, 0, 8), abi.StatusNotFound},
		{"copy past source before destination", bcopy(2, 1, 1020, 9999, 8), abi.StatusInvalidArgument},
		{"copy past destination", bcopy(1, 2, 0, 1020, 8), abi.StatusInvalidArgument},
		{"copy offset + length wraps", bcopy(1, 2, ^uint64(0)-3, 0, 8), abi.StatusInvalidArgument},
		{"fill nondeterministic flag", nondet, abi.StatusInvalidArgument},
		{"fill pattern length 3", fill(2, 3, 0, 3, pat), abi.StatusInvalidArgument},
		{"fill pattern crossing a page", fill(2, 8, 0, 8, pat+abi.PageSize-4), abi.StatusInvalidArgument},
		{"fill unknown buffer", fill(9, 1, 0, 1, ramSize*2), abi.StatusNotFound},
		{"fill past the end", fill(2, 4, 1020, 8, pat), abi.StatusInvalidArgument},
		{"fill pattern outside RAM", fill(2, 4, 0, 8, ramSize), abi.StatusBadAddress},
	} {
		if rec := g.run(tt.c)[0]; rec.Status != tt.want {
			t.Errorf("%s: status %v, want %v", tt.name, rec.Status, tt.want)
		}
	}
	// Nothing reached the other instance.
	get3, read3 := other.download(3, 1024)
	other.mustOK(other.run(get3)...)
	if got := read3(); !bytes.Equal(got, make([]byte, 1024)) {
		t.Errorf("the other instance's buffer changed")
	}
}

// TestMigrateSeesCopyAndFill: a buffer-copy or buffer-fill makes its
// destination dirty for the next pre-copy round; its source stays clean.
func TestMigrateSeesCopyAndFill(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "mig14", 1<<20)
	g.mustOK(g.run(
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 4096}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 4096}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 3, Size: 4096}, 0, 0),
		g.upload(1, bytes.Repeat([]byte{5}, 4096)),
	)...)
	ctx := context.Background()
	if _, err := g.in.ExtractRound(ctx, newRecSink(), false); err != nil {
		t.Fatal(err)
	}
	pat := g.alloc(abi.PageSize)
	g.put(pat, []byte{9})
	g.mustOK(g.run(
		abi.NewCommand(&abi.BufferCopy{Src: 1, Dst: 2, Length: 4096}, 0, 0),
		abi.NewCommand(&abi.BufferFill{Handle: 3, PatternLen: 1, Offset: 100, Length: 10, PatternAddr: pat}, 0, 0),
	)...)
	r := newRecSink()
	st, err := g.in.ExtractRound(ctx, r, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Buffers != 2 || r.data[1] != nil || !bytes.Equal(r.data[2], bytes.Repeat([]byte{5}, 4096)) || r.data[3][105] != 9 || r.data[3][99] != 0 {
		t.Errorf("round after copy and fill: %+v, sent %v", st, r.order)
	}
}

// TestQualifiersAgree: gpu and abi spell the argument qualifiers alike, so
// program-info passes the device's values through unchanged.
func TestQualifiersAgree(t *testing.T) {
	for _, c := range [][2]uint32{
		{gpu.ArgAddressGlobal, abi.ArgAddressGlobal}, {gpu.ArgAddressLocal, abi.ArgAddressLocal},
		{gpu.ArgAddressConstant, abi.ArgAddressConstant}, {gpu.ArgAddressPrivate, abi.ArgAddressPrivate},
		{gpu.ArgAccessNone, abi.ArgAccessNone}, {gpu.ArgTypeConst, abi.ArgTypeConst},
		{gpu.ArgTypeRestrict, abi.ArgTypeRestrict}, {gpu.ArgTypeVolatile, abi.ArgTypeVolatile},
	} {
		if c[0] != c[1] {
			t.Errorf("gpu %#x, abi %#x", c[0], c[1])
		}
	}
}

// deviceInfoCmd asks for the device-information blob into room bytes of
// scattered guest pages (prefilled with 0xee), as programInfoCmd does.
func (g *testGuest) deviceInfoCmd(room int) (abi.Command, func() []byte) {
	table, count, pages := g.sg(bytes.Repeat([]byte{0xee}, room), room)
	read := func() []byte {
		out := make([]byte, 0, room)
		for i, p := range pages {
			out = append(out, g.get(p, min(abi.PageSize, room-i*abi.PageSize))...)
		}
		return out
	}
	return abi.NewCommand(&abi.DeviceInfoQuery{SGCount: count, Length: uint64(room), SGAddr: table}, 0, 0), read
}

func TestDeviceInfoCommand(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "devinfo", 1<<20)
	cmd, read := g.deviceInfoCmd(2 * abi.PageSize)
	rec := g.run(cmd)[0]
	g.mustOK(rec)
	blob := read()
	info, err := abi.UnmarshalDeviceInfo(blob)
	if err != nil {
		t.Fatalf("UnmarshalDeviceInfo = %v", err)
	}
	t.Logf("%+v", info)
	if rec.Detail != info.Size() || !bytes.Equal(blob[rec.Detail:], bytes.Repeat([]byte{0xee}, len(blob)-int(rec.Detail))) {
		t.Errorf("detail = %d for a blob of %d bytes, or the room after it was written", rec.Detail, info.Size())
	}
	want := deviceInfoOf(d.Info(), g.in.Limits().MaxWorkGroup)
	if !cmp.Equal(info, want) {
		t.Errorf("device-info = %+v\nwant %+v", info, want)
	}
	// PoCL's CPU devices: fp64, 64-bit, little-endian; images and SPIR,
	// which they list too, are not passed on.
	if !slices.Contains(info.Extensions, "cl_khr_fp64") || info.DoubleFPConfig == 0 || info.AddressBits != 64 || !info.EndianLittle {
		t.Errorf("device-info on PoCL = %+v, want fp64, 64 bits, little-endian", info)
	}
	for _, e := range info.Extensions {
		if !abi.PassThroughExtension(e) {
			t.Errorf("device-info lists %q", e)
		}
	}

	// Too little room: the size, and nothing written.
	cmd, read = g.deviceInfoCmd(100)
	rec = g.run(cmd)[0]
	g.mustOK(rec)
	if rec.Detail != info.Size() || !bytes.Equal(read(), bytes.Repeat([]byte{0xee}, 100)) {
		t.Errorf("device-info with 100 bytes of room: detail %d", rec.Detail)
	}

	// Failures, in the order docs/ABI.md gives.
	table, count, _ := g.sg(nil, abi.PageSize)
	q := func(count uint32, length, sg uint64) abi.Command {
		return abi.NewCommand(&abi.DeviceInfoQuery{SGCount: count, Length: length, SGAddr: sg}, 0, 0)
	}
	badTable := g.alloc(abi.PageSize)
	g.put(badTable, sgEntryBytes(abi.SGEntry{Addr: ramSize + abi.PageSize, Len: abi.PageSize}))
	flagged := q(count, abi.PageSize, table)
	flagged.Flags = abi.FlagNondeterministic
	reserved := q(count, abi.PageSize, table)
	reserved.Payload[4] = 5 // a blob version no device knows
	for _, tt := range []struct {
		name string
		c    abi.Command
		want abi.Status
	}{
		{"nondeterministic flag", flagged, abi.StatusInvalidArgument},
		{"blob version 5", reserved, abi.StatusInvalidArgument},
		{"length 0", q(count, 0, table), abi.StatusInvalidArgument},
		{"list shorter than length", q(count, 2*abi.PageSize, table), abi.StatusInvalidArgument},
		{"table outside RAM", q(1, abi.PageSize, ramSize+abi.PageSize), abi.StatusBadAddress},
		{"data outside RAM, blob written", q(1, abi.PageSize, badTable), abi.StatusBadAddress},
		{"data outside RAM, blob too big", q(1, 16, badTableOf(g, 16)), abi.StatusOK},
	} {
		if rec := g.run(tt.c)[0]; rec.Status != tt.want {
			t.Errorf("%s: status %v, want %v", tt.name, rec.Status, tt.want)
		}
	}
}

// TestDeviceInfoOf: the profile's restrictions and the extension
// allowlist, on values no PoCL device reports.
func TestDeviceInfoOf(t *testing.T) {
	info := gpu.Info{MaxWorkItemSizes: [3]uint64{1024, 64, 8}, LocalMemBytes: 48 << 10, Caps: gpu.Caps{
		MaxParameterSize: 8192, MaxClockFrequency: 1500, HalfFPConfig: 0x3e, DoubleFPConfig: 0,
		PreferredVectorWidth: [7]uint32{1, 2, 3, 4, 5, 6, 7}, NativeVectorWidth: [7]uint32{7, 6, 5, 4, 3, 2, 1},
		Extensions: "  cl_khr_gl_sharing cl_khr_fp16 cl_khr_subgroups cl_khr_byte_addressable_store cl_khr_icd cl_khr_il_program cl_khr_spir cl_khr_3d_image_writes ",
	}}
	got := deviceInfoOf(info, 256)
	want := abi.DeviceInfo{MaxWorkItemSizes: [3]uint64{256, 64, 8}, LocalMemSize: 48 << 10, MaxParameterSize: abi.MaxLaunchParamBytes,
		MaxClockFrequency: 1500, HalfFPConfig: 0x3e,
		PreferredVectorWidth: [7]uint32{1, 2, 3, 4, 5, 6, 7}, NativeVectorWidth: [7]uint32{7, 6, 5, 4, 3, 2, 1},
		Extensions: []string{"cl_khr_byte_addressable_store", "cl_khr_fp16"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("deviceInfoOf (-want +got):\n%s", d)
	}
	if _, err := got.Marshal(); err != nil {
		t.Errorf("Marshal() = %v", err)
	}
}

// TestContiguousCopyMovesStraight is the mechanism test of issue 42's
// copies: a copy from contiguous guest RAM that lends its mapping moves in
// one device transfer (up to directChunk), straight between guest RAM and
// the device, with no byte through the staging buffer (it used to take
// one transfer per MiB, each staged); scattered pages are still gathered, as
// many as fit, into one staged transfer; memory that lends nothing is
// staged as before. The bytes are the same each way. It runs on a device
// whose buffers are device memory (a GPU's; the fake's), as PoCL's are
// host-backed (TestHostBackedCopyMovesInPlace).
func TestContiguousCopyMovesStraight(t *testing.T) {
	d := newDeviceOn(t, gputest.New(gputest.Config{Info: gpu.Info{GlobalMemBytes: 64 << 20, MaxAllocBytes: 16 << 20}}))
	g := newTestGuest(t, d, "vm0", 64<<20)
	const n = 3 << 20
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: n}, 0, 0))...)
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	contig := func(toDev bool, at uint64) abi.Command {
		table := g.alloc(abi.PageSize)
		var eb [abi.SGEntrySize]byte
		(&abi.SGEntry{Addr: at, Len: n}).Marshal(eb[:])
		g.put(table, eb[:])
		return abi.NewCommand(&abi.Copy{ToDevice: toDev, Handle: 1, SGCount: 1, Length: n, SGAddr: table}, 0, 0)
	}
	src, dst := g.alloc(n), g.alloc(n)
	g.put(src, data)
	for _, tt := range []struct {
		name      string
		views     bool
		transfers uint64
		staged    uint64
	}{
		{"lent", true, 1, 0},
		{"not lent", false, 3, n},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g.mem.views.Store(tt.views)
			g.put(dst, make([]byte, n))
			sh := g.in.sh
			for _, toDev := range []bool{true, false} {
				tr, st := sh.Transfers.Load(), sh.Staged.Load()
				at := src
				if !toDev {
					at = dst
				}
				g.mustOK(g.run(contig(toDev, at))...)
				if got := sh.Transfers.Load() - tr; got != tt.transfers {
					t.Errorf("to device %v: %d device transfers for a contiguous %d MiB, want %d", toDev, got, n>>20, tt.transfers)
				}
				if got := sh.Staged.Load() - st; got != tt.staged {
					t.Errorf("to device %v: %d bytes staged, want %d", toDev, got, tt.staged)
				}
				if !toDev && !bytes.Equal(g.get(at, n), data) {
					t.Error("the bytes read back differ from those written")
				}
			}
		})
	}
	// Scattered pages (every other page): gathered into one transfer.
	g.mem.views.Store(true)
	tr, st := g.in.sh.Transfers.Load(), g.in.sh.Staged.Load()
	up := g.upload(1, data[:64<<10])
	g.mustOK(g.run(up)...)
	if got := g.in.sh.Transfers.Load() - tr; got != 1 {
		t.Errorf("16 scattered pages took %d transfers, want 1", got)
	}
	if got := g.in.sh.Staged.Load() - st; got != 64<<10 {
		t.Errorf("16 scattered pages: %d bytes staged, want %d", got, 64<<10)
	}
}

// TestCopiesStreamThroughStaging is the mechanism test of streamed
// copies (issue 42, on a GPU): on a queue that streams (gpu.Streamer: a
// GPU's, through its pinned staging memory), a batch mostly of short runs
// (scattered pages) or of memory that lends no mapping is one stream of
// gpu.StreamPiece pieces, either way, with no blocking Write or Read on
// the device; a contiguous run the memory lends still moves straight, one
// blocking transfer, as the application's own would. The bytes are the
// same each way, on the fake and on a real OpenCL queue (PoCL's, opened
// plain, so that its buffers are device memory as a GPU's are).
func TestCopiesStreamThroughStaging(t *testing.T) {
	fake := gputest.New(gputest.Config{Stream: true, Info: gpu.Info{GlobalMemBytes: 64 << 20, MaxAllocBytes: 16 << 20}})
	plain, err := gpu.OpenPlain("")
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []struct {
		name string
		d    *Device
	}{{"fake", newDeviceOn(t, fake)}, {"opencl", newDeviceOn(t, plain)}} {
		t.Run(dev.name, func(t *testing.T) {
			g := newTestGuest(t, dev.d, "vm0", 64<<20)
			const n = 3<<20 + 4096
			g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: n}, 0, 0))...)
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i*11 + i>>12)
			}
			src := g.alloc(n)
			table := g.alloc(abi.PageSize)
			var eb [abi.SGEntrySize]byte
			(&abi.SGEntry{Addr: src, Len: n}).Marshal(eb[:])
			g.put(table, eb[:])
			sh := g.in.sh
			for _, tt := range []struct {
				views             bool
				pieces, transfers uint64 // each way
			}{{views: false, pieces: (n + gpu.StreamPiece - 1) / gpu.StreamPiece}, {views: true, transfers: 1}} {
				g.mem.views.Store(tt.views)
				g.put(src, data)
				before, tr := fake.Stats(), sh.Transfers.Load()
				g.mustOK(g.run(abi.NewCommand(&abi.Copy{ToDevice: true, Handle: 1, SGCount: 1, Length: n, SGAddr: table}, 0, 0))...)
				g.put(src, make([]byte, n))
				g.mustOK(g.run(abi.NewCommand(&abi.Copy{Handle: 1, SGCount: 1, Length: n, SGAddr: table}, 0, 0))...)
				if !bytes.Equal(g.get(src, n), data) {
					t.Errorf("lent %v: the bytes read back differ from those written", tt.views)
				}
				// 3 MiB and a page, one batch.
				if got, want := sh.Transfers.Load()-tr, 2*(tt.pieces+tt.transfers); got != want {
					t.Errorf("lent %v: %d device transfers, want %d", tt.views, got, want)
				}
				if dev.name != "fake" {
					continue
				}
				after := fake.Stats()
				if got := after.Transfers - before.Transfers; got != 2*tt.transfers {
					t.Errorf("lent %v: %d blocking Writes and Reads, want %d", tt.views, got, 2*tt.transfers)
				}
				if got := after.Pieces - before.Pieces; got != 2*tt.pieces {
					t.Errorf("lent %v: %d pieces streamed, want %d", tt.views, got, 2*tt.pieces)
				}
			}
			// Scattered pages (every other page), both ways: streamed.
			part := data[:256<<10]
			before := fake.Stats()
			g.mustOK(g.run(g.upload(1, part))...)
			down, read := g.download(1, len(part))
			g.mustOK(g.run(down)...)
			if !bytes.Equal(read(), part) {
				t.Error("scattered: the bytes read back differ from those written")
			}
			if after := fake.Stats(); dev.name == "fake" && (after.Transfers != before.Transfers || after.Streams-before.Streams != 2) {
				t.Errorf("scattered: %d blocking Writes and Reads and %d streams, want 0 and 2",
					after.Transfers-before.Transfers, after.Streams-before.Streams)
			}
			// A long scattered copy is one stream too, up to streamChunk:
			// a stream ends with its batch, and short ones leave the
			// copy engine idle while the next piece is gathered.
			const run, long = 64 << 10, 5 << 20
			g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: long}, 0, 0))...)
			ltable, runs := g.alloc(abi.PageSize), make([]uint64, long/run)
			for i := range runs {
				runs[i] = g.alloc(run + abi.PageSize) // a page between runs
				g.put(runs[i], data[i*run%(3<<20):][:run])
				var eb [abi.SGEntrySize]byte
				(&abi.SGEntry{Addr: runs[i], Len: run}).Marshal(eb[:])
				g.put(ltable+uint64(i)*abi.SGEntrySize, eb[:])
			}
			lcopy := func(toDev bool) abi.Command {
				return abi.NewCommand(&abi.Copy{ToDevice: toDev, Handle: 2, SGCount: uint32(len(runs)), Length: long, SGAddr: ltable}, 0, 0)
			}
			before = fake.Stats()
			g.mustOK(g.run(lcopy(true))...)
			for _, r := range runs {
				g.put(r, make([]byte, run))
			}
			g.mustOK(g.run(lcopy(false))...)
			for i, r := range runs {
				if !bytes.Equal(g.get(r, run), data[i*run%(3<<20):][:run]) {
					t.Fatalf("5 MiB scattered: run %d read back differs from what was written", i)
				}
			}
			if after := fake.Stats(); dev.name == "fake" && after.Streams-before.Streams != 2 {
				t.Errorf("5 MiB scattered: %d streams, want 2 (one each way)", after.Streams-before.Streams)
			}
		})
	}
}

// TestHostBackedCopyMovesInPlace is the mechanism test of host-backed
// buffers (issue 42): on a device whose buffers are host memory it uses
// in place (PoCL's, the fake's HostBacked), a copy, contiguous or
// scattered, either way, is memory copies between guest RAM and the
// buffer: no device transfer (the device's Write and Read are never
// called), nothing staged. The bytes are the same each way.
//
// And they take no device turn: on a free device a lone copy then costs
// no turn's request and grant (in a worker, a round trip to the main
// process).
func TestHostBackedCopyMovesInPlace(t *testing.T) {
	fake := gputest.New(gputest.Config{HostBacked: true, Info: gpu.Info{GlobalMemBytes: 64 << 20, MaxAllocBytes: 16 << 20}})
	for _, dev := range []struct {
		name string
		d    *Device
	}{{"fake", newDeviceOn(t, fake)}, {"pocl", func() *Device { d, _ := newDevice(t); return d }()}} {
		t.Run(dev.name, func(t *testing.T) {
			g := newTestGuest(t, dev.d, "vm0", 64<<20)
			const n = 3 << 20
			g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: n}, 0, 0))...)
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i*13 + i>>12)
			}
			src := g.alloc(n)
			g.put(src, data)
			table := g.alloc(abi.PageSize)
			var eb [abi.SGEntrySize]byte
			(&abi.SGEntry{Addr: src, Len: n}).Marshal(eb[:])
			g.put(table, eb[:])
			sh := g.in.sh
			before := fake.Stats().Transfers
			turns := sh.Turns.Load()
			g.mustOK(g.run(abi.NewCommand(&abi.Copy{ToDevice: true, Handle: 1, SGCount: 1, Length: n, SGAddr: table}, 0, 0))...)
			g.put(src, make([]byte, n))
			g.mustOK(g.run(abi.NewCommand(&abi.Copy{Handle: 1, SGCount: 1, Length: n, SGAddr: table}, 0, 0))...)
			if !bytes.Equal(g.get(src, n), data) {
				t.Error("contiguous: the bytes read back differ from those written")
			}
			// Scattered pages, both ways.
			part := data[:256<<10]
			g.mustOK(g.run(g.upload(1, part))...)
			down, read := g.download(1, len(part))
			g.mustOK(g.run(down)...)
			if !bytes.Equal(read(), part) {
				t.Error("scattered: the bytes read back differ from those written")
			}
			if got := sh.Transfers.Load(); got != 0 {
				t.Errorf("%d device transfers, want 0", got)
			}
			if got := sh.Staged.Load(); got != 0 {
				t.Errorf("%d bytes staged, want 0", got)
			}
			if got := fake.Stats().Transfers - before; dev.name == "fake" && got != 0 {
				t.Errorf("the device's Write and Read moved bytes %d times, want 0", got)
			}
			// A memory copy uses no device: it asks for no turn.
			if got := sh.Turns.Load() - turns; got != 0 {
				t.Errorf("copies in place took %d device turns, want 0", got)
			}
			if sh.InPlace.Load() == 0 {
				t.Error("no batch counted as moved in place")
			}
		})
	}
}

// TestSegCursor: pieces taken from a cursor, then what rests, cover the
// segments exactly, in order, and the segments are left as they were.
func TestSegCursor(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		segs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) segment {
			return segment{gpa: rapid.Uint64Range(0, 1<<40).Draw(t, "gpa"), len: rapid.Uint64Range(1, 1<<20).Draw(t, "len")}
		}), 0, 20).Draw(t, "segs")
		orig := slices.Clone(segs)
		expand := func(ss []segment) []uint64 {
			var out []uint64
			for _, s := range ss {
				out = append(out, s.gpa, s.len)
			}
			return out
		}
		c := segCursor{segs: segs}
		var got []segment
		for range rapid.IntRange(0, 10).Draw(t, "takes") {
			got = append(got, c.take(rapid.Uint64Range(0, 3<<20).Draw(t, "n"))...)
		}
		got = append(got, c.rest()...)
		if !slices.Equal(segs, orig) {
			t.Fatalf("the cursor changed its segments: %v, was %v", segs, orig)
		}
		// Merge adjacent pieces back and compare with the original.
		var merged []segment
		for _, s := range got {
			if s.len == 0 {
				t.Fatalf("an empty piece in %v", got)
			}
			if n := len(merged); n > 0 && merged[n-1].gpa+merged[n-1].len == s.gpa && len(merged) <= len(orig) && merged[n-1].len < orig[n-1].len {
				merged[n-1].len += s.len
				continue
			}
			merged = append(merged, s)
		}
		if !slices.Equal(expand(merged), expand(orig)) {
			t.Fatalf("pieces %v merge to %v, want %v", got, merged, orig)
		}
	})
}

// BenchmarkStreamedCopy moves 8 MiB of scattered guest RAM (64 KiB runs,
// a page between them, as bench/isolation's harness guest) to and from a
// buffer through the aggregator on a queue that streams (PoCL opened
// plain, as a GPU's queue is): the cost of the copy path around the
// stream (the command, its scatter-gather walk, the runs, the turn),
// against gpu's BenchmarkStream of the stream alone. Run with
// -cpuprofile to see which.
func BenchmarkStreamedCopy(b *testing.B) {
	plain, err := gpu.OpenPlain("")
	if err != nil {
		b.Fatal(err)
	}
	d := newDeviceOn(b, plain)
	g := newTestGuest(b, d, "vm0", 64<<20)
	const run, n = 64 << 10, 8 << 20
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: n}, 0, 0))...)
	table := g.alloc(abi.PageSize)
	for i := range n / run {
		at := g.alloc(run + abi.PageSize)
		var eb [abi.SGEntrySize]byte
		(&abi.SGEntry{Addr: at, Len: run}).Marshal(eb[:])
		g.put(table+uint64(i)*abi.SGEntrySize, eb[:])
	}
	for _, up := range []bool{true, false} {
		name := "download"
		if up {
			name = "upload"
		}
		b.Run(name, func(b *testing.B) {
			cmd := abi.NewCommand(&abi.Copy{ToDevice: up, Handle: 1, SGCount: n / run, Length: n, SGAddr: table}, 0, 0)
			b.SetBytes(n)
			for b.Loop() {
				g.mustOK(g.run(cmd)...)
			}
		})
	}
}

package aggregator

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/vgpud/vgpud/abi"
)

// recSink records what an extraction round sends.
type recSink struct {
	progs    []ProgramState
	progFree []uint32
	bufs     []BufferState
	data     map[uint32][]byte // handle -> content assembled from chunks
	bufFree  []uint32
	ring     *RingState
	order    []string
}

func newRecSink() *recSink { return &recSink{data: map[uint32][]byte{}} }

func (s *recSink) Program(p ProgramState) error {
	s.progs = append(s.progs, p)
	s.order = append(s.order, fmt.Sprint("program ", p.Handle))
	return nil
}
func (s *recSink) ProgramFree(h uint32) error {
	s.progFree = append(s.progFree, h)
	s.order = append(s.order, fmt.Sprint("program-free ", h))
	return nil
}
func (s *recSink) Buffer(b BufferState) error {
	s.bufs = append(s.bufs, b)
	s.data[b.Handle] = make([]byte, b.Size)
	s.order = append(s.order, fmt.Sprint("buffer ", b.Handle))
	return nil
}
func (s *recSink) BufferData(h uint32, off uint64, data []byte) error {
	if s.data[h] == nil {
		s.data[h] = []byte{}
	}
	if need := off + uint64(len(data)); uint64(len(s.data[h])) < need {
		s.data[h] = append(s.data[h], make([]byte, need-uint64(len(s.data[h])))...)
	}
	copy(s.data[h][off:], data)
	s.order = append(s.order, fmt.Sprint("data ", h))
	return nil
}
func (s *recSink) BufferFree(h uint32) error {
	s.bufFree = append(s.bufFree, h)
	s.order = append(s.order, fmt.Sprint("buffer-free ", h))
	return nil
}
func (s *recSink) Ring(r RingState) error { s.ring = &r; s.order = append(s.order, "ring"); return nil }
func (s *recSink) Context(c ContextState) error {
	s.order = append(s.order, fmt.Sprint("context ", c.ID))
	return nil
}

// replay applies a recorded round to dst, as a destination worker does.
func (s *recSink) replay(t *testing.T, dst *Instance) {
	t.Helper()
	ctx := context.Background()
	for _, h := range s.progFree {
		if err := dst.InjectProgramFree(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range s.bufFree {
		if err := dst.InjectBufferFree(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range s.progs {
		if err := dst.InjectProgram(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range s.bufs {
		if err := dst.InjectBuffer(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for h, d := range s.data {
		if err := dst.InjectBufferData(ctx, h, 0, d); err != nil {
			t.Fatal(err)
		}
	}
	if s.ring != nil {
		if err := dst.InjectRing(ctx, *s.ring); err != nil {
			t.Fatal(err)
		}
	}
}

const mixSrc = `__kernel void scramble(__global const uint* in, __global uint* out, uint k) {
	size_t i = get_global_id(0);
	out[i] = in[i] * 2654435761u + k;
}`

func mixLaunch(g *testGuest, in, out uint32, k uint32, n uint64) abi.Command {
	var kb [4]byte
	binary.LittleEndian.PutUint32(kb[:], k)
	return g.launch(1, abi.LaunchDesc{Kernel: "scramble", WorkDim: 1, GlobalSize: [3]uint64{n},
		Args: []abi.KernelArg{{Kind: abi.ArgBuffer, Handle: in}, {Kind: abi.ArgBuffer, Handle: out}, {Kind: abi.ArgScalar, Bytes: kb[:]}}})
}

func mixCPU(in []uint32, k uint32) []uint32 {
	out := make([]uint32, len(in))
	for i, v := range in {
		out[i] = v*2654435761 + k
	}
	return out
}

func u32s(b []byte) []uint32 {
	v := make([]uint32, len(b)/4)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return v
}

func u32bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

// TestMigrateRounds moves an instance in three rounds to a second
// instance with a copy of the guest's RAM (what QEMU's migration gives the
// destination): later rounds send only what changed, the destination
// continues the guest's ring where the source stopped, with its handles.
func TestMigrateRounds(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "src", 64<<20)
	const n = 4096
	input := make([]uint32, n)
	for i := range input {
		input[i] = uint32(i * 7)
	}
	build, _ := g.build(1, mixSrc, 0)
	g.mustOK(g.run(build,
		abi.NewCommand(&abi.BufferCreate{Handle: 10, Size: 4 * n}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 11, Size: 4 * n}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 12, Size: 1 << 20}, 0, 0), // never written: zeros
		g.upload(10, u32bytes(input)),
		mixLaunch(g, 10, 11, 5, n))...)

	ctx := context.Background()
	r0 := newRecSink()
	st, err := g.in.ExtractRound(ctx, r0, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Programs != 1 || st.Buffers != 3 || r0.ring != nil {
		t.Fatalf("round 0: %+v, ring %v; want 1 program, 3 buffers, no ring", st, r0.ring)
	}
	// The guest computes on: 11 is written, 10 only read, 12 untouched.
	g.mustOK(g.run(mixLaunch(g, 10, 11, 9, n))...)
	r1 := newRecSink()
	if st, err = g.in.ExtractRound(ctx, r1, false); err != nil {
		t.Fatal(err)
	}
	if st.Programs != 0 || st.Buffers != 1 || len(r1.bufs) != 0 || r1.data[11] == nil {
		t.Fatalf("round 1: %+v, order %v; want buffer 11's content only", st, r1.order)
	}
	// A buffer freed and one created; the last commands are published but
	// not yet fetched when the ring freezes: they must run on the
	// destination.
	g.mustOK(g.run(abi.NewCommand(&abi.BufferFree{Handle: 12}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 13, Size: 4 * n}, 0, 0))...)
	if err := g.in.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	dl, read := g.download(13, 4*n)
	first := g.submit(mixLaunch(g, 11, 13, 3, n), dl)
	rf := newRecSink()
	if st, err = g.in.ExtractRound(ctx, rf, true); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rf.bufFree, []uint32{12}) || len(rf.bufs) != 1 || rf.bufs[0].Handle != 13 || rf.ring == nil {
		t.Fatalf("final round: %v", rf.order)
	}
	if r := *rf.ring; !r.Enabled || r.Head != first || r.Completed != first || r.Tail != first+2 {
		t.Fatalf("ring %+v, want head = completed = %d, tail %d", r, first, first+2)
	}

	// The destination: guest RAM as QEMU's migration leaves it.
	mem := &sliceMemory{ram: bytes.Clone(g.mem.ram)}
	bell := newBroadcast()
	dst, err := d.NewInstance(InstanceConfig{ID: "dst", Profile: "test", MemBytes: 64 << 20, Memory: mem,
		Notify: func(uint32) { bell.ring() }})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.PrepareInject(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recSink{r0, r1, rf} {
		r.replay(t, dst)
	}
	if dst.Done() != first {
		t.Fatalf("destination done %d, want %d", dst.Done(), first)
	}
	dst.Thaw()
	g2 := &testGuest{t: t, mem: mem, in: dst, tail: first + 2, bell: bell, rb: ringBase, cb: complBase}
	g2.mustOK(g2.wait(first), g2.wait(first+1))
	want := mixCPU(mixCPU(input, 9), 3)
	g.mem = mem // the download's pages are read from the destination's RAM
	got := u32s(read())
	if !slices.Equal(got, want) {
		t.Fatalf("result after migration differs at %d", firstDiff(got, want))
	}
	if dst.MemUsed() != 2*4*n+4*n {
		t.Errorf("destination holds %d bytes, want %d", dst.MemUsed(), 3*4*n)
	}
}

func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestMigrateFrozenRingFetchesNothing: a frozen ring takes doorbells and
// runs tasks but fetches no command until Thaw.
func TestMigrateFrozenRingFetchesNothing(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "frozen", 16<<20)
	ctx := context.Background()
	if err := g.in.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	idx := g.submit(abi.NewCommand(&abi.Nop{}, 0, 0))
	if err := g.in.ResetMigration(ctx); err != nil { // a task runs while frozen
		t.Fatal(err)
	}
	if g.in.Done() != idx {
		t.Fatalf("frozen ring completed %d commands", g.in.Done()-idx)
	}
	g.in.Thaw()
	g.mustOK(g.wait(idx))
}

// TestInjectRefusesBadState: values from a migration stream are checked
// like a guest's.
func TestInjectRefusesBadState(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "bad", 1<<20)
	ctx := context.Background()
	cases := []struct {
		name string
		f    func() error
		want abi.Status
	}{
		{"over quota", func() error { return g.in.InjectBuffer(ctx, BufferState{Handle: 1, Size: 2 << 20}) }, abi.StatusQuotaExceeded},
		{"bad flags", func() error { return g.in.InjectBuffer(ctx, BufferState{Handle: 1, Size: 16, Flags: 1 << 7}) }, abi.StatusInvalidArgument},
		{"data of unknown buffer", func() error { return g.in.InjectBufferData(ctx, 9, 0, []byte{1}) }, abi.StatusNotFound},
		{"ring slots", func() error { return g.in.InjectRing(ctx, RingState{Enabled: true, Slots: 3}) }, abi.StatusRingConfig},
		{"ring positions", func() error {
			return g.in.InjectRing(ctx, RingState{Enabled: true, Slots: 4, Base: 0x1000, ComplBase: 0x2000, Head: 5, Completed: 1, Tail: 5})
		}, abi.StatusRingConfig},
		{"ring overflow", func() error {
			return g.in.InjectRing(ctx, RingState{Enabled: true, Slots: 4, Base: 0x1000, ComplBase: 0x2000, Head: 1, Completed: 1, Tail: 9})
		}, abi.StatusRingConfig},
		{"latched status", func() error { return g.in.InjectRing(ctx, RingState{ErrStatus: 999}) }, abi.StatusInvalidArgument},
		{"bad source", func() error { return g.in.InjectProgram(ctx, ProgramState{Handle: 1, Source: "__kernel void f( {"}) }, abi.StatusBuildFailed},
	}
	for _, c := range cases {
		if err := c.f(); statusOf(err) != c.want {
			t.Errorf("%s: %v (status %v), want %v", c.name, err, statusOf(err), c.want)
		}
	}
	if err := g.in.InjectBuffer(ctx, BufferState{Handle: 1, Size: 64}); err != nil {
		t.Fatal(err)
	}
	if err := g.in.InjectBufferData(ctx, 1, 60, []byte{1, 2, 3, 4, 5}); abi.StatusOf(err) != abi.StatusInvalidArgument {
		t.Errorf("data past the end: %v", err)
	}
}

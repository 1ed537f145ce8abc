package aggregator

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
)

// withContexts lets g's instance make n device contexts, each on a device
// open returns (nil: queues of the instance's device).
func withContexts(g *testGuest, n uint32, open func(uint32) (gpu.Device, error)) {
	g.in.maxContexts = n
	if open != nil {
		g.in.openContext = func(id uint32, _ ContextMemory) (gpu.Device, error) { return open(id) }
	}
}

func ctxCmd(p abi.Payload) abi.Command { return abi.NewCommand(p, 0, 0) }

// TestContextsAreSeparate runs a job in two device contexts and the
// default one at once, with the same handles: each sees only its own
// objects.
func TestContextsAreSeparate(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	withContexts(g, 4, nil)
	c1, c2 := g.context(1, 0), g.context(2, 0)
	for i, x := range []*testGuest{g, c1, c2} {
		x.mustOK(x.run(ctxCmd(&abi.BufferCreate{Handle: 9, Size: 4096}), x.upload(9, bytes.Repeat([]byte{byte(i + 1)}, 4096)))...)
	}
	for i, x := range []*testGuest{g, c1, c2} {
		dl, read := x.download(9, 4096)
		x.mustOK(x.run(dl)...)
		if b := read(); !bytes.Equal(b, bytes.Repeat([]byte{byte(i + 1)}, 4096)) {
			t.Errorf("guest %d reads buffer 9 as %x..., want its own %d", i, b[:4], i+1)
		}
	}
	// A program built in one context is unknown to another.
	build, _ := c1.build(7, vaddSrc, 0)
	c1.mustOK(c1.run(build)...)
	rec := c2.run(c2.launch(7, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{1}, Kernel: "vadd"}))[0]
	if rec.Status != abi.StatusNotFound {
		t.Errorf("launch of context 1's program in context 2 = %v, want not found", rec.Status)
	}
	// Whole jobs in both, then the default one, concurrently.
	var wg sync.WaitGroup
	for _, x := range []*testGuest{c1, c2, g} {
		wg.Go(func() { vaddJob(t, x, 2048) })
	}
	wg.Wait()
	if got := g.in.Contexts(); len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 || got[0].Commands == 0 {
		t.Errorf("Contexts() = %+v", got)
	}
	if n := g.in.Shared().LiveContexts(); n != 2 {
		t.Errorf("Shared().LiveContexts() = %d, want 2", n)
	}
}

// TestContextCommandErrors checks every refusal the ABI lists for the
// context commands and kicks.
func TestContextCommandErrors(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	withContexts(g, 2, nil)
	c1 := g.context(1, 0)
	ring, compl, shadow := g.alloc(slots*abi.CommandSize), g.alloc(slots*abi.ComplSize), g.alloc(4)
	ok := abi.ContextCreate{ID: 2, Slots: slots, Ring: ring, Compl: compl, Shadow: shadow}
	with := func(f func(*abi.ContextCreate)) *abi.ContextCreate { c := ok; f(&c); return &c }
	for _, tc := range []struct {
		name string
		on   *testGuest
		p    abi.Payload
		want abi.Status
	}{
		{"id above the instance's", g, with(func(c *abi.ContextCreate) { c.ID = 3 }), abi.StatusInvalidArgument},
		{"id 0", g, with(func(c *abi.ContextCreate) { c.ID = 0 }), abi.StatusInvalidArgument},
		{"live id", g, with(func(c *abi.ContextCreate) { c.ID = 1 }), abi.StatusExists},
		{"ring outside guest RAM", g, with(func(c *abi.ContextCreate) { c.Ring = 1 << 40 }), abi.StatusBadAddress},
		{"ring overlaps completions", g, with(func(c *abi.ContextCreate) { c.Compl = c.Ring }), abi.StatusBadAddress},
		{"misaligned shadow", g, with(func(c *abi.ContextCreate) { c.Shadow = shadow + 2 }), abi.StatusInvalidArgument},
		{"slots not a power of two", g, with(func(c *abi.ContextCreate) { c.Slots = 3 }), abi.StatusInvalidArgument},
		{"create on a context's ring", c1, &ok, abi.StatusInvalidOpcode},
		{"destroy on a context's ring", c1, &abi.ContextDestroy{ID: 1}, abi.StatusInvalidOpcode},
		{"destroy of no context", g, &abi.ContextDestroy{ID: 2}, abi.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec := tc.on.run(ctxCmd(tc.p))[0]; rec.Status != tc.want {
				t.Errorf("status = %v, want %v", rec.Status, tc.want)
			}
		})
	}
	for _, id := range []uint32{0, 2, 3, 1 << 31} {
		if err := g.in.ContextKick(id); abi.StatusOf(err) != abi.StatusNotFound {
			t.Errorf("ContextKick(%d) = %v, want not found", id, err)
		}
	}
	// An overflowing tail is refused and the context goes on.
	g.put(c1.shadow, []byte{0xff, 0xff, 0, 0})
	if err := g.in.ContextKick(1); abi.StatusOf(err) != abi.StatusRingOverflow {
		t.Errorf("kick with tail 65535 = %v, want ring overflow", err)
	}
	c1.mustOK(c1.run(ctxCmd(&abi.Nop{}))...)
	if got := g.in.Contexts(); len(got) != 1 {
		t.Errorf("Contexts() = %+v, want context 1 alone", got)
	}
}

// TestContextMemory: contexts charge the instance's quota and their own
// limits, and give it back when destroyed or reset.
func TestContextMemory(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 1<<20)
	withContexts(g, 2, nil)
	c1, c2 := g.context(1, 256<<10), g.context(2, 0)
	create := func(x *testGuest, h uint32, n uint64) abi.Status {
		return x.run(ctxCmd(&abi.BufferCreate{Handle: h, Size: n}))[0].Status
	}
	if st := create(c1, 1, 512<<10); st != abi.StatusQuotaExceeded {
		t.Errorf("512 KiB in a context limited to 256 KiB = %v", st)
	}
	if st := create(c1, 1, 128<<10); st != abi.StatusOK {
		t.Errorf("128 KiB in context 1 = %v", st)
	}
	if st := create(c2, 1, 768<<10); st != abi.StatusOK {
		t.Errorf("768 KiB in context 2 = %v", st)
	}
	if st := create(g, 1, 512<<10); st != abi.StatusQuotaExceeded {
		t.Errorf("512 KiB in the default context with 896 KiB of 1 MiB held by contexts = %v", st)
	}
	if used := g.in.MemUsed(); used != 896<<10 {
		t.Errorf("instance MemUsed = %d, want %d", used, 896<<10)
	}
	g.mustOK(g.run(ctxCmd(&abi.ContextDestroy{ID: 2}))...)
	if used := g.in.MemUsed(); used != 128<<10 {
		t.Errorf("MemUsed after destroying context 2 = %d, want %d", used, 128<<10)
	}
	if st := create(g, 1, 512<<10); st != abi.StatusOK {
		t.Errorf("512 KiB in the default context after the destroy = %v", st)
	}
	// A reset destroys every context and frees everything.
	g.in.Reset()
	if err := g.in.ContextKick(1); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("kick after reset = %v, want not found", err)
	}
	g.put(complBase, make([]byte, slots*abi.ComplSize))
	g.tail = 0
	if err := g.in.EnableRing(RingConfig{Base: ringBase, ComplBase: complBase, Slots: slots}); err != nil {
		t.Fatal(err)
	}
	g.mustOK(g.run(ctxCmd(&abi.Nop{}))...)
	if used, n := g.in.MemUsed(), len(g.in.Contexts()); used != 0 || n != 0 {
		t.Errorf("after reset: MemUsed %d, %d contexts", used, n)
	}
	// The id is free again.
	c1 = g.context(1, 0)
	c1.mustOK(c1.run(ctxCmd(&abi.Nop{}))...)
}

// losingDevice is a device whose queues report a lost context once lose
// is set: a context's executing process that died.
type losingDevice struct {
	gpu.Device
	lose *atomic.Bool
}

func (l losingDevice) NewQueue() (gpu.Queue, error) {
	q, err := l.Device.NewQueue()
	return losingQueue{q, l.lose}, err
}
func (l losingDevice) Close() error { return nil } // the test's shared device outlives it

type losingQueue struct {
	gpu.Queue
	lose *atomic.Bool
}

func (q losingQueue) Alloc(n uint64) (gpu.Buffer, error) {
	if q.lose.Load() {
		return nil, fmt.Errorf("executor gone: %w", gpu.ErrContextLost)
	}
	return q.Queue.Alloc(n)
}

// TestContextLostAlone: a context whose device state is lost completes
// everything StatusDeviceLost; its sibling and the default context go on,
// and a new context in its place works.
func TestContextLostAlone(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	var lose [3]atomic.Bool
	withContexts(g, 2, func(id uint32) (gpu.Device, error) { return losingDevice{openGPU(t), &lose[id]}, nil })
	c1, c2 := g.context(1, 0), g.context(2, 0)
	lose[1].Store(true)
	recs := c1.run(ctxCmd(&abi.BufferCreate{Handle: 1, Size: 64}), ctxCmd(&abi.Nop{}))
	for _, r := range recs {
		if r.Status != abi.StatusDeviceLost {
			t.Errorf("context 1 command %v after its loss = %v, want device lost", r.Opcode, r.Status)
		}
	}
	vaddJob(t, c2, 512)
	vaddJob(t, g, 512)
	if got := g.in.Contexts(); !got[0].Lost || got[1].Lost {
		t.Errorf("Contexts() = %+v, want 1 lost and 2 not", got)
	}
	lose[1].Store(false)
	g.mustOK(g.run(ctxCmd(&abi.ContextDestroy{ID: 1}))...)
	c1 = g.context(1, 0)
	vaddJob(t, c1, 512)
}

// orderedSink records an extraction round as the ordered Inject calls a
// destination worker makes for it, Context records switching the target.
type orderedSink struct {
	ops      []func(ctx context.Context, dst *Instance, cur **Instance) error
	contexts []ContextState
}

func (s *orderedSink) add(f func(ctx context.Context, cur *Instance) error) error {
	s.ops = append(s.ops, func(ctx context.Context, _ *Instance, cur **Instance) error { return f(ctx, *cur) })
	return nil
}
func (s *orderedSink) Program(p ProgramState) error {
	return s.add(func(ctx context.Context, in *Instance) error { return in.InjectProgram(ctx, p) })
}
func (s *orderedSink) ProgramFree(h uint32) error {
	return s.add(func(ctx context.Context, in *Instance) error { return in.InjectProgramFree(ctx, h) })
}
func (s *orderedSink) Buffer(b BufferState) error {
	return s.add(func(ctx context.Context, in *Instance) error { return in.InjectBuffer(ctx, b) })
}
func (s *orderedSink) BufferData(h uint32, off uint64, data []byte) error {
	d := bytes.Clone(data)
	return s.add(func(ctx context.Context, in *Instance) error { return in.InjectBufferData(ctx, h, off, d) })
}
func (s *orderedSink) BufferFree(h uint32) error {
	return s.add(func(ctx context.Context, in *Instance) error { return in.InjectBufferFree(ctx, h) })
}
func (s *orderedSink) Ring(r RingState) error {
	return s.add(func(ctx context.Context, in *Instance) error { return in.InjectRing(ctx, r) })
}
func (s *orderedSink) Context(c ContextState) error {
	s.contexts = append(s.contexts, c)
	s.ops = append(s.ops, func(ctx context.Context, dst *Instance, cur **Instance) error {
		t, err := dst.InjectContext(ctx, c)
		*cur = t
		return err
	})
	return nil
}

func (s *orderedSink) replay(t *testing.T, dst *Instance) {
	t.Helper()
	cur := dst
	for i, op := range s.ops {
		if err := op(context.Background(), dst, &cur); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// TestContextsMigrate (issue 31): an instance's device contexts move
// with it. A pre-copy round sends both contexts; then the guest writes in
// context 1, destroys context 2 and publishes commands on context 1 that
// the frozen ring has not fetched; the final round sends that. On the
// destination context 1 holds its data and runs the waiting commands,
// context 2 is gone, and both rings go on.
func TestContextsMigrate(t *testing.T) {
	d, _ := newDevice(t)
	ctx := context.Background()
	g := newTestGuest(t, d, "vm0", 64<<20)
	withContexts(g, 4, nil)
	c1, c2 := g.context(1, 1<<20), g.context(2, 0)
	c1.mustOK(c1.run(ctxCmd(&abi.BufferCreate{Handle: 5, Size: 4096}), c1.upload(5, bytes.Repeat([]byte{1}, 4096)))...)
	c2.mustOK(c2.run(ctxCmd(&abi.BufferCreate{Handle: 5, Size: 4096}), c2.upload(5, bytes.Repeat([]byte{2}, 4096)))...)
	build, _ := c1.build(1, vaddSrc, 0)
	c1.mustOK(c1.run(build)...)

	r0 := &orderedSink{}
	if _, err := g.in.ExtractRound(ctx, r0, false); err != nil {
		t.Fatal(err)
	}
	if len(r0.contexts) != 3 || r0.contexts[0].ID != 1 || r0.contexts[0].MemLimit != 1<<20 || r0.contexts[1].ID != 2 || r0.contexts[2].ID != 0 {
		t.Fatalf("round 0 context records %+v, want 1, 2, then 0", r0.contexts)
	}
	c1.mustOK(c1.run(c1.upload(5, bytes.Repeat([]byte{3}, 4096)))...)
	g.mustOK(g.run(ctxCmd(&abi.ContextDestroy{ID: 2}))...)
	// Published on context 1, not fetched: the ring is frozen.
	if err := g.in.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c1.in.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	dl, read := c1.download(5, 4096)
	first := c1.submit(ctxCmd(&abi.Nop{}), dl)
	rf := &orderedSink{}
	if _, err := g.in.ExtractRound(ctx, rf, true); err != nil {
		t.Fatal(err)
	}
	if len(rf.contexts) != 3 || !rf.contexts[0].Destroyed || rf.contexts[0].ID != 2 || rf.contexts[1].ID != 1 {
		t.Fatalf("final round context records %+v, want 2 destroyed, 1, 0", rf.contexts)
	}

	// The destination, with guest RAM as the VM's migration leaves it.
	mem := &sliceMemory{ram: bytes.Clone(g.mem.ram)}
	bell := newBroadcast()
	dst, err := d.NewInstance(InstanceConfig{ID: "dst", Profile: "test", MemBytes: 64 << 20, Memory: mem, Contexts: 4,
		Notify: func(uint32) { bell.ring() }})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.PrepareInject(ctx); err != nil {
		t.Fatal(err)
	}
	r0.replay(t, dst)
	rf.replay(t, dst)
	if got := dst.Contexts(); len(got) != 1 || got[0].ID != 1 || got[0].MemLimit != 1<<20 {
		t.Fatalf("destination contexts %+v, want context 1 alone", got)
	}
	dst.Thaw()
	n1 := *c1
	n1.mem, n1.in, n1.parent, n1.bell = mem, dst.contexts[1], dst, bell
	n1.mustOK(n1.wait(first), n1.wait(first+1))
	c1.mem = mem
	if b := read(); !bytes.Equal(b, bytes.Repeat([]byte{3}, 4096)) {
		t.Errorf("context 1's buffer after the move starts %x, want 03s", b[:4])
	}
	// The moved program is there; the context computes on.
	n1.mustOK(n1.run(ctxCmd(&abi.ProgramFree{Handle: 1}))...)
	vaddJob(t, &n1, 512)
	if err := dst.ContextKick(2); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("kick of context 2 on the destination = %v, want not found", err)
	}
	nd := *g
	nd.mem, nd.in, nd.bell, nd.tail = mem, dst, bell, g.tail
	nd.mustOK(nd.run(ctxCmd(&abi.Nop{}))...)
}

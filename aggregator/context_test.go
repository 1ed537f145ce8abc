package aggregator

import (
	"bytes"
	"errors"
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
	g.in.maxContexts, g.in.openContext = n, open
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
	if n := g.in.Shared().Contexts.Load(); n != 2 {
		t.Errorf("Shared().Contexts = %d, want 2", n)
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

// TestContextsMoveRefused: an instance with live contexts cannot be
// extracted for migration (this version moves the default context only).
func TestContextsMoveRefused(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	withContexts(g, 1, nil)
	g.context(1, 0)
	if _, err := g.in.ExtractRound(t.Context(), nil, false); !errors.Is(err, ErrContexts) {
		t.Errorf("ExtractRound with a live context = %v, want ErrContexts", err)
	}
}

package aggregator

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/sched"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newDevice is the test device on its own scheduler (default policy).
func newDevice(t testing.TB) (*Device, *sched.Scheduler) {
	s := sched.New(sched.DefaultPolicy, nil)
	d := NewDevice(openGPU(t), s, nil)
	t.Cleanup(func() { d.Close(); s.Close() })
	return d, s
}

// newDeviceOn is newDevice on the physical device g.
func newDeviceOn(t testing.TB, g gpu.Device) *Device {
	s := sched.New(sched.DefaultPolicy, nil)
	d := NewDevice(g, s, nil)
	t.Cleanup(func() { d.Close(); s.Close(); g.Close() })
	return d
}

// sliceMemory is guest RAM as a byte slice starting at gpa 0. With
// views set it lends its bytes (GuestViews), as guestmem.Map does.
type sliceMemory struct {
	mu    sync.RWMutex
	ram   []byte
	views atomic.Bool
}

func (m *sliceMemory) View(gpa, n uint64, _ bool, f func([]byte) error) (bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.views.Load() || m.check(gpa, int(n)) != nil {
		return false, nil
	}
	return true, f(m.ram[gpa : gpa+n : gpa+n])
}

func (m *sliceMemory) check(gpa uint64, n int) error {
	if gpa > uint64(len(m.ram)) || uint64(len(m.ram))-gpa < uint64(n) {
		return abi.Errorf(abi.StatusBadAddress, "%#x+%d outside %d bytes", gpa, n, len(m.ram))
	}
	return nil
}

func (m *sliceMemory) ReadAt(p []byte, gpa uint64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.check(gpa, len(p)); err != nil {
		return err
	}
	copy(p, m.ram[gpa:])
	return nil
}

func (m *sliceMemory) WriteAt(p []byte, gpa uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(gpa, len(p)); err != nil {
		return err
	}
	copy(m.ram[gpa:], p)
	return nil
}

func (m *sliceMemory) Store64(gpa, v uint64) error {
	if gpa%8 != 0 {
		return abi.Errorf(abi.StatusBadAddress, "misaligned")
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return m.WriteAt(b[:], gpa)
}

func (m *sliceMemory) load64(gpa uint64) uint64 {
	var b [8]byte
	if err := m.ReadAt(b[:], gpa); err != nil {
		panic(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

var (
	devOnce sync.Once
	testDev gpu.Device
	devErr  error
)

// openGPU opens the real OpenCL device for the package's tests. A machine
// without an OpenCL platform fails the test: the tests are about real work.
func openGPU(t testing.TB) gpu.Device {
	t.Helper()
	devOnce.Do(func() {
		testDev, devErr = gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	})
	if devErr != nil {
		t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", devErr)
	}
	return testDev
}

// Guest layout in the test RAM.
const (
	ramSize   = 16 << 20
	ringBase  = 0x1000
	complBase = 0x2000
	slots     = 64
	fenceAddr = 0x3000
	heap      = 0x10000 // bump allocator for test data
)

// testGuest plays a guest driver against one Instance.
type testGuest struct {
	t     testing.TB
	mem   *sliceMemory
	in    *Instance
	tail  uint32
	next  *atomic.Uint64 // heap bump pointer, shared with the guest's contexts
	dones chan uint32
	// bell, if set, is closed and replaced at every completion of the
	// instance or its contexts (whose notices the instance's hook gets).
	bell *broadcast
	// The ring this guest plays on: the default one (rb 0: ringBase,
	// complBase), or device context ctx's (guest.context), rung by
	// writing shadow and kicking its parent.
	rb, cb, shadow uint64
	ctx            uint32
	parent         *Instance
	// hang bounds one wait; 0 means 60 s. It guards against hangs, it is
	// not a performance assertion.
	hang time.Duration
}

func newTestGuest(t testing.TB, d *Device, id string, quota uint64) *testGuest {
	t.Helper()
	next := new(atomic.Uint64)
	next.Store(heap)
	g := &testGuest{t: t, mem: &sliceMemory{ram: make([]byte, ramSize)}, next: next, dones: make(chan uint32, 1024),
		rb: ringBase, cb: complBase, bell: newBroadcast()}
	in, err := d.NewInstance(InstanceConfig{ID: id, Profile: "test", MemBytes: quota, Memory: g.mem,
		Notify: func(i uint32) {
			select {
			case g.dones <- i:
			default: // nobody counts them (a test with contexts)
			}
			g.bell.ring()
		}})
	if err != nil {
		t.Fatalf("NewInstance(%s) = %v", id, err)
	}
	t.Cleanup(func() {
		if err := in.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	g.in = in
	if err := in.EnableRing(RingConfig{Base: ringBase, ComplBase: complBase, Slots: slots}); err != nil {
		t.Fatalf("EnableRing = %v", err)
	}
	return g
}

// broadcast wakes every waiter at each ring.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcast() *broadcast { return &broadcast{ch: make(chan struct{})} }

// wait returns a channel closed at the next ring.
func (b *broadcast) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcast) ring() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}

// context makes device context id on g's default ring and returns a
// guest that plays on the context's ring (its own slots-slot ring page,
// completion page and shadow word, from the shared heap).
func (g *testGuest) context(id uint32, memLimit uint64) *testGuest {
	g.t.Helper()
	c := *g
	c.tail = 0
	c.rb, c.cb = g.alloc(slots*abi.CommandSize), g.alloc(slots*abi.ComplSize)
	c.shadow = g.alloc(4)
	c.ctx, c.parent = id, g.in
	g.mustOK(g.run(abi.NewCommand(&abi.ContextCreate{ID: id, Slots: slots, Ring: c.rb, Compl: c.cb, Shadow: c.shadow,
		MemLimit: memLimit}, 0, 0))...)
	g.in.ctxMu.Lock()
	c.in = g.in.contexts[id]
	g.in.ctxMu.Unlock()
	if c.in == nil {
		g.t.Fatalf("context %d is not live after it was made", id)
	}
	return &c
}

// alloc returns page-aligned guest RAM for n bytes.
func (g *testGuest) alloc(n int) uint64 {
	size := (uint64(n) + abi.PageSize - 1) &^ (abi.PageSize - 1)
	a := g.next.Add(size) - size
	if a+size > ramSize {
		g.t.Fatalf("test guest out of RAM")
	}
	return a
}

func (g *testGuest) put(gpa uint64, b []byte) {
	if err := g.mem.WriteAt(b, gpa); err != nil {
		g.t.Fatal(err)
	}
}

func (g *testGuest) get(gpa uint64, n int) []byte {
	b := make([]byte, n)
	if err := g.mem.ReadAt(b, gpa); err != nil {
		g.t.Fatal(err)
	}
	return b
}

// submit writes commands into the ring and rings the doorbell once.
func (g *testGuest) submit(cmds ...abi.Command) (first uint32) {
	g.t.Helper()
	first = g.tail
	for _, c := range cmds {
		var b [abi.CommandSize]byte
		c.Marshal(b[:])
		g.put(g.rb+uint64(g.tail%slots)*abi.CommandSize, b[:])
		g.tail++
	}
	if g.ctx != 0 {
		var t [4]byte
		binary.LittleEndian.PutUint32(t[:], g.tail)
		g.put(g.shadow, t[:])
		if err := g.parent.ContextKick(g.ctx); err != nil {
			g.t.Fatalf("ContextKick(%d) = %v", g.ctx, err)
		}
		return first
	}
	if err := g.in.Doorbell(g.tail); err != nil {
		g.t.Fatalf("Doorbell(%d) = %v", g.tail, err)
	}
	return first
}

// wait waits until command idx has completed and returns its record.
func (g *testGuest) wait(idx uint32) abi.Completion {
	g.t.Helper()
	hang := g.hang
	if hang == 0 {
		hang = 60 * time.Second
	}
	timeout := time.After(hang)
	for {
		rang := g.bell.wait()
		rec, _ := abi.UnmarshalCompletion(g.get(g.cb+uint64(idx%slots)*abi.ComplSize, abi.ComplSize))
		if rec.Seq == uint64(idx)+1 {
			return rec
		}
		select {
		case <-rang:
		case <-timeout:
			g.t.Fatalf("command %d did not complete", idx)
		}
	}
}

// run submits cmds and returns their completion records.
func (g *testGuest) run(cmds ...abi.Command) []abi.Completion {
	g.t.Helper()
	first := g.submit(cmds...)
	recs := make([]abi.Completion, len(cmds))
	for i := range cmds {
		recs[i] = g.wait(first + uint32(i))
	}
	return recs
}

// mustOK fails the test unless every record has StatusOK.
func (g *testGuest) mustOK(recs ...abi.Completion) {
	g.t.Helper()
	for _, r := range recs {
		if r.Status != abi.StatusOK {
			g.t.Fatalf("command %d (%v) status = %v, want ok", r.Seq-1, r.Opcode, r.Status)
		}
	}
}

// sg writes a scatter-gather table for data placed at scattered pages
// (every other page, so nothing is contiguous) and returns the table's
// address and entry count. The data pages are filled from b.
func (g *testGuest) sg(b []byte, n int) (table uint64, count uint32, pages []uint64) {
	npages := (n + abi.PageSize - 1) / abi.PageSize
	if npages > abi.PageSize/abi.SGEntrySize {
		g.t.Fatalf("sg helper: %d pages", npages)
	}
	table = g.alloc(abi.PageSize)
	for i := 0; i < npages; i++ {
		p := g.alloc(2 * abi.PageSize) // skip a page between entries
		pages = append(pages, p)
		l := min(abi.PageSize, n-i*abi.PageSize)
		if b != nil {
			g.put(p, b[i*abi.PageSize:i*abi.PageSize+l])
		}
		e := abi.SGEntry{Addr: p, Len: uint32(l)}
		var eb [abi.SGEntrySize]byte
		e.Marshal(eb[:])
		g.put(table+uint64(i)*abi.SGEntrySize, eb[:])
	}
	return table, uint32(npages), pages
}

func (g *testGuest) upload(h uint32, data []byte) abi.Command {
	table, count, _ := g.sg(data, len(data))
	return abi.NewCommand(&abi.Copy{ToDevice: true, Handle: h, SGCount: count, Length: uint64(len(data)), SGAddr: table}, 0, 0)
}

// download returns the command and a function that reads the result after it completed.
func (g *testGuest) download(h uint32, n int) (abi.Command, func() []byte) {
	table, count, pages := g.sg(nil, n)
	read := func() []byte {
		out := make([]byte, 0, n)
		for i, p := range pages {
			out = append(out, g.get(p, min(abi.PageSize, n-i*abi.PageSize))...)
		}
		return out
	}
	return abi.NewCommand(&abi.Copy{Handle: h, SGCount: count, Length: uint64(n), SGAddr: table}, 0, 0), read
}

func (g *testGuest) build(h uint32, src string, logLen uint32) (abi.Command, uint64) {
	table, count, _ := g.sg([]byte(src), len(src))
	logAddr := uint64(0)
	if logLen > 0 {
		logAddr = g.alloc(int(logLen))
	}
	return abi.NewCommand(&abi.ProgramBuild{Handle: h, SrcCount: count, SrcLen: uint64(len(src)), SrcSGAddr: table,
		LogLen: logLen, LogAddr: logAddr}, 0, 0), logAddr
}

func (g *testGuest) launch(prog uint32, d abi.LaunchDesc) abi.Command {
	b, err := d.Marshal()
	if err != nil {
		g.t.Fatal(err)
	}
	a := g.alloc(len(b))
	g.put(a, b)
	return abi.NewCommand(&abi.Launch{Program: prog, DescLen: uint32(len(b)), DescAddr: a}, 0, 0)
}

func floats(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func floatBytes(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// migratePending live-migrates g's instance to a new one on d in a single
// round (Freeze, cmds submitted behind the freeze, ExtractRound, the
// destination injected from the records and thawed on a copy of guest
// RAM), waits for cmds to complete there, and points g at the
// destination's RAM, where their results are.
func migratePending(t *testing.T, g *testGuest, d *Device, cmds ...abi.Command) {
	t.Helper()
	ctx := context.Background()
	if err := g.in.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	first := g.submit(cmds...)
	rec := newRecSink()
	if _, err := g.in.ExtractRound(ctx, rec, true); err != nil {
		t.Fatal(err)
	}
	mem := &sliceMemory{ram: bytes.Clone(g.mem.ram)}
	bell := newBroadcast()
	dst, err := d.NewInstance(InstanceConfig{ID: "dst", Profile: "test", MemBytes: 1 << 20, Memory: mem,
		Notify: func(uint32) { bell.ring() }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	if err := dst.PrepareInject(ctx); err != nil {
		t.Fatal(err)
	}
	rec.replay(t, dst)
	dst.Thaw()
	g2 := &testGuest{t: t, mem: mem, in: dst, tail: first + uint32(len(cmds)), bell: bell, rb: ringBase, cb: complBase}
	for i := range cmds {
		g2.mustOK(g2.wait(first + uint32(i)))
	}
	g.mem = mem
}

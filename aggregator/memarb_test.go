package aggregator

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/sched"
)

// ledgerArbiter is a device scheduler plus a memory arbiter whose answer
// the test sets: grant within a capacity, refuse, or relocate.
type ledgerArbiter struct {
	*sched.Scheduler
	mu       sync.Mutex
	capacity uint64
	held     map[string]uint64
	relocate bool // the next refusal is a relocation
	asked    int
}

func (a *ledgerArbiter) Reserve(_ context.Context, id string, n uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked++
	if sum := a.sum(); sum+n <= a.capacity {
		a.held[id] += n
		return nil
	}
	if a.relocate {
		a.relocate = false
		return fmt.Errorf("test: %w", ErrRelocate)
	}
	return fmt.Errorf("test: device full")
}

func (a *ledgerArbiter) Unreserve(id string, n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held[id] -= min(n, a.held[id])
}

func (a *ledgerArbiter) sum() (s uint64) {
	for _, v := range a.held {
		s += v
	}
	return s
}

func (a *ledgerArbiter) heldBy(id string) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held[id]
}

func newLedgerDevice(t *testing.T, capacity uint64) (*Device, *ledgerArbiter) {
	s := sched.New(sched.DefaultPolicy, nil)
	arb := &ledgerArbiter{Scheduler: s, capacity: capacity, held: map[string]uint64{}}
	d := NewDevice(openGPU(t), arb, nil)
	t.Cleanup(func() { d.Close(); s.Close() })
	return d, arb
}

// TestDeviceMemoryLedger: an allocation within the instance's quota but
// past what the device holds is refused with StatusOutOfResources; frees,
// failed allocations and a reset give the memory back.
func TestDeviceMemoryLedger(t *testing.T) {
	d, arb := newLedgerDevice(t, 8<<20)
	g := newTestGuest(t, d, "ledger", 64<<20) // advertises more than the device has
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 6 << 20}, 0, 0))...)
	rec := g.run(abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 4 << 20}, 0, 0))[0]
	if rec.Status != abi.StatusOutOfResources {
		t.Fatalf("allocation past the device: %v, want out of resources", rec.Status)
	}
	if g.in.MemUsed() != 6<<20 || arb.heldBy("ledger") != 6<<20 {
		t.Fatalf("after the refusal: quota use %d, ledger %d", g.in.MemUsed(), arb.heldBy("ledger"))
	}
	g.mustOK(g.run(abi.NewCommand(&abi.BufferFree{Handle: 1}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 4 << 20}, 0, 0))...)
	if arb.heldBy("ledger") != 4<<20 {
		t.Fatalf("ledger holds %d, want 4 MiB", arb.heldBy("ledger"))
	}
	g.in.Reset()
	reenable(t, g.in)
	if arb.heldBy("ledger") != 0 {
		t.Fatalf("after reset the ledger holds %d", arb.heldBy("ledger"))
	}
}

// reenable waits for a reset to be applied and enables the ring again.
func reenable(t *testing.T, in *Instance) {
	t.Helper()
	// A task runs after the worker applied the reset's free.
	if err := in.onWorker(context.Background(), func() {}); err != nil {
		t.Fatal(err)
	}
	if err := in.EnableRing(RingConfig{Base: ringBase, ComplBase: complBase, Slots: slots}); err != nil {
		t.Fatal(err)
	}
}

// TestRelocateLeavesCommandInRing: when the arbiter answers that the
// instance is being moved, the allocation is not completed: the ring
// freezes with the command unfetched, and it runs (and succeeds) after the
// thaw, behind it the commands published meanwhile.
func TestRelocateLeavesCommandInRing(t *testing.T) {
	d, arb := newLedgerDevice(t, 8<<20)
	g := newTestGuest(t, d, "moving", 64<<20)
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 6 << 20}, 0, 0))...)
	arb.mu.Lock()
	arb.relocate = true
	arb.mu.Unlock()
	idx := g.submit(abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 4 << 20}, 0, 0))
	// Freeze waits for the command in progress: after it, the ring must
	// have frozen itself with the command back in it.
	if err := g.in.Freeze(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.in.Done() != idx || g.in.Head() != idx || !g.in.Frozen() {
		t.Fatalf("after the deferral: head %d done %d frozen %v, want %d, %d, true", g.in.Head(), g.in.Done(), g.in.Frozen(), idx, idx)
	}
	next := g.submit(abi.NewCommand(&abi.Nop{}, 0, 0))
	// The move makes room (here: the test frees the device's other holder).
	arb.mu.Lock()
	arb.capacity = 16 << 20
	arb.mu.Unlock()
	g.in.Thaw()
	g.mustOK(g.wait(idx), g.wait(next))
	if g.in.MemUsed() != 10<<20 {
		t.Fatalf("quota use %d, want 10 MiB", g.in.MemUsed())
	}
}

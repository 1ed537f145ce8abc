package mdev

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/worker"
)

// patientProfile has budgets far beyond any test's wait: only a crash, a
// kill or preemption can end what its instances run.
var patientProfile = Profile{Name: "patient", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8,
	TurnTimeout: Duration(10 * time.Minute), BuildTimeout: Duration(10 * time.Minute)}

// TestWildPointerEndsWorkerAtOnce: a kernel that writes through a wild
// pointer ends its worker by the signal, not by the watchdog: with a
// kernel limit of ten minutes, the guest sees its device lost well within
// its two-minute wait, and the end is counted as a crash (crashCause).
func TestWildPointerEndsWorkerAtOnce(t *testing.T) {
	m := newManager(t, []Profile{patientProfile})
	inst := mustCreate(t, m, CreateRequest{Profile: patientProfile.Name})
	vm := attach(t, inst)
	d, err := driver.Open(vm, vm, driver.Options{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, _, err := d.Build(`__kernel void wild(__global int *o) { *(__global int *)0x10 = 1; o[0] = 2; }`, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CreateBuffer(256)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, make([]byte, 256)); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "wild", driver.Range1(1, 0), driver.BufferArg(b)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); !errors.Is(err, driver.ErrDeviceLost) {
		t.Fatalf("Finish after a wild write = %v, want ErrDeviceLost", err)
	}
	exits := m.Pool().Exits()
	if crash := crashCause(m); exits[crash] != 1 || exits[worker.CauseWatchdog] != 0 {
		t.Errorf("worker exits = %v, want one by %s and none by %s", exits, crash, worker.CauseWatchdog)
	}
}

// spinSource is a legitimate long kernel: one work item steps a linear
// congruential generator n times (a chain of dependent multiplies the
// compiler cannot shorten) and writes the result.
const spinSource = `__kernel void spin(__global ulong *o, ulong n) {
	ulong x = o[0];
	for (ulong i = 0; i < n; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	}
	o[0] = x;
}`

// spin is spinSource's result in Go.
func spin(x, n uint64) uint64 {
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// spinSteps makes spinSource run for seconds on a CPU device.
const spinSteps = 1_500_000_000

// TestLongKernelSharesTheDevice: a legitimate kernel that runs for seconds
// (many slices, one work item: it cannot be cut into launch slices) is
// preempted whenever another domain's guest waits, not killed: it
// completes with the right result, its worker is never ended, and the
// neighbour's suite runs complete while it runs. Before preemption the
// neighbour waited for the whole kernel (no run completed meanwhile) or,
// past the old 10 s turn budget, the watchdog ended the kernel's worker.
func TestLongKernelSharesTheDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a kernel of seconds")
	}
	m := newManager(t, []Profile{patientProfile})
	long := mustCreate(t, m, CreateRequest{Profile: patientProfile.Name})
	nb := mustCreate(t, m, CreateRequest{Profile: patientProfile.Name})
	g := newGoodGuest(t, nb)
	if !g.once() { // its programs built: later runs are device work
		t.Fatalf("neighbour's first run: %v", errors.Join(g.errs...))
	}

	vm := attach(t, long)
	d, err := driver.Open(vm, vm, driver.Options{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, _, err := d.Build(spinSource, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CreateBuffer(8)
	if err != nil {
		t.Fatal(err)
	}
	const seed = 12345
	if err := d.Write(b, 0, binary.LittleEndian.AppendUint64(nil, seed)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}

	// The neighbour computes all along; runs counts those that passed
	// and ended while the long kernel was in flight.
	var (
		inFlight atomic.Bool
		during   atomic.Int64
		wg       sync.WaitGroup
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			started := inFlight.Load()
			if !g.once() {
				return
			}
			if started && inFlight.Load() {
				during.Add(1)
			}
		}
	}()

	inFlight.Store(true)
	if err := d.Launch(p, "spin", driver.Range1(1, 0), driver.BufferArg(b), driver.Uint64Arg(spinSteps)); err != nil {
		t.Fatal(err)
	}
	err = d.Finish()
	inFlight.Store(false)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("Finish of the long kernel = %v, want nil (exits %v)", err, m.Pool().Exits())
	}
	got := make([]byte, 8)
	if err := d.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	if v, want := binary.LittleEndian.Uint64(got), spin(seed, spinSteps); v != want {
		t.Errorf("long kernel's result = %#x, want %#x", v, want)
	}
	if n := during.Load(); n == 0 {
		t.Errorf("the neighbour completed %d suite runs while the long kernel ran, want some", n)
	}
	g.check(t)
	if exits := m.Pool().Exits(); len(exits) != 0 {
		t.Errorf("worker exits = %v, want none", exits)
	}
	if st, _ := long.Error(); st != abi.StatusOK || long.Lost() {
		t.Errorf("long instance: error %v, lost %v", st, long.Lost())
	}
	t.Logf("neighbour: %d suite runs during the long kernel, the slowest %v; long instance: %+v",
		during.Load(), g.worst, m.Pool().Sched(long.Device()).Client(long.UUID()))
}

package mdev

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
)

// TestPolledDoorbellsNeedNoWakeups (issue 42) is the mechanism test of
// poll-then-block across the process boundaries, on vgpud's default
// configuration (sandboxed worker, kernels in an executor): while the
// worker's ring loop polls its instance page, a guest that sends one
// command at a time and waits for each (a write, then a read back) rings
// doorbells the main process publishes without signalling the worker's
// eventfd (a cross-process wake-up each), and the commands run under
// renewed device turns rather than a request and a grant each. The
// window is the longest there is, so that a loaded machine's gaps between
// commands stay inside it.
func TestPolledDoorbellsNeedNoWakeups(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}, PollWindow: aggregator.MaxPollWindow})
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	// The guest rings every doorbell (no poll word): what is measured is
	// the main process's side (TestPollingWorkerNeedsNoDoorbells the
	// guest's).
	vm := attach(t, inst)
	d, err := driver.Open(vm, vm, driver.Options{NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	b, err := d.CreateBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	sh := inst.be.Shared()
	signals, polled, bells := sh.Signals.Load(), sh.Polled.Load(), sh.Stats.Doorbells.Load()
	cmds, turns, renewals := sh.Stats.Commands.Load(), inst.Sched().Turns, sh.Renewals.Load()
	const n = 20
	writeReadRounds(t, d, b, n)
	rang := sh.Stats.Doorbells.Load() - bells
	ran := sh.Stats.Commands.Load() - cmds
	if rang < n {
		t.Fatalf("%d doorbells for %d round trips", rang, n)
	}
	if got := sh.Signals.Load() - signals; got != 0 {
		t.Errorf("%d of %d doorbells signalled the worker while it polled, want none", got, rang)
	}
	if got := sh.Polled.Load() - polled; got != rang {
		t.Errorf("%d of %d doorbells published without a signal, want all", got, rang)
	}
	if got := inst.Sched().Turns - turns; got >= ran {
		t.Errorf("%d commands took %d device turns: none ran under a renewed turn", ran, got)
	}
	if sh.Renewals.Load() == renewals {
		t.Error("no kept turn was renewed")
	}
}

// writeReadRounds writes 64 bytes to b and reads them back, n times,
// each command waited for before the next.
func writeReadRounds(t *testing.T, d *driver.Device, b driver.Buffer, n int) {
	t.Helper()
	for k := range n {
		want := bytes.Repeat([]byte{byte(k + 1)}, 64)
		if err := d.Write(b, 0, want); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 64)
		if err := d.Read(b, 0, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: read back %x, want %x", k, got[:8], want[:8])
		}
	}
}

// TestPollingWorkerNeedsNoDoorbells (issue 42, ABI 1.6) is the mechanism
// test of notification suppression: while the worker's ring loop polls,
// it says so in the guest's poll word and reads the guest's tail shadow,
// so a guest that sends one command at a time and waits for each rings
// no doorbell at all (no trapped access, no wake-up of the main
// process), and every command still runs, in order. A guest that opts
// out rings each time. Nothing is timed; the window is the longest there
// is, so that a loaded machine's gaps between commands stay inside it.
func TestPollingWorkerNeedsNoDoorbells(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}, PollWindow: aggregator.MaxPollWindow})
	for _, tc := range []struct {
		notify, context bool
	}{{true, false}, {false, false}, {true, true}} {
		notify := tc.notify
		inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
		vm := attach(t, inst)
		d, err := driver.Open(vm, vm, driver.Options{NoNotify: !notify})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if tc.context {
			// A device context's ring, its poll word given with its
			// context-create.
			c, err := d.OpenContext(driver.ContextOptions{ID: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			d = c
		}
		b, err := d.CreateBuffer(64)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Finish(); err != nil {
			t.Fatal(err)
		}
		sh := inst.be.Shared()
		st0, bells, tails := d.Stats(), sh.Stats.Doorbells.Load(), sh.ShadowTails.Load()
		const n = 20
		writeReadRounds(t, d, b, n)
		st := d.Stats()
		rung, skipped := st.Doorbells-st0.Doorbells, st.Suppressed-st0.Suppressed
		seen := sh.ShadowTails.Load() - tails
		if !notify {
			if skipped != 0 || rung < n {
				t.Errorf("without a poll word: %d doorbells rung, %d skipped for %d round trips", rung, skipped, n)
			}
			continue
		}
		// The first doorbell may find the loop not yet polling.
		if skipped < n || rung > 1 {
			t.Errorf("%+v: %d doorbells rung, %d skipped for %d round trips while the worker polled: want none rung", tc, rung, skipped, n)
		}
		if got := sh.Stats.Doorbells.Load() - bells; !tc.context && got != rung+st.Rekicks-st0.Rekicks {
			t.Errorf("%+v: the device took %d doorbells, the guest rang %d and kicked again %d times", tc, got, rung, st.Rekicks-st0.Rekicks)
		}
		// A skipped doorbell's tail reaches the worker in the shadow,
		// or, when the guest's wait for it slept (a loaded machine),
		// with the kick that wait made (Rekicks).
		if rekicks := st.Rekicks - st0.Rekicks; seen+rekicks < skipped {
			t.Errorf("%+v: the worker found %d tails in the shadow and the guest kicked again %d times, for %d skipped doorbells", tc, seen, rekicks, skipped)
		}
	}
}

// TestFirstTurnOnAFreeDeviceNeedsNoRequest (issue 42) is the mechanism
// test of parked turns (sched/offer.go) on vgpud's default configuration:
// when an instance alone on its device has gone idle (its worker blocked,
// its turn given back), the scheduler parks the free device in its
// instance page, and the first command of its next doorbell takes that
// turn without a request and a grant on the worker's socket. Nothing is
// timed: each round waits for the offer to be parked, then sends one
// command and waits for it. Without parking no round takes one.
func TestFirstTurnOnAFreeDeviceNeedsNoRequest(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}})
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	d := openDriver(t, attach(t, inst))
	bump := newBump(t, d)
	sh := inst.be.Shared()
	before := inst.Sched()
	const n = 10
	// The first turn is asked for: a turn is parked only at the instance
	// whose turn ended last.
	for k := range n + 1 {
		if k > 0 {
			waitParked(t, sh)
		}
		// A launch needs a device turn (a small copy may not: exec.go move).
		bump.launch()
		got := make([]byte, 64)
		if err := d.Read(bump.buf, 0, got); err != nil {
			t.Fatal(err)
		}
		if v := binary.LittleEndian.Uint32(got[60:]); v != uint32(k+1) {
			t.Fatalf("round %d: the kernel's result is %d, want %d", k, v, k+1)
		}
	}
	// On a loaded machine a round's command may still find no offer (the
	// previous round's kept turn and its asynchronous release race with
	// it) and ask: the mechanism is there when most rounds took it.
	after := inst.Sched()
	if got := after.Taken - before.Taken; got < n/2 {
		t.Errorf("%d of %d first commands after idleness took the parked turn (%d turns requested)",
			got, n, (after.Turns-after.Taken)-(before.Turns-before.Taken))
	}

	// Parked turns off (the baseline): every turn is requested.
	m2 := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}, RequestEveryTurn: true})
	inst2 := mustCreate(t, m2, CreateRequest{Profile: "vgpu-small"})
	d2 := openDriver(t, attach(t, inst2))
	newBump(t, d2).launch()
	if err := d2.Finish(); err != nil {
		t.Fatal(err)
	}
	if c := inst2.Sched(); c.Offers != 0 || c.Taken != 0 || c.Turns == 0 {
		t.Errorf("with RequestEveryTurn: %d offers, %d taken of %d turns; want none of some", c.Offers, c.Taken, c.Turns)
	}
}

// bumper launches a kernel that adds 1 to each of the 16 words of buf,
// a zeroed 64-byte buffer of its driver.
type bumper struct {
	t   *testing.T
	d   *driver.Device
	p   driver.Program
	buf driver.Buffer
}

func newBump(t *testing.T, d *driver.Device) *bumper {
	t.Helper()
	p, log, err := d.Build(`__kernel void bump(__global uint *a) { a[get_global_id(0)] += 1; }`, "")
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log)
	}
	b, err := d.CreateBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	return &bumper{t: t, d: d, p: p, buf: b}
}

// launch enqueues one launch of the kernel.
func (b *bumper) launch() {
	b.t.Helper()
	if err := b.d.Launch(b.p, "bump", driver.Range1(16, 0), driver.BufferArg(b.buf)); err != nil {
		b.t.Fatal(err)
	}
}

// waitParked waits until the scheduler has parked a free turn in sh.
func waitParked(t *testing.T, sh *aggregator.Shared) {
	t.Helper()
	hang := time.Now().Add(time.Minute)
	for !sh.TurnParked() {
		if time.Now().After(hang) {
			t.Fatalf("no turn parked at an idle instance alone on its device a minute on (offer word %#x)", sh.TurnOffer.Load())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestIdleWorkerSleeps (issue 42): once its poll window has passed, an
// idle instance's worker and executor use no CPU: the polling is bounded
// and ends in a blocking wait (measured from /proc, over a second).
func TestIdleWorkerSleeps(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}})
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	d := openDriver(t, attach(t, inst))
	b, err := d.CreateBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := d.Write(b, 0, make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
		if err := d.Read(b, 0, make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	sh := inst.be.Shared()
	if sh.PollWindowNow() <= 0 || sh.PollNanos.Load() == 0 {
		t.Fatalf("poll window %v, %d ns polled: the default configuration does not poll", sh.PollWindowNow(), sh.PollNanos.Load())
	}
	hang := time.Now().Add(time.Minute)
	for sh.Polling() {
		if time.Now().After(hang) {
			t.Fatal("the worker still polls a minute after the last command")
		}
		time.Sleep(time.Millisecond)
	}
	worker := inst.WorkerPID()
	pids := append([]int{worker}, addrspacetest.Children(worker)...)
	// A worker whose kernels run in an executor (a CPU device's) has it
	// as a child; on a GPU the worker runs them itself.
	if m.Pool().KernelsInExecutor(0) && len(pids) < 2 {
		t.Fatalf("worker %d has no executor", worker)
	}
	before := cpuTicks(t, pids)
	time.Sleep(time.Second) // the interval measured, not a wait for something
	used := cpuTicks(t, pids) - before
	// A poller that never blocked would use ~100 ticks a second (one
	// CPU); a few are the Go runtime's own housekeeping.
	if used > 10 {
		t.Errorf("an idle worker and its children (%v) used %d clock ticks in a second after the poll window", pids, used)
	}
}

// cpuTicks sums the user and system clock ticks of pids (/proc/PID/stat).
func cpuTicks(t *testing.T, pids []int) int {
	t.Helper()
	total := 0
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		// After the command: state is field 3, utime 14, stime 15.
		for _, i := range []int{14 - 3, 15 - 3} {
			v, err := strconv.Atoi(f[i])
			if err != nil {
				t.Fatalf("/proc/%d/stat: %v", pid, err)
			}
			total += v
		}
	}
	return total
}

// TestLyingPollUntilDelaysOnlyItsOwnDoorbells (issue 42, hostile values
// in the shared page): a worker that says it polls (PollUntil far ahead)
// and does not makes the main process publish its instance's doorbells
// without a signal, so that instance's commands wait, and nothing else
// does: another domain's instance runs on, and the commands waiting are
// not lost: the next doorbell the main process signals (the guest's
// next, here one rung on its behalf) runs them.
func TestLyingPollUntilDelaysOnlyItsOwnDoorbells(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}})
	liar := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	good := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	dl, dg := openDriver(t, attach(t, liar)), openDriver(t, attach(t, good))
	bl, err := dl.CreateBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := dl.Finish(); err != nil {
		t.Fatal(err)
	}
	sh := liar.be.Shared()
	// The worker stops polling (as a lying one would), then the lie: once
	// its loop has cleared PollUntil it is blocked and writes it no more
	// (a PollUntil merely past the clock may still be cleared after the
	// lie is written).
	sh.PollWindow.Store(0)
	hang := time.Now().Add(time.Minute)
	for sh.PollUntil.Load() != 0 {
		if time.Now().After(hang) {
			t.Fatal("the worker still polls a minute after its window went to 0")
		}
		time.Sleep(time.Millisecond)
	}
	sh.PollUntil.Store(math.MaxInt64)
	polled, done := sh.Polled.Load(), sh.Done.Load()
	want := bytes.Repeat([]byte{0x5a}, 64)
	wrote := make(chan error, 1)
	go func() {
		if err := dl.Write(bl, 0, want); err != nil {
			wrote <- err
			return
		}
		wrote <- dl.Finish()
	}()
	for sh.Polled.Load() == polled {
		if time.Now().After(hang) {
			t.Fatal("the liar's doorbell was never published")
		}
		time.Sleep(time.Millisecond)
	}
	// The other domain's instance is not held up.
	bg, err := dg.CreateBuffer(64)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		in := bytes.Repeat([]byte{byte(k)}, 64)
		if err := dg.Write(bg, 0, in); err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 64)
		if err := dg.Read(bg, 0, out); err != nil || !bytes.Equal(in, out) {
			t.Fatalf("the other instance, round %d: %v, equal %v", k, err, bytes.Equal(in, out))
		}
	}
	select {
	case err := <-wrote:
		t.Fatalf("the liar's write completed (%v) with its doorbell unsignalled", err)
	default:
	}
	if sh.Done.Load() != done {
		t.Fatal("the liar's commands ran with their doorbell unsignalled")
	}
	// The lie ends; the next signalled doorbell runs what waited.
	sh.PollUntil.Store(0)
	if err := liar.be.Doorbell(sh.Tail.Load()); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the liar's write after the lie: %v", err)
	}
	got := make([]byte, 64)
	if err := dl.Read(bl, 0, got); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the liar's buffer after the lie: %v, %x", err, got[:8])
	}
}

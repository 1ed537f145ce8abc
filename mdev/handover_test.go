package mdev

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/mdev/mpqemu"
)

// envOldProcess makes the test binary play the old vgpud of
// TestHandedOverShutdownTouchesNothing in socket directory $value.
const envOldProcess = "VGPUD_TEST_HANDED_OVER_DIR"

// TestHandedOverShutdownTouchesNothing: once an old process handed its
// manager over (an upgrade in place committed), nothing of its shutdown
// (Drain, Destroy, Close: the instances' close, Pool.retire) unlinks a
// socket or stops a worker the new process now serves (issue 27: an old
// vgpud's Close stopped the worker and unlinked the sockets). The old
// process is a child running this test; it checks its worker after its
// shutdown, this test its sockets after its exit.
func TestHandedOverShutdownTouchesNothing(t *testing.T) {
	if dir := os.Getenv(envOldProcess); dir != "" {
		oldProcess(dir)
		return
	}
	// The worker outlives the old process and is re-parented to this one,
	// which ends and reaps it.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandedOverShutdownTouchesNothing$", "-test.count=1")
	cmd.Env = append(os.Environ(), envOldProcess+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The old process's shutdown used to hang (waiting on what it had
	// paused): bound it generously.
	var hung atomic.Bool
	stop := time.AfterFunc(2*time.Minute, func() {
		hung.Store(true)
		cmd.Process.Kill()
	})
	defer stop.Stop()
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the old process: %v (its shutdown hung: %v)\n%s", err, hung.Load(), strings.Join(lines, "\n"))
	}
	var pid int
	var socks []string
	var before []uint64
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) == 6 && f[0] == "before":
			pid = atoi(f[1])
			socks = f[2:4]
			before = []uint64{uint64(atoi(f[4])), uint64(atoi(f[5]))}
		case len(f) > 0 && f[0] == "error":
			t.Errorf("the old process: %s", l)
		}
	}
	if pid == 0 {
		t.Fatalf("the old process said no worker pid:\n%s", strings.Join(lines, "\n"))
	}
	// With no new process holding its socket, the worker ended with the
	// old process: reap it.
	defer func() {
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}()
	for i, p := range socks {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || st.Ino != before[i] {
			t.Errorf("socket %s after the old process's shutdown and exit: inode %d, %v; want the same file (inode %d)", p, st.Ino, err, before[i])
		}
	}
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// oldProcess plays an old vgpud in an upgrade: it makes an instance,
// pauses, exports and hands the manager over, then runs its whole
// shutdown and exits as vgpud does (os.Exit, no cleanup). It prints
// "before PID SOCK AGENTSOCK INO INO" and an "error ..." line per
// failed check.
func oldProcess(dir string) {
	fail := func(format string, args ...any) { fmt.Printf("error "+format+"\n", args...) }
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		fail("gpu.Open: %v", err)
		os.Exit(0)
	}
	m, err := NewManager(Config{Devices: []gpu.Device{d}, SocketDir: dir, Transport: mpqemu.Transport{}})
	if err != nil {
		fail("NewManager: %v", err)
		os.Exit(0)
	}
	inst, err := m.Create(CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		fail("Create: %v", err)
		os.Exit(0)
	}
	id := inst.UUID()
	var ino [2]uint64
	for i, p := range []string{inst.Socket(), inst.AgentSocket()} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			fail("%v", err)
		}
		ino[i] = st.Ino
	}
	worker := m.Pool().WorkerPID(id)
	fmt.Printf("before %d %s %s %d %d\n", worker, inst.Socket(), inst.AgentSocket(), ino[0], ino[1])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Pause(ctx); err != nil {
		fail("Pause: %v", err)
	}
	tab := handover.NewTable(nil)
	if _, _, _, err := m.Export(tab); err != nil {
		fail("Export: %v", err)
	}
	tab.Close()
	m.HandOver()
	if rep := m.Drain(ctx, time.Second); rep.Instance != 0 {
		fail("Drain after HandOver = %+v, want no instance", rep)
	}
	if err := m.Destroy(id); !errors.Is(err, ErrNotFound) {
		fail("Destroy(%s) after HandOver = %v, want %v", id, err, ErrNotFound)
	}
	if err := m.Close(); !errors.Is(err, ErrHandedOver) {
		fail("Close() after HandOver = %v, want %v", err, ErrHandedOver)
	}
	if _, err := m.Create(CreateRequest{Profile: "vgpu-small"}); !errors.Is(err, ErrManagerClosed) {
		fail("Create after HandOver = %v, want %v", err, ErrManagerClosed)
	}
	// The worker was not stopped. (It ends when its socket closes in
	// every process: here, with this one, since no new process took it.)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", worker)); err != nil || strings.Contains(string(b), ") Z ") {
		fail("worker %d after the shutdown: %q, %v; want it running", worker, b, err)
	}
	os.Exit(0)
}

// TestHandoverRollBack: an old process whose upgrade rolled back after
// the commit (the new process served on probation and died, issue 40
// (8)) serves again with what the new process changed and left outside
// itself: the register file latches the tail and tail shadow the guest
// wrote through the new process (published in the instance page), a
// completion the new process drained from the notify eventfd is
// signalled again (INTx), and the paused connection, worker and ring
// serve again: the guest reads the registers and computes.
func TestHandoverRollBack(t *testing.T) {
	m := newManager(t, []Profile{{Name: "p", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 2}})
	inst := mustCreate(t, m, CreateRequest{Profile: "p"})
	vm := attach(t, inst)
	d := openDriver(t, vm)
	vm.Write32(abi.RegIntEnable, abi.IntCompletion)
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	// The completion's interrupt came (the notice relay may trail the
	// completion record the guest saw), then the guest acknowledges it
	// and no later notice raises it again: the line is low.
	if _, err := vm.WaitIRQ(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for quiet := 0; quiet < 10; quiet++ {
		if vm.Read32(abi.RegIntStatus)&abi.IntCompletion != 0 {
			vm.Write32(abi.RegIntStatus, abi.IntCompletion)
			quiet = 0
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := vm.IRQCount(); err != nil { // consumed (the counter restarts at 0)
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	cp := m.Checkpoint()
	// The new process, on probation: the guest rang the doorbell and
	// kicked with a tail shadow (the register file published both in the
	// instance page) and a command completed (it drained the eventfd).
	sh := inst.be.Shared()
	tail, done := sh.Tail.Load(), sh.Done.Load()
	sh.Tail.Store(tail + 3)
	sh.Shadow.Store(0x5000)
	sh.Done.Store(done + 1)
	rep := m.RollBack(cp)
	if rep.Instances != 1 || rep.Tails != 1 || rep.Woken != 1 {
		t.Errorf("RollBack = %+v, want 1 instance, 1 tail moved, 1 woken", rep)
	}
	// Through the paused connection, served again.
	if got := vm.Read32(abi.RegRingTail); got != tail+3 {
		t.Errorf("RegRingTail after the rollback = %d, want %d (the instance page's)", got, tail+3)
	}
	if lo := vm.Read32(abi.RegTailShadowLo); lo != 0x5000 {
		t.Errorf("RegTailShadowLo after the rollback = %#x, want 0x5000", lo)
	}
	if got := vm.Read32(abi.RegIntStatus); got&abi.IntCompletion == 0 {
		t.Errorf("RegIntStatus after the rollback = %#x, want the completion signalled again", got)
	}
	if n, err := vm.WaitIRQ(10 * time.Second); err != nil || n == 0 {
		t.Errorf("interrupts after the rollback = %d, %v; want the completion's", n, err)
	}
	// The guest computes again (the worker's counters as they were: the
	// completion above was the test's).
	sh.Done.Store(done)
	sh.Tail.Store(tail)
	vm.Write32(abi.RegIntStatus, abi.IntCompletion)
	if err := d.Finish(); err != nil {
		t.Fatalf("a command after the rollback: %v", err)
	}
	// Not paused any more: the manager takes new work.
	if _, err := m.Create(CreateRequest{Profile: "p"}); err != nil {
		t.Errorf("Create after the rollback = %v", err)
	}
}

package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// TestGPUAcrossUpgradeAndCrash: a guest runs a long job; vgpud
// is upgraded in place mid-job (vgpuctl upgrade: a new process takes
// every socket, connection and worker over), and the job goes on with no
// error and no loss. Then vgpud is killed with SIGKILL and started again
// on the same run directory. The instance
// comes back from the state file, vgpud re-plugs the running VM's vGPU
// over QMP (no VM restart), the guest program is told its device state
// was lost, says exactly what it lost, and does its job again on the
// fresh device with a correct result.
func TestGPUAcrossUpgradeAndCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	env := migrationSetup(t)
	// A short probation (docs/upgrade.md): the upgrade's answer comes
	// once it passed, and the job must still run then.
	a := runDaemon(t, env, "pthread", t.TempDir(), "-upgrade-probation", "200ms")
	id := create(t, a, "vgpu-small")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const steps = 300
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,300,-pace,15ms,-progress,25,-recover,1"
	vm := startVM(ctx, t, env, a.InstanceBase(id), "", app)
	console := func() string { return strings.Join(vm.Lines(), "\n") }
	if _, err := vm.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, console())
	}
	oldPID := a.PID()
	workerBefore := workerPID(ctx, t, a, id)
	// A new binary that cannot take over: the old vgpud goes on serving.
	if out, err := a.Ctl(ctx, "upgrade", "-binary", "/bin/false"); err == nil || !strings.Contains(out, "goes on serving") {
		t.Errorf("upgrade to /bin/false = %v\n%s", err, out)
	}
	if pid := a.PID(); pid != oldPID {
		t.Fatalf("after a failed upgrade the lock names pid %d, want %d", pid, oldPID)
	}
	out, err := a.Ctl(ctx, "upgrade")
	if err != nil {
		t.Fatalf("vgpuctl upgrade: %v\n%s\n%s", err, out, a.Logs())
	}
	t.Logf("%s", strings.TrimSpace(out))
	if newPID := a.PID(); newPID == oldPID || newPID == 0 {
		t.Fatalf("the run directory's lock names pid %d after the upgrade, %d before", newPID, oldPID)
	}
	if _, err := vm.WaitLine(ctx, "ITERATE step 125/"); err != nil {
		t.Fatalf("the job did not go on after the upgrade: %v\n%s\n%s", err, console(), a.Logs())
	}
	for _, l := range vm.Lines() {
		if strings.Contains(l, "ITERATE LOST") || strings.Contains(l, "ITERATE FAIL") {
			t.Fatalf("the guest saw an error across the upgrade: %q\n%s", l, console())
		}
	}
	if st, err := a.Ctl(ctx, "show", id); err != nil || !strings.Contains(st, `"attached": true`) {
		t.Errorf("after the upgrade vgpuctl show %s = %v\n%s", id, err, st)
	}
	// The mechanism: the device state was handed over, not rebuilt: the
	// same worker process serves the instance, and the job never started
	// again.
	if after := workerPID(ctx, t, a, id); after != workerBefore || after == 0 {
		t.Errorf("worker pid %d after the upgrade, %d before: the device state was not handed over", after, workerBefore)
	}
	if n := strings.Count(console(), "ITERATE start"); n != 1 {
		t.Errorf("the job started %d times across the upgrade, want once", n)
	}
	b, lost := killAndRecover(ctx, t, env, a, vm, steps)
	if !strings.Contains(lost, "commands in flight were lost") {
		t.Errorf("the loss report %q does not say what was lost", lost)
	}
	for _, l := range strings.Split(b.Logs(), "\n") {
		if strings.Contains(l, "reattached the VM's vGPU") {
			t.Logf("%s", l)
			return
		}
	}
	t.Errorf("the restarted vgpud did not log the reattach:\n%s", b.Logs())
}

// killAndRecover kills vgpud a and starts another on its run directory
// (with flags; stopped at the end of the test), then waits for the
// guest's job on vm to report the loss of its device state (the line it
// returns), reopen the re-plugged device and finish its steps with the
// CPU's result, and the guest to exit 0.
func killAndRecover(ctx context.Context, t *testing.T, env *migratetest.Env, a *daemon, vm *qemuvm.VM, steps int, flags ...string) (*daemon, string) {
	t.Helper()
	console := func() string { return strings.Join(vm.Lines(), "\n") }
	a.Kill()
	b, err := migratetest.StartDaemonFlags(ctx, env.Bin, a.RunDir, "pthread", env.TLSDir, flags, "POCL_DEVICES=pthread basic")
	if err != nil {
		t.Fatalf("restart on the same run directory: %v", err)
	}
	t.Cleanup(func() {
		b.Stop()
		if t.Failed() {
			t.Logf("restarted vgpud log:\n%s", b.Logs())
		}
	})
	lost, err := vm.WaitLine(ctx, "ITERATE LOST")
	if err != nil {
		t.Fatalf("the guest was not told its device state was lost: %v\n%s", err, console())
	}
	keeperEndedInOrder(ctx, t, a)
	if _, err := vm.WaitLine(ctx, "ITERATE RECOVERED"); err != nil {
		t.Fatalf("the guest did not reopen the re-plugged device: %v\n%s", err, console())
	}
	waitResult(ctx, t, vm, steps)
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, console())
	}
	return b, lost
}

// keeperEndedInOrder waits until the killed daemon d's connection keeper
// (package mdev/keeper) says it ended the VM's connection in order: shut
// for writing, drained, closed with nothing unread, so that the VMM read
// an end of file rather than a reset (which QEMU 11.1.3's vfio-user
// client aborts on). Its log shares d's log file.
func keeperEndedInOrder(ctx context.Context, t *testing.T, d *daemon) {
	t.Helper()
	parts := []string{`"msg":"connection ended in order"`, `"component":"connection-keeper"`}
	for {
		if line, ok := logLine(d.Logs(), parts...); ok {
			t.Logf("the killed vgpud's connection keeper: %s", line)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the killed vgpud's connection keeper never logged %s:\n%s", parts, d.Logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// showInstance decodes vgpuctl show's JSON for instance id into v.
func showInstance(ctx context.Context, t *testing.T, d *daemon, id string, v any) {
	t.Helper()
	out, err := d.Ctl(ctx, "show", id)
	if err != nil {
		t.Fatalf("vgpuctl show %s: %v\n%s", id, err, out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("vgpuctl show %s: %v\n%s", id, err, out)
	}
}

// workerPID is the worker process serving instance id (vgpuctl show).
func workerPID(ctx context.Context, t *testing.T, d *daemon, id string) int {
	t.Helper()
	var st struct {
		WorkerPID int `json:"worker_pid"`
	}
	showInstance(ctx, t, d, id, &st)
	return st.WorkerPID
}

// liveContexts returns the device contexts vgpuctl show counts live.
func liveContexts(ctx context.Context, t *testing.T, d *daemon, id string) uint32 {
	t.Helper()
	var st struct {
		Contexts struct {
			Live uint32 `json:"live"`
		} `json:"contexts"`
	}
	showInstance(ctx, t, d, id, &st)
	return st.Contexts.Live
}

// TestUpgradesInARowUnderLoad: 20 upgrades in place in a row while a
// guest computes and busy processes load every CPU (issue 27: an old
// vgpud whose shutdown raced its exit stopped the worker and unlinked
// the sockets it had handed over, and hung). The job runs on a device
// context (issue 31). After each upgrade the old process has exited with
// status 0, the instance's QEMU and agent sockets are the same files, the
// same worker serves the instance, the new vgpud sees the job's context
// live and the guest saw no error; at the end the job's result is whole.
func TestUpgradesInARowUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	upgradesInARow(t, false)
}

// TestVFIOUserUpgradesInARowUnderLoad is TestUpgradesInARowUnderLoad on
// QEMU 11.1 over vfio-user: each upgrade hands the paused vfio-user
// session over (its DMA windows, interrupt eventfds and mask: package
// vfiouser's Handover), and QEMU, which is not told, goes on.
func TestVFIOUserUpgradesInARowUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	upgradesInARow(t, true)
}

// upgradesInARow is TestUpgradesInARowUnderLoad, with the VM on QEMU 11.1
// over vfio-user when vfioUser is set, else on QEMU 7.2 over mpqemu.
func upgradesInARow(t *testing.T, vfioUser bool) {
	const upgrades = 20
	env := migrationSetup(t)
	// This process becomes the reaper of every vgpud that an upgrade
	// orphans (each new one is the old one's child), so it sees each
	// exit's status, and of the workers once their first vgpud exits.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	var last, worker int // reaped at the end, once the daemon stopped
	t.Cleanup(func() {
		for _, pid := range []int{last, worker} {
			if pid > 0 {
				reap(pid, time.Minute)
			}
		}
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	})
	// Each upgrade's answer comes once its probation passed
	// (docs/upgrade.md): a short one, and steps for 20 of them.
	start, suffix, sock := startVM, ".sock", "mpqemu"
	var a *daemon
	if vfioUser {
		start, suffix, sock = startVFIOUserVM, ".vfio-user.sock", "vfio-user"
		a = startVFIOUserDaemon(t, env, "pthread", "-upgrade-probation", "200ms")
	} else {
		a = runDaemon(t, env, "pthread", t.TempDir(), "-upgrade-probation", "200ms")
	}
	id := create(t, a, "vgpu-small")
	loadCPUs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	const steps = 2500
	// The job runs on a device context (ABI 1.5), which lives in the
	// worker: the upgrades must leave it, and its executor, computing.
	app := fmt.Sprintf("vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,%d,-pace,10ms,-progress,10,-context,1", steps)
	vm := start(ctx, t, env, a.InstanceBase(id), "", app)
	if _, err := vm.WaitLine(ctx, "ITERATE step 10/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, console(vm))
	}
	socks := []string{a.InstanceBase(id) + suffix, a.InstanceBase(id) + ".agent.sock"}
	inodes := func() ([]uint64, error) {
		var out []uint64
		for _, p := range socks {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				return nil, err
			}
			out = append(out, st.Ino)
		}
		return out, nil
	}
	inoBefore, err := inodes()
	if err != nil {
		t.Fatalf("instance sockets: %v", err)
	}
	worker = workerPID(ctx, t, a, id)
	first := a.PID()
	began := time.Now()
	for i := range upgrades {
		// The guest computed since the last upgrade.
		if err := waitProgress(ctx, vm); err != nil {
			t.Fatalf("upgrade %d: the job made no progress: %v\n%s", i, err, console(vm))
		}
		if lastStep(vm) >= steps {
			t.Fatalf("upgrade %d: the job ended already (step %d of %d): give it more steps", i, lastStep(vm), steps)
		}
		old := a.PID()
		out, err := a.Ctl(ctx, "upgrade")
		if err != nil {
			t.Fatalf("upgrade %d: vgpuctl upgrade: %v\n%s", i, err, out)
		}
		cur := a.PID()
		if cur == old || cur == 0 {
			t.Fatalf("upgrade %d: the run directory's lock names pid %d, %d before", i, cur, old)
		}
		if old == first {
			// The test's own child: Daemon reaps it; its pidfd says it ended.
			if !exited(old, time.Minute) {
				t.Fatalf("upgrade %d: the old vgpud %d is still running a minute after the commit\n%s", i, old, a.Logs())
			}
		} else if ws, err := reap(old, time.Minute); err != nil || !ws.Exited() || ws.ExitStatus() != 0 {
			t.Fatalf("upgrade %d: the old vgpud %d: %v (status %v), want an exit with status 0\n%s", i, old, err, ws, a.Logs())
		}
		last = cur
		if ino, err := inodes(); err != nil || fmt.Sprint(ino) != fmt.Sprint(inoBefore) {
			t.Fatalf("upgrade %d: instance sockets %v (%v), want the same files %v\n%s", i, ino, err, inoBefore, a.Logs())
		}
		if w := workerPID(ctx, t, a, id); w != worker || !running(w) {
			t.Fatalf("upgrade %d: worker pid %d (running %v), want %d: the device state was not handed over\n%s",
				i, w, running(w), worker, a.Logs())
		}
		if n := liveContexts(ctx, t, a, id); n != 1 {
			t.Fatalf("upgrade %d: the new vgpud sees %d live device contexts, want the job's one", i, n)
		}
		for _, l := range vm.Lines() {
			if strings.Contains(l, "ITERATE LOST") || strings.Contains(l, "ITERATE FAIL") {
				t.Fatalf("upgrade %d: the guest saw an error: %q\n%s", i, l, console(vm))
			}
		}
		t.Logf("upgrade %d (%s): vgpud %d -> %d at guest step %d", i, sock, old, cur, lastStep(vm))
	}
	upgraded := time.Since(began)
	waitResult(ctx, t, vm, steps)
	t.Logf("%d upgrades in %v; the job ended %v later", upgrades, upgraded.Round(time.Millisecond),
		(time.Since(began) - upgraded).Round(time.Millisecond))
	if !strings.Contains(console(vm), "context=1") {
		t.Errorf("the job did not run on device context 1:\n%s", console(vm))
	}
	if n := strings.Count(console(vm), "ITERATE start"); n != 1 {
		t.Errorf("the job started %d times across %d upgrades, want once", n, upgrades)
	}
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, console(vm))
	}
}

// loadCPUs keeps every CPU busy with niced busy loops until the test ends.
func loadCPUs(t *testing.T) {
	t.Helper()
	for range max(2, runtimeCPUs()) {
		cmd := exec.Command("nice", "-n", "10", "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a busy loop: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}

// runtimeCPUs is the number of CPUs this process may run on.
func runtimeCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 1
	}
	return set.Count()
}

// exited waits up to wait for process pid to end (its pidfd turns
// readable), reaped or not.
func exited(pid int, wait time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds())+1)
		if n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
	}
	return false
}

// reap waits up to wait for child pid of this process (a subreaper) to
// end and collects its status.
func reap(pid int, wait time.Duration) (syscall.WaitStatus, error) {
	var ws syscall.WaitStatus
	if !exited(pid, wait) {
		return ws, fmt.Errorf("process %d did not exit within %v", pid, wait)
	}
	if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != nil {
		return ws, fmt.Errorf("wait4(%d): %w", pid, err)
	}
	return ws, nil
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), "stat"))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

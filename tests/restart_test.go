package tests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	a := startDaemon(t, env, "pthread")
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
	a.Kill()
	b, err := migratetest.StartDaemon(ctx, env.Bin, a.RunDir, "pthread", env.TLSDir, "POCL_DEVICES=pthread basic")
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
	if !strings.Contains(lost, "commands in flight were lost") {
		t.Errorf("the loss report %q does not say what was lost", lost)
	}
	if _, err := vm.WaitLine(ctx, "ITERATE RECOVERED"); err != nil {
		t.Fatalf("the guest did not reopen the re-plugged device: %v\n%s", err, console())
	}
	waitResult(ctx, t, vm, steps)
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, console())
	}
	for _, l := range strings.Split(b.Logs(), "\n") {
		if strings.Contains(l, "reattached the VM's vGPU") {
			t.Logf("%s", l)
			return
		}
	}
	t.Errorf("the restarted vgpud did not log the reattach:\n%s", b.Logs())
}

// workerPID is the worker process serving instance id (vgpuctl show).
func workerPID(ctx context.Context, t *testing.T, d *daemon, id string) int {
	t.Helper()
	out, err := d.Ctl(ctx, "show", id)
	if err != nil {
		t.Fatalf("vgpuctl show %s: %v\n%s", id, err, out)
	}
	var st struct {
		WorkerPID int `json:"worker_pid"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("vgpuctl show %s: %v\n%s", id, err, out)
	}
	return st.WorkerPID
}

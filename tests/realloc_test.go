package tests

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// startTwoDeviceDaemon is a real vgpud on both of PoCL's CPU device
// models, pthread (device 0, 2 compute units) and basic (device 1, 1),
// with more vgpud flags.
func startTwoDeviceDaemon(t *testing.T, env *migratetest.Env, flags ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// A short run directory: instance socket paths must fit sun_path.
	dir, err := os.MkdirTemp("", "tr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := migratetest.StartDaemonFlags(ctx, env.Bin, dir, "pthread", env.TLSDir,
		append([]string{"-device", "basic"}, flags...), "POCL_DEVICES=pthread basic")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("vgpud log:\n%s", d.Logs())
		}
	})
	return d
}

// ctl runs vgpuctl against d and fails the test on an error.
func ctl(t *testing.T, d *daemon, args ...string) string {
	t.Helper()
	out, err := d.Ctl(t.Context(), args...)
	if err != nil {
		t.Fatalf("vgpuctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// createOn creates an instance of profile on device dev.
func createOn(t *testing.T, d *daemon, profile, dev string) string {
	t.Helper()
	f := strings.Fields(ctl(t, d, "create", "-profile", profile, "-device", dev))
	if len(f) == 0 {
		t.Fatal("create printed nothing")
	}
	return f[len(f)-1]
}

func console(vm *qemuvm.VM) string { return strings.Join(vm.Lines(), "\n") }

// TestReallocWithReconfigurationAPI: a guest program that registered for
// reconfiguration (min 64 MiB, preferred 512 MiB) runs a long job on
// vgpu-medium (1 GiB) on device 0; mid-run the operator downgrades it to
// vgpu-small (256 MiB) on device 1. The program checkpoints and frees its
// device state, is told the new limits, sizes its working set to them,
// resumes and finishes with the CPU's result; vgpuctl resources shows its
// declaration. Then it is upgraded back the same way.
func TestReallocWithReconfigurationAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	env := migrationSetup(t)
	d := startTwoDeviceDaemon(t, env)
	id := createOn(t, d, "vgpu-medium", "0")

	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,300,-pace,15ms,-progress,25,-min-mem,67108864,-pref-mem,536870912"
	vm := startVM(ctx, t, env, d.InstanceBase(id), "", app)
	if _, err := vm.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, console(vm))
	}
	res := ctl(t, d, "resources", id, "-json")
	var r mdev.Resources
	if err := json.Unmarshal([]byte(res), &r); err != nil {
		t.Fatalf("resources: %v\n%s", err, res)
	}
	if len(r.Declared) != 1 || r.Declared[0].MinMem != 64<<20 || r.Declared[0].PrefMem != 512<<20 || !r.Reconfig {
		t.Fatalf("resources declared %+v (reconfigurable %v), want vgpu-iterate's 64/512 MiB", r.Declared, r.Reconfig)
	}

	var down mdev.ReallocResult
	out := ctl(t, d, "realloc", id, "-device", "1", "-profile", "vgpu-small", "-json")
	if err := json.Unmarshal([]byte(out), &down); err != nil {
		t.Fatalf("realloc: %v\n%s", err, out)
	}
	if down.Transparent || down.Programs != 1 || down.To != 1 || down.ToProfile != "vgpu-small" {
		t.Fatalf("downgrade %+v: want the program to checkpoint and resume on device 1 as vgpu-small", down)
	}
	if _, err := vm.WaitLine(ctx, "ITERATE reconfig limits mem=268435456 device=basic"); err != nil {
		t.Fatalf("the program was not told the new limits: %v\n%s", err, console(vm))
	}
	if _, err := vm.WaitLine(ctx, "ITERATE step 150/"); err != nil {
		t.Fatalf("the job did not go on after the downgrade: %v\n%s", err, console(vm))
	}
	var up mdev.ReallocResult
	out = ctl(t, d, "realloc", id, "-device", "0", "-profile", "vgpu-medium", "-json")
	if err := json.Unmarshal([]byte(out), &up); err != nil {
		t.Fatalf("realloc back: %v\n%s", err, out)
	}
	if up.Transparent || up.Programs != 1 || up.To != 0 {
		t.Fatalf("upgrade %+v", up)
	}
	line, err := vm.WaitLine(ctx, "ITERATE OK")
	if err != nil {
		t.Fatalf("job did not finish: %v\n%s", err, console(vm))
	}
	t.Logf("%s; downgrade: state %d bytes, ring stopped %v, checkpoint %v, resume %v; upgrade: ring stopped %v",
		line, down.StateBytes, down.Stopped.D(), down.Checkpoint.D(), down.Resume.D(), up.Stopped.D())
	if !strings.Contains(console(vm), "ITERATE reconfig checkpoint to=268435456") {
		t.Errorf("no checkpoint line before the downgrade:\n%s", console(vm))
	}
}

// TestOvercommitInGuests: device 0 lets its instances hold 48 MiB
// together, less than the 256 MiB vgpu-small advertises. Two guests on it
// each allocate a 64 MiB buffer: the one whose policy is migrate moves to
// device 1 and finishes its job there with the CPU's result; the one whose
// policy is block asks for more than device 0 can ever hold and gets a
// clean out-of-resources status, not a hang. (Blocking until another
// instance frees, and timing out when none does, are mdev's
// TestOvercommitBlock, with real workers but no QEMU.)
func TestOvercommitInGuests(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU twice")
	}
	env := migrationSetup(t)
	d := startTwoDeviceDaemon(t, env, "-device-memory", "48MiB")
	mig := createOn(t, d, "vgpu-small", "0")
	blk := createOn(t, d, "vgpu-small", "0")
	ctl(t, d, "overcommit", mig, "migrate")
	ctl(t, d, "overcommit", blk, "block", "-timeout", "3s")

	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,60,-pace,15ms,-progress,20,-ballast,67108864"
	vmM := startVM(ctx, t, env, d.InstanceBase(mig), "", app)
	vmB := startVM(ctx, t, env, d.InstanceBase(blk), "", app)
	line, err := vmM.WaitLine(ctx, "ITERATE OK")
	if err != nil {
		t.Fatalf("migrate guest: %v\n%s", err, console(vmM))
	}
	var info struct{ Device int }
	if err := json.Unmarshal([]byte(ctl(t, d, "show", mig)), &info); err != nil {
		t.Fatal(err)
	}
	if info.Device != 1 {
		t.Fatalf("migrate guest's instance is on device %d after its shortage, want 1", info.Device)
	}
	t.Logf("migrate guest: %s", line)
	fail, err := vmB.WaitLine(ctx, "ITERATE FAIL")
	if err != nil {
		t.Fatalf("block guest: %v\n%s", err, console(vmB))
	}
	if !strings.Contains(fail, "out of resources") {
		t.Fatalf("block guest failed with %q, want out of resources", fail)
	}
	res := ctl(t, d, "resources", mig)
	if !strings.Contains(res, "1 migrations") {
		t.Errorf("resources of the migrated instance:\n%s", res)
	}
}

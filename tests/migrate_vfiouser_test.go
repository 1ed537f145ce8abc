package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// startVFIOUserDaemon is startDaemon for a vgpud whose VMs attach by
// vfio-user, with more flags, in a short run directory (instance socket
// paths must fit a Unix socket address).
func startVFIOUserDaemon(t *testing.T, env *migratetest.Env, device string, flags ...string) *daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "vu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return runDaemon(t, env, device, dir, append([]string{"-transport", "vfio-user"}, flags...)...)
}

// startVFIOUserVM is migratetest.Env.StartVFIOUserVM, killed at the end
// of the test.
func startVFIOUserVM(ctx context.Context, t *testing.T, env *migratetest.Env, base, incoming, app string) *qemuvm.VM {
	t.Helper()
	vm, err := env.StartVFIOUserVM(ctx, base, incoming, app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return vm
}

// TestMigrateVFIOUserInPlace: a guest on QEMU 11.1 with its vGPU attached
// by vfio-user-pci runs a long iterative job whose state lives in device
// buffers; midway the VM moves from vgpud A (PoCL pthread, 2 compute units)
// to vgpud B (PoCL basic, 1) with a plain QMP migrate driven by vgpuctl
// migrate, the vGPU never unplugged: B's instance was created to await it
// and B's QEMU attached to it at its start. The guest's programs restore
// the device's PCI configuration that QEMU did not carry, and the job's
// final result equals the guest's CPU reference.
func TestMigrateVFIOUserInPlace(t *testing.T) {
	env := migrationSetup(t)
	a := startVFIOUserDaemon(t, env, "pthread")
	b := startVFIOUserDaemon(t, env, "basic")
	id := create(t, a, "vgpu-small")
	if out, err := b.Ctl(t.Context(), "create", "-incoming", "-uuid", id, "-profile", "vgpu-small"); err != nil {
		t.Fatalf("create -incoming on B: %v: %s", err, out)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	const steps = 400
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,400,-pace,15ms,-progress,25"
	vmA := startVFIOUserVM(ctx, t, env, a.InstanceBase(id), "", app)
	console := func(vm *qemuvm.VM) string { return strings.Join(vm.Lines(), "\n") }
	if _, err := vmA.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, console(vmA))
	}

	uri := "unix:" + filepath.Join(t.TempDir(), "to-b.mig")
	vmB := startVFIOUserVM(ctx, t, env, b.InstanceBase(id), uri, app)
	rep, err := migrateVM(t, a, b, id, uri)
	if err != nil {
		t.Fatalf("migrate A -> B: %v\nreport %+v\nconsole A:\n%s\nconsole B:\n%s", err, rep, console(vmA), console(vmB))
	}
	t.Logf("A -> B: %+v", rep)
	if !rep.InPlace || rep.Unplug != 0 || rep.From == rep.To || !rep.Rounds[len(rep.Rounds)-1].Final {
		t.Errorf("report %+v: want in place (no unplug), different devices, a final round", rep)
	}
	line, err := vmB.WaitLine(ctx, "ITERATE step ")
	if err != nil || !strings.Contains(line, "cus=1") {
		t.Fatalf("job did not go on on B's 1-CU device: %q %v\nconsole B:\n%s", line, err, console(vmB))
	}
	waitResult(ctx, t, vmB, steps)
	if _, err := vmB.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, console(vmB))
	}
}

package tests

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// icdMigrateCheck runs in the guest (the Debian userland, through the
// vgpud ICD and vgpu-icdd, which gives each process a device context of
// its own): two unprivileged processes, of two users, compute with
// ctxjob until $1 rounds are done, $2 ms apart, each checking every
// round's read-back against the CPU.
const icdMigrateCheck = "#!/bin/sh\n" + userlandCheckFunc + `ROUNDS=$1
PACE=$2
mkdir -p /tmp/ctx/ready
chmod -R 1777 /tmp/ctx
for f in passwd group; do cp /etc/$f /run/$f; mount --bind /run/$f /etc/$f; done
echo 'second:x:1000:1000::/tmp:/bin/sh' >> /etc/passwd
echo 'second:x:1000:' >> /etc/group
as() { u=$1; shift; su -p -s /bin/sh -c "HOME=/tmp $*" $u; }
# Results to files; progress (stderr) to the console, for the host to
# migrate meanwhile.
as nobody /vgpu/bin/ctxjob /tmp/ctx/ready 2 $ROUNDS $PACE > /tmp/ctx/one &
one=$!
as second /vgpu/bin/ctxjob /tmp/ctx/ready 2 $ROUNDS $PACE > /tmp/ctx/two &
two=$!
wait $one
echo "exit=$?" >> /tmp/ctx/one
wait $two
echo "exit=$?" >> /tmp/ctx/two
check one cat /tmp/ctx/one
check two cat /tmp/ctx/two
`

// TestMigrateVFIOUserICD (issues 31 and 44): two unprivileged processes
// of a guest on QEMU 11.1, each with a device context that vgpu-icdd made
// for it through the ICD, compute while the VM migrates in place from
// vgpud A (PoCL pthread) to vgpud B (PoCL basic) with the vGPU running
// during QEMU's copy; each checks every round's read-back against the
// CPU (the multiplier changes each round, so a read-back that QEMU
// copied before the device wrote it, and that the final round's guest
// pages did not bring, fails it). vgpu-icdd quiesces with the vGPU in
// place: its contexts are held, not drained, and move with the instance;
// both processes finish OK on B's device.
func TestMigrateVFIOUserICD(t *testing.T) {
	a := imagetest.RequireApps(t)
	initrd := ctxjobInitramfs(t, a, "icd-migrate-check", icdMigrateCheck, nil, "github.com/vgpud/vgpud/guestagent/cmd/vgpu-agent")

	env := migrationSetup(t)
	da := startVFIOUserDaemon(t, env, "pthread")
	db := startVFIOUserDaemon(t, env, "basic")
	id := create(t, da, "vgpu-small")
	if out, err := db.Ctl(t.Context(), "create", "-incoming", "-uuid", id, "-profile", "vgpu-small"); err != nil {
		t.Fatalf("create -incoming on B: %v: %s", err, out)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*vmTimeout)
	defer cancel()
	// vgpu-agent serves its relay outside the userland, where vgpu-icdd
	// (started by vgpu-apps, also outside) finds it.
	const rounds, paceMS = 1000, 10
	guest := qemuvm.Config{Kernel: a.Vmlinuz, Initrd: initrd, Disk: a.Disk, MemMiB: 1024,
		Append: fmt.Sprintf("vgpu.run=vgpu-agent vgpu.args=/bin/%s,%s/icd-migrate-check,%d,%d",
			imagetest.AppsProgram, imagetest.AppsBinDir, rounds, paceMS)}
	vmA, err := env.StartVFIOUserGuest(ctx, da.InstanceBase(id), "", guest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vmA.Kill)
	console := func(vm *qemuvm.VM) string { return strings.Join(vm.Lines(), "\n") }
	// Both processes are computing (each prints every 25 rounds).
	for range 2 {
		if _, err := vmA.WaitLine(ctx, "CTXJOB round 50"); err != nil {
			t.Fatalf("jobs did not start: %v\n%s", err, console(vmA))
		}
	}

	uri := "unix:" + filepath.Join(t.TempDir(), "to-b.mig")
	vmB, err := env.StartVFIOUserGuest(ctx, db.InstanceBase(id), uri, guest)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vmB.Kill)
	start := time.Now()
	rep, err := migrateVM(t, da, db, id, uri)
	if err != nil {
		t.Fatalf("migrate A -> B: %v\nreport %+v\nconsole A:\n%s\nconsole B:\n%s", err, rep, console(vmA), console(vmB))
	}
	t.Logf("A -> B in %v: %+v", time.Since(start).Round(time.Millisecond), rep)
	// The final round carried pages the device wrote while QEMU copied
	// the VM (the processes' read-backs): their checks below prove the
	// content arrived.
	if !rep.InPlace || !rep.Live || rep.Programs == 0 || rep.From == rep.To || rep.GuestBytes == 0 {
		t.Errorf("report %+v: want a live migration in place, the guest's programs quiesced, different devices, guest pages in the final round", rep)
	}
	if _, err := vmB.WaitLine(ctx, "CTXJOB round"); err != nil {
		t.Fatalf("jobs did not go on on B: %v\nconsole B:\n%s", err, console(vmB))
	}
	if _, err := vmB.WaitLine(ctx, "VGPU-INIT exit="); err != nil {
		t.Fatalf("guest did not finish: %v\nconsole B:\n%s", err, console(vmB))
	}
	out, codes := userlandResults(vmB.Lines())
	for _, name := range []string{"one", "two"} {
		if codes[name] != 0 || !strings.Contains(out[name], "CTXJOB OK") || !strings.Contains(out[name], "exit=0") {
			t.Errorf("process %s: exit %d, output:\n%s\nconsole B:\n%s", name, codes[name], out[name], console(vmB))
		}
	}
}

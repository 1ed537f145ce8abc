package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/migrate/migratetest"
	"github.com/vgpud/vgpud/migrate/qmp"
)

// startVFIOUserDaemon is startDaemon for a vgpud whose VMs attach by
// vfio-user, with more flags, in a short run directory (instance socket
// paths must fit a Unix socket address).
func startVFIOUserDaemon(t *testing.T, env *migratetest.Env, device string, flags ...string) *daemon {
	t.Helper()
	return runDaemon(t, env, device, shortDir(t, "vu"), append([]string{"-transport", "vfio-user"}, flags...)...)
}

// shortDir is a directory removed at the end of the test, with a path
// short enough for the Unix sockets of the instances in it (t.TempDir's
// can be too long).
func shortDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
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
	// The job kept computing while QEMU copied the VM: its completions
	// and read-backs of those steps reached guest RAM that QEMU had
	// copied, and only the final round's guest pages carry them.
	if !rep.Live || rep.LiveCopy <= 0 || rep.GuestBytes == 0 {
		t.Errorf("report %+v: want the vGPU running during QEMU's copy and guest pages in the final round", rep)
	}
	// The destination ran the VM and timed the guest's first answer (its
	// agent's Hello), within the resume it answered after.
	if rep.GuestHello <= 0 || rep.GuestHello > rep.Resume {
		t.Errorf("report %+v: want the guest agent's Hello timed within the resume", rep)
	}
	// The program kept BAR0 mapped across the migration and found it
	// answering at Resume: the agent wrote the PCI configuration QEMU did
	// not carry back once, and the program did not reopen the device.
	line, err := vmB.WaitLine(ctx, "ITERATE resumed ")
	if err != nil || !strings.Contains(line, "kept-mapping=true") {
		t.Errorf("program's resume %q (%v): want it on the BAR0 it kept mapped\nconsole B:\n%s", line, err, console(vmB))
	}
	line, err = vmB.WaitLine(ctx, "ITERATE step ")
	if err != nil || !strings.Contains(line, "cus=1") {
		t.Fatalf("job did not go on on B's 1-CU device: %q %v\nconsole B:\n%s", line, err, console(vmB))
	}
	waitResult(ctx, t, vmB, steps)
	if _, err := vmB.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, console(vmB))
	}
}

// TestMigrateVFIOUserLiveRollsBack (issue 44): a migration whose vGPU
// keeps running while QEMU copies the VM fails at each step of the new
// path, and each time the VM keeps running on the source with its GPU
// work intact, and the job's final result is right: QEMU's stream cut
// while it copies the VM (the guest not yet quiesced), an operator
// cancelling QEMU's migration then (migrate_cancel on a monitor of the
// operator's own), the daemons'
// channel cut while QEMU copies the VM (the source finds out as it sends
// the final round, the VM stopped before its switchover), the destination
// failing the final round (the source VM stopped before its switchover:
// QEMU's migration is cancelled and the VM runs again), and the
// destination failing the commit after QEMU moved the VM (it quits its
// QEMU; the source runs its VM again). The source is a real vgpud; the
// destination runs in the test, to fail at an exact step.
func TestMigrateVFIOUserLiveRollsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	env := migrationSetup(t)
	a := startVFIOUserDaemon(t, env, "pthread")
	id := create(t, a, "vgpu-small")

	sockDir := shortDir(t, "vd")
	m, b, failAt := faultyDestination(t, env, sockDir, vfiouser.Transport{})

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	const steps = 2000
	app := fmt.Sprintf("vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,%d,-pace,15ms,-progress,50", steps)
	// The source QEMU has a second monitor, the operator's: vgpud holds
	// the first while it migrates the VM.
	opQMP := filepath.Join(shortDir(t, "op"), "op.qmp")
	vmA, err := env.StartVFIOUserGuest(ctx, a.InstanceBase(id), "", qemuvm.Config{Kernel: env.Kernel.Vmlinuz, Initrd: env.Initrd, MemMiB: 512,
		Append: app, ExtraArgs: []string{"-qmp", "unix:" + opQMP + ",server=on,wait=off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vmA.Kill)
	if _, err := vmA.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, strings.Join(vmA.Lines(), "\n"))
	}
	for i, c := range []struct {
		phase, failAt string
		cutQEMU       bool // QEMU's own stream goes through a relay that cuts it
		cutChannel    bool // the daemons' channel is cut while QEMU copies the VM
		cancel        bool // an operator cancels QEMU's migration while QEMU copies the VM
		quiesced      bool // the guest was quiesced, so it resumes
	}{
		{phase: "qemu", cutQEMU: true},
		{phase: "qemu", cancel: true},
		{phase: "stop-and-copy", cutChannel: true, quiesced: true},
		{phase: "stop-and-copy", failAt: "final", quiesced: true},
		{phase: "commit", failAt: "commit", quiesced: true},
	} {
		failAt.Store(c.failAt)
		if _, err := m.Create(mdev.CreateRequest{UUID: id, Profile: "vgpu-small", Incoming: true}); err != nil {
			t.Fatalf("attempt %d: create the awaiting instance: %v", i, err)
		}
		dir := t.TempDir()
		target := filepath.Join(dir, fmt.Sprintf("attempt-%d.mig", i))
		vmB := startVFIOUserVM(ctx, t, env, filepath.Join(sockDir, id), "unix:"+target, app)
		uri := "unix:" + target
		to := b
		switch {
		case c.cutQEMU:
			uri = "unix:" + unixRelay(t, target, filepath.Join(dir, "relay.mig"), 64<<20, nil)
		case c.cutChannel:
			ch := newChannelRelay(t, b.MigrateAddr)
			to = &daemon{RunDir: sockDir, MigrateAddr: ch.addr}
			uri = "unix:" + unixRelay(t, target, filepath.Join(dir, "relay.mig"), -1, map[int64]func(){64 << 20: ch.cut})
		}
		var op sync.WaitGroup
		if c.cancel {
			op.Go(func() { cancelWhenCopying(ctx, t, opQMP) })
		}
		rep, err := migrateVM(t, a, to, id, uri)
		op.Wait()
		if err == nil || rep == nil || !rep.RolledBack || rep.Phase != c.phase || !rep.Live {
			t.Fatalf("attempt %d: %v, report %+v; want a live migration rolled back in %s\nconsole:\n%s", i, err, rep, c.phase, strings.Join(vmA.Lines(), "\n"))
		}
		t.Logf("attempt %d failed in %s as injected and rolled back: %+v", i, c.phase, rep)
		goesOnAtSource(ctx, t, i, vmA, m, c.quiesced)
		vmB.Kill()
	}
	sourceQEMUAsBefore(ctx, t, a.InstanceBase(id)+".qmp", "rolled back")
	waitResult(ctx, t, vmA, steps)
	if _, err := vmA.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, strings.Join(vmA.Lines(), "\n"))
	}
}

// cancelWhenCopying is an operator cancelling a migration on the source
// QEMU's monitor at path (QMP migrate_cancel) as soon as QEMU copies the
// VM.
func cancelWhenCopying(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	mon, err := qmp.Dial(ctx, path)
	if err != nil {
		t.Errorf("the operator's monitor: %v", err)
		return
	}
	defer mon.Close()
	// The last attempt's end (failed, cancelled) reads until this one
	// starts: look for active alone.
	for {
		info, err := mon.QueryMigrate(ctx)
		if err != nil {
			t.Errorf("waiting for QEMU to copy the VM: %v", err)
			return
		}
		if info.Status == qmp.MigrationActive {
			break
		}
		select {
		case <-ctx.Done():
			t.Errorf("QEMU never copied the VM: %v", ctx.Err())
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
	if err := mon.MigrateCancel(ctx); err != nil {
		t.Errorf("migrate_cancel: %v", err)
	}
}

// unixRelay listens on path and forwards one connection to target (a
// relay, closing both ends after n bytes from the client when n >= 0,
// calling at[k] once k bytes have passed). It returns path.
func unixRelay(t *testing.T, target, path string, n int64, at map[int64]func()) string {
	t.Helper()
	return relay(t, "unix", path, target, n, at)
}

// channelRelay forwards one TCP connection to addr (the daemons' channel)
// until cut.
type channelRelay struct {
	addr    string
	mu      sync.Mutex
	c, s    net.Conn
	cutDone bool
}

func newChannelRelay(t *testing.T, addr string) *channelRelay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r := &channelRelay{addr: l.Addr().String()}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", addr)
		if err != nil {
			c.Close()
			return
		}
		r.mu.Lock()
		r.c, r.s = c, s
		cut := r.cutDone
		r.mu.Unlock()
		if cut {
			r.cut()
		}
		go io.Copy(c, s)
		io.Copy(s, c)
	}()
	return r
}

// cut closes both ends of the relayed connection (or the one to come).
func (r *channelRelay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cutDone = true
	for _, c := range []net.Conn{r.c, r.s} {
		if c != nil {
			c.Close()
		}
	}
}

// TestVFIOUserRestartReplugs: vgpud on -transport vfio-user is killed
// (no hand-over) while a guest on QEMU 11.1 computes. QEMU survives with
// a dead vfio-user-pci device; the vgpud restarted on the same run
// directory re-plugs the vGPU as a vfio-user-pci device at the same slot
// (never a proxy device, which QEMU 11.1's monitor did not survive) and
// tells the guest its device came back empty; the job starts again and
// finishes with the CPU's result.
//
// QEMU 11.1.3 aborts when a read of its vfio-user socket fails with an
// error rather than at its end (its vfio_user_recv_hdr sets the error the
// read already set), which a vgpud killed with the guest's register
// writes unread used to cause (ECONNRESET). The connection keeper (package
// mdev/keeper) ends the connection in order instead: killAndRecover checks
// it did, and QEMU must survive every time.
func TestVFIOUserRestartReplugs(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	env := migrationSetup(t)
	a := startVFIOUserDaemon(t, env, "pthread")
	id := create(t, a, "vgpu-small")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const steps = 300
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,300,-pace,15ms,-progress,25,-recover,1"
	vm := startVFIOUserVM(ctx, t, env, a.InstanceBase(id), "", app)
	console := func() string { return strings.Join(vm.Lines(), "\n") }
	if _, err := vm.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, console())
	}
	a2, _ := killAndRecover(ctx, t, env, a, vm, steps, "-transport", "vfio-user")
	if _, ok := logLine(a2.Logs(), `msg="reattached the VM's vGPU after a restart"`, `agent_error=""`); !ok {
		t.Errorf("the restarted vgpud did not log the reattach:\n%s", a2.Logs())
	}
}

// TestMigrateVFIOUserSourceDies (issue 44, the fault table's "the source
// vgpud dies mid-way"): the source vgpud is killed mid-migration, once
// while QEMU copies the VM with the vGPU running (QEMU is left copying
// at a 1 ms downtime limit, to stop before its switchover), and once
// while the destination receives the final round (the guest quiesced,
// its VM stopped before QEMU's switchover). Each time a vgpud restarted
// on the same run directory cancels QEMU's migration, runs the VM, gives
// QEMU its defaults back, re-plugs the vGPU and tells the guest its
// device came back empty; the guest's job starts again and ends with the
// CPU's result, and the destination keeps nothing. Killed while the
// guest computes, vgpud leaves QEMU 11.1.3 an orderly end of its
// connection (the connection keeper; TestVFIOUserRestartReplugs).
func TestMigrateVFIOUserSourceDies(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	for _, at := range []string{"qemu", "final"} {
		t.Run(at, func(t *testing.T) { testSourceDies(t, at) })
	}
}

// testSourceDies is TestMigrateVFIOUserSourceDies with the source killed
// at: "qemu" when 64 MiB of QEMU's stream have passed, "final" when the
// destination is sent the final round.
func testSourceDies(t *testing.T, at string) {
	env := migrationSetup(t)
	a := startVFIOUserDaemon(t, env, "pthread")
	id := create(t, a, "vgpu-small")
	sockDir := shortDir(t, "vd")
	var killed atomic.Bool
	kill := func() {
		killed.Store(true) // before: vgpuctl may report the death first
		a.Kill()           // SIGKILL, waited for: the source is gone before we go on
	}
	m, b := hookedDestination(t, env, sockDir, vfiouser.Transport{}, func(step string) error {
		if at != "final" || step != "final" {
			return nil
		}
		kill()
		return fmt.Errorf("the source was killed at %s", step)
	})

	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	const steps = 400
	app := fmt.Sprintf("vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,%d,-pace,15ms,-progress,25,-recover,1", steps)
	vmA := startVFIOUserVM(ctx, t, env, a.InstanceBase(id), "", app)
	if _, err := vmA.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, strings.Join(vmA.Lines(), "\n"))
	}
	if _, err := m.Create(mdev.CreateRequest{UUID: id, Profile: "vgpu-small", Incoming: true}); err != nil {
		t.Fatalf("create the awaiting instance: %v", err)
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "in.mig")
	vmB := startVFIOUserVM(ctx, t, env, filepath.Join(sockDir, id), "unix:"+target, app)
	uri := "unix:" + target
	if at == "qemu" {
		uri = "unix:" + unixRelay(t, target, filepath.Join(dir, "relay.mig"), -1, map[int64]func(){64 << 20: kill})
	}
	rep, err := migrateVM(t, a, b, id, uri)
	if err == nil || !killed.Load() {
		t.Fatalf("migration: %v, report %+v; want it ended by the source's death", err, rep)
	}
	t.Logf("the migration ended with the source: %v", err)
	vmB.Kill()

	a2, _ := killAndRecover(ctx, t, env, a, vmA, steps, "-transport", "vfio-user")
	line, ok := logLine(a2.Logs(), `msg="reattached the VM's vGPU after a restart"`, `abandoned_migration=true`)
	if !ok {
		t.Errorf("the restarted vgpud did not log a reattach that abandoned QEMU's migration:\n%s", a2.Logs())
	}
	t.Logf("restarted: %s", line)
	sourceQEMUAsBefore(ctx, t, a.InstanceBase(id)+".qmp", "reattached")
	destinationForgets(t, m, "after the source's death")
}

// sourceQEMUAsBefore checks that the source QEMU whose monitor is at
// path (how, e.g. "rolled back", says what happened to it) is as it was
// before a live migration: no pause before a switchover (which would
// stop the next migration there), QEMU's default downtime limit back.
func sourceQEMUAsBefore(ctx context.Context, t *testing.T, path, how string) {
	t.Helper()
	mon, err := qmp.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if caps, err := mon.QueryMigrateCapabilities(ctx); err != nil || caps["pause-before-switchover"] {
		t.Errorf("the %s source QEMU's capabilities: %v, %v; want no pause before its switchover", how, caps, err)
	}
	if p, err := mon.QueryMigrateParameters(ctx); err != nil || p.DowntimeLimitMS != 300 {
		t.Errorf("the %s source QEMU's parameters: %+v, %v; want QEMU's default downtime limit, 300 ms", how, p, err)
	}
}

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

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

// migrationEnv is built once for the package's migration and restart
// tests: vgpud, vgpuctl, the guest image, a TLS directory (TestMain
// removes it).
var (
	migrationDir string
	migrationEnv = sync.OnceValues(func() (*migratetest.Env, error) {
		dir, err := os.MkdirTemp("", "vgpud-migration-")
		if err != nil {
			return nil, err
		}
		migrationDir = dir
		return migratetest.NewEnv(context.Background(), dir)
	})
)

// migrationSetup returns the migration tests' Env, failing the test
// without a guest kernel.
func migrationSetup(t *testing.T) *migratetest.Env {
	t.Helper()
	imagetest.RequireKernel(t)
	env, err := migrationEnv()
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// daemon is a real vgpud process on one of PoCL's two CPU device models,
// stopped at the end of the test (its log shown if the test failed).
type daemon = migratetest.Daemon

func startDaemon(t *testing.T, env *migratetest.Env, device string) *daemon {
	t.Helper()
	return runDaemon(t, env, device, t.TempDir())
}

// runDaemon starts vgpud on device with run directory dir and more
// flags, stopped at the end of the test.
func runDaemon(t *testing.T, env *migratetest.Env, device, dir string, flags ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	d, err := migratetest.StartDaemonFlags(ctx, env.Bin, dir, device, env.TLSDir, flags, "POCL_DEVICES=pthread basic")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("vgpud %s log:\n%s", device, d.Logs())
		}
	})
	return d
}

func create(t *testing.T, d *daemon, profile string) string {
	t.Helper()
	id, err := d.Create(t.Context(), profile)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// startVM boots (or, with incoming, prepares to receive) the test VM for
// the instance whose sockets start with base (Daemon.InstanceBase); it is
// killed at the end of the test.
func startVM(ctx context.Context, t *testing.T, env *migratetest.Env, base, incoming, app string) *qemuvm.VM {
	t.Helper()
	vm, err := env.StartVM(ctx, base, incoming, app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return vm
}

func migrateVM(t *testing.T, from, to *daemon, id, uri string) (*migrate.Report, error) {
	t.Helper()
	return from.Migrate(t.Context(), id, to.MigrateAddr, uri)
}

// TestMigrateAcrossDeviceModels: a guest runs a long iterative job whose
// state lives in device buffers (each step's output is the next step's
// input); midway it moves from vgpud A (PoCL pthread, 2 compute units) to
// vgpud B (PoCL basic, 1), and back; the final result equals the guest's
// CPU reference. The job runs on a device context (ABI 1.5), which moves
// with the instance: its ring, buffers and program, and on each side an
// executor of its own.
func TestMigrateAcrossDeviceModels(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU three times")
	}
	env := migrationSetup(t)
	a := startDaemon(t, env, "pthread")
	b := startDaemon(t, env, "basic")
	id := create(t, a, "vgpu-small")
	if _, perr := os.Stat(a.InstanceBase(id) + ".sock"); perr != nil {
		t.Fatalf("create printed %q: no instance socket: %v", id, perr)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	app := "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,600,-pace,15ms,-progress,25,-context,1"
	vmA := startVM(ctx, t, env, a.InstanceBase(id), "", app)
	console := func(vm *qemuvm.VM) string { return strings.Join(vm.Lines(), "\n") }
	if _, err := vmA.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, console(vmA))
	}

	uri := "unix:" + filepath.Join(t.TempDir(), "to-b.mig")
	vmB := startVM(ctx, t, env, b.InstanceBase(id), uri, app)
	rep, err := migrateVM(t, a, b, id, uri)
	if err != nil {
		t.Fatalf("migrate A -> B: %v\nreport %+v\nconsole A:\n%s", err, rep, console(vmA))
	}
	t.Logf("A -> B: %+v", rep)
	// The migrated source is done, as an orchestrator quits it: a source
	// QEMU left running reconnects its agent chardev to A's socket, and
	// once the instance is back on A the two QEMUs take turns on A's agent
	// channel, so the guest's resume confirmation can be lost (a 60 s
	// stun and a failed job, seen in CI).
	vmA.Kill()
	if rep.From == rep.To || len(rep.Rounds) < 2 || !rep.Rounds[len(rep.Rounds)-1].Final {
		t.Errorf("report %+v: want different devices, pre-copy rounds and a final one", rep)
	}
	line, err := vmB.WaitLine(ctx, "ITERATE step ")
	if err != nil || !strings.Contains(line, "cus=1") {
		t.Fatalf("job did not go on on B's 1-CU device: %q %v\nconsole B:\n%s", line, err, console(vmB))
	}
	// One more step on B before moving back (not a fixed step number: on
	// a loaded host the guest may pass any given step during the move).
	if err := waitProgress(ctx, vmB); err != nil {
		t.Fatalf("%v\nconsole B:\n%s", err, console(vmB))
	}

	uri2 := "unix:" + filepath.Join(t.TempDir(), "to-a.mig")
	vmA2 := startVM(ctx, t, env, a.InstanceBase(id), uri2, app)
	if rep, err = migrateVM(t, b, a, id, uri2); err != nil {
		t.Fatalf("migrate B -> A: %v\nreport %+v\nconsole B:\n%s", err, rep, console(vmB))
	}
	t.Logf("B -> A: %+v", rep)
	waitResult(ctx, t, vmA2, 600)
	if _, err := vmA2.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, console(vmA2))
	}
	if !strings.Contains(console(vmA), "context=1") {
		t.Errorf("the job did not run on device context 1:\n%s", console(vmA))
	}
}

// TestMigrateRollsBack: a migration that fails in any phase leaves the VM
// running on the source with its vGPU, and the guest's job finishes there
// with a correct result. The source is a real vgpud; the destination runs
// in the test, so that it can drop the connection at an exact step: the
// link cut during pre-copy (by a relay that cuts after 100 KiB), during
// the stop-and-copy round, and after QEMU moved the VM but before the vGPU
// was plugged on the destination (the destination then quits its QEMU and
// the source runs the VM again).
func TestMigrateRollsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	env := migrationSetup(t)
	a := startDaemon(t, env, "pthread")
	id := create(t, a, "vgpu-small")

	// The destination: an in-process manager and migrate.Destination.
	sockDir := t.TempDir()
	m, b, failAt := faultyDestination(t, env, sockDir, mpqemu.Transport{})

	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	const steps = 2000
	app := fmt.Sprintf("vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,%d,-pace,15ms,-progress,50", steps)
	vmA := startVM(ctx, t, env, a.InstanceBase(id), "", app)
	if _, err := vmA.WaitLine(ctx, "ITERATE step 50/"); err != nil {
		t.Fatalf("job did not start: %v\n%s", err, strings.Join(vmA.Lines(), "\n"))
	}
	for i, c := range []struct {
		phase, failAt string
		cut           bool // through a relay that cuts the link
		quiesced      bool // the guest was quiesced, so it resumes
	}{
		{phase: "pre-copy", cut: true},
		{phase: "stop-and-copy", failAt: "final", quiesced: true},
		{phase: "commit", failAt: "commit", quiesced: true},
	} {
		failAt.Store(c.failAt)
		uri := "unix:" + filepath.Join(t.TempDir(), fmt.Sprintf("attempt-%d.mig", i))
		vmB := startVM(ctx, t, env, filepath.Join(sockDir, id), uri, app)
		to := b
		if c.cut {
			to = &daemon{RunDir: sockDir, MigrateAddr: cutRelay(t, b.MigrateAddr, 100<<10)}
		}
		rep, err := migrateVM(t, a, to, id, uri)
		if err == nil || rep == nil || !rep.RolledBack || rep.Phase != c.phase {
			t.Fatalf("attempt %d: %v, report %+v; want a roll back in %s\nconsole:\n%s", i, err, rep, c.phase, strings.Join(vmA.Lines(), "\n"))
		}
		t.Logf("attempt %d failed in %s as injected and rolled back: %+v", i, c.phase, rep)
		goesOnAtSource(ctx, t, i, vmA, m, c.quiesced)
		if c.phase == "commit" {
			if err := vmB.Wait(); err != nil {
				t.Logf("destination QEMU: %v", err)
			}
		} else {
			vmB.Kill()
		}
	}
	waitResult(ctx, t, vmA, steps)
	if _, err := vmA.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		t.Fatalf("guest did not exit 0: %v\n%s", err, strings.Join(vmA.Lines(), "\n"))
	}
}

// goesOnAtSource checks what a migration attempt rolled back leaves: the
// guest resumed on the source (if it was quiesced), its job going on
// there, and the destination m keeping nothing (it discards the instance
// as it notices the failure, which may be after the source rolled back;
// once QEMU had moved the VM, it quit its copy).
func goesOnAtSource(ctx context.Context, t *testing.T, attempt int, vm *qemuvm.VM, m *mdev.Manager, quiesced bool) {
	t.Helper()
	if quiesced {
		line, err := vm.WaitLine(ctx, "ITERATE resume")
		if err != nil || !strings.Contains(line, "resumed") {
			t.Fatalf("attempt %d: guest did not resume on the source: %q %v\n%s", attempt, line, err, strings.Join(vm.Lines(), "\n"))
		}
	}
	if err := waitProgress(ctx, vm); err != nil {
		t.Fatalf("attempt %d: job stopped: %v\n%s", attempt, err, strings.Join(vm.Lines(), "\n"))
	}
	destinationForgets(t, m, fmt.Sprintf("attempt %d", attempt))
}

// destinationForgets waits until the destination m keeps no instance
// (it discards the one it was receiving as it notices the failure, which
// may be after the source has gone on); when, e.g. "attempt 2", names the
// moment in the failure.
func destinationForgets(t *testing.T, m *mdev.Manager, when string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); len(m.List()) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the destination still has instance %s", when, m.List()[0].UUID())
		}
	}
}

// faultyDestination is a destination in the test process, for fault
// injection: a manager on transport with its sockets in sockDir, and a
// migrate.Destination that fails at the step failAt names ("" none). b
// is that destination as a daemon to migrate to.
func faultyDestination(t *testing.T, env *migratetest.Env, sockDir string, tr transport.Socket) (m *mdev.Manager, b *daemon, failAt *atomic.Value) {
	t.Helper()
	failAt = &atomic.Value{}
	failAt.Store("")
	m, b = hookedDestination(t, env, sockDir, tr, func(step string) error {
		if step == failAt.Load().(string) {
			return fmt.Errorf("at %s", step)
		}
		return nil
	})
	return m, b, failAt
}

// hookedDestination is faultyDestination with inject called at each
// step of each incoming migration (migrate.Destination.InjectFault): an
// error fails the migration there.
func hookedDestination(t *testing.T, env *migratetest.Env, sockDir string, tr transport.Socket, inject func(step string) error) (m *mdev.Manager, b *daemon) {
	t.Helper()
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatal(err)
	}
	m, err = mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: sockDir, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	dst := &migrate.Destination{Manager: m, TLS: migratetest.Load(t, env.TLSDir), StepTimeout: time.Minute, InjectFault: inject}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- dst.Serve(sctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("destination Serve: %v", err)
		}
		m.Close()
		dev.Close()
	})
	return m, &daemon{RunDir: sockDir, MigrateAddr: ln.Addr().String()}
}

// cutRelay forwards one connection to addr and closes both ends after n
// bytes from the client.
func cutRelay(t *testing.T, addr string, n int64) string {
	t.Helper()
	return relay(t, "tcp", "127.0.0.1:0", addr, n, nil)
}

// relay listens on network address listen and forwards one connection to
// target. It closes both ends after n bytes from the client (n >= 0), and
// calls at[k] once k bytes from the client have passed. It returns the
// address it listens on.
func relay(t *testing.T, network, listen, target string, n int64, at map[int64]func()) string {
	t.Helper()
	l, err := net.Listen(network, listen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		s, err := net.Dial(network, target)
		if err != nil {
			return
		}
		defer s.Close()
		go io.Copy(c, s)
		var passed int64
		buf := make([]byte, 64<<10)
		for n < 0 || passed < n {
			want := int64(len(buf))
			if n >= 0 {
				want = min(want, n-passed)
			}
			k, err := c.Read(buf[:want])
			if k > 0 {
				if _, werr := s.Write(buf[:k]); werr != nil {
					return
				}
				for mark, f := range at {
					if passed < mark && passed+int64(k) >= mark {
						f()
					}
				}
				passed += int64(k)
			}
			if err != nil {
				return
			}
		}
	}()
	return l.Addr().String()
}

// lastStep is the highest step of the job's progress lines so far.
func lastStep(vm *qemuvm.VM) int {
	n := 0
	for _, l := range vm.Lines() {
		var step, steps int
		if _, err := fmt.Sscanf(l, "ITERATE step %d/%d", &step, &steps); err == nil {
			n = max(n, step)
		}
	}
	return n
}

// waitProgress waits for a progress line past the last one printed so far.
func waitProgress(ctx context.Context, vm *qemuvm.VM) error {
	was := lastStep(vm)
	for {
		if _, err := vm.WaitLine(ctx, "ITERATE step "); err != nil {
			return err
		}
		if lastStep(vm) > was {
			return nil
		}
	}
}

// waitResult waits for the job's result line and fails unless it is OK
// after steps steps.
func waitResult(ctx context.Context, t *testing.T, vm *qemuvm.VM, steps int) {
	t.Helper()
	line, err := vm.WaitLine(ctx, "ITERATE ")
	for err == nil && !strings.HasPrefix(line, "ITERATE OK") && !strings.HasPrefix(line, "ITERATE FAIL") {
		line, err = vm.WaitLine(ctx, "ITERATE ")
	}
	if err != nil || !strings.HasPrefix(line, fmt.Sprintf("ITERATE OK steps=%d", steps)) {
		t.Fatalf("job result %q, %v\nconsole:\n%s", line, err, strings.Join(vm.Lines(), "\n"))
	}
}

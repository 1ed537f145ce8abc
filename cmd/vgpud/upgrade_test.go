package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/mdev/runstate"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// TestUpgradeRefusedWhenNotItsTurn: an upgrade does not start while
// another is in progress, nor once the daemon settled for its shutdown
// (settle waits for the one in progress first), nor after a commit, nor
// while this vgpud is itself on probation after an upgrade.
func TestUpgradeRefusedWhenNotItsTurn(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, u *upgrader)
		want  error
	}{
		{"in progress", func(t *testing.T, u *upgrader) {
			if err := u.begin(); err != nil {
				t.Fatal(err)
			}
		}, control.ErrUpgradeBusy},
		{"shutting down", func(t *testing.T, u *upgrader) { u.settle() }, ErrStopping},
		{"shutting down after one in progress", func(t *testing.T, u *upgrader) {
			if err := u.begin(); err != nil {
				t.Fatal(err)
			}
			settled := make(chan struct{})
			go func() {
				u.settle()
				close(settled)
			}()
			u.finish() // the upgrade rolled back
			<-settled
		}, ErrStopping},
		{"committed", func(t *testing.T, u *upgrader) { u.state = upgradeHandedOver }, control.ErrUpgraded},
		{"on probation after its own upgrade", func(t *testing.T, u *upgrader) {
			u.upgraded = &incoming{over: make(chan struct{})}
			u.upgraded.to(inheritProbation)
		}, control.ErrUpgradeBusy},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newUpgrader(&upgrader{log: slog.New(slog.DiscardHandler)})
			tt.setup(t, u)
			if _, _, err := u.upgrade(context.Background(), "/bin/false"); !errors.Is(err, tt.want) {
				t.Errorf("upgrade() = %v, want %v", err, tt.want)
			}
		})
	}
}

// The upgrade tests below run this test binary as vgpud: its main, the
// old process, and again as each new process an upgrade starts (the old
// one executes its own file, with its environment).
const (
	// envTestVgpud, set to 1, makes the test binary vgpud (init below).
	envTestVgpud = "VGPUD_TEST_AS_VGPUD"
	// envTestFault names a file whose content says where a new process
	// dies or fails (upgradeTestHook's points): "ready", "serving" (it is
	// killed, SIGKILL, as a crash) or "health" (its health check fails);
	// anything else, nothing. Read at each point, so a test changes it
	// between upgrades.
	envTestFault = "VGPUD_TEST_UPGRADE_FAULT"
)

var (
	upgradeRounds    = flag.Int("upgrade.rounds", 6, "TestUpgradeProbation: upgrades whose new vgpud crashes or fails on probation")
	upgradeProbation = flag.String("upgrade.probation", "1s", "TestUpgradeProbation: vgpud's -upgrade-probation (0 shows the behaviour without one)")
)

func init() {
	if os.Getenv(envTestVgpud) != "1" {
		return
	}
	if path := os.Getenv(envTestFault); path != "" {
		upgradeTestHook = func(point string) error {
			b, _ := os.ReadFile(path)
			if strings.TrimSpace(string(b)) != point {
				return nil
			}
			if point == "health" {
				return errors.New("test: the health check fails")
			}
			// A crash: nothing deferred runs, nothing is cleaned up.
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	main()
	os.Exit(0)
}

// testVgpud is a vgpud process (this test binary, init above) on its own
// run directory: its ready line, its log.
type testVgpud struct {
	t       *testing.T
	dir     string
	runDir  string
	fault   string
	cmd     *exec.Cmd
	logPath string
	lines   chan string
	sock    string
}

func startTestVgpud(t *testing.T, args ...string) *testVgpud {
	t.Helper()
	// Short: the instances' socket paths must fit sockaddr_un.
	dir, err := os.MkdirTemp("", "vgpud-up")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	v := &testVgpud{t: t, dir: dir, runDir: filepath.Join(dir, "run"), fault: filepath.Join(dir, "fault"),
		logPath: filepath.Join(dir, "vgpud.log"), lines: make(chan string, 64)}
	logf, err := os.Create(v.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	v.cmd = exec.Command(os.Args[0], append([]string{"-run-dir", v.runDir, "-metrics-addr", "", "-log-level", "info",
		"-definitions", filepath.Join(dir, "defs")}, args...)...)
	v.cmd.Env = append(os.Environ(), envTestVgpud+"=1", envTestFault+"="+v.fault)
	v.cmd.Stdout, v.cmd.Stderr = w, logf
	err = v.cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	// Every vgpud of the run writes its ready line here; the pipe ends
	// when the last one exited.
	go func() {
		defer close(v.lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case v.lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-v.lines:
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "vgpud" || f[1] != "ready" || !strings.HasPrefix(f[2], "control=") {
			t.Fatalf("vgpud's first line %q\n%s", l, v.log())
		}
		v.sock = strings.TrimPrefix(f[2], "control=")
	case <-time.After(2 * time.Minute):
		v.cmd.Process.Kill()
		t.Fatalf("vgpud did not get ready\n%s", v.log())
	}
	return v
}

// becomeSubreaper makes this process a child subreaper
// (PR_SET_CHILD_SUBREAPER): a new vgpud and the workers, once the vgpud
// that started them exits, are this process's to reap. The function it
// returns undoes that.
func becomeSubreaper(t *testing.T) (undo func()) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	return func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) }
}

// finish is the end of a test whose vgpud processes have all been
// stopped: it reaps the worker (workerPID, if any), reads the log pipe
// to its end and, if the test failed, logs what vgpud wrote.
func (v *testVgpud) finish(t *testing.T, workerPID int) {
	if workerPID > 0 {
		reapPID(workerPID, time.Minute)
	}
	for range v.lines { // every vgpud ended: the pipe ends
	}
	if t.Failed() {
		t.Logf("vgpud log:\n%s", v.log())
	}
}

func (v *testVgpud) log() string {
	b, _ := os.ReadFile(v.logPath)
	return string(b)
}

// lockPID is the PID the run directory's lock file names.
func (v *testVgpud) lockPID() int {
	b, _ := os.ReadFile(filepath.Join(v.runDir, runstate.LockFile))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (v *testVgpud) setFault(point string) {
	if err := os.WriteFile(v.fault, []byte(point), 0o600); err != nil {
		v.t.Fatal(err)
	}
}

// alive reports whether pid runs (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// reapPID waits (this process is the subreaper) for pid to end, killing
// it after d.
func reapPID(pid int, d time.Duration) {
	done := make(chan struct{})
	go func() {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		syscall.Kill(pid, syscall.SIGKILL)
		<-done
	}
}

// guestJob is a guest's work on its vGPU through the instance's QEMU
// socket (mpqemutest plays QEMU, the guest driver library drives the
// ring): a buffer of counters in device memory, each launch adds one to
// every counter. The buffer lives in the worker: its content is the
// instance's device state.
type guestJob struct {
	d     *driver.Device
	p     driver.Program
	b     driver.Buffer
	count int // launches so far: every counter is seed+count
}

const guestCounters = 1024

// openGuest plays a VM's QEMU on an instance's socket (mpqemutest, 64
// MiB of guest RAM, closed when the test ends) and opens the guest
// driver on it with opts.
func openGuest(t *testing.T, socket string, opts driver.Options) (*mpqemutest.VM, *driver.Device) {
	t.Helper()
	qc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := mpqemutest.NewVM(qc, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	d, err := driver.Open(vm, vm, opts)
	if err != nil {
		t.Fatal(err)
	}
	return vm, d
}

// openVFIOUserGuest attaches a harness VM to an instance's vfio-user
// socket, as QEMU 11.1's vfio-user-pci does, and opens the guest driver on
// it.
func openVFIOUserGuest(t *testing.T, socket string, opts driver.Options) *driver.Device {
	t.Helper()
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := vfiousertest.New(conn, 64<<20)
	if err != nil {
		t.Fatalf("vfio-user attach: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	d, err := driver.Open(cl, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startGuestJob starts a guest job on the instance socket (mpqemu's or
// vfio-user's): its program built, its counters written.
func startGuestJob(t *testing.T, socket string) *guestJob {
	t.Helper()
	g := &guestJob{}
	if strings.HasSuffix(socket, ".vfio-user.sock") {
		g.d = openVFIOUserGuest(t, socket, driver.Options{Timeout: time.Minute, Kick: true})
	} else {
		_, g.d = openGuest(t, socket, driver.Options{Timeout: time.Minute})
	}
	var (
		blog string
		err  error
	)
	if g.p, blog, err = g.d.Build(`__kernel void inc(__global uint *c) { c[get_global_id(0)] += 1; }`, ""); err != nil {
		t.Fatalf("build: %v\n%s", err, blog)
	}
	if g.b, err = g.d.CreateBuffer(4 * guestCounters); err != nil {
		t.Fatal(err)
	}
	seed := make([]byte, 4*guestCounters)
	for i := range guestCounters {
		binary.LittleEndian.PutUint32(seed[4*i:], uint32(i*1000))
	}
	if err := g.d.Write(g.b, 0, seed); err != nil {
		t.Fatal(err)
	}
	return g
}

// startComputingGuest creates an instance (vgpu-small) on c and a guest
// job on it that computed once, and returns them with the PID of the
// instance's worker.
func startComputingGuest(ctx context.Context, t *testing.T, c *control.Client) (control.InstanceInfo, *guestJob, int) {
	t.Helper()
	info, err := c.Create(ctx, mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	g := startGuestJob(t, info.Socket)
	if err := g.step(); err != nil {
		t.Fatal(err)
	}
	shown, err := c.Instance(ctx, info.UUID)
	if err != nil || shown.WorkerPID == 0 {
		t.Fatalf("instance %s: %+v, %v; want one with a worker", info.UUID, shown, err)
	}
	return info, g, shown.WorkerPID
}

// step launches once more and checks every counter: those the device
// held (the state from before) plus one.
func (g *guestJob) step() error {
	if err := g.d.Launch(g.p, "inc", driver.Range1(guestCounters, 0), driver.BufferArg(g.b)); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	g.count++
	return g.check()
}

// check reads the buffer back from the device.
func (g *guestJob) check() error {
	got := make([]byte, 4*guestCounters)
	if err := g.d.Read(g.b, 0, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	for i := range guestCounters {
		if v, want := binary.LittleEndian.Uint32(got[4*i:]), uint32(i*1000+g.count); v != want {
			return fmt.Errorf("counter %d = %d, want %d (after %d launches): the device state was lost", i, v, want, g.count)
		}
	}
	return nil
}

// TestUpgradeProbation: issue 40 (8). A new vgpud that crashes right
// after Ready, or once it serves, or fails its health check, does not
// take the daemon down: the old one, which kept what it handed over for
// the probation, serves again, every instance with its device state, the
// same worker and the guest's own connection; the lock file names it
// again. Then an upgrade whose new vgpud lives through the probation:
// the old one exits with status 0 and the new one serves the same
// instance, device state and connection. Before the probation (run with
// -upgrade.probation=0) the old vgpud exits at the commit and the guest's
// vGPU is gone with the new one.
func TestUpgradeProbation(t *testing.T) { upgradeProbationRounds(t) }

// TestVFIOUserUpgradeProbation is TestUpgradeProbation on vfio-user (a
// harness client as QEMU 11.1's): the old vgpud resumes the sessions it
// paused and handed over (their watchers, the kick ioeventfd), and the
// new one's connection keeper leaves the connections it held to the old
// vgpud that serves them again.
func TestVFIOUserUpgradeProbation(t *testing.T) {
	upgradeProbationRounds(t, "-transport", "vfio-user")
}

func upgradeProbationRounds(t *testing.T, args ...string) {
	if testing.Short() {
		t.Skip("starts vgpud and a worker many times")
	}
	// The new vgpud is the old one's child; once the old one exits, it
	// and the workers are this process's (reaped here).
	defer becomeSubreaper(t)()
	v := startTestVgpud(t, append([]string{"-upgrade-probation", *upgradeProbation}, args...)...)
	oldPID := v.cmd.Process.Pid
	var newPID, workerPID int
	oldWaited := false
	defer func() {
		if !oldWaited {
			v.cmd.Process.Signal(syscall.SIGTERM)
			v.cmd.Wait()
		}
		if newPID > 0 {
			syscall.Kill(newPID, syscall.SIGTERM)
			reapPID(newPID, time.Minute)
		}
		v.finish(t, workerPID)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := control.NewClient(v.sock)
	info, g, worker := startComputingGuest(ctx, t, c)
	workerPID = worker
	if slices.Contains(args, "vfio-user") != strings.HasSuffix(info.Socket, ".vfio-user.sock") {
		t.Fatalf("vgpud %q serves the instance on %s", args, info.Socket)
	}
	faults := []string{"ready", "serving", "health"}
	for i := range *upgradeRounds {
		fault := faults[i%len(faults)]
		v.setFault(fault)
		start := time.Now()
		rep, err := c.Upgrade(ctx, control.UpgradeRequest{})
		if err == nil || !strings.Contains(err.Error(), "rolled back") {
			t.Fatalf("round %d: upgrade to a new vgpud that fails at %q = %+v, %v; want it rolled back", i, fault, rep, err)
		}
		t.Logf("round %d (%s): %v in %v", i, fault, err, time.Since(start).Round(time.Millisecond))
		if !alive(oldPID) {
			t.Fatalf("round %d: the old vgpud %d is gone", i, oldPID)
		}
		if pid := v.lockPID(); pid != oldPID {
			t.Errorf("round %d: the lock file names pid %d, want the old vgpud's %d", i, pid, oldPID)
		}
		// The guest's own connection, the same buffer in the same worker.
		if err := g.check(); err != nil {
			t.Fatalf("round %d: after the rollback: %v", i, err)
		}
		if err := g.step(); err != nil {
			t.Fatalf("round %d: computing after the rollback: %v", i, err)
		}
		shown, err := c.Instance(ctx, info.UUID)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if shown.WorkerPID != workerPID || !shown.Attached {
			t.Fatalf("round %d: worker %d (attached %v), want %d attached", i, shown.WorkerPID, shown.Attached, workerPID)
		}
	}

	// An upgrade whose new vgpud lives through its probation.
	v.setFault("")
	rep, err := c.Upgrade(ctx, control.UpgradeRequest{})
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	newPID = rep.NewPID
	werr := make(chan error, 1)
	go func() { werr <- v.cmd.Wait() }()
	select {
	case err := <-werr:
		oldWaited = true
		if err != nil {
			t.Errorf("the old vgpud after the probation: %v, want an exit with status 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the old vgpud %d still runs a minute after its probation", oldPID)
	}
	if !alive(newPID) {
		t.Fatalf("the new vgpud %d is gone", newPID)
	}
	if pid := v.lockPID(); pid != newPID {
		t.Errorf("the lock file names pid %d, want the new vgpud's %d", pid, newPID)
	}
	if !preparedBeforeTheState(v.log()) {
		t.Errorf("the new vgpud opened its devices or derived its sandbox after it asked for the state, inside the guests' pause:\n%s", v.log())
	} else if !strings.Contains(v.log(), "worker sandbox platform") {
		t.Errorf("no vgpud logged its sandbox's platforms:\n%s", v.log())
	}
	if err := g.step(); err != nil {
		t.Fatalf("computing on the new vgpud: %v", err)
	}
	c = control.NewClient(v.sock)
	shown, err := c.Instance(ctx, info.UUID)
	if err != nil || shown.WorkerPID != workerPID || !shown.Attached {
		t.Fatalf("on the new vgpud: %+v, %v; want worker %d attached", shown, err, workerPID)
	}
}

// preparedBeforeTheState reports whether, in a log of upgrades, the last
// new vgpud opened its devices and derived its workers' sandbox from the
// host's platforms before it received the old one's state (neither is
// logged after that): the old vgpud pauses its guests when the new one
// asks for the state, and what does not need the state must not
// lengthen that pause.
func preparedBeforeTheState(log string) bool {
	i := strings.LastIndex(log, "upgrade: state received")
	return i >= 0 && !strings.Contains(log[i:], "device opened") && !strings.Contains(log[i:], "worker sandbox platform")
}

// TestUpgradeProbationStop: a stop of the daemon while an upgrade is on
// probation, whichever process gets the SIGTERM (the old one is still
// the service's main process: systemd's KillMode=mixed signals it
// alone), is a stop, not a rollback: the new vgpud, which serves, does
// the shutdown (the sockets removed, the worker ended) and the old one
// exits after it, with status 0, touching nothing.
func TestUpgradeProbationStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts vgpud and a worker")
	}
	defer becomeSubreaper(t)()
	for _, signalled := range []string{"new", "old"} {
		t.Run(signalled, func(t *testing.T) {
			v := startTestVgpud(t, "-upgrade-probation", "10m")
			oldPID := v.cmd.Process.Pid
			var workerPID int
			oldWaited := false
			defer func() {
				if !oldWaited {
					v.cmd.Process.Kill()
					v.cmd.Wait()
				}
				v.finish(t, workerPID)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c := control.NewClient(v.sock)
			info, _, worker := startComputingGuest(ctx, t, c)
			workerPID = worker
			upgraded := make(chan error, 1)
			go func() {
				_, err := c.Upgrade(ctx, control.UpgradeRequest{})
				upgraded <- err
			}()
			// The new vgpud serves (its ready line), on probation.
			select {
			case l := <-v.lines:
				if !strings.HasPrefix(l, "vgpud ready ") {
					t.Fatalf("the new vgpud's line %q", l)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("the new vgpud did not get ready")
			}
			newPID := v.lockPID()
			if newPID == oldPID || !alive(newPID) {
				t.Fatalf("the lock names pid %d (the old vgpud is %d)", newPID, oldPID)
			}
			target := newPID
			if signalled == "old" {
				target = oldPID
			}
			if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			werr := make(chan error, 1)
			go func() { werr <- v.cmd.Wait() }()
			select {
			case err := <-werr:
				oldWaited = true
				if err != nil {
					t.Errorf("the old vgpud: %v, want an exit with status 0", err)
				}
			case <-time.After(3 * time.Minute):
				t.Fatal("the old vgpud did not exit")
			}
			if alive(newPID) {
				t.Errorf("the new vgpud %d still runs after the old one exited", newPID)
				syscall.Kill(newPID, syscall.SIGKILL)
				reapPID(newPID, time.Minute)
			}
			if err := <-upgraded; err != nil && !strings.Contains(err.Error(), "EOF") {
				t.Errorf("the upgrade's answer: %v", err)
			}
			// The new vgpud's shutdown removed what it served; no
			// rollback re-created any of it.
			for _, p := range []string{v.sock, info.Socket} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s after the stop: %v, want it removed", p, err)
				}
			}
			if strings.Contains(v.log(), "rolled back") {
				t.Errorf("a stop on probation rolled the upgrade back")
			}
		})
	}
}

// TestUpgradeBadConfigInstance: a new vgpud that cannot create an
// instance its configuration file newly names (here a profile that does
// not exist) fails the upgrade and exits, touching nothing: the old
// vgpud serves on, with its guest's worker and state. Before, the new
// vgpud returned the error and ran its shutdown over the instances and
// workers it had adopted, which the old one still served.
func TestUpgradeBadConfigInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts vgpud and a worker")
	}
	defer becomeSubreaper(t)()
	cfg := filepath.Join(t.TempDir(), "vgpud.json")
	if err := os.WriteFile(cfg, []byte(`{"instances": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	v := startTestVgpud(t, "-config", cfg)
	var workerPID int
	defer func() {
		v.cmd.Process.Signal(syscall.SIGTERM)
		v.cmd.Wait()
		v.finish(t, workerPID)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := control.NewClient(v.sock)
	info, g, worker := startComputingGuest(ctx, t, c)
	workerPID = worker
	bad := `{"instances": [{"uuid": "6c0b2e44-9e1f-4a53-8d5a-2f4b1c7e9a10", "profile": "no-such-profile"}]}`
	if err := os.WriteFile(cfg, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Upgrade(ctx, control.UpgradeRequest{})
	if err == nil {
		t.Fatalf("upgrade to a vgpud whose config names an instance it cannot create = %+v, want an error", rep)
	}
	t.Logf("upgrade: %v", err)
	if pid := v.lockPID(); pid != v.cmd.Process.Pid {
		t.Errorf("the lock file names pid %d, want the old vgpud's %d", pid, v.cmd.Process.Pid)
	}
	if err := g.check(); err != nil {
		t.Fatalf("after the failed upgrade: %v", err)
	}
	if err := g.step(); err != nil {
		t.Fatalf("computing after the failed upgrade: %v", err)
	}
	shown, err := c.Instance(ctx, info.UUID)
	if err != nil || shown.WorkerPID != workerPID || !shown.Attached {
		t.Fatalf("after the failed upgrade: %+v, %v; want worker %d attached", shown, err, workerPID)
	}
}

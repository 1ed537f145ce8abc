package tests

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/worker/child"
)

// vmTimeout bounds one guest's whole life under TCG on a loaded 2-core
// machine; it is a hang guard, not a performance assertion.
const vmTimeout = 5 * time.Minute

var (
	guestOnce sync.Once
	guestK    imagetest.Kernel
	guestRD   string
)

// guest returns the kernel and an initramfs with vgpu-init and vgpu-suite,
// built once for the package.
func guest(t *testing.T) (imagetest.Kernel, string) {
	t.Helper()
	k := imagetest.RequireKernel(t)
	guestOnce.Do(func() {
		guestK = k
		guestRD = sharedInitramfs(t, k, "vgpud-e2e-", "github.com/vgpud/vgpud/guestagent/cmd/vgpu-suite")
	})
	if guestRD == "" {
		t.Fatal("initramfs build failed earlier")
	}
	return guestK, guestRD
}

// keepDir hands Initramfs a temp dir that outlives the first test (the
// image is shared by the package's tests); TestMain removes it.
type keepDir struct {
	testing.TB
	dir string
}

func (k *keepDir) TempDir() string { return k.dir }

// sharedDirs are the directories sharedInitramfs made; TestMain removes
// them once every test has run.
var sharedDirs struct {
	sync.Mutex
	dirs []string
}

// sharedInitramfs builds, for the package's tests to share, an initramfs
// with progs in a directory named after prefix that outlives the test
// (and is removed at the end of the package's run).
func sharedInitramfs(t *testing.T, k imagetest.Kernel, prefix string, progs ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	sharedDirs.Lock()
	sharedDirs.dirs = append(sharedDirs.dirs, dir)
	sharedDirs.Unlock()
	return imagetest.Initramfs(&keepDir{TB: t, dir: dir}, k, progs...)
}

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	code := m.Run()
	for _, dir := range sharedDirs.dirs {
		os.RemoveAll(dir)
	}
	if migrationDir != "" {
		os.RemoveAll(migrationDir)
	}
	os.Exit(code)
}

// host is an in-process vgpud: one real OpenCL device, a manager with
// instance sockets for QEMU 7.2's x-pci-proxy-dev (mdev/mpqemu).
func host(t *testing.T) *mdev.Manager {
	t.Helper()
	return hostOn(t, mpqemu.Transport{})
}

// hostOn is host with the instance sockets speaking tr: mpqemu.Transport
// or vfiouser.Transport (QEMU 11.1's vfio-user-pci, run from the VMM
// root).
func hostOn(t *testing.T, tr transport.Socket) *mdev.Manager {
	t.Helper()
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", err)
	}
	// Not t.TempDir(): a long test name would push the sockets' paths
	// past a sockaddr_un's 107 bytes.
	dir, err := os.MkdirTemp("", "vgpud-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // after the manager's Close, registered below
	return newManager(t, d, mdev.Config{Devices: []gpu.Device{d}, SocketDir: dir, Transport: tr})
}

// newManager returns a manager of cfg on d, closed with d when t ends.
func newManager(t *testing.T, d gpu.Device, cfg mdev.Config) *mdev.Manager {
	t.Helper()
	m, err := mdev.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("manager close: %v", err)
		}
		d.Close()
	})
	return m
}

// runGuest boots a VM with inst attached, running vgpu-suite with args,
// and returns the suite's report and the console. An instance of an
// mpqemu host is attached by x-pci-proxy-dev to the host's QEMU 7.2; one
// of a vfio-user host by vfio-user-pci to QEMU 11.1 from the VMM root
// (make vmm-root), with sealed guest RAM.
func runGuest(ctx context.Context, t *testing.T, inst *mdev.Instance, args ...string) (suite.Report, string, error) {
	k, initrd := guest(t)
	ctx, cancel := context.WithTimeout(ctx, vmTimeout)
	defer cancel()
	app := "vgpu.run=vgpu-suite"
	if len(args) > 0 {
		app += " vgpu.args=" + strings.Join(args, ",")
	}
	cfg := qemuvm.Config{Kernel: k.Vmlinuz, Initrd: initrd, Append: app, MemMiB: 512}
	var qemuErr strings.Builder
	cfg.Stderr = &qemuErr
	vm, err := bootVGPU(ctx, inst.Socket(), cfg)
	if err != nil {
		return suite.Report{}, "", err
	}
	defer vm.Kill()
	line, err := vm.WaitLine(ctx, suite.LinePrefix)
	console := strings.Join(vm.Lines(), "\n")
	if err != nil {
		return suite.Report{}, console, fmt.Errorf("no result line: %w", err)
	}
	rep, err := suite.ParseLine(line)
	if err != nil {
		return rep, console, err
	}
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit="); err != nil {
		return rep, console, fmt.Errorf("guest did not finish: %w", err)
	}
	if err := vm.Wait(); err != nil {
		return rep, console, fmt.Errorf("qemu: %w", err)
	}
	if e := strings.TrimSpace(qemuErr.String()); e != "" {
		t.Logf("qemu stderr:\n%s", e)
		// QEMU 11.1 has nothing to warn about a vfio-user vGPU (it once
		// warned "Could not enable error recovery for the device": the
		// ERR interrupt, docs/vfio-user.md).
		if len(cfg.VFIOUser) > 0 && strings.Contains(e, "warning:") {
			t.Errorf("QEMU 11.1 warned about the vfio-user device:\n%s", e)
		}
	}
	return rep, console, nil
}

// bootVGPU starts cfg's VM with the instance listening at sock attached as
// vgpu0: an instance of an
// mpqemu host by x-pci-proxy-dev on the host's QEMU 7.2, one of a
// vfio-user host by vfio-user-pci on QEMU 11.1 from the VMM root (make
// vmm-root), with sealed guest RAM. cfg must be complete otherwise (the
// VMM root binds the paths it names).
func bootVGPU(ctx context.Context, sock string, cfg qemuvm.Config) (*qemuvm.VM, error) {
	if !strings.HasSuffix(sock, vfiouser.Transport{}.Suffix()) {
		f, err := qemuvm.DialProxy(sock)
		if err != nil {
			return nil, err
		}
		defer f.Close() // QEMU holds its own copy once started
		cfg.Devices = []qemuvm.ProxyDevice{{ID: "vgpu0", FD: f}}
		return qemuvm.Start(ctx, cfg)
	}
	root, err := qemuvm.RepoVMMRoot()
	if err != nil {
		return nil, err
	}
	cfg.VFIOUser = []qemuvm.VFIOUserDevice{{ID: "vgpu0", Socket: sock}}
	root.Apply(&cfg)
	return qemuvm.Start(ctx, cfg)
}

// qemuTransports are the socket transports the real-QEMU tests run on, each
// with its QEMU: 7.2 (the host's) over mpqemu, 11.1 (the VMM root's) over
// vfio-user.
var qemuTransports = []struct {
	name string
	tr   transport.Socket
}{
	{"qemu7.2-mpqemu", mpqemu.Transport{}},
	{"qemu11.1-vfio-user", vfiouser.Transport{}},
}

// guestRun is what runGuest returned for one guest.
type guestRun struct {
	rep     suite.Report
	console string
	err     error
}

// runBesideHostile runs the guest of bad (with badArgs) while the guest of
// good (with goodArgs) runs, waits for both and logs the hostile one's
// report; it returns the hostile guest's run and the good guest's report,
// console and error.
func runBesideHostile(t *testing.T, bad *mdev.Instance, badArgs []string, good *mdev.Instance,
	goodArgs ...string) (hostile guestRun, rep suite.Report, console string, err error) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		hostile.rep, hostile.console, hostile.err = runGuest(t.Context(), t, bad, badArgs...)
	}()
	rep, console, err = runGuest(t.Context(), t, good, goodArgs...)
	wg.Wait()
	t.Logf("hostile guest's report:\n%s", hostile.rep)
	return hostile, rep, console, err
}

func mustCreate(t *testing.T, m *mdev.Manager, profile string) *mdev.Instance {
	t.Helper()
	inst, err := m.Create(mdev.CreateRequest{Profile: profile})
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// TestGuestSuite: one guest runs the correctness suite on its vGPU, on
// each transport: QEMU 7.2 over x-pci-proxy-dev (mpqemu) and QEMU 11.1
// from the VMM root over vfio-user-pci.
func TestGuestSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	for _, tt := range qemuTransports {
		t.Run(tt.name, func(t *testing.T) {
			m := hostOn(t, tt.tr)
			inst := mustCreate(t, m, "vgpu-small")
			start := time.Now()
			rep, console, err := runGuest(t.Context(), t, inst)
			if err != nil {
				t.Fatalf("guest: %v\nconsole:\n%s", err, console)
			}
			t.Logf("boot, suite and power-off: %v", time.Since(start).Round(time.Millisecond))
			if !rep.OK() || len(rep.Cases) < 5 {
				t.Fatalf("suite in the guest:\n%s\nconsole:\n%s", rep, console)
			}
			if rep.Profile != "vgpu-small" {
				t.Errorf("guest saw profile %q", rep.Profile)
			}
			if s := inst.Stats(); s.Launches.Load() == 0 || s.BytesToDev.Load() == 0 {
				t.Errorf("host saw no work: launches %d, bytes %d", s.Launches.Load(), s.BytesToDev.Load())
			}
		})
	}
}

// TestTwoGuestsShareDevice: two VMs at once on one physical device.
func TestTwoGuestsShareDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	m := host(t)
	insts := []*mdev.Instance{mustCreate(t, m, "vgpu-small"), mustCreate(t, m, "vgpu-small")}
	type result struct {
		rep     suite.Report
		console string
		err     error
	}
	res := make([]result, len(insts))
	var wg sync.WaitGroup
	for i, inst := range insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Different seeds: each guest checks its own data.
			r, c, err := runGuest(t.Context(), t, inst, fmt.Sprintf("-seed=%d", i+1))
			res[i] = result{r, c, err}
		}()
	}
	wg.Wait()
	for i, r := range res {
		if r.err != nil || !r.rep.OK() {
			t.Errorf("guest %d: err %v\n%s\nconsole:\n%s", i, r.err, r.rep, r.console)
		}
	}
}

// TestHostileGuest: a hostile guest sends bad addresses, foreign handles,
// an over-quota allocation, a garbage opcode and a doorbell beyond its
// ring, while a good guest runs the suite; the hostile one gets error
// statuses, the good one's results stay correct and vgpud keeps serving:
// the good instance takes a second VM, which on vfio-user is a second
// client session on the same socket. On both transports: QEMU 7.2 over
// mpqemu and QEMU 11.1 over vfio-user, the default on modern QEMU.
func TestHostileGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	for _, tt := range qemuTransports {
		t.Run(tt.name, func(t *testing.T) {
			m := hostOn(t, tt.tr)
			good, bad := mustCreate(t, m, "vgpu-small"), mustCreate(t, m, "vgpu-small")
			h, rep, console, err := runBesideHostile(t, bad, []string{"-mode=hostile"}, good)
			if h.err != nil || !h.rep.OK() {
				t.Errorf("hostile guest: err %v\n%s\nconsole:\n%s", h.err, h.rep, h.console)
			}
			if err != nil || !rep.OK() {
				t.Errorf("good guest: err %v\n%s\nconsole:\n%s", err, rep, console)
			}
			if s := bad.Stats(); s.Errors.Load() == 0 {
				t.Errorf("host counted no errors for the hostile guest")
			}
			// vgpud still serves: the good instance takes another VM.
			rep, console, err = runGuest(t.Context(), t, good, "-vector-n=4096", "-reduce-n=4096")
			if err != nil || !rep.OK() {
				t.Errorf("second run after the hostile guest: err %v\n%s\nconsole:\n%s", err, rep, console)
			}
		})
	}
}

package mdev

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

var (
	devOnce sync.Once
	testDev gpu.Device
	devErr  error
)

func openGPU(t *testing.T) gpu.Device {
	t.Helper()
	devOnce.Do(func() { testDev, devErr = gpu.Open(os.Getenv("VGPUD_TEST_DEVICE")) })
	if devErr != nil {
		t.Fatalf("gpu.Open: %v", devErr)
	}
	return testDev
}

func newManager(t *testing.T, profiles []Profile) *Manager {
	t.Helper()
	return newManagerN(t, 1, profiles)
}

// newManagerN is a manager over n devices (the test device, n times: in
// placement tests the placement is what is under test, not the device).
func newManagerN(t *testing.T, n int, profiles []Profile) *Manager {
	t.Helper()
	devs := make([]gpu.Device, n)
	for i := range devs {
		devs[i] = openGPU(t)
	}
	return startManager(t, Config{Devices: devs, Profiles: profiles, SocketDir: t.TempDir(), Transport: mpqemu.Transport{}})
}

// startManager is NewManager(cfg), closed (without error) at the test's
// end.
func startManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatalf("NewManager = %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	return m
}

// mustCreate creates an instance on m, failing the test if it cannot.
func mustCreate(t *testing.T, m *Manager, req CreateRequest) *Instance {
	t.Helper()
	inst, err := m.Create(req)
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// attach connects a harness VM to the instance's socket, like QEMU does.
func attach(t *testing.T, inst *Instance) *mpqemutest.VM {
	t.Helper()
	vm, err := mpqemutest.Dial(inst.Socket(), 64<<20)
	if err != nil {
		t.Fatalf("NewVM = %v", err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

func openDriver(t *testing.T, vm *mpqemutest.VM) *driver.Device {
	t.Helper()
	d, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		t.Fatalf("driver.Open = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestProfiles(t *testing.T) {
	for _, p := range DefaultProfiles() {
		if err := p.Validate(); err != nil {
			t.Errorf("default profile %s: %v", p.Name, err)
		}
	}
	bad := []Profile{
		{Name: "", MemBytes: 1 << 30, Share: 1, MaxPerDevice: 1},
		{Name: "has space", MemBytes: 1 << 30, Share: 1, MaxPerDevice: 1},
		{Name: "tiny", MemBytes: 1, Share: 1, MaxPerDevice: 1},
		{Name: "noshare", MemBytes: 1 << 30, MaxPerDevice: 1},
		{Name: "none", MemBytes: 1 << 30, Share: 1},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want error", p)
		}
	}
}

func TestCreateDestroy(t *testing.T) {
	m := newManager(t, []Profile{{Name: "p", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 2}})
	a := mustCreate(t, m, CreateRequest{Profile: "p"})
	if _, err := os.Stat(a.Socket()); err != nil {
		t.Errorf("socket: %v", err)
	}
	const id = "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"
	if _, err := m.Create(CreateRequest{Profile: "p", UUID: id}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		req  CreateRequest
		want error
	}{
		{CreateRequest{Profile: "p"}, ErrNoCapacity},
		{CreateRequest{Profile: "nope"}, ErrUnknownProfile},
		{CreateRequest{Profile: "p", UUID: id}, ErrExists},
	}
	for _, tt := range tests {
		if _, err := m.Create(tt.req); !errors.Is(err, tt.want) {
			t.Errorf("Create(%+v) = %v, want %v", tt.req, err, tt.want)
		}
	}
	if _, err := m.Create(CreateRequest{Profile: "p", UUID: "not-a-uuid"}); err == nil {
		t.Errorf("Create(bad uuid) = nil error")
	}
	if got := len(m.List()); got != 2 {
		t.Errorf("len(List()) = %d, want 2", got)
	}
	if err := m.Destroy(id); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Destroy twice = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(a.Socket()), id+".sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket of destroyed instance: %v", err)
	}
}

// TestSuiteOverHarness runs the guest suite through the whole host stack:
// instance socket, multi-process protocol, register file, aggregator and
// the real OpenCL device.
func TestSuiteOverHarness(t *testing.T) {
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	d := openDriver(t, attach(t, inst))
	if got := d.Info().Profile; got != "vgpu-small" {
		t.Errorf("profile seen by the guest = %q", got)
	}
	rep := suite.Run(context.Background(), d, suite.Options{VectorN: 65536, ReduceN: 1 << 18})
	if !rep.OK() {
		t.Fatalf("suite failed:\n%s", rep)
	}
	if !inst.Attached() {
		t.Errorf("Attached() = false during a session")
	}
	// mpqemu's socket is dialed by whoever starts QEMU and passed on:
	// the VM's process is not known from it.
	if got := inst.VMPID(); got != 0 {
		t.Errorf("VMPID() = %d during an mpqemu session, want 0", got)
	}
}

// vmDialedTransport is mpqemu whose VMs dial their sockets themselves,
// as vfio-user's do.
type vmDialedTransport struct{ mpqemu.Transport }

func (vmDialedTransport) ConnectedByVM() bool { return true }

// TestVMPID: on a transport whose VMs dial the instance socket
// themselves, the instance knows the attached VM's process (its agent
// channel then takes only that process's connection), and forgets it
// when the VM detaches.
func TestVMPID(t *testing.T) {
	m := startManager(t, Config{Devices: []gpu.Device{openGPU(t)}, SocketDir: t.TempDir(), Transport: vmDialedTransport{}})
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	vm := attach(t, inst)
	openDriver(t, vm)
	if got := inst.VMPID(); got != os.Getpid() {
		t.Errorf("VMPID() = %d during a session, want %d (the test dialed)", got, os.Getpid())
	}
	vm.Close()
	for inst.Attached() { // its hang-up is noticed asynchronously
		time.Sleep(time.Millisecond)
	}
	if got := inst.VMPID(); got != 0 {
		t.Errorf("VMPID() = %d after the VM left, want 0", got)
	}
}

// TestHostileGuestDoesNotDisturbNeighbour runs the hostile guest and a
// good guest at once on one device.
func TestHostileGuestDoesNotDisturbNeighbour(t *testing.T) {
	m := newManager(t, nil)
	good := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	bad := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	gd, bd := openDriver(t, attach(t, good)), openDriver(t, attach(t, bad))
	var hostile suite.Report
	done := make(chan struct{})
	go func() {
		defer close(done)
		hostile = suite.RunHostile(context.Background(), bd, suite.Options{VectorN: 4096})
	}()
	rep := suite.Run(context.Background(), gd, suite.Options{VectorN: 65536, ReduceN: 1 << 18})
	<-done
	if !rep.OK() {
		t.Errorf("good guest:\n%s", rep)
	}
	if !hostile.OK() {
		t.Errorf("hostile guest did not get the expected errors:\n%s", hostile)
	}
	if st, _ := good.Error(); st != abi.StatusOK {
		t.Errorf("good guest's error register = %v", st)
	}
}

// TestMalformedConnection checks that a peer speaking garbage loses only
// its own connection; the instance accepts a proper VM afterwards and
// another instance is never disturbed.
func TestMalformedConnection(t *testing.T) {
	m := newManager(t, nil)
	a := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	b := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	bd := openDriver(t, attach(t, b))

	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: a.Socket(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 16)
	garbage[0] = 99 // unknown command
	if _, err := c.Write(garbage); err != nil {
		t.Fatal(err)
	}
	// vgpud hangs up on us.
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Errorf("read after garbage = %d bytes, want EOF", n)
	}
	c.Close()

	rep := suite.Run(context.Background(), openDriver(t, attach(t, a)), suite.Options{VectorN: 4096, ReduceN: 4096})
	if !rep.OK() {
		t.Errorf("instance after a bad connection:\n%s", rep)
	}
	if rep := suite.Run(context.Background(), bd, suite.Options{VectorN: 4096, ReduceN: 4096}); !rep.OK() {
		t.Errorf("neighbour:\n%s", rep)
	}
}

// TestCompletionRaisesINTx: the aggregator's completion hook reaches the
// attached VM's irqfd once the guest enables the completion interrupt
// (docs/ABI.md "Interrupts"; the guest side cannot run under TCG).
func TestCompletionRaisesINTx(t *testing.T) {
	m := newManager(t, []Profile{{Name: "p", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 1}})
	inst := mustCreate(t, m, CreateRequest{Profile: "p"})
	vm := attach(t, inst)
	d := openDriver(t, vm)
	if n, err := vm.IRQCount(); err != nil || n != 0 {
		t.Fatalf("IRQCount() with the interrupt disabled = %d, %v, want 0, nil", n, err)
	}
	vm.Write32(abi.RegIntStatus, abi.IntCompletion)
	vm.Write32(abi.RegIntEnable, abi.IntCompletion)
	if err := d.Finish(); err != nil { // a fence: one command, one completion
		t.Fatal(err)
	}
	if n, err := vm.WaitIRQ(10 * time.Second); err != nil || n == 0 {
		t.Errorf("WaitIRQ() after a completion = %d, %v, want > 0, nil", n, err)
	}
	if got := vm.Read32(abi.RegIntStatus); got&abi.IntCompletion == 0 {
		t.Errorf("RegIntStatus = %#x, want IntCompletion set", got)
	}
}

// TestSuiteWithKick runs the guest suite with the ABI 1.3 kick doorbell
// through a worker process: every doorbell is a RegRingKick, the worker
// reads the tail from the shadow in guest RAM. A shadow outside guest RAM
// latches StatusBadAddress and loses nothing.
func TestSuiteWithKick(t *testing.T) {
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	vm := attach(t, inst)
	d, err := driver.Open(vm, vm, driver.Options{Kick: true})
	if err != nil {
		t.Fatalf("driver.Open = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if vm.Read32(abi.RegTailShadowLo) == 0 {
		t.Fatal("the driver did not program the tail shadow")
	}
	rep := suite.Run(context.Background(), d, suite.Options{VectorN: 4096, ReduceN: 1 << 14})
	if !rep.OK() {
		t.Fatalf("suite failed:\n%s", rep)
	}
	if rung := d.Stats().Doorbells; inst.Stats().Doorbells.Load() < rung || rung == 0 {
		t.Errorf("device counted %d doorbells, the driver rang %d", inst.Stats().Doorbells.Load(), rung)
	}

	lo, hi := vm.Read32(abi.RegTailShadowLo), vm.Read32(abi.RegTailShadowHi)
	vm.Write32(abi.RegTailShadowHi, 0x7fff) // far outside the VM's 64 MiB
	vm.Write32(abi.RegRingKick, 1)
	waitFor(t, "StatusBadAddress from a kick", func() bool { st, _ := inst.Error(); return st == abi.StatusBadAddress })
	vm.Write32(abi.RegErrorAck, 1)
	vm.Write32(abi.RegTailShadowLo, lo)
	vm.Write32(abi.RegTailShadowHi, hi)
	if rep := suite.Run(context.Background(), d, suite.Options{VectorN: 4096, ReduceN: 1 << 14}); !rep.OK() {
		t.Fatalf("suite after a bad kick failed:\n%s", rep)
	}
}

// waitFor polls cond (state another process changes, with no event to
// wait on) until it holds, failing after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNames: a name is unique, never a UUID, and stands for the UUID in
// Resolve; labels are checked.
func TestNames(t *testing.T) {
	m := newManager(t, nil)
	a := mustCreate(t, m, CreateRequest{Profile: "vgpu-small", Name: "web"})
	for _, c := range []struct {
		req  CreateRequest
		want error
	}{
		{CreateRequest{Profile: "vgpu-small", Name: "web"}, ErrExists},
		{CreateRequest{Profile: "vgpu-small", Name: "-x"}, ErrBadName},
		{CreateRequest{Profile: "vgpu-small", Name: "has space"}, ErrBadName},
		{CreateRequest{Profile: "vgpu-small", Name: "0b5a9b5e-6f3e-4c54-9d5c-1f2b3c4d5e6f"}, ErrBadName},
		{CreateRequest{Profile: "vgpu-small", Labels: map[string]string{"bad key": "v"}}, ErrBadName},
	} {
		if _, err := m.Create(c.req); !errors.Is(err, c.want) {
			t.Errorf("Create(%+v) = %v, want %v", c.req, err, c.want)
		}
	}
	for _, ref := range []string{"web", a.UUID(), strings.ToUpper(a.UUID())} {
		if id, err := m.Resolve(ref); err != nil || id != a.UUID() {
			t.Errorf("Resolve(%q) = %q, %v", ref, id, err)
		}
	}
	if _, err := m.Resolve("nosuch"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve(nosuch) = %v", err)
	}
	if got := len(m.List()); got != 1 {
		t.Errorf("%d instances after the refused creates, want 1", got)
	}
}

package mdev

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev/mpqemu"
)

// ocProfile advertises 64 MiB: more than device 0 of newOvercommitManager
// holds.
var ocProfile = Profile{Name: "oc", MemBytes: 64 << 20, Share: 1, MaxPerDevice: 4}

// newOvercommitManager is a manager over two devices (the test device
// twice) that let their instances hold 12 MiB and 48 MiB together.
func newOvercommitManager(t *testing.T) *Manager {
	t.Helper()
	devs := []gpu.Device{openGPU(t), openGPU(t)}
	return startManager(t, Config{Devices: devs, Profiles: []Profile{ocProfile, {Name: "oc-small", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 4}},
		SocketDir: t.TempDir(), Transport: mpqemu.Transport{}, DeviceMemory: []uint64{12 << 20, 48 << 20}})
}

// ocGuest is an instance on device dev with a driver open on it.
type ocGuest struct {
	inst *Instance
	d    *driver.Device
}

func newOCGuest(t *testing.T, m *Manager, dev int, policy OvercommitPolicy, timeout time.Duration) *ocGuest {
	t.Helper()
	inst := mustCreate(t, m, CreateRequest{Profile: ocProfile.Name, Device: &dev})
	if err := m.SetOvercommit(inst.UUID(), Overcommit{Policy: policy, Timeout: Duration(timeout)}); err != nil {
		t.Fatal(err)
	}
	vm := attach(t, inst)
	d, err := driver.Open(vm, vm, driver.Options{Timeout: guestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &ocGuest{inst: inst, d: d}
}

// fill creates a buffer of n bytes holding pattern seed.
func (g *ocGuest) fill(t *testing.T, n int, seed byte) driver.Buffer {
	t.Helper()
	b, err := g.d.CreateBuffer(uint64(n))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.d.Write(b, 0, pattern(n, seed)); err != nil {
		t.Fatal(err)
	}
	if err := g.d.Finish(); err != nil {
		t.Fatalf("fill %d bytes: %v", n, err)
	}
	return b
}

// check reads b back and compares it with pattern seed.
func (g *ocGuest) check(t *testing.T, b driver.Buffer, seed byte) {
	t.Helper()
	got := make([]byte, b.Size)
	if err := g.d.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(int(b.Size), seed)) {
		t.Fatalf("buffer %d lost its content", b.Handle)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// TestOvercommitNone: within the quota but past the device, the
// allocation fails with StatusOutOfResources; the instance goes on.
func TestOvercommitNone(t *testing.T) {
	m := newOvercommitManager(t)
	g := newOCGuest(t, m, 0, OvercommitNone, 0)
	b := g.fill(t, 8<<20, 1)
	if _, err := g.d.CreateBuffer(8 << 20); err != nil {
		t.Fatal(err)
	}
	err := g.d.Finish()
	if st := abi.StatusOf(err); st != abi.StatusOutOfResources {
		t.Fatalf("allocation past the device: %v, want out of resources", err)
	}
	g.check(t, b, 1)
	if st := m.pool.MemoryStats(0); st.Refused != 1 || st.Used != 8<<20 {
		t.Fatalf("ledger %+v, want 1 refusal and 8 MiB used", st)
	}
}

// TestOvercommitBlock: the allocation waits while another instance holds
// the device, and completes when it frees; with no one freeing it ends
// with StatusOutOfResources after the timeout, not a hang.
func TestOvercommitBlock(t *testing.T) {
	m := newOvercommitManager(t)
	hog := newOCGuest(t, m, 0, OvercommitNone, 0)
	hb := hog.fill(t, 8<<20, 2)
	g := newOCGuest(t, m, 0, OvercommitBlock, time.Minute)
	done := make(chan error, 1)
	var b driver.Buffer
	go func() {
		var err error
		if b, err = g.d.CreateBuffer(6 << 20); err == nil {
			err = g.d.Finish()
		}
		done <- err
	}()
	waitFor(t, "the allocation to wait", func() bool { return m.pool.MemoryStats(0).Waited == 1 })
	select {
	case err := <-done:
		t.Fatalf("allocation done while the device was full: %v", err)
	default:
	}
	if err := hog.d.Free(hb); err != nil {
		t.Fatal(err)
	}
	if err := hog.d.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("blocked allocation: %v", err)
	}
	if err := g.d.Write(b, 0, pattern(6<<20, 3)); err != nil {
		t.Fatal(err)
	}
	g.check(t, b, 3)

	// Nobody frees: a clean error after the timeout.
	if err := m.SetOvercommit(g.inst.UUID(), Overcommit{Policy: OvercommitBlock, Timeout: Duration(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	hog.fill(t, 4<<20, 4)
	if _, err := g.d.CreateBuffer(8 << 20); err != nil {
		t.Fatal(err)
	}
	if st := abi.StatusOf(g.d.Finish()); st != abi.StatusOutOfResources {
		t.Fatalf("blocked allocation nobody made room for: %v, want out of resources", st)
	}
	if st := m.pool.MemoryStats(0); st.WaitTimeouts != 1 {
		t.Fatalf("ledger %+v, want one wait in vain", st)
	}
}

// TestOvercommitMigrate: the allocation moves the instance to the device
// with room, where it completes; its buffers and programs came along.
func TestOvercommitMigrate(t *testing.T) {
	m := newOvercommitManager(t)
	g := newOCGuest(t, m, 0, OvercommitMigrate, 0)
	b := g.fill(t, 8<<20, 5)
	prog, _, err := g.d.Build(`__kernel void inc(__global uint* x) { x[get_global_id(0)] += 1; }`, "")
	if err != nil {
		t.Fatal(err)
	}
	nb := g.fill(t, 8<<20, 6) // past device 0: moves to device 1
	if dev := g.inst.Device(); dev != 1 {
		t.Fatalf("instance on device %d after the shortage, want 1", dev)
	}
	g.check(t, b, 5)
	g.check(t, nb, 6)
	if err := g.d.Launch(prog, "inc", driver.NDRange{Dims: 1, Global: [3]uint64{4}}, driver.BufferArg(b)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if err := g.d.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	if want := pattern(4, 5); got[0] != want[0]+1 {
		t.Fatalf("kernel after the move: byte 0 = %d, want %d", got[0], want[0]+1)
	}
	if st := g.inst.Overcommit(); st.Migrations != 1 {
		t.Fatalf("overcommit stats %+v", st)
	}
	if m0, m1 := m.pool.Memory(0).Held(g.inst.UUID()), m.pool.Memory(1).Held(g.inst.UUID()); m0 != 0 || m1 != 16<<20 {
		t.Fatalf("ledgers hold %d on device 0 and %d on device 1", m0, m1)
	}
}

// TestOvercommitSuspend: the allocation sends the instance's state out to
// host memory until the device has room, then it comes back and the
// allocation completes.
func TestOvercommitSuspend(t *testing.T) {
	m := newOvercommitManager(t)
	hog := newOCGuest(t, m, 0, OvercommitNone, 0)
	hb := hog.fill(t, 6<<20, 7)
	g := newOCGuest(t, m, 0, OvercommitSuspend, 0)
	b := g.fill(t, 4<<20, 8)
	done := make(chan error, 1)
	var nb driver.Buffer
	go func() {
		var err error
		if nb, err = g.d.CreateBuffer(4 << 20); err == nil {
			err = g.d.Finish()
		}
		done <- err
	}()
	waitFor(t, "the suspension", func() bool { return g.inst.Overcommit().Suspended })
	if held := m.pool.Memory(0).Held(g.inst.UUID()); held != 0 {
		t.Fatalf("a suspended instance holds %d bytes of the device", held)
	}
	if err := hog.d.Free(hb); err != nil {
		t.Fatal(err)
	}
	if err := hog.d.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("allocation across the suspension: %v", err)
	}
	g.check(t, b, 8)
	if err := g.d.Write(nb, 0, pattern(4<<20, 9)); err != nil {
		t.Fatal(err)
	}
	g.check(t, nb, 9)
	if st := g.inst.Overcommit(); st.Suspensions != 1 || st.Suspended {
		t.Fatalf("overcommit stats %+v", st)
	}
}

// TestReallocTransparent: an operator's reallocation moves a running
// instance to the other device and a smaller profile with its state.
func TestReallocTransparent(t *testing.T) {
	m := newOvercommitManager(t)
	g := newOCGuest(t, m, 0, OvercommitNone, 0)
	b := g.fill(t, 4<<20, 10)
	dev := 1
	res, err := m.Realloc(context.Background(), g.inst.UUID(), ReallocRequest{Device: &dev, Profile: "oc-small"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Transparent || res.To != 1 || g.inst.Device() != 1 || g.inst.Profile().Name != "oc-small" || g.inst.MemQuota() != 16<<20 {
		t.Fatalf("realloc %+v: instance on %d as %s (quota %d)", res, g.inst.Device(), g.inst.Profile().Name, g.inst.MemQuota())
	}
	g.check(t, b, 10)
	// It holds more than the small profile's quota: refused, nothing moves.
	g.fill(t, 8<<20, 11)
	if err := m.SetProfile(g.inst.UUID(), ocProfile.Name); err != nil {
		t.Fatal(err)
	}
	g.fill(t, 8<<20, 12)
	back := 0
	if _, err := m.Realloc(context.Background(), g.inst.UUID(), ReallocRequest{Device: &back, Profile: "oc-small"}); !errors.Is(err, ErrReallocRefused) {
		t.Fatalf("realloc of 20 MiB into a 16 MiB profile: %v, want refused", err)
	}
	if g.inst.Device() != 1 {
		t.Fatalf("a refused reallocation moved the instance to %d", g.inst.Device())
	}
	g.check(t, b, 10)
}

// TestPauseRefusedWhileMoving: an upgrade in place does not start while an
// instance is being moved (its state is between two workers, or in host
// memory), and a reallocation does not start while one is in progress.
func TestPauseRefusedWhileMoving(t *testing.T) {
	m := newOvercommitManager(t)
	dev := 0
	inst := mustCreate(t, m, CreateRequest{Profile: ocProfile.Name, Device: &dev})
	inst.relocating.Store(true)
	defer inst.relocating.Store(false)
	if err := m.Pause(context.Background()); !errors.Is(err, ErrReallocating) {
		t.Fatalf("Pause with an instance moving: %v, want ErrReallocating", err)
	}
	one := 1
	if _, err := m.Realloc(context.Background(), inst.UUID(), ReallocRequest{Device: &one}); !errors.Is(err, ErrReallocating) {
		t.Fatalf("Realloc of an instance moving: %v, want ErrReallocating", err)
	}
}

// TestReallocUnderLoad: a guest keeps submitting commands (and ringing its
// doorbell) while its instance moves between the devices and back three
// times: nothing hangs, no command fails, its data comes along each time.
func TestReallocUnderLoad(t *testing.T) {
	m := newOvercommitManager(t)
	g := newOCGuest(t, m, 0, OvercommitNone, 0)
	b := g.fill(t, 4<<20, 13)
	prog, _, err := g.d.Build(`__kernel void inc(__global uint* x) { x[get_global_id(0)] += 1; }`, "")
	if err != nil {
		t.Fatal(err)
	}
	counter := g.fill(t, 4096, 0)
	zeroed := make([]byte, 4096)
	if err := g.d.Write(counter, 0, zeroed); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	launches := 0
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := g.d.Launch(prog, "inc", driver.Range1(1024, 0), driver.BufferArg(counter)); err != nil {
				done <- err
				return
			}
			if err := g.d.Finish(); err != nil {
				done <- err
				return
			}
			launches++
		}
	}()
	for i, dev := range []int{1, 0, 1} {
		d := dev
		if _, err := m.Realloc(context.Background(), g.inst.UUID(), ReallocRequest{Device: &d}); err != nil {
			close(stop)
			<-done
			t.Fatalf("move %d to device %d: %v", i, dev, err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("guest during the moves: %v", err)
	}
	g.check(t, b, 13)
	got := make([]byte, 4096)
	if err := g.d.Read(counter, 0, got); err != nil {
		t.Fatal(err)
	}
	if n := int(uint32(got[0]) | uint32(got[1])<<8 | uint32(got[2])<<16 | uint32(got[3])<<24); n != launches {
		t.Fatalf("counter %d after %d launches across three moves", n, launches)
	}
}

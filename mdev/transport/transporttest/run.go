package transporttest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mmio"
)

// RAM is the guest RAM every conformance guest gets.
const RAM = 64 << 20

// small keeps the suite's jobs short: the conformance suite checks the
// transport, the guest suite's own tests check the arithmetic.
var small = suite.Options{VectorN: 4096, ReduceN: 1 << 14}

// wait bounds every wait for the device.
const wait = 30 * time.Second

var (
	devOnce sync.Once
	dev     gpu.Device
	devErr  error
)

// device opens the physical device once per test binary.
func device(t *testing.T) gpu.Device {
	devOnce.Do(func() { dev, devErr = gpu.Open("") })
	if devErr != nil {
		t.Fatalf("open the physical device: %v", devErr)
	}
	return dev
}

// Run is the conformance suite: it runs the same tests against tr that it
// runs against every transport, each on a fresh instance of a manager
// whose VMs attach through tr. Config space and BAR sizing, the
// registers, the whole guest suite over the transport (DMA through
// scattered guest pages, with the value doorbell and with the kick),
// DMA bounds, interrupts and their resampling, reset, hang-up and
// reconnect, and each of tr's hostile peers, after which the instance
// must serve a fresh guest and a neighbour must have lost nothing.
func Run(t *testing.T, tr Transport) {
	cfg := mdev.Config{Devices: []gpu.Device{device(t)}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if s := tr.Socket(); s != nil {
		// Short: a Unix socket path holds at most 107 bytes.
		dir, err := os.MkdirTemp("", "tc")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		cfg.SocketDir, cfg.Transport = dir, s
	}
	m, err := mdev.NewManager(cfg)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("manager Close: %v", err)
		}
	})
	c := &conformance{m: m, tr: tr}
	t.Run("config", c.config)
	t.Run("registers", c.registers)
	t.Run("suite", func(t *testing.T) { c.suite(t, false) })
	t.Run("kick", func(t *testing.T) { c.suite(t, true) })
	t.Run("dma-bounds", c.dmaBounds)
	t.Run("interrupts", c.interrupts)
	t.Run("reset", c.reset)
	t.Run("hangup", c.hangup)
	for _, a := range tr.Hostile() {
		t.Run("hostile/"+a.Name, func(t *testing.T) { c.hostile(t, a) })
	}
}

type conformance struct {
	m  *mdev.Manager
	tr Transport
}

// instance creates an instance that lives as long as the test.
func (c *conformance) instance(t *testing.T) *mdev.Instance {
	t.Helper()
	inst, err := c.m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := c.m.Destroy(inst.UUID()); err != nil && !errors.Is(err, mdev.ErrNotFound) {
			t.Errorf("Destroy: %v", err)
		}
	})
	return inst
}

// open opens the reference guest driver on g.
func open(t *testing.T, g Guest, opts driver.Options) *driver.Device {
	t.Helper()
	d, err := driver.Open(g, g, opts)
	if err != nil {
		t.Fatalf("driver.Open: %v (transport: %v)", err, g.Err())
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// waitUntil polls cond, state another goroutine or process changes with
// no event to wait on, failing after wait.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(wait); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// config checks the PCI identity and BAR0's sizing as firmware probes it.
func (c *conformance) config(t *testing.T) {
	g := c.tr.Attach(t, c.instance(t), RAM)
	for _, f := range []struct {
		name      string
		off, size uint32
		want      uint32
	}{
		{"vendor", mmio.CfgVendorID, 2, abi.VendorID},
		{"device", mmio.CfgDeviceID, 2, abi.DeviceID},
		{"subsystem vendor", mmio.CfgSubsysVendor, 2, abi.SubsystemVendorID},
		{"subsystem", mmio.CfgSubsysID, 2, abi.SubsystemID},
		{"revision", mmio.CfgRevision, 1, abi.Revision},
		{"interrupt pin", mmio.CfgInterruptPin, 1, abi.InterruptPin},
	} {
		got, err := g.ConfigRead(f.off, int(f.size))
		if err != nil {
			t.Fatalf("config read %s: %v", f.name, err)
		}
		if got != f.want {
			t.Errorf("config %s = %#x, want %#x", f.name, got, f.want)
		}
	}
	// Class code: base class, subclass, programming interface above the
	// revision byte.
	if got, err := g.ConfigRead(mmio.CfgRevision, 4); err != nil || got>>8 != abi.ClassCode {
		t.Errorf("class code = %#06x (%v), want %#06x", got>>8, err, abi.ClassCode)
	}
	// BAR sizing: all ones in, the size mask out, then the old value back.
	old, err := g.ConfigRead(mmio.CfgBAR0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.ConfigWrite(mmio.CfgBAR0, 4, 0xffffffff); err != nil {
		t.Fatal(err)
	}
	mask, err := g.ConfigRead(mmio.CfgBAR0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := ^uint32(abi.BAR0Size - 1); mask != want {
		t.Errorf("BAR0 sizing reads %#x, want %#x (4 KiB, 32-bit memory)", mask, want)
	}
	for bar := uint32(mmio.CfgBAR0 + 4); bar <= mmio.CfgBAR5; bar += 4 {
		if err := g.ConfigWrite(bar, 4, 0xffffffff); err != nil {
			t.Fatal(err)
		}
		if v, err := g.ConfigRead(bar, 4); err != nil || v != 0 {
			t.Errorf("BAR at %#x sizes as %#x (%v), want 0: unimplemented", bar, v, err)
		}
	}
	if err := g.ConfigWrite(mmio.CfgBAR0, 4, old); err != nil {
		t.Fatal(err)
	}
	if got := g.Read32(abi.RegID); got != abi.IDMagic {
		t.Errorf("RegID after BAR sizing = %#x, want %#x (transport: %v)", got, abi.IDMagic, g.Err())
	}
}

// registers checks the identity registers, that read-only registers
// ignore writes, that read-write ones read back, and that a bad access
// latches StatusBadAccess and is acknowledged.
func (c *conformance) registers(t *testing.T) {
	inst := c.instance(t)
	g := c.tr.Attach(t, inst, RAM)
	for _, r := range []struct {
		name string
		off  uint32
		want uint32
	}{
		{"id", abi.RegID, abi.IDMagic},
		{"version", abi.RegVersion, abi.Version},
		{"features", abi.RegFeatures, abi.Features},
		{"max ring slots", abi.RegMaxRingSlots, abi.MaxRingSlots},
		{"mem size", abi.RegMemSizeLo, uint32(inst.MemQuota())},
		{"unassigned", 0xffc, 0},
	} {
		if got := g.Read32(r.off); got != r.want {
			t.Errorf("%s register = %#x, want %#x", r.name, got, r.want)
		}
		g.Write32(r.off, 0xdeadbeef)
		if got := g.Read32(r.off); got != r.want {
			t.Errorf("%s register after a write = %#x, want %#x (read-only)", r.name, got, r.want)
		}
	}
	for _, r := range []struct{ off, want uint32 }{
		{abi.RegRingBaseLo, 0x40}, {abi.RegComplBaseLo, 0x40}, {abi.RegRingSlots, 0x40}, {abi.RegTailShadowLo, 0x40},
		{abi.RegIntEnable, 0x40 & abi.IntAll}, // undefined bits read 0
	} {
		g.Write32(r.off, 0x40)
		if got := g.Read32(r.off); got != r.want {
			t.Errorf("register %#x reads %#x after writing 0x40, want %#x", r.off, got, r.want)
		}
	}
	if got := g.Read32(abi.RegError); got != uint32(abi.StatusOK) {
		t.Fatalf("RegError = %d before the bad access", got)
	}
	// A misaligned register access: the register file refuses it.
	g.Write32(abi.RegRingTail+1, 1)
	if got := abi.Status(g.Read32(abi.RegError)); got != abi.StatusBadAccess {
		t.Errorf("RegError after a misaligned write = %v, want %v", got, abi.StatusBadAccess)
	}
	g.Write32(abi.RegErrorAck, 1)
	if got := abi.Status(g.Read32(abi.RegError)); got != abi.StatusOK {
		t.Errorf("RegError after the ack = %v", got)
	}
	if err := g.Err(); err != nil {
		t.Errorf("transport error: %v", err)
	}
}

// suite runs the guest suite through the transport: every command, data
// through scattered guest pages, the results checked against the CPU.
func (c *conformance) suite(t *testing.T, kick bool) {
	inst := c.instance(t)
	g := c.tr.Attach(t, inst, RAM)
	d := open(t, g, driver.Options{Kick: kick})
	if rep := suite.Run(context.Background(), d, small); !rep.OK() {
		t.Fatalf("guest suite (kick %v) failed:\n%s", kick, rep)
	}
	if kick && g.Read32(abi.RegTailShadowLo) == 0 {
		t.Errorf("kick: the driver did not program the tail shadow")
	}
	if st, _ := inst.Error(); st != abi.StatusOK {
		t.Errorf("error register after the suite = %v", st)
	}
}

// dmaBounds runs the hostile guest suite: addresses outside guest RAM,
// foreign handles, over-quota, garbage, ring overflow, each refused
// with its status, and a normal job after them.
func (c *conformance) dmaBounds(t *testing.T) {
	g := c.tr.Attach(t, c.instance(t), RAM)
	d := open(t, g, driver.Options{})
	if rep := suite.RunHostile(context.Background(), d, small); !rep.OK() {
		t.Fatalf("hostile guest suite failed:\n%s", rep)
	}
}

// interrupts checks that a completion asserts INTx through the transport
// while it is enabled, that a line still high is asserted again on
// resample, and that no interrupt arrives once it is acknowledged.
func (c *conformance) interrupts(t *testing.T) {
	g := c.tr.Attach(t, c.instance(t), RAM)
	d := open(t, g, driver.Options{})
	if _, err := g.IRQCount(); err != nil { // forget anything from before
		t.Fatal(err)
	}
	g.Write32(abi.RegIntEnable, abi.IntCompletion)
	if _, err := d.Fence(); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if n, err := g.WaitIRQ(wait); err != nil || n == 0 {
		t.Fatalf("no interrupt after a completion: %d, %v", n, err)
	}
	if st := g.Read32(abi.RegIntStatus); st&abi.IntCompletion == 0 {
		t.Errorf("RegIntStatus = %#x, want IntCompletion latched", st)
	}
	// Still high: the end of the interrupt asserts it again.
	if err := g.Resample(); err != nil {
		t.Fatal(err)
	}
	if n, err := g.WaitIRQ(wait); err != nil || n == 0 {
		t.Errorf("a line still high was not asserted again after resample: %d, %v", n, err)
	}
	// Acknowledged: the line falls, and a resample asserts nothing. The
	// register read after the resample orders it before the count.
	g.Write32(abi.RegIntStatus, abi.IntCompletion)
	if _, err := g.IRQCount(); err != nil {
		t.Fatal(err)
	}
	if err := g.Resample(); err != nil {
		t.Fatal(err)
	}
	_ = g.Read32(abi.RegIntStatus)
	if n, err := g.IRQCount(); err != nil || n != 0 {
		t.Errorf("%d interrupts after the status was acknowledged (%v), want 0", n, err)
	}
	// Disabled: a completion latches the status but asserts nothing. The
	// read-back makes the disable land before the fence: a posted write
	// (vfio-user under TCG) may still be in the socket when a worker that
	// polls the tail shadow (ABI 1.6) has run the fence, and a driver
	// that needs the order reads back, as on PCI.
	g.Write32(abi.RegIntEnable, 0)
	_ = g.Read32(abi.RegIntEnable)
	if _, err := d.Fence(); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	// The guest sees the completion record before vgpud's notice of it
	// has latched the cause (it comes from the worker asynchronously).
	waitUntil(t, "the completion to latch with the interrupt disabled", func() bool {
		return g.Read32(abi.RegIntStatus)&abi.IntCompletion != 0
	})
	if n, err := g.IRQCount(); err != nil || n != 0 {
		t.Errorf("%d interrupts while disabled (%v), want 0", n, err)
	}
}

// reset checks the transport's device reset: the ring registers return
// to 0, the device state is gone, and the device opens again.
func (c *conformance) reset(t *testing.T) {
	inst := c.instance(t)
	g := c.tr.Attach(t, inst, RAM)
	d := open(t, g, driver.Options{})
	if _, err := d.CreateBuffer(1 << 16); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if inst.MemUsed() == 0 {
		t.Fatal("a buffer holds no device memory")
	}
	if err := g.Reset(); err != nil {
		t.Fatalf("reset: %v", err)
	}
	for _, off := range []uint32{abi.RegRingBaseLo, abi.RegComplBaseLo, abi.RegRingSlots, abi.RegTailShadowLo, abi.RegIntEnable} {
		if got := g.Read32(off); got != 0 {
			t.Errorf("register %#x = %#x after reset, want 0", off, got)
		}
	}
	if st := g.Read32(abi.RegStatus); st&abi.StatusBitRingEnabled != 0 {
		t.Errorf("ring enabled after reset (status %#x)", st)
	}
	waitUntil(t, "the reset to free the buffer", func() bool { return inst.MemUsed() == 0 })
	d2 := open(t, g, driver.Options{})
	if rep := suite.Run(context.Background(), d2, small); !rep.OK() {
		t.Fatalf("suite after reset failed:\n%s", rep)
	}
}

// hangup checks that a VM going away detaches it, keeps the device state
// for the next VM (a reboot of the same VM reconnects), and that the
// instance serves the next one.
func (c *conformance) hangup(t *testing.T) {
	inst := c.instance(t)
	g := c.tr.Attach(t, inst, RAM)
	open(t, g, driver.Options{})
	waitUntil(t, "the session to be attached", inst.Attached)
	if err := g.Close(); err != nil {
		t.Fatalf("hang up: %v", err)
	}
	waitUntil(t, "the hang-up to detach the VM", func() bool { return !inst.Attached() })
	g2 := c.tr.Attach(t, inst, RAM)
	d := open(t, g2, driver.Options{})
	if rep := suite.Run(context.Background(), d, small); !rep.OK() {
		t.Fatalf("suite after reconnecting failed:\n%s", rep)
	}
}

// hostile runs one of the transport's own attacks against an instance
// while a neighbour on the same device runs the guest suite, then checks
// that both instances still serve.
func (c *conformance) hostile(t *testing.T, a Attack) {
	victim, neighbour := c.instance(t), c.instance(t)
	ng := c.tr.Attach(t, neighbour, RAM)
	nd := open(t, ng, driver.Options{})
	done := make(chan suite.Report, 1)
	go func() { done <- suite.Run(context.Background(), nd, small) }()
	a.Run(t, victim)
	if rep := <-done; !rep.OK() {
		t.Errorf("the neighbour's suite failed during the attack:\n%s", rep)
	}
	if st, _ := neighbour.Error(); st != abi.StatusOK {
		t.Errorf("the neighbour's error register = %v", st)
	}
	waitUntil(t, "the attacker to be detached", func() bool { return !victim.Attached() })
	// A fresh guest opens the attacked instance and completes a command
	// (the suite itself ran on it in the other subtests).
	g := c.tr.Attach(t, victim, RAM)
	d := open(t, g, driver.Options{})
	if _, err := d.CreateBuffer(4096); err != nil {
		t.Fatalf("buffer on the attacked instance afterwards: %v", err)
	}
	if _, err := d.Fence(); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("fence on the attacked instance afterwards: %v", err)
	}
}

package vfiouser_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/sockpairtest"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
	"github.com/vgpud/vgpud/mmio"
)

// countingMap is a guestmem.Map that counts its updates.
type countingMap struct {
	guestmem.Map
	mu      sync.Mutex
	updates []int // regions per update
}

func (c *countingMap) Update(r []guestmem.Region) error {
	c.mu.Lock()
	c.updates = append(c.updates, len(r))
	c.mu.Unlock()
	return c.Map.Update(r)
}

// served is a Session on one end of a socketpair, the client on the other.
type served struct {
	be   *transporttest.FakeBackend
	regs *mmio.Device
	cfg  *mmio.ConfigSpace
	mem  *countingMap
	sess *vfiouser.Session
	done chan error
}

func socketPair(t *testing.T) (a, b *net.UnixConn) { return sockpairtest.Stream(t) }

func serve(t *testing.T, conn *net.UnixConn) *served {
	t.Helper()
	s := &served{be: &transporttest.FakeBackend{Kicked: make(chan uint64, 16)}, cfg: mmio.NewConfigSpace(), mem: &countingMap{}, done: make(chan error, 1)}
	s.regs = mmio.New(s.be)
	s.sess = vfiouser.NewSession(conn, transport.Device{Regs: s.regs, Config: s.cfg, Memory: s.mem})
	go func() { s.done <- s.sess.Serve(context.Background()) }()
	t.Cleanup(func() {
		s.sess.Close()
		<-s.done
		s.mem.Close()
	})
	return s
}

func attach(t *testing.T) (*vfiousertest.Client, *served) {
	t.Helper()
	cl, dv := socketPair(t)
	s := serve(t, dv)
	c, err := vfiousertest.New(cl, 4<<20)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, s
}

// TestAttach: the client's realize sequence leaves the device probed,
// guest RAM mapped (two windows, one update each) and BAR0 reachable.
func TestAttach(t *testing.T) {
	c, s := attach(t)
	if c.NumRegions != vfiouser.NumRegions || c.NumIRQs != vfiouser.NumIRQs || c.BAR0Size != abi.BAR0Size || c.ConfigSize != mmio.ConfigSize {
		t.Errorf("device: %d regions, %d irqs, BAR0 %d, config %d", c.NumRegions, c.NumIRQs, c.BAR0Size, c.ConfigSize)
	}
	if got := c.Read32(abi.RegID); got != abi.IDMagic {
		t.Errorf("RegID = %#x (%v)", got, c.Err())
	}
	if v, err := c.ConfigRead(mmio.CfgVendorID, 2); err != nil || v != abi.VendorID {
		t.Errorf("vendor = %#x, %v", v, err)
	}
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	if len(s.mem.updates) != 2 || s.mem.updates[1] != 2 {
		t.Errorf("guest-memory updates %v, want [1 2]", s.mem.updates)
	}
	// The device reaches guest RAM through the map it was given.
	want := []byte("vfio-user dma")
	if err := c.WriteRAM(2<<20, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := s.mem.ReadAt(got, 2<<20); err != nil || string(got) != string(want) {
		t.Errorf("device read %q, %v; want %q", got, err, want)
	}
}

// TestKickNeedsNoMessage is the mechanism behind the ioeventfd doorbell:
// a kick reaches the register file (and the backend, with the tail
// shadow's address) through the eventfd alone, with no message on the
// socket and no reply to wait for.
func TestKickNeedsNoMessage(t *testing.T) {
	c, s := attach(t)
	c.Write32(abi.RegTailShadowLo, 0x2000)
	c.Write32(abi.RegTailShadowHi, 0)
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	// Client.Kick is one write(2) to the eventfd the server handed out
	// in DEVICE_GET_REGION_IO_FDS; it touches no socket.
	for i := range 3 {
		if err := c.Kick(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-s.be.Kicked:
			if got != 0x2000 {
				t.Errorf("kick %d: shadow %#x, want 0x2000", i, got)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("kick %d never reached the backend", i)
		}
	}
}

// TestDMAWindows: overlaps, exact unmaps, unmaps of unknown windows, an
// fd-less window (recorded, never given to the device), and the map the
// device holds after each step.
func TestDMAWindows(t *testing.T) {
	c, s := attach(t)
	last := func() int {
		s.mem.mu.Lock()
		defer s.mem.mu.Unlock()
		return s.mem.updates[len(s.mem.updates)-1]
	}
	if err := c.DMAMap(1<<20, 4096, 1<<20, c.FD()); !errors.Is(err, unix.EEXIST) {
		t.Errorf("overlapping map = %v, want EEXIST", err)
	}
	if err := c.DMAMap(1<<32, 1<<20, 0, -1); err != nil {
		t.Errorf("fd-less map = %v", err)
	}
	if got := last(); got != 2 {
		t.Errorf("device map has %d regions after an fd-less window, want 2", got)
	}
	if err := c.DMAUnmap(1<<20, 4096); !errors.Is(err, unix.EINVAL) {
		t.Errorf("partial unmap = %v, want EINVAL", err)
	}
	if err := c.DMAUnmap(0, 0xa0000); err != nil {
		t.Fatalf("unmap = %v", err)
	}
	if got := last(); got != 1 {
		t.Errorf("device map has %d regions after the unmap, want 1", got)
	}
	if err := c.DMAUnmap(1<<32, 1<<20); err != nil {
		t.Errorf("unmap of the fd-less window = %v", err)
	}
}

// TestINTxAutomask: INTx is signalled on a rise, stays masked until the
// client unmasks it (by message or eventfd), and is signalled again then
// if the line is still high.
func TestINTxAutomask(t *testing.T) {
	c, s := attach(t)
	c.Write32(abi.RegIntEnable, abi.IntCompletion)
	s.regs.INTx().Signal(abi.IntCompletion)
	if n, err := c.WaitIRQ(30 * time.Second); err != nil || n != 1 {
		t.Fatalf("first interrupt: %d, %v", n, err)
	}
	s.regs.INTx().Signal(abi.IntCompletion) // level still high, masked: nothing
	if n, _ := c.IRQCount(); n != 0 {
		t.Errorf("%d interrupts while automasked", n)
	}
	unmask := vfiouser.IRQSet{Argsz: vfiouser.IRQSetSize, Flags: vfiouser.IRQSetDataNone | vfiouser.IRQSetActionUnmask, Index: vfiouser.IRQIntx, Count: 1}
	if _, _, err := c.Call(vfiouser.CmdDeviceSetIRQs, nil, unmask.Marshal()); err != nil {
		t.Fatal(err)
	}
	if n, err := c.WaitIRQ(30 * time.Second); err != nil || n != 1 {
		t.Fatalf("after unmask with the line high: %d, %v", n, err)
	}
	c.Write32(abi.RegIntStatus, abi.IntCompletion) // the guest clears the cause
	if err := c.Resample(); err != nil {           // and ends the interrupt
		t.Fatal(err)
	}
	_ = c.Read32(abi.RegID)
	if n, _ := c.IRQCount(); n != 0 {
		t.Errorf("%d interrupts after the cause was cleared", n)
	}
}

// TestServeEnds: a hang-up ends Serve with nil and unmaps guest RAM from
// the device; Close ends it with ErrClosed.
func TestServeEnds(t *testing.T) {
	c, s := attach(t)
	c.Close()
	if err := <-s.done; err != nil {
		t.Errorf("Serve after the hang-up = %v", err)
	}
	s.done <- nil
	s.mem.mu.Lock()
	if u := s.mem.updates[len(s.mem.updates)-1]; u != 0 {
		t.Errorf("device map after the hang-up has %d regions, want 0", u)
	}
	s.mem.mu.Unlock()

	_, s2 := attach(t)
	s2.sess.Close()
	if err := <-s2.done; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Serve after Close = %v, want ErrClosed", err)
	}
	s2.done <- nil
}

package xen_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/xen"
	"github.com/vgpud/vgpud/xen/xentest"
)

const ram = 4 << 20

const wait = 10 * time.Second

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rig struct {
	be   *fakeBackend
	regs *mmio.Device
	cs   *mmio.ConfigSpace
	mem  *guestmem.Map
}

func newRig(t *testing.T) *rig {
	t.Helper()
	be := &fakeBackend{}
	r := &rig{be: be, regs: mmio.New(be), cs: mmio.NewConfigSpace(), mem: &guestmem.Map{}}
	t.Cleanup(func() { r.mem.Close() })
	return r
}

func (r *rig) dev() transport.Device {
	return transport.Device{Regs: r.regs, Config: r.cs, Memory: r.mem, Log: quiet}
}

// attach serves r over a fake domain; the domain is destroyed at the end
// and Serve must then return nil.
func attach(t *testing.T, r *rig) *xentest.Guest {
	t.Helper()
	g, stop, err := xentest.Attach(r.dev(), ram)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve after the domain went: %v, want nil", err)
		}
		if n := g.Hypervisor().Mappings(); n != 0 {
			t.Errorf("%d mappings left after Serve", n)
		}
	})
	return g
}

func TestServeRegistersAndConfig(t *testing.T) {
	r := newRig(t)
	g := attach(t, r)
	if g.Info().VendorID != abi.VendorID {
		t.Fatalf("probe: %+v", g.Info())
	}
	if v := g.Read32(abi.RegID); v != abi.IDMagic {
		t.Fatalf("RegID = %#x (%v)", v, g.Err())
	}
	g.Write32(abi.RegRingTail, 5)
	if db := r.be.Doorbells(); len(db) != 1 || db[0] != 5 {
		t.Errorf("doorbells %v, want [5]", db)
	}
	// A misaligned access reaches the register file, which latches it.
	if _, err := g.IO(xen.IOReq{Type: xen.TypeCopy, Addr: xentest.BAR0Addr + 2, Size: 2, Count: 1, Dir: xen.IOReqRead}, false); err != nil {
		t.Fatal(err)
	}
	if st := abi.Status(g.Read32(abi.RegError)); st != abi.StatusBadAccess {
		t.Errorf("RegError = %v after a 2-byte read, want %v", st, abi.StatusBadAccess)
	}
	// Guest RAM reached the device's map as the fake's memfd.
	if err := g.WriteRAM(xentest.HighRAM, []byte("xen!")); err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	if err := r.mem.ReadAt(b[:], xentest.HighRAM); err != nil || string(b[:]) != "xen!" {
		t.Errorf("device reads %q, %v from guest RAM", b, err)
	}
	if err := g.Err(); err != nil {
		t.Errorf("transport error: %v", err)
	}
}

func TestBARMoves(t *testing.T) {
	r := newRig(t)
	g := attach(t, r)
	h := g.Hypervisor()
	const moved = 0xfe000000
	if err := g.ConfigWrite(mmio.CfgBAR0, 4, moved); err != nil {
		t.Fatal(err)
	}
	// The old address is no longer claimed: "Xen" answers all ones.
	if v := g.Read32(abi.RegID); v != 0xffffffff {
		t.Errorf("read at the old BAR0 = %#x, want all ones", v)
	}
	v, err := g.IO(xen.IOReq{Type: xen.TypeCopy, Addr: moved + abi.RegID, Size: 4, Count: 1, Dir: xen.IOReqRead}, false)
	if err != nil || v != abi.IDMagic {
		t.Errorf("read at the new BAR0 = %#x, %v", v, err)
	}
	// Decoding off releases the range; on claims it again.
	if err := g.ConfigWrite(mmio.CfgCommand, 2, mmio.CmdBusMaster); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitBAR(moved, time.Millisecond); err == nil {
		t.Error("BAR0 still claimed with memory decoding off")
	}
	if err := g.ConfigWrite(mmio.CfgBAR0, 4, xentest.BAR0Addr); err != nil {
		t.Fatal(err)
	}
	if err := g.ConfigWrite(mmio.CfgCommand, 2, mmio.CmdBusMaster|mmio.CmdMemorySpace); err != nil {
		t.Fatal(err)
	}
	if v := g.Read32(abi.RegID); v != abi.IDMagic {
		t.Errorf("RegID back at BAR0Addr = %#x", v)
	}
	// The sizing pattern is never claimed.
	if err := g.ConfigWrite(mmio.CfgBAR0, 4, 0xffffffff); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitBAR(0xfffff000, time.Millisecond); err == nil {
		t.Error("the BAR sizing pattern was claimed as MMIO")
	}
	if c := h.Calls(); c["map_io_range"] != 3 || c["unmap_io_range"] != 3 {
		t.Errorf("map/unmap calls %d/%d, want 3/3", c["map_io_range"], c["unmap_io_range"])
	}
}

func TestINTxLevel(t *testing.T) {
	r := newRig(t)
	g := attach(t, r)
	h := g.Hypervisor()
	g.Write32(abi.RegIntEnable, abi.IntCompletion)
	r.regs.INTx().Signal(abi.IntCompletion) // a completion
	if n, err := g.WaitIRQ(wait); err != nil || n != 1 {
		t.Fatalf("WaitIRQ = %d, %v", n, err)
	}
	if _, level := h.IRQs(); !level {
		t.Fatal("line not asserted")
	}
	if err := g.Resample(); err != nil { // EOI with the line high
		t.Fatal(err)
	}
	if n, err := g.WaitIRQ(wait); err != nil || n != 1 {
		t.Fatalf("no redelivery after EOI: %d, %v", n, err)
	}
	g.Write32(abi.RegIntStatus, abi.IntCompletion) // ack: the line must fall
	if _, level := h.IRQs(); level {
		t.Fatal("line still asserted after the guest acknowledged the interrupt")
	}
	g.Resample()
	if n, _ := g.IRQCount(); n != 0 {
		t.Errorf("%d interrupts after the ack", n)
	}
	// INTx disable in the command register lowers the line too.
	r.regs.INTx().Signal(abi.IntCompletion)
	if n, err := g.WaitIRQ(wait); err != nil || n != 1 {
		t.Fatalf("WaitIRQ = %d, %v", n, err)
	}
	cmd, _ := g.ConfigRead(mmio.CfgCommand, 2)
	if err := g.ConfigWrite(mmio.CfgCommand, 2, cmd|mmio.CmdINTxDisable); err != nil {
		t.Fatal(err)
	}
	if _, level := h.IRQs(); level {
		t.Error("line asserted with INTx disabled")
	}
	if h.Asserts() != 2 {
		t.Errorf("%d assertions, want 2", h.Asserts())
	}
}

func TestRepMMIO(t *testing.T) {
	r := newRig(t)
	g := attach(t, r)
	const buf = xentest.HighRAM + 0x3ff8 // straddles a page boundary
	rep := func(dir uint8, addr uint64, count uint32, df bool) {
		t.Helper()
		req := xen.IOReq{Type: xen.TypeCopy, Addr: xentest.BAR0Addr + addr, Data: buf, Size: 4, Count: count, DataIsPtr: true, Dir: dir, DF: df}
		if df {
			req.Data = buf + uint64(count-1)*4
		}
		if _, err := g.IO(req, false); err != nil {
			t.Fatal(err)
		}
	}
	// rep movsd from RegID and RegVersion into guest RAM.
	rep(xen.IOReqRead, abi.RegID, 2, false)
	var got [8]byte
	if err := g.ReadRAM(buf, got[:]); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(got[:]) != abi.IDMagic || binary.LittleEndian.Uint32(got[4:]) != abi.Version {
		t.Errorf("rep read into RAM: % x", got)
	}
	// rep movsd from guest RAM into RegRingBaseLo, RegRingBaseHi, going down.
	var src [8]byte
	binary.LittleEndian.PutUint32(src[:], 0x1000)
	binary.LittleEndian.PutUint32(src[4:], 0x2)
	if err := g.WriteRAM(buf, src[:]); err != nil {
		t.Fatal(err)
	}
	rep(xen.IOReqWrite, abi.RegRingBaseLo+4, 2, true)
	if lo, hi := g.Read32(abi.RegRingBaseLo), g.Read32(abi.RegRingBaseLo+4); lo != 0x1000 || hi != 2 {
		t.Errorf("rep write down: base %#x:%#x", hi, lo)
	}
	// Without data_is_ptr a rep read keeps the last value.
	v, err := g.IO(xen.IOReq{Type: xen.TypeCopy, Addr: xentest.BAR0Addr + abi.RegID, Size: 4, Count: 2, Dir: xen.IOReqRead}, false)
	if err != nil || v != abi.Version {
		t.Errorf("rep read without a pointer = %#x, %v; want the last item", v, err)
	}
}

func TestBufferedRing(t *testing.T) {
	r := newRig(t)
	g := attach(t, r)
	h := g.Hypervisor()
	// Buffered writes carry 20-bit addresses (Xen buffers only legacy
	// VGA): they never fall in BAR0, are dropped, and the ring drains,
	// 8-byte writes taking two slots.
	es := []xen.BufIOReq{
		{Type: xen.TypeCopy, Size: 2, Addr: 0xa0000, Data: 1},
		{Type: xen.TypeCopy, Size: 3, Addr: 0xa0008, Data: 2}, {Data: 3},
		{Type: xen.TypeInvalidate},
	}
	if err := h.Buffered(es, nil); err != nil {
		t.Fatal(err)
	}
	if v := g.Read32(abi.RegID); v != abi.IDMagic { // orders the drain before the check
		t.Fatalf("RegID %#x", v)
	}
	if rd, wr, _ := h.BufferedPointers(); rd != 4 || wr != 4 {
		t.Errorf("ring pointers %d/%d after the drain, want 4/4", rd, wr)
	}
	// Xen rebases both pointers by a multiple of the ring size.
	if err := h.Buffered(es[:1], &[2]uint32{4 + xen.BufSlots, 5 + xen.BufSlots}); err != nil {
		t.Fatal(err)
	}
	g.Read32(abi.RegID)
	if rd, wr, _ := h.BufferedPointers(); rd != wr {
		t.Errorf("ring pointers %d/%d after a rebase", rd, wr)
	}
}

func TestServeEnds(t *testing.T) {
	r := newRig(t)
	h, err := xentest.New(ram, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cfg := xen.Config{Domain: h.Domain(), SBDF: xentest.DefaultSBDF}

	srv := xen.NewServer(h, cfg, r.dev())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	if err := h.WaitServing(cfg.SBDF, wait); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if err := <-done; !errors.Is(err, xen.ErrClosed) {
		t.Errorf("Serve after Close = %v", err)
	}
	if err := srv.Serve(context.Background()); err == nil {
		t.Error("a second Serve succeeded")
	}
	srv.Close()
	if err := h.WaitServerGone(wait); err != nil {
		t.Error(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	srv = xen.NewServer(h, cfg, r.dev())
	go func() { done <- srv.Serve(ctx) }()
	if err := h.WaitServing(cfg.SBDF, wait); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Serve after cancel = %v", err)
	}
	if n := h.Mappings(); n != 0 {
		t.Errorf("%d mappings left", n)
	}
	c := h.Calls()
	if c["create_ioreq_server"] != 2 || c["destroy_ioreq_server"] != 2 || c["evtchn_open"] != c["evtchn_close"] {
		t.Errorf("calls %v", c)
	}

	// Closed before Serve: nothing is created.
	srv = xen.NewServer(h, cfg, r.dev())
	srv.Close()
	if err := srv.Serve(context.Background()); !errors.Is(err, xen.ErrClosed) {
		t.Errorf("Serve after an early Close = %v", err)
	}

	// A domain that is gone: setup fails with ErrNoDomain.
	h.Destroy()
	srv = xen.NewServer(h, cfg, r.dev())
	if err := srv.Serve(context.Background()); !errors.Is(err, xen.ErrNoDomain) {
		t.Errorf("Serve on a dead domain = %v", err)
	}
}

// A dying domain (Xen destroyed its ioreq servers, the domain lingers
// while its pages are mapped): the server notices within Liveness, though
// nr_vcpus still answers and no event comes, and ends like a hang-up.
func TestServeEndsDyingDomain(t *testing.T) {
	r := newRig(t)
	h, err := xentest.New(ram, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cfg := xen.Config{Domain: h.Domain(), SBDF: xentest.DefaultSBDF, Liveness: 20 * time.Millisecond}
	srv := xen.NewServer(h, cfg, r.dev())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	if err := h.WaitServing(cfg.SBDF, wait); err != nil {
		t.Fatal(err)
	}
	if r.mem.Mapped() == 0 {
		t.Fatal("guest RAM was not handed to the device")
	}
	h.Kill()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve on a dying domain = %v, want nil (a hang-up)", err)
		}
	case <-time.After(wait):
		t.Fatal("Serve did not notice the dying domain")
	}
	if n := h.Mappings(); n != 0 {
		t.Errorf("%d mappings left", n)
	}
	if _, err := h.NrVCPUs(h.Domain()); err != nil {
		t.Errorf("the fake's dying domain should still answer nr_vcpus: %v", err)
	}
	// The device dropped its guest RAM: a worker that outlives the
	// session must not hold the dead domain's frames.
	if n := r.mem.Mapped(); n != 0 {
		t.Errorf("the device still maps %d bytes of the dead domain's RAM", n)
	}
}

// Two servers, two domains, one hostile: the other keeps serving.
func TestIsolation(t *testing.T) {
	a, b := newRig(t), newRig(t)
	ga, stop, err := xentest.Attach(a.dev(), ram)
	if err != nil {
		t.Fatal(err)
	}
	gb := attach(t, b)
	if _, err := ga.IO(xen.IOReq{Type: 5, Size: 4, Count: 1, State: xen.StateReady}, true); err != nil && !errors.Is(err, xentest.ErrServerGone) {
		t.Fatal(err)
	}
	if err := ga.Hypervisor().WaitServerGone(wait); err != nil {
		t.Fatal(err)
	}
	if v := gb.Read32(abi.RegID); v != abi.IDMagic {
		t.Errorf("neighbour RegID = %#x", v)
	}
	if err := stop(); !errors.Is(err, xen.ErrProtocol) {
		t.Errorf("the attacked server returned %v, want ErrProtocol", err)
	}
}

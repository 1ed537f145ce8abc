package mpqemu_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/fdtest"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mmio"
)

const ramBytes = 4 << 20

// device is one served vGPU instance.
type device struct {
	b    *transporttest.FakeBackend
	dev  *mmio.Device
	cs   *mmio.ConfigSpace
	mem  *guestmem.Map
	conn *mpqemu.Conn
	done chan error
}

// serve starts a Conn on devSide.
func serve(t *testing.T, ctx context.Context, devSide *net.UnixConn) *device {
	t.Helper()
	d := &device{b: &transporttest.FakeBackend{}, cs: mmio.NewConfigSpace(), mem: &guestmem.Map{}, done: make(chan error, 1)}
	d.dev = mmio.New(d.b)
	d.conn = mpqemu.NewConn(devSide, d.dev, d.cs, d.mem, nil)
	go func() { d.done <- d.conn.Serve(ctx) }()
	t.Cleanup(func() {
		d.conn.Close()
		<-d.done
		d.mem.Close()
	})
	return d
}

// attach serves a device and attaches a VM to it.
func attach(t *testing.T) (*mpqemutest.VM, *device) {
	t.Helper()
	vmSide, devSide := pipe(t)
	d := serve(t, context.Background(), devSide)
	vm, err := mpqemutest.NewVM(vmSide, ramBytes)
	if err != nil {
		t.Fatalf("NewVM: %v", err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm, d
}

func TestAttachProbe(t *testing.T) {
	vm, d := attach(t)
	info := vm.Info()
	want := mpqemutest.PCIInfo{VendorID: abi.VendorID, DeviceID: abi.DeviceID, Class: abi.ClassCode >> 8,
		SubsystemID: abi.SubsystemID, BARSize: [7]uint32{abi.BAR0Size}}
	if info != want {
		t.Errorf("Info() = %+v, want %+v", info, want)
	}
	if addr, mem := d.cs.BAR0(); addr != mpqemutest.BAR0Addr || !mem {
		t.Errorf("device BAR0() = %#x, %v, want %#x, true", addr, mem, mpqemutest.BAR0Addr)
	}
	if got, want := d.mem.Regions(), [][2]uint64{{0, 0xa0000}, {0x100000, ramBytes - 0x100000}}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("device memory map = %v, want %v", got, want)
	}
}

func TestRegisterAccess(t *testing.T) {
	vm, d := attach(t)
	if got := vm.Read32(abi.RegID); got != abi.IDMagic {
		t.Errorf("Read32(RegID) = %#x, want %#x", got, abi.IDMagic)
	}
	vm.Write32(abi.RegRingTail, 42)
	if got := vm.Read32(abi.RegRingHead); got != 42 {
		t.Errorf("Read32(RegRingHead) = %d, want 42", got)
	}
	if doorbells := d.b.Doorbells(); doorbells != 1 {
		t.Errorf("doorbells = %d, want 1", doorbells)
	}
	// Misaligned access reaches the register file, which latches an error.
	vm.Read32(2)
	if got := vm.Read32(abi.RegError); got != uint32(abi.StatusBadAccess) {
		t.Errorf("Read32(RegError) = %v, want %v", abi.Status(got), abi.StatusBadAccess)
	}
	if err := vm.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
}

// TestDMA checks that the device reads what the guest wrote into an
// Alloc'd buffer at the page addresses Alloc reported.
func TestDMA(t *testing.T) {
	vm, d := attach(t)
	dma, err := vm.Alloc(5 * abi.PageSize)
	if err != nil {
		t.Fatalf("Alloc: %v", err)
	}
	for i := range dma.Buf {
		dma.Buf[i] = byte(i / abi.PageSize * 31)
	}
	for i, gpa := range dma.Pages {
		p := make([]byte, abi.PageSize)
		if err := d.mem.ReadAt(p, gpa); err != nil {
			t.Fatalf("device ReadAt(%#x): %v", gpa, err)
		}
		if !bytes.Equal(p, dma.Buf[i*abi.PageSize:(i+1)*abi.PageSize]) {
			t.Errorf("page %d at %#x: device sees other bytes than the guest wrote", i, gpa)
		}
	}
	if err := d.mem.Store64(dma.Pages[0], 0x0102030405060708); err != nil {
		t.Fatalf("Store64: %v", err)
	}
	if got := dma.Buf[0]; got != 0x08 {
		t.Errorf("guest sees %#x after device Store64, want 0x08", got)
	}
}

func TestResetAndConfig(t *testing.T) {
	vm, d := attach(t)
	vm.Write32(abi.RegRingSlots, 64)
	if err := vm.Reset(); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if resets := d.b.Resets(); resets != 1 {
		t.Errorf("backend resets = %d, want 1", resets)
	}
	if got := vm.Read32(abi.RegRingSlots); got != 0 {
		t.Errorf("Read32(RegRingSlots) after Reset = %d, want 0", got)
	}
	// Disable memory decoding: BAR reads answer all ones, writes are dropped.
	if err := vm.ConfigWrite(mmio.CfgCommand, 2, 0); err != nil {
		t.Fatalf("ConfigWrite: %v", err)
	}
	if got := vm.Read32(abi.RegID); got != 0xffffffff {
		t.Errorf("Read32(RegID) with decoding off = %#x, want 0xffffffff", got)
	}
	vm.Write32(abi.RegRingSlots, 8)
	if err := vm.ConfigWrite(mmio.CfgCommand, 2, mmio.CmdMemorySpace); err != nil {
		t.Fatalf("ConfigWrite: %v", err)
	}
	if got := vm.Read32(abi.RegRingSlots); got != 0 {
		t.Errorf("Read32(RegRingSlots) = %d, want 0 (write with decoding off dropped)", got)
	}
	if got, err := vm.ConfigRead(0x100, 4); err != nil || got != 0xffffffff {
		t.Errorf("ConfigRead(0x100) = %#x, %v, want 0xffffffff, nil", got, err)
	}
	if err := vm.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
}

func TestRaiseIRQ(t *testing.T) {
	vm, d := attach(t)
	if err := d.conn.RaiseIRQ(); err != nil {
		t.Fatalf("RaiseIRQ: %v", err)
	}
	if err := d.conn.RaiseIRQ(); err != nil {
		t.Fatalf("RaiseIRQ: %v", err)
	}
	if n := waitIRQs(t, vm, 2); n != 2 {
		t.Errorf("irqfd counter after 2 RaiseIRQ = %d, want 2", n)
	}
}

// waitIRQs waits until the irqfd's counter has added up to at least n
// (the irqfd is written by its own goroutine, after RaiseIRQ returns) and
// returns the sum.
func waitIRQs(t *testing.T, vm *mpqemutest.VM, n uint64) uint64 {
	t.Helper()
	var got uint64
	for got < n {
		k, err := vm.WaitIRQ(time.Minute)
		if err != nil {
			t.Fatalf("WaitIRQ after %d of %d interrupts: %v", got, n, err)
		}
		got += k
	}
	return got
}

func TestRaiseIRQBeforeSetIRQFD(t *testing.T) {
	_, devSide := pipe(t)
	d := serve(t, context.Background(), devSide)
	if err := d.conn.RaiseIRQ(); !errors.Is(err, mpqemu.ErrNoIRQ) {
		t.Errorf("RaiseIRQ() = %v, want ErrNoIRQ", err)
	}
}

func TestServeEnds(t *testing.T) {
	t.Run("peer hangs up", func(t *testing.T) {
		vm, d := attach(t)
		vm.Close()
		if err := <-d.done; err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
		d.done <- nil
	})
	t.Run("context cancelled", func(t *testing.T) {
		vmSide, devSide := pipe(t)
		ctx, cancel := context.WithCancel(context.Background())
		d := serve(t, ctx, devSide)
		vm, err := mpqemutest.NewVM(vmSide, ramBytes)
		if err != nil {
			t.Fatalf("NewVM: %v", err)
		}
		defer vm.Close()
		cancel()
		if err := <-d.done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve() = %v, want context.Canceled", err)
		}
		d.done <- nil
		if got := vm.Read32(abi.RegID); got != 0xffffffff || vm.Err() == nil {
			t.Errorf("Read32 after server went away = %#x, Err() = %v, want 0xffffffff and an error", got, vm.Err())
		}
	})
	t.Run("Close", func(t *testing.T) {
		_, d := attach(t)
		d.conn.Close()
		if err := <-d.done; !errors.Is(err, mpqemu.ErrClosed) {
			t.Errorf("Serve() = %v, want ErrClosed", err)
		}
		d.done <- nil
	})
}

// TestFDsClosed counts this process's open fds around a whole session,
// including irqfd replacement and memory remaps.
func TestFDsClosed(t *testing.T) {
	before := fdtest.Open(t)
	func() {
		vm, stop, err := mpqemutest.Attach(mmio.New(&transporttest.FakeBackend{}), mmio.NewConfigSpace(), &guestmem.Map{}, ramBytes)
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		for range 3 {
			if err := vm.ResyncMemory(); err != nil {
				t.Fatalf("ResyncMemory: %v", err)
			}
		}
		if got := vm.Read32(abi.RegID); got != abi.IDMagic {
			t.Errorf("Read32(RegID) = %#x", got)
		}
		if err := stop(); err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
	}()
	if after := fdtest.Open(t); after != before {
		t.Errorf("open fds = %d after session, %d before", after, before)
	}
}

// TestMalformed sends one bad message per connection; each must end
// that connection with ErrProtocol while another connection keeps
// working.
func TestMalformed(t *testing.T) {
	good, _ := attach(t)
	hdr := func(cmd int32, size uint64) []byte {
		m := mpqemu.Msg{Cmd: mpqemu.Cmd(cmd), Payload: make([]byte, 0)}
		b := m.Encode(nil)
		for i := range 8 {
			b[8+i] = byte(size >> (8 * i))
		}
		return b
	}
	outside := mpqemu.Msg{Cmd: mpqemu.CmdBarRead, Payload: mpqemu.BarMsg{Addr: mpqemutest.BAR0Addr + abi.BAR0Size, Size: 4, Memory: true}.Marshal()}
	below := mpqemu.Msg{Cmd: mpqemu.CmdBarWrite, Payload: mpqemu.BarMsg{Addr: mpqemutest.BAR0Addr - 4, Size: 4, Memory: true}.Marshal()}
	ioSpace := mpqemu.Msg{Cmd: mpqemu.CmdBarRead, Payload: mpqemu.BarMsg{Addr: mpqemutest.BAR0Addr, Size: 4}.Marshal()}
	tests := []struct {
		name      string
		raw       []byte
		withFD    bool
		wantReply bool
	}{
		{"size too big", hdr(int32(mpqemu.CmdPCICfgRead), 4096), false, false},
		{"bad size", append(hdr(int32(mpqemu.CmdBarRead), 20), make([]byte, 20)...), false, false},
		{"unknown cmd", hdr(42, 0), false, false},
		{"ret to remote", append(hdr(int32(mpqemu.CmdRet), 8), make([]byte, 8)...), false, false},
		{"fd on bar write", append(hdr(int32(mpqemu.CmdBarWrite), 24), make([]byte, 24)...), true, false},
		{"one fd for irqfd", hdr(int32(mpqemu.CmdSetIRQFD), 0), true, false},
		{"bar past BAR0", outside.Encode(nil), false, true},
		{"bar below BAR0", below.Encode(nil), false, true},
		{"bar in io space", ioSpace.Encode(nil), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The bad message goes to a fresh connection of its own; vm
			// (started alongside) and good (older) must survive it.
			vm, _ := attach(t)
			peer, devSide := pipe(t)
			bad := serve(t, context.Background(), devSide)
			bad.cs.Write(mmio.CfgBAR0, 4, mpqemutest.BAR0Addr)
			bad.cs.Write(mmio.CfgCommand, 2, mmio.CmdMemorySpace)
			before := fdtest.Open(t)
			var err error
			if tt.withFD {
				fd := memfd(t, 4096)
				_, _, err = peer.WriteMsgUnix(tt.raw, unix.UnixRights(fd), nil)
			} else {
				_, err = peer.Write(tt.raw)
			}
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			if err := <-bad.done; !errors.Is(err, mpqemu.ErrProtocol) {
				t.Errorf("Serve() = %v, want ErrProtocol", err)
			}
			bad.done <- nil
			// The server's end is closed: the peer reads the optional
			// reply, then EOF.
			all, _ := readAll(peer)
			if tt.wantReply && (len(all) != 24 || !bytes.Equal(all[16:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) && !bytes.Equal(all[16:], make([]byte, 8))) {
				t.Errorf("reply = %x, want one RET", all)
			}
			if !tt.wantReply && len(all) != 0 {
				t.Errorf("reply = %x, want none", all)
			}
			if after := fdtest.Open(t); after > before {
				t.Errorf("open fds = %d after, %d before", after, before)
			}
			// The other connections keep working.
			for _, v := range []*mpqemutest.VM{vm, good} {
				if got := v.Read32(abi.RegID); got != abi.IDMagic {
					t.Errorf("Read32(RegID) on a healthy connection = %#x, want %#x (err %v)", got, abi.IDMagic, v.Err())
				}
			}
		})
	}
}

func readAll(c *net.UnixConn) ([]byte, error) {
	var out []byte
	buf := make([]byte, 256)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// TestINTxThroughIRQFD: a completion signalled on an enabled line writes
// the irqfd QEMU sent; the resample eventfd (KVM's EOI) re-asserts it
// while the guest has not cleared the cause.
func TestINTxThroughIRQFD(t *testing.T) {
	vm, d := attach(t)
	x := d.dev.INTx()
	x.Signal(abi.IntCompletion) // not enabled: latched only
	if n, err := vm.IRQCount(); err != nil || n != 0 {
		t.Fatalf("IRQCount() before enable = %d, %v, want 0, nil", n, err)
	}
	vm.Write32(abi.RegIntEnable, abi.IntCompletion) // level rises: asserted
	if n := waitIRQs(t, vm, 1); n != 1 {
		t.Fatalf("irqfd counter after enable = %d, want 1", n)
	}
	for i := range 3 { // each EOI while the cause is set asserts again
		if err := vm.Resample(); err != nil {
			t.Fatal(err)
		}
		if n, err := vm.WaitIRQ(10 * time.Second); err != nil || n != 1 {
			t.Fatalf("WaitIRQ() after resample %d = %d, %v, want 1, nil", i, n, err)
		}
	}
	if got := vm.Read32(abi.RegIntStatus); got != abi.IntCompletion {
		t.Errorf("RegIntStatus = %#x, want %#x", got, abi.IntCompletion)
	}
	vm.Write32(abi.RegIntStatus, abi.IntCompletion) // W1C: the level falls
	if x.Level() {
		t.Errorf("Level() after W1C = true, want false")
	}
	x.Signal(abi.IntCompletion) // the next completion rises again
	if n, err := vm.WaitIRQ(10 * time.Second); err != nil || n != 1 {
		t.Errorf("WaitIRQ() after the next completion = %d, %v, want 1, nil", n, err)
	}
	if r, f := x.Raised(); r != 5 || f != 0 {
		t.Errorf("Raised() = %d, %d, want 5, 0", r, f)
	}
	// Closing the Conn detaches it from the line and stops the resample
	// goroutine (goleak checks it).
	d.conn.Close() // returns once the resample goroutine has ended
	x.Signal(abi.IntCompletion)
	if _, f := x.Raised(); f != 0 {
		t.Errorf("Raised() failures after Close = %d, want 0 (sink detached)", f)
	}
}

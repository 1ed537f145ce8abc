package mpqemutest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem/guestmemtest"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mmio"
)

// Guest-physical layout, as QEMU's pc machine presents RAM to the proxy's
// memory listener: low RAM below the VGA hole, high RAM from 1 MiB. The
// same memfd backs both at offset == gpa.
const (
	LowRAMEnd = guestmemtest.LowRAMEnd
	HighRAM   = guestmemtest.HighRAM
	MinRAM    = guestmemtest.MinRAM
	BAR0Addr  = 0xfebf0000 // where the harness programs BAR0
	numBARs   = 7          // QEMU probes PCI_NUM_REGIONS dwords from 0x10: BAR0-5 and 0x28
)

// ErrClosed is returned by a VM's methods after Close (the same as its RAM's).
var ErrClosed = guestmemtest.ErrClosed

// PCIInfo is what the config space probe found.
type PCIInfo struct {
	VendorID, DeviceID, Class, SubsystemID uint16
	BARSize                                [numBARs]uint32
}

// VM is one QEMU-less guest attached to a vGPU over an mpqemu connection.
// Register accesses are serialised like QEMU's io_mutex; Alloc, ReadRAM
// and WriteRAM may run concurrently with them.
type VM struct {
	*guestmemtest.RAM
	info  PCIInfo
	irqFD int
	resFD int

	ioMu   sync.Mutex
	conn   *net.UnixConn
	wire   *mpqemu.Wire
	rbuf   [mpqemu.HeaderSize + mpqemu.RetSize]byte
	err    error // first transport error
	closed bool
}

var (
	_ driver.Registers = (*VM)(nil)
	_ driver.Memory    = (*VM)(nil)
)

// NewVM creates ramBytes of guest RAM (a multiple of the page size, at
// least MinRAM), announces it and an irqfd pair on conn, probes and
// programs the device's config space. It takes ownership of conn: on
// error conn is closed.
func NewVM(conn *net.UnixConn, ramBytes uint64) (*VM, error) { return newVM(conn, ramBytes, false) }

// NewVMUnsealed is NewVM with guest RAM in a memfd that is not sealed
// against shrinking: a hostile QEMU peer's, which can Shrink it under
// vgpud's mappings (vgpud must refuse it).
func NewVMUnsealed(conn *net.UnixConn, ramBytes uint64) (*VM, error) {
	return newVM(conn, ramBytes, true)
}

// Dial connects to the vGPU instance socket at path, as QEMU does, and
// attaches a VM with ramBytes of RAM to it (NewVM).
func Dial(path string, ramBytes uint64) (*VM, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	return NewVM(c, ramBytes)
}

func newVM(conn *net.UnixConn, ramBytes uint64, unsealed bool) (_ *VM, err error) {
	v := &VM{conn: conn, wire: mpqemu.NewWire(conn), irqFD: -1, resFD: -1}
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	// Sealed against shrinking, as QEMU's memory-backend-memfd makes it:
	// vgpud refuses guest RAM that could shrink under its mappings.
	if v.RAM, err = guestmemtest.New("mpqemutest-ram", ramBytes, unsealed); err != nil {
		return nil, fmt.Errorf("new vm: %w", err)
	}
	if err := v.syncSysmem(); err != nil {
		return nil, fmt.Errorf("new vm: %w", err)
	}
	if err := v.setIRQFD(); err != nil {
		return nil, fmt.Errorf("new vm: %w", err)
	}
	if err := v.probe(); err != nil {
		return nil, fmt.Errorf("new vm: %w", err)
	}
	if err := v.program(); err != nil {
		return nil, fmt.Errorf("new vm: %w", err)
	}
	return v, nil
}

// syncSysmem announces RAM in two regions of the same fd, like QEMU's
// pc machine: [0, 0xa0000) and [1 MiB, end).
func (v *VM) syncSysmem() error {
	var s mpqemu.SyncSysmemMsg
	s.GPAs[0], s.Sizes[0], s.Offsets[0] = 0, LowRAMEnd, 0
	s.GPAs[1], s.Sizes[1], s.Offsets[1] = HighRAM, v.Size()-HighRAM, HighRAM
	return v.send(mpqemu.Msg{Cmd: mpqemu.CmdSyncSysmem, Payload: s.Marshal(), FDs: []int{v.FD(), v.FD()}})
}

func (v *VM) setIRQFD() error {
	var err error
	if v.irqFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	if v.resFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	return v.send(mpqemu.Msg{Cmd: mpqemu.CmdSetIRQFD, FDs: []int{v.irqFD, v.resFD}})
}

// send writes a message that expects no reply.
func (v *VM) send(m mpqemu.Msg) error {
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	if v.closed {
		return ErrClosed
	}
	return v.wire.Write(m)
}

// probe reads the identity and sizes every BAR as probe_pci_info does.
func (v *VM) probe() error {
	reads := []struct {
		off uint32
		dst *uint16
	}{
		{mmio.CfgVendorID, &v.info.VendorID},
		{mmio.CfgDeviceID, &v.info.DeviceID},
		{0x0a, &v.info.Class},
		{mmio.CfgSubsysID, &v.info.SubsystemID},
	}
	for _, r := range reads {
		val, err := v.ConfigRead(r.off, 2)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		*r.dst = uint16(val)
	}
	if v.info.VendorID != abi.VendorID || v.info.DeviceID != abi.DeviceID {
		return fmt.Errorf("probe: device %04x:%04x, want %04x:%04x", v.info.VendorID, v.info.DeviceID, abi.VendorID, abi.DeviceID)
	}
	for i := range numBARs {
		off := uint32(mmio.CfgBAR0 + 4*i)
		orig, err := v.ConfigRead(off, 4)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := v.ConfigWrite(off, 4, 0xffffffff); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		mask, err := v.ConfigRead(off, 4)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := v.ConfigWrite(off, 4, orig); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		v.info.BARSize[i] = ^(mask & 0xfffffff0) + 1
	}
	if v.info.BARSize[0] != abi.BAR0Size {
		return fmt.Errorf("probe: BAR0 size %#x, want %#x", v.info.BARSize[0], abi.BAR0Size)
	}
	return nil
}

// program places BAR0 at BAR0Addr and enables memory space and bus
// mastering, as firmware does.
func (v *VM) program() error {
	if err := v.ConfigWrite(mmio.CfgBAR0, 4, BAR0Addr); err != nil {
		return fmt.Errorf("program BAR0: %w", err)
	}
	cmd, err := v.ConfigRead(mmio.CfgCommand, 2)
	if err != nil {
		return fmt.Errorf("program command: %w", err)
	}
	if err := v.ConfigWrite(mmio.CfgCommand, 2, cmd|mmio.CmdMemorySpace|mmio.CmdBusMaster); err != nil {
		return fmt.Errorf("program command: %w", err)
	}
	return nil
}

// Info returns what the config space probe found.
func (v *VM) Info() PCIInfo { return v.info }

// roundTrip sends one message that expects a RET and returns its value.
// Caller holds ioMu.
func (v *VM) roundTripLocked(send func() error) (uint64, error) {
	if v.closed {
		return 0, ErrClosed
	}
	if v.err != nil {
		return 0, v.err
	}
	if err := send(); err != nil {
		v.err = err
		return 0, err
	}
	val, err := v.readRetLocked()
	if err != nil {
		v.err = err
		return 0, err
	}
	return val, nil
}

// readRetLocked reads one RET reply in one read when the kernel allows
// (vgpud always answers 8 bytes, and sends nothing unasked, so asking
// for the whole reply at once never reads into another message).
func (v *VM) readRetLocked() (uint64, error) {
	n := 0
	want := mpqemu.HeaderSize + mpqemu.RetSize
	for n < want {
		k, err := v.conn.Read(v.rbuf[n:want])
		n += k
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("read reply: %w", err)
		}
		if n >= mpqemu.HeaderSize {
			cmd := mpqemu.Cmd(int32(binary.LittleEndian.Uint32(v.rbuf[0:])))
			size := binary.LittleEndian.Uint64(v.rbuf[8:])
			if cmd != mpqemu.CmdRet || size != mpqemu.RetSize {
				return 0, fmt.Errorf("reply %v of %d bytes: %w", cmd, size, mpqemu.ErrProtocol)
			}
		}
	}
	return mpqemu.RetValue(v.rbuf[mpqemu.HeaderSize:want])
}

func (v *VM) bar(cmd mpqemu.Cmd, off uint32, val uint32) (uint64, error) {
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	return v.roundTripLocked(func() error {
		return v.wire.WriteBar(cmd, mpqemu.BarMsg{Addr: BAR0Addr + uint64(off), Val: uint64(val), Size: 4, Memory: true})
	})
}

// Read32 reads the BAR0 register at off. On a transport error it returns
// 0xffffffff and Err reports the error.
func (v *VM) Read32(off uint32) uint32 {
	val, err := v.bar(mpqemu.CmdBarRead, off, 0)
	if err != nil {
		return 0xffffffff
	}
	return uint32(val)
}

// Write32 writes the BAR0 register at off; a transport error is kept for
// Err.
func (v *VM) Write32(off uint32, val uint32) {
	v.bar(mpqemu.CmdBarWrite, off, val)
}

// Err returns the first transport error, after which every register
// access fails.
func (v *VM) Err() error {
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	return v.err
}

func (v *VM) config(cmd mpqemu.Cmd, addr uint32, n int, val uint32) (uint32, error) {
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	r, err := v.roundTripLocked(func() error {
		m := mpqemu.ConfigMsg{Addr: addr, Val: val, Len: int32(n)}
		return v.wire.Write(mpqemu.Msg{Cmd: cmd, Payload: m.Marshal()})
	})
	return uint32(r), err
}

// ConfigRead reads n (1, 2 or 4) bytes of config space at addr.
func (v *VM) ConfigRead(addr uint32, n int) (uint32, error) {
	val, err := v.config(mpqemu.CmdPCICfgRead, addr, n, 0)
	if err != nil {
		return 0xffffffff, fmt.Errorf("config read %#x/%d: %w", addr, n, err)
	}
	return val, nil
}

// ConfigWrite writes n (1, 2 or 4) bytes of config space at addr.
func (v *VM) ConfigWrite(addr uint32, n int, val uint32) error {
	if _, err := v.config(mpqemu.CmdPCICfgWrite, addr, n, val); err != nil {
		return fmt.Errorf("config write %#x/%d: %w", addr, n, err)
	}
	return nil
}

// Reset sends DEVICE_RESET and then, like firmware after a reset,
// programs BAR0 and the command register again.
func (v *VM) Reset() error {
	v.ioMu.Lock()
	_, err := v.roundTripLocked(func() error { return v.wire.Write(mpqemu.Msg{Cmd: mpqemu.CmdDeviceReset}) })
	v.ioMu.Unlock()
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return v.program()
}

// ResyncMemory sends SYNC_SYSMEM again, as QEMU does whenever the guest's
// memory map changes.
func (v *VM) ResyncMemory() error {
	return v.syncSysmem()
}

// IRQCount returns how often the device raised its interrupt since the
// last call (the irqfd's counter), 0 if it did not.
func (v *VM) IRQCount() (uint64, error) {
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	if v.closed {
		return 0, ErrClosed
	}
	return guestmemtest.ReadCounter(v.irqFD)
}

// WaitIRQ waits until the device has raised its interrupt (the irqfd's
// counter is nonzero) and returns the count, like KVM's irqfd would
// consume it; ErrTimeout-wrapped error after timeout.
func (v *VM) WaitIRQ(timeout time.Duration) (uint64, error) {
	return guestmemtest.WaitCounter(v.irqFD, timeout, v.IRQCount)
}

// Resample signals the resample eventfd, as KVM does when the guest ends
// the interrupt (EOI) and deasserts the line.
func (v *VM) Resample() error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	if v.closed {
		return ErrClosed
	}
	if _, err := unix.Write(v.resFD, b[:]); err != nil {
		return fmt.Errorf("write resample eventfd: %w", err)
	}
	return nil
}

// Close hangs up (the device side sees the peer go away), closes the
// eventfds and unmaps guest RAM, including every buffer Alloc returned.
// Close is idempotent.
func (v *VM) Close() error {
	v.ioMu.Lock()
	if v.closed {
		v.ioMu.Unlock()
		return nil
	}
	v.closed = true
	v.conn.Close()
	for _, fd := range []int{v.irqFD, v.resFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	v.ioMu.Unlock()
	if v.RAM != nil {
		return v.RAM.Close()
	}
	return nil
}

// IRQLine returns the vGPU's INTx as a guest's driver sees it
// (driver.IRQLine, for driver.Interrupts): the irqfd vgpud writes when the
// line rises (driver.EventfdLine). The line has its own copy of the
// irqfd; closing it leaves the VM's.
func (v *VM) IRQLine() (driver.IRQLine, error) {
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	if v.closed {
		return nil, ErrClosed
	}
	fd, err := unix.FcntlInt(uintptr(v.irqFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("irqfd: %w", err)
	}
	// Non-blocking, like the VM's: the runtime's poller waits for it.
	return driver.NewEventfdLine(os.NewFile(uintptr(fd), "irqfd")), nil
}

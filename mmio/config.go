package mmio

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/vgpud/vgpud/abi"
)

// Configuration header offsets used by ConfigSpace (PCI Local Bus 3.0,
// type-0 header).
const (
	ConfigSize = 256

	CfgVendorID      = 0x00
	CfgDeviceID      = 0x02
	CfgCommand       = 0x04
	CfgStatus        = 0x06
	CfgRevision      = 0x08
	CfgClassProg     = 0x09 // programming interface, subclass, base class
	CfgHeaderType    = 0x0e
	CfgBAR0          = 0x10
	CfgBAR5          = 0x24
	CfgCardbusCIS    = 0x28
	CfgSubsysVendor  = 0x2c
	CfgSubsysID      = 0x2e
	CfgExpansionROM  = 0x30
	CfgInterruptLine = 0x3c
	CfgInterruptPin  = 0x3d
)

// Command register bits the guest may set; all others read as 0.
const (
	CmdIOSpace      = 1 << 0
	CmdMemorySpace  = 1 << 1
	CmdBusMaster    = 1 << 2
	CmdINTxDisable  = 1 << 10
	cmdWritableBits = CmdIOSpace | CmdMemorySpace | CmdBusMaster | CmdINTxDisable
)

// StatusINTx is the status register's interrupt status bit (3): the
// device has an interrupt pending, whatever INTx disable says.
const StatusINTx = 1 << 3

// bar0AddrMask is the writable part of BAR0: the address bits above the
// BAR's size. The low 4 bits (memory space, 32-bit, non-prefetchable)
// read as 0.
const bar0AddrMask = ^uint32(abi.BAR0Size - 1)

// ConfigSpace is the 256-byte PCI configuration header of a vGPU. It is
// safe for concurrent use.
//
// Like QEMU's own PCI core it keeps an image of the header and a per-byte
// mask of the bits the guest may write; every access, of any width at any
// offset, is merged byte lane by byte lane.
type ConfigSpace struct {
	mu    sync.Mutex
	image [ConfigSize]byte
	wmask [ConfigSize]byte // constant after NewConfigSpace
	intx  atomic.Pointer[INTx]
}

// SetINTx connects the header to the device's interrupt line: the command
// register's INTx disable bit masks it and the status register's interrupt
// status bit reads its pending state (what uio_pci_generic relies on).
func (c *ConfigSpace) SetINTx(x *INTx) {
	c.intx.Store(x)
	if x != nil {
		x.setDisabled(c.Command()&CmdINTxDisable != 0)
	}
}

// NewConfigSpace returns the header of a freshly reset vGPU.
func NewConfigSpace() *ConfigSpace {
	c := &ConfigSpace{}
	le := binary.LittleEndian
	le.PutUint16(c.wmask[CfgCommand:], cmdWritableBits)
	le.PutUint32(c.wmask[CfgBAR0:], bar0AddrMask)
	c.wmask[CfgInterruptLine] = 0xff
	c.resetLocked()
	return c
}

func (c *ConfigSpace) resetLocked() {
	c.image = [ConfigSize]byte{}
	le := binary.LittleEndian
	le.PutUint16(c.image[CfgVendorID:], abi.VendorID)
	le.PutUint16(c.image[CfgDeviceID:], abi.DeviceID)
	c.image[CfgRevision] = abi.Revision
	c.image[CfgClassProg] = abi.ClassCode & 0xff
	c.image[CfgClassProg+1] = abi.ClassCode >> 8 & 0xff
	c.image[CfgClassProg+2] = abi.ClassCode >> 16 & 0xff
	c.image[CfgHeaderType] = 0 // type 0, single function
	le.PutUint16(c.image[CfgSubsysVendor:], abi.SubsystemVendorID)
	le.PutUint16(c.image[CfgSubsysID:], abi.SubsystemID)
	c.image[CfgInterruptPin] = abi.InterruptPin
	// Status is 0: no capabilities list, nothing to report.
}

// Reset returns the header to its power-on state: command register,
// BAR0 and interrupt line cleared (PCI function-level reset).
func (c *ConfigSpace) Reset() {
	c.mu.Lock()
	c.resetLocked()
	c.mu.Unlock()
	if x := c.intx.Load(); x != nil {
		x.setDisabled(false)
	}
}

func validCfgAccess(off uint32, size int) bool {
	switch size {
	case 1, 2, 4:
	default:
		return false
	}
	return off < ConfigSize && uint64(off)+uint64(size) <= ConfigSize
}

// Read returns size (1, 2 or 4) bytes at off, little-endian. An access
// outside the header or of another width reads as 0xffffffff, like a
// master abort.
func (c *ConfigSpace) Read(off uint32, size int) uint32 {
	if !validCfgAccess(off, size) {
		return 0xffffffff
	}
	var status [2]byte
	if x := c.intx.Load(); x != nil && x.Pending() {
		binary.LittleEndian.PutUint16(status[:], StatusINTx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var v uint32
	for i := size - 1; i >= 0; i-- {
		o := int(off) + i
		b := c.image[o]
		if o >= CfgStatus && o < CfgStatus+2 {
			b |= status[o-CfgStatus]
		}
		v = v<<8 | uint32(b)
	}
	return v
}

// Write stores the low size (1, 2 or 4) bytes of v at off. Only writable
// bits change; accesses outside the header or of another width are
// ignored. Writing all ones to BAR0 makes it read back its size mask, as
// BAR sizing expects; BAR1-5, the CardBus CIS pointer and the expansion
// ROM BAR do not exist on this device and read as 0.
func (c *ConfigSpace) Write(off uint32, size int, v uint32) {
	if !validCfgAccess(off, size) {
		return
	}
	c.mu.Lock()
	for i := range size {
		o := int(off) + i
		b := byte(v >> (8 * i))
		m := c.wmask[o]
		c.image[o] = c.image[o]&^m | b&m
	}
	disabled := binary.LittleEndian.Uint16(c.image[CfgCommand:])&CmdINTxDisable != 0
	c.mu.Unlock()
	if x := c.intx.Load(); x != nil && off <= CfgCommand+1 && int(off)+size > CfgCommand {
		x.setDisabled(disabled)
	}
}

// BAR0 returns the address the guest programmed into BAR0 and whether
// memory space decoding is enabled in the command register.
func (c *ConfigSpace) BAR0() (addr uint32, memEnabled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	le := binary.LittleEndian
	addr = le.Uint32(c.image[CfgBAR0:]) & bar0AddrMask
	memEnabled = le.Uint16(c.image[CfgCommand:])&CmdMemorySpace != 0
	return addr, memEnabled
}

// Command returns the command register.
func (c *ConfigSpace) Command() uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.LittleEndian.Uint16(c.image[CfgCommand:])
}

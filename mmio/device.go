package mmio

import (
	"errors"
	"fmt"
	"sync"

	"github.com/vgpud/vgpud/abi"
)

// Device is the BAR0 register file of one vGPU instance (abi.Reg*). It
// latches the ring configuration the guest programs and forwards
// doorbells, ring control and error handling to its Backend. It is safe
// for concurrent use; see the package comment for the lock order.
type Device struct {
	b   Backend
	irq INTx // the interrupt line (abi.FeatureINTx); its own lock

	mu        sync.Mutex
	ringBase  uint64
	complBase uint64
	slots     uint32
	tail      uint32
	shadow    uint64 // RegTailShadowLo/Hi (ABI 1.3)
	pollWord  uint64 // RegPollWordLo/Hi (ABI 1.6)
	// keep makes the next Reset leave the backend alone: the reset QEMU
	// sends a hot-plugged device right after it is added, on a device
	// whose state a migration has just restored (Restore).
	keep bool
	// hold makes every Reset leave the backend alone until HoldBackend
	// (false): an incoming migration fills the backend while the
	// destination QEMU, started by the VM's manager mid-migration
	// (libvirt), connects and resets the device as it starts.
	hold bool
}

// New returns the register file of a device backed by b.
func New(b Backend) *Device {
	return &Device{b: b}
}

// INTx returns the device's interrupt line: the completion hook calls its
// Signal, the transport attaches with SetSink and calls Resample, and the
// config space follows INTx disable through ConfigSpace.SetINTx.
func (d *Device) INTx() *INTx { return &d.irq }

// Reset is a PCI device reset: the backend is reset and every latched
// register returns to 0.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resetLocked()
}

// Restore sets the registers a migrated guest's driver programmed on its
// former device, and makes the next Reset (the one QEMU sends a
// hot-plugged device) spare the restored backend; any BAR access first
// ends that.
func (d *Device) Restore(r RingConfig, tail uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ringBase, d.complBase, d.slots, d.tail = r.Base, r.ComplBase, r.Slots, tail
	d.keep = true
}

// SpareNextReset makes the next Reset leave the backend alone (a vGPU
// re-plugged into the VM it was taken from); any BAR access first ends it.
func (d *Device) SpareNextReset() {
	d.mu.Lock()
	d.keep = true
	d.mu.Unlock()
}

// HoldBackend makes every Reset leave the backend alone while on (the
// registers are reset all the same): the backend holds a migrated
// device's state that a VMM starting on the destination must not wipe.
// Restore then sets the registers the guest's driver programmed.
func (d *Device) HoldBackend(on bool) {
	d.mu.Lock()
	d.hold = on
	d.mu.Unlock()
}

func (d *Device) resetLocked() {
	if d.keep {
		d.keep = false
		d.irq.reset()
		return
	}
	if d.hold {
		d.irq.reset()
		d.ringBase, d.complBase, d.slots, d.tail, d.shadow, d.pollWord = 0, 0, 0, 0, 0, 0
		d.publishShadow()
		return
	}
	d.b.Reset()
	d.irq.reset()
	d.ringBase, d.complBase, d.slots, d.tail, d.shadow, d.pollWord = 0, 0, 0, 0, 0, 0
	d.publishShadow()
}

// publishShadow tells a backend that reads the kick eventfd itself
// (KickTaker) the tail shadow's address.
func (d *Device) publishShadow() {
	if kt, ok := d.b.(KickTaker); ok {
		kt.TailShadow(d.shadow)
	}
}

// TakeKicks hands the transport's kick eventfd (abi.RegRingKick backed
// by an ioeventfd) to the backend, if it is a KickTaker that can read it
// itself; fd stays the caller's. fd -1 lets go of the last one. An error
// (errors.ErrUnsupported where the backend is no KickTaker) says the
// caller must watch fd and write abi.RegRingKick on each signal.
func (d *Device) TakeKicks(fd int) error {
	kt, ok := d.b.(KickTaker)
	if !ok {
		if fd < 0 {
			return nil
		}
		return fmt.Errorf("kick eventfd: the backend reads none: %w", errors.ErrUnsupported)
	}
	return kt.TakeKicks(fd)
}

// goodAccess reports whether an access is a naturally aligned 4-byte
// access inside BAR0, the only kind the register file serves.
func goodAccess(off uint64, size int) bool {
	return size == 4 && off%4 == 0 && off < abi.BAR0Size
}

// ReadBAR reads the register at byte offset off of BAR0. Accesses that
// are not naturally aligned 4-byte accesses inside BAR0 read 0 and latch
// abi.StatusBadAccess; unassigned offsets read 0.
func (d *Device) ReadBAR(off uint64, size int) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keep = false
	if !goodAccess(off, size) {
		d.b.LatchError(abi.StatusBadAccess)
		return 0
	}
	return uint64(d.read32Locked(uint32(off)))
}

func (d *Device) read32Locked(off uint32) uint32 {
	switch off {
	case abi.RegID:
		return abi.IDMagic
	case abi.RegVersion:
		return abi.Version
	case abi.RegFeatures:
		if f, ok := d.b.(Featured); ok {
			return f.ABIFeatures() & abi.Features
		}
		return abi.Features
	case abi.RegStatus:
		var s uint32
		if d.b.RingEnabled() {
			s |= abi.StatusBitRingEnabled
		}
		if st, _ := d.b.Error(); st != abi.StatusOK {
			s |= abi.StatusBitError
		}
		return s
	case abi.RegMemSizeLo:
		return uint32(d.b.Limits().MemBytes)
	case abi.RegMemSizeHi:
		return uint32(d.b.Limits().MemBytes >> 32)
	case abi.RegMaxAllocLo:
		return uint32(d.b.Limits().MaxAlloc)
	case abi.RegMaxAllocHi:
		return uint32(d.b.Limits().MaxAlloc >> 32)
	case abi.RegComputeUnits:
		return d.b.Limits().ComputeUnits
	case abi.RegMaxRingSlots:
		return abi.MaxRingSlots
	case abi.RegMaxWorkGroup:
		return d.b.Limits().MaxWorkGroup
	case abi.RegMaxContexts:
		return min(d.b.Limits().Contexts, abi.MaxContexts)
	case abi.RegError:
		st, _ := d.b.Error()
		return uint32(st)
	case abi.RegErrorCount:
		_, n := d.b.Error()
		return n
	case abi.RegRingBaseLo:
		return uint32(d.ringBase)
	case abi.RegRingBaseHi:
		return uint32(d.ringBase >> 32)
	case abi.RegComplBaseLo:
		return uint32(d.complBase)
	case abi.RegComplBaseHi:
		return uint32(d.complBase >> 32)
	case abi.RegRingSlots:
		return d.slots
	case abi.RegRingCtrl:
		if d.b.RingEnabled() {
			return abi.RingCtrlEnable
		}
		return 0
	case abi.RegRingTail:
		return d.tail
	case abi.RegTailShadowLo:
		return uint32(d.shadow)
	case abi.RegTailShadowHi:
		return uint32(d.shadow >> 32)
	case abi.RegPollWordLo:
		return uint32(d.pollWord)
	case abi.RegPollWordHi:
		return uint32(d.pollWord >> 32)
	case abi.RegRingHead:
		return d.b.Head()
	case abi.RegRingDone:
		return d.b.Done()
	case abi.RegIntStatus:
		return d.irq.readStatus()
	case abi.RegIntEnable:
		return d.irq.readEnable()
	}
	if off >= abi.RegProfileName && off < abi.RegProfileName+abi.ProfileNameLen {
		return nameWord(d.b.Limits().ProfileName, abi.ProfileNameLen, off-abi.RegProfileName)
	}
	if off >= abi.RegDeviceName && off < abi.RegDeviceName+abi.DeviceNameLen {
		return nameWord(d.b.Limits().DeviceName, abi.DeviceNameLen, off-abi.RegDeviceName)
	}
	return 0
}

// nameWord returns bytes [i, i+4) of name truncated to max bytes and NUL
// padded, as a little-endian word.
func nameWord(name string, max int, i uint32) uint32 {
	if len(name) > max {
		name = name[:max]
	}
	var v uint32
	for k := 3; k >= 0; k-- {
		var c byte
		if j := int(i) + k; j < len(name) {
			c = name[j]
		}
		v = v<<8 | uint32(c)
	}
	return v
}

// WriteBAR writes the register at byte offset off of BAR0. Writes to
// read-only or unassigned registers are ignored; accesses that are not
// naturally aligned 4-byte accesses inside BAR0 are ignored and latch
// abi.StatusBadAccess.
func (d *Device) WriteBAR(off uint64, size int, v uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keep = false
	if !goodAccess(off, size) {
		d.b.LatchError(abi.StatusBadAccess)
		return
	}
	d.write32Locked(uint32(off), uint32(v))
}

func (d *Device) write32Locked(off, v uint32) {
	switch off {
	case abi.RegErrorAck:
		d.b.AckError()
	case abi.RegRingBaseLo:
		d.ringBase = d.ringBase&^0xffffffff | uint64(v)
	case abi.RegRingBaseHi:
		d.ringBase = d.ringBase&0xffffffff | uint64(v)<<32
	case abi.RegComplBaseLo:
		d.complBase = d.complBase&^0xffffffff | uint64(v)
	case abi.RegComplBaseHi:
		d.complBase = d.complBase&0xffffffff | uint64(v)<<32
	case abi.RegRingSlots:
		d.slots = v
	case abi.RegRingCtrl:
		d.ringCtrlLocked(v)
	case abi.RegIntStatus:
		d.irq.ack(v)
	case abi.RegIntEnable:
		d.irq.setEnable(v)
	case abi.RegRingTail:
		d.tail = v
		if err := d.b.Doorbell(v); err != nil {
			d.b.LatchError(abi.StatusOf(err))
		}
	case abi.RegTailShadowLo:
		d.shadow = d.shadow&^0xffffffff | uint64(v)
		d.publishShadow()
	case abi.RegTailShadowHi:
		d.shadow = d.shadow&0xffffffff | uint64(v)<<32
		d.publishShadow()
	case abi.RegPollWordLo:
		d.pollWord = d.pollWord&^0xffffffff | uint64(v)
	case abi.RegPollWordHi:
		d.pollWord = d.pollWord&0xffffffff | uint64(v)<<32
	case abi.RegRingKick:
		if err := d.b.Kick(d.shadow); err != nil {
			d.b.LatchError(abi.StatusOf(err))
		}
	case abi.RegContextKick:
		if v == 0 || v > min(d.b.Limits().Contexts, abi.MaxContexts) {
			d.b.LatchError(abi.StatusNotFound)
			return
		}
		if err := d.b.ContextKick(v); err != nil {
			d.b.LatchError(abi.StatusOf(err))
		}
	}
}

// ringCtrlLocked applies a RegRingCtrl write. Reset wins over Enable;
// Enable while already enabled is a no-op; 0 disables. Bits other than
// Enable and Reset are ignored.
func (d *Device) ringCtrlLocked(v uint32) {
	switch {
	case v&abi.RingCtrlReset != 0:
		d.resetLocked()
	case v&abi.RingCtrlEnable != 0:
		if d.b.RingEnabled() {
			return
		}
		cfg := RingConfig{Base: d.ringBase, ComplBase: d.complBase, Slots: d.slots}
		if d.pollWord != 0 {
			cfg.Shadow, cfg.PollWord = d.shadow, d.pollWord
		}
		if err := d.b.EnableRing(cfg); err != nil {
			d.b.LatchError(abi.StatusOf(err))
		}
	default:
		d.b.DisableRing()
	}
}

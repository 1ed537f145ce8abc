package mmio

import (
	"sync"
	"sync/atomic"

	"github.com/vgpud/vgpud/abi"
)

// IRQSink asserts the device's interrupt line on the transport (for
// x-pci-proxy-dev: a signal to the irqfd QEMU sent). An irqfd cannot be
// deasserted by the device: KVM deasserts the line when the guest ends the
// interrupt (EOI) and signals the resample eventfd, on which the transport
// calls INTx.Resample. RaiseIRQ is called holding the INTx's lock (and
// the Device's): it must not block and must not call back into the INTx,
// so a sink never writes a peer's fd itself (internal/irqfd's
// Trigger writes it from a goroutine of its own).
type IRQSink interface {
	RaiseIRQ() error
}

// INTx is the device's level-triggered INTA# (abi.FeatureINTx, docs/ABI.md
// "Interrupts"): the register file's RegIntStatus and RegIntEnable, the
// INTx-disable bit of the command register (ConfigSpace.SetINTx), and the
// sink that asserts the line. The line's level is
//
//	status & enable != 0 && !INTx-disable
//
// and it is asserted on every rise of that level and again on each
// resample while it stays high. The interrupt status bit of the PCI status
// register reads status & enable != 0 (what uio_pci_generic checks).
//
// Lock order: INTx.mu nests inside Device.mu and calls the sink holding
// it; ConfigSpace never holds its own mutex while calling INTx.
type INTx struct {
	mu sync.Mutex
	// Guarded by mu.
	status, enable uint32
	disabled       bool // command register INTx disable
	sink           IRQSink
	// pending mirrors status&enable != 0 for lock-free reads.
	pending atomic.Bool
	raised  atomic.Uint64
	errs    atomic.Uint64
}

// level reports whether the line should be asserted.
func (x *INTx) levelLocked() bool {
	return x.status&x.enable != 0 && !x.disabled
}

// update recomputes the level after a change and asserts the line if it
// rose.
func (x *INTx) updateLocked(was bool) {
	x.pending.Store(x.status&x.enable != 0)
	if !was && x.levelLocked() {
		x.raiseLocked()
	}
}

func (x *INTx) raiseLocked() {
	if x.sink == nil {
		return
	}
	if err := x.sink.RaiseIRQ(); err != nil {
		x.errs.Add(1)
		return
	}
	x.raised.Add(1)
}

// Signal latches bits (abi.Int*) in RegIntStatus, asserting the line if
// they are enabled. The completion hook calls Signal(abi.IntCompletion)
// after each completion record; it never takes Device.mu, so the
// aggregator's worker cannot deadlock against a vCPU's register access.
func (x *INTx) Signal(bits uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	was := x.levelLocked()
	x.status |= bits & abi.IntAll
	x.updateLocked(was)
}

// Resample is the end of an interrupt (KVM's resample eventfd): the line
// was deasserted; assert it again if it is still high.
func (x *INTx) Resample() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.levelLocked() {
		x.raiseLocked()
	}
}

// SetSink attaches the transport's line (nil detaches) and asserts it at
// once if the level is high.
func (x *INTx) SetSink(s IRQSink) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.sink = s
	if x.levelLocked() {
		x.raiseLocked()
	}
}

// ClearSink detaches s if it is the attached sink (a transport that ends
// must not detach its successor).
func (x *INTx) ClearSink(s IRQSink) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sink == s {
		x.sink = nil
	}
}

// Pending reports whether RegIntStatus & RegIntEnable != 0 (the PCI
// status register's interrupt status bit).
func (x *INTx) Pending() bool { return x.pending.Load() }

// Level reports whether the line is asserted.
func (x *INTx) Level() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.levelLocked()
}

// Raised returns how often the line was asserted, and how often the sink
// failed.
func (x *INTx) Raised() (raised, failed uint64) { return x.raised.Load(), x.errs.Load() }

func (x *INTx) readStatus() uint32 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.status
}

func (x *INTx) readEnable() uint32 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.enable
}

// ack clears the status bits written as 1 (write-1-to-clear).
func (x *INTx) ack(v uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	was := x.levelLocked()
	x.status &^= v
	x.updateLocked(was)
}

func (x *INTx) setEnable(v uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	was := x.levelLocked()
	x.enable = v & abi.IntAll
	x.updateLocked(was)
}

// setDisabled follows the command register's INTx-disable bit.
func (x *INTx) setDisabled(d bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	was := x.levelLocked()
	x.disabled = d
	x.updateLocked(was)
}

// reset clears status and enable (device reset); the sink stays.
func (x *INTx) reset() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.status, x.enable = 0, 0
	x.pending.Store(false)
}

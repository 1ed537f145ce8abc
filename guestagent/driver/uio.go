package driver

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// UIOFile is an open /dev/uioN of a device bound to uio_pci_generic: a
// 4-byte read blocks until the next interrupt and returns the interrupt
// count. *os.File is one: /dev/uioN supports poll, so read deadlines work.
type UIOFile interface {
	io.ReadCloser
	SetReadDeadline(t time.Time) error
}

// PCIConfig is the device's PCI configuration space (its sysfs config
// file): uio_pci_generic masks INTx in its handler by setting the command
// register's INTx-disable bit, and has no irqcontrol, so a write to
// /dev/uioN fails with ENOSYS; the interrupt is unmasked by clearing the
// bit here, as the kernel's UIO howto says.
type PCIConfig interface {
	io.ReaderAt
	io.WriterAt
}

// uioRecheck bounds one sleep so a lost interrupt costs at most this much.
const uioRecheck = 50 * time.Millisecond

// Command register (PCI_COMMAND) and its INTx-disable bit.
const (
	pciCommand            = 0x04
	pciCommandINTxDisable = 1 << 10
)

// UIOBlocker sleeps on the device's INTx (ABI 1.1, docs/ABI.md
// "Interrupts") through uio_pci_generic. It needs a VMM that delivers the
// device's interrupt: QEMU's vfio-user-pci does under KVM and under TCG;
// x-pci-proxy-dev only under KVM (docs/vfio-user.md "Interrupts"). Where
// none arrives every sleep ends at its 50 ms re-check. It is safe for
// concurrent use; sleepers are serialised.
type UIOBlocker struct {
	regs Registers

	mu   sync.Mutex // serialises sleepers and Close
	line *UIOLine   // nil after Close

	woken, rechecks atomic.Uint64
}

var _ Blocker = (*UIOBlocker)(nil)

// NewUIOBlocker enables the completion interrupt in regs (the device's
// BAR0, e.g. Device.Regs) and sleeps on uio, unmasking through cfg. It
// fails with ErrNoINTx on a device without FeatureINTx. It takes
// ownership of uio, and of cfg when it is an io.Closer.
func NewUIOBlocker(regs Registers, uio UIOFile, cfg PCIConfig) (*UIOBlocker, error) {
	if f := regs.Read32(abi.RegFeatures); f == 0xffffffff || f&abi.FeatureINTx == 0 {
		uio.Close()
		closeConfig(cfg)
		return nil, fmt.Errorf("uio blocker: features %#x: %w", f, ErrNoINTx)
	}
	regs.Write32(abi.RegIntStatus, abi.IntCompletion)
	regs.Write32(abi.RegIntEnable, abi.IntCompletion)
	return &UIOBlocker{regs: regs, line: NewUIOLine(uio, cfg)}, nil
}

func closeConfig(cfg PCIConfig) {
	if c, ok := cfg.(io.Closer); ok {
		c.Close()
	}
}

// unmaskINTx clears the INTx-disable bit of the command register in cfg,
// if it is set.
func unmaskINTx(cfg PCIConfig) error {
	var cmd [2]byte
	if _, err := cfg.ReadAt(cmd[:], pciCommand); err != nil {
		return fmt.Errorf("read command register: %w", err)
	}
	v := binary.LittleEndian.Uint16(cmd[:])
	if v&pciCommandINTxDisable == 0 {
		return nil
	}
	binary.LittleEndian.PutUint16(cmd[:], v&^pciCommandINTxDisable)
	if _, err := cfg.WriteAt(cmd[:], pciCommand); err != nil {
		return fmt.Errorf("write command register: %w", err)
	}
	return nil
}

// Stats returns how many sleeps an interrupt ended and how many ended at
// their re-check or deadline instead.
func (b *UIOBlocker) Stats() (interrupts, rechecks uint64) {
	return b.woken.Load(), b.rechecks.Load()
}

// BlockUntil implements Blocker: it clears the completion cause, unmasks
// INTx, re-checks done() and only then sleeps for an interrupt (so a
// completion between the check and the sleep still raises one), looping
// until done() or deadline.
func (b *UIOBlocker) BlockUntil(index uint32, done func() bool, deadline time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.line == nil {
		return fmt.Errorf("uio blocker: %w", ErrClosed)
	}
	for {
		b.regs.Write32(abi.RegIntStatus, abi.IntCompletion)
		if err := b.line.Unmask(); err != nil {
			return fmt.Errorf("uio blocker: unmask intx: %w", err)
		}
		if done() {
			return nil
		}
		now := time.Now()
		if !now.Before(deadline) {
			return fmt.Errorf("uio blocker: command %d: %w", index, ErrTimeout)
		}
		wake := now.Add(uioRecheck)
		if deadline.Before(wake) {
			wake = deadline
		}
		raised, err := b.line.Await(wake)
		if err != nil {
			return fmt.Errorf("uio blocker: %w", err)
		}
		if raised {
			b.woken.Add(1)
		} else {
			b.rechecks.Add(1)
		}
	}
}

// Close disables the completion interrupt and closes the uio file.
func (b *UIOBlocker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.line == nil {
		return nil
	}
	b.regs.Write32(abi.RegIntEnable, 0)
	err := b.line.Close()
	b.line = nil
	return err
}

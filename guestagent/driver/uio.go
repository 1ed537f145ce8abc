package driver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// UIOFile is an open /dev/uioN of a device bound to uio_pci_generic: a
// 4-byte read blocks until the next interrupt and returns the interrupt
// count; a 4-byte write of 1 unmasks INTx (uio_pci_generic masks it in its
// handler through the command register's INTx disable bit). *os.File is
// one: /dev/uioN supports poll, so read deadlines work.
type UIOFile interface {
	io.ReadWriteCloser
	SetReadDeadline(t time.Time) error
}

// uioRecheck bounds one sleep so a lost interrupt costs at most this much.
const uioRecheck = 50 * time.Millisecond

// UIOBlocker sleeps on the device's INTx (ABI 1.1, docs/ABI.md
// "Interrupts") through uio_pci_generic: the Blocker for KVM hosts, where
// QEMU delivers the proxy device's irqfd. Under TCG no interrupt arrives
// (docs/agent-channel.md); every sleep then ends at its 50 ms re-check.
// It is safe for concurrent use; sleepers are serialised.
type UIOBlocker struct {
	regs Registers

	mu  sync.Mutex // serialises sleepers and Close
	uio UIOFile    // nil after Close
}

var _ Blocker = (*UIOBlocker)(nil)

// NewUIOBlocker enables the completion interrupt in regs (the device's
// BAR0, e.g. Device.Regs) and sleeps on uio. It fails with ErrNoINTx on a
// device without FeatureINTx. It takes ownership of uio.
func NewUIOBlocker(regs Registers, uio UIOFile) (*UIOBlocker, error) {
	if f := regs.Read32(abi.RegFeatures); f == 0xffffffff || f&abi.FeatureINTx == 0 {
		uio.Close()
		return nil, fmt.Errorf("uio blocker: features %#x: %w", f, ErrNoINTx)
	}
	regs.Write32(abi.RegIntStatus, abi.IntCompletion)
	regs.Write32(abi.RegIntEnable, abi.IntCompletion)
	return &UIOBlocker{regs: regs, uio: uio}, nil
}

// BlockUntil implements Blocker: it clears the completion cause, unmasks
// INTx, re-checks done() and only then sleeps for an interrupt (so a
// completion between the check and the sleep still raises one), looping
// until done() or deadline.
func (b *UIOBlocker) BlockUntil(index uint32, done func() bool, deadline time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.uio == nil {
		return fmt.Errorf("uio blocker: %w", ErrClosed)
	}
	var unmask, count [4]byte
	binary.LittleEndian.PutUint32(unmask[:], 1)
	for {
		b.regs.Write32(abi.RegIntStatus, abi.IntCompletion)
		if _, err := b.uio.Write(unmask[:]); err != nil {
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
		if err := b.uio.SetReadDeadline(wake); err != nil {
			return fmt.Errorf("uio blocker: %w", err)
		}
		if _, err := io.ReadFull(b.uio, count[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("uio blocker: wait for interrupt: %w", err)
		}
	}
}

// Close disables the completion interrupt and closes the uio file.
func (b *UIOBlocker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.uio == nil {
		return nil
	}
	b.regs.Write32(abi.RegIntEnable, 0)
	err := b.uio.Close()
	b.uio = nil
	return err
}

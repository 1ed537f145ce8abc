package driver

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// Completion interrupts for a process that serves many waiters (issue 43).
//
// A Blocker (sync.go, uio.go) lets one waiter sleep on the device's INTx.
// A daemon that serves many clients on one vGPU (vgpu-icdd: a reaper per
// device context, all on the vGPU's one line) needs each interrupt handed
// to every reaper instead: Interrupts waits on the line and wakes every
// subscriber. The line is armed only on request (Arm): an interrupt costs
// a TCG guest several trapped accesses (the handler, clearing the cause,
// unmasking), so a reaper arms it only when a client sleeps on its
// completions, and a burst of completions nobody sleeps for raises none.

// IRQLine is a device's INTx as the guest's OS hands it to a process:
// /dev/uioN of uio_pci_generic in a guest (UIOLine), the irqfd of an
// in-process harness in tests.
type IRQLine interface {
	// Await blocks until the line is raised (true) or deadline passes
	// (false). It fails once the line is closed.
	Await(deadline time.Time) (bool, error)
	// Unmask ends the interrupt, so that the line can be raised again.
	Unmask() error
	// Close closes the line; an Await in progress returns.
	Close() error
}

// irqRearm bounds one Await: when it ends without an interrupt the line
// counts as disarmed, and the next Arm enables the cause again (a reset
// or a migration clears RegIntEnable). A variable for tests.
var irqRearm = time.Second

// Interrupts hands each completion interrupt of a device to every
// subscriber. Subscribers get a wake-up on a channel of one slot: after
// it, every completion record that landed before the interrupt is visible
// (a record is written before its cause is latched: docs/ABI.md
// "Interrupts"). It starts one goroutine, which Close stops.
type Interrupts struct {
	d    *Device
	line IRQLine
	log  *slog.Logger

	mu     sync.Mutex
	subs   map[chan struct{}]struct{}
	armed  bool // cause cleared and line unmasked since the last interrupt
	enable bool // the next Arm enables the cause (first, and after a quiet Await)
	warned bool // a failure to unmask was logged

	count, arms atomic.Uint64
	stop        chan struct{}
	done        chan struct{}
	runErr      error // why the goroutine ended early; read after done
}

// NewInterrupts takes ownership of line and delivers d's completion
// interrupts through it. It fails with ErrNoINTx (closing line) on a
// device that does not announce abi.FeatureINTx.
func NewInterrupts(d *Device, line IRQLine, log *slog.Logger) (*Interrupts, error) {
	if d.Info().Features&abi.FeatureINTx == 0 {
		line.Close()
		return nil, fmt.Errorf("completion interrupts: %w", ErrNoINTx)
	}
	if log == nil {
		log = slog.Default()
	}
	in := &Interrupts{d: d, line: line, log: log, subs: map[chan struct{}]struct{}{}, enable: true,
		stop: make(chan struct{}), done: make(chan struct{})}
	go in.run()
	return in, nil
}

// Subscribe returns a channel that is signalled after each interrupt, and
// a function that stops the signals.
func (in *Interrupts) Subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	in.mu.Lock()
	in.subs[c] = struct{}{}
	in.mu.Unlock()
	return c, func() {
		in.mu.Lock()
		delete(in.subs, c)
		in.mu.Unlock()
	}
}

// Arm makes the next completion raise an interrupt: it clears the cause
// and unmasks the line, unless that was done since the last interrupt.
// It reports whether it armed the line now: the caller must then look for
// completions once more before it sleeps (one may have landed before the
// cause was cleared, and raise nothing).
func (in *Interrupts) Arm() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.armed {
		return false
	}
	if !in.d.armInterrupt(in.enable) {
		return false // suspended or closed: the timers carry on
	}
	if err := in.line.Unmask(); err != nil {
		if !in.warned {
			in.warned = true
			in.log.Warn("vgpu completion interrupts: cannot unmask the line: reapers poll on timers", "err", err)
		}
		return false
	}
	in.armed, in.enable = true, false
	in.arms.Add(1)
	return true
}

// Count returns how many interrupts have arrived, and how often the line
// was armed: no interrupts for many arms means the VMM delivers none
// (docs/ABI.md "Interrupts").
func (in *Interrupts) Count() (interrupts, arms uint64) { return in.count.Load(), in.arms.Load() }

// Close disables the completion cause, closes the line and stops the
// goroutine. It returns why the goroutine had ended early, if it had.
func (in *Interrupts) Close() error {
	select {
	case <-in.stop:
	default:
		close(in.stop)
	}
	err := in.line.Close()
	<-in.done
	in.d.disableInterrupt()
	if in.runErr != nil {
		return in.runErr
	}
	return err
}

func (in *Interrupts) run() {
	defer close(in.done)
	for {
		raised, err := in.line.Await(time.Now().Add(irqRearm))
		select {
		case <-in.stop:
			return
		default:
		}
		if err != nil {
			in.runErr = fmt.Errorf("completion interrupts: wait: %w", err)
			in.log.Warn("vgpu completion interrupts stop: reapers poll on timers", "err", err)
			return
		}
		in.mu.Lock()
		in.armed = false
		if !raised {
			in.enable = true // quiet: arm (and enable) afresh next time
		} else {
			in.count.Add(1)
			for c := range in.subs {
				select {
				case c <- struct{}{}:
				default:
				}
			}
		}
		in.mu.Unlock()
	}
}

// armInterrupt enables the completion cause in RegIntEnable (with
// enable) and clears it in RegIntStatus, and reports whether it wrote;
// disableInterrupt disables it. Both reach the registers through intRegs.
func (d *Device) armInterrupt(enable bool) bool {
	return d.intRegs(func(r Registers) {
		if enable {
			r.Write32(abi.RegIntEnable, abi.IntCompletion)
		}
		r.Write32(abi.RegIntStatus, abi.IntCompletion)
	})
}

func (d *Device) disableInterrupt() {
	d.intRegs(func(r Registers) { r.Write32(abi.RegIntEnable, 0) })
}

// intRegs runs write on the registers of the interrupt's owner, unless
// the device is closed, suspended (its registers are closed) or
// abandoned. A device context shares its vGPU's line and registers: the
// default ring's Device owns them.
func (d *Device) intRegs(write func(Registers)) bool {
	if d.parent != nil {
		return d.parent.intRegs(write)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.abandoned.Load() || d.Suspended() || d.regs == nil {
		return false
	}
	write(d.regs)
	return true
}

// UIOLine is a device's INTx through uio_pci_generic: /dev/uioN, whose
// 4-byte reads block until the next interrupt, and the device's PCI
// configuration, where the interrupt is unmasked (uio.go).
type UIOLine struct {
	uio UIOFile
	cfg PCIConfig
}

var _ IRQLine = (*UIOLine)(nil)

// NewUIOLine takes ownership of uio and of cfg (when it is an io.Closer).
func NewUIOLine(uio UIOFile, cfg PCIConfig) *UIOLine { return &UIOLine{uio: uio, cfg: cfg} }

// Await implements IRQLine.
func (l *UIOLine) Await(deadline time.Time) (bool, error) {
	var count [4]byte
	return awaitRead(l.uio, count[:], deadline)
}

// awaitRead reads one interrupt's record into buf from f, a file that
// blocks until the next interrupt, by deadline: false when it passed.
func awaitRead(f UIOFile, buf []byte, deadline time.Time) (bool, error) {
	if err := f.SetReadDeadline(deadline); err != nil {
		return false, fmt.Errorf("interrupt line: %w", err)
	}
	_, err := io.ReadFull(f, buf)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, nil
	default:
		return false, fmt.Errorf("interrupt line: wait for interrupt: %w", err)
	}
}

// Unmask implements IRQLine: it clears the command register's INTx-disable
// bit, which uio_pci_generic's handler set.
func (l *UIOLine) Unmask() error { return unmaskINTx(l.cfg) }

// Close implements IRQLine.
func (l *UIOLine) Close() error {
	err := l.uio.Close()
	closeConfig(l.cfg)
	return err
}

// EventfdLine is a device's INTx delivered as an eventfd that the VMM (or
// a harness playing one) writes when the line rises: an irqfd. Ending the
// interrupt needs nothing here: no interrupt controller holds the line,
// and the next rise writes the eventfd again once the cause was cleared.
type EventfdLine struct{ f *os.File }

var _ IRQLine = (*EventfdLine)(nil)

// NewEventfdLine takes ownership of f, a non-blocking eventfd (so that
// the runtime's poller waits for it and Close ends a wait).
func NewEventfdLine(f *os.File) *EventfdLine { return &EventfdLine{f: f} }

// Await implements IRQLine: it reads the eventfd's counter.
func (l *EventfdLine) Await(deadline time.Time) (bool, error) {
	var count [8]byte
	return awaitRead(l.f, count[:], deadline)
}

// Unmask implements IRQLine: nothing to do.
func (l *EventfdLine) Unmask() error { return nil }

// Close implements IRQLine.
func (l *EventfdLine) Close() error { return l.f.Close() }

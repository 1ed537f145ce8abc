package mpqemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/irqfd"
	"github.com/vgpud/vgpud/internal/scmrights"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mmio"
)

// Errors returned by Conn.
var (
	// ErrClosed is returned by Serve after Close, like http.ErrServerClosed.
	ErrClosed = transport.ErrClosed
	// ErrNoIRQ is returned by RaiseIRQ before QEMU sent SET_IRQFD.
	ErrNoIRQ = errors.New("mpqemu: no irqfd")
	// ErrPaused is returned by Serve after Pause, between two messages;
	// the connection stays open and Serve may be called again.
	ErrPaused = transport.ErrPaused
)

// MemoryMap receives the guest-RAM map SYNC_SYSMEM announces.
type MemoryMap = transport.MemoryMap

// IRQSink raises the device's interrupt (INTx).
type IRQSink = mmio.IRQSink

// allOnes is what a read that no device answers returns.
const allOnes = ^uint64(0)

// Conn serves one x-pci-proxy-dev connection for one vGPU instance.
//
// Lock order: irqMu is a leaf (the device's INTx calls RaiseIRQ holding
// its own lock). Serve's goroutine alone uses wire; the device, config
// space and memory map have their own locks. The resample goroutine
// (one per SET_IRQFD, stopped before its fds are closed) calls
// dev.INTx().Resample holding no Conn lock. RaiseIRQ never writes the
// irqfd itself: the irqfd.Trigger's goroutine does, holding no lock.
type Conn struct {
	conn *net.UnixConn
	dev  *mmio.Device
	cs   *mmio.ConfigSpace
	mem  MemoryMap
	log  *slog.Logger
	wire *Wire

	serving   atomic.Bool
	pause     *transport.Pauser // an upgrade in place
	closed    atomic.Bool
	closeOnce sync.Once

	irqMu      sync.Mutex
	irq        *irqfd.Trigger // the eventfd QEMU routes to the guest's INTx; nil if none
	resampleFD int            // eventfd KVM signals on EOI; -1 if none
	resampler  *irqfd.Watcher // calls the INTx's Resample on each signal of resampleFD
}

var _ IRQSink = (*Conn)(nil)

// NewConn returns a Conn serving dev, cs and mem on conn. It takes
// ownership of conn. log may be nil (slog.Default()). It connects cs to
// dev's interrupt line (mmio.ConfigSpace.SetINTx); once QEMU sends
// SET_IRQFD the Conn is the line's sink until it closes.
func NewConn(conn *net.UnixConn, dev *mmio.Device, cs *mmio.ConfigSpace, mem MemoryMap, log *slog.Logger) *Conn {
	if log == nil {
		log = slog.Default()
	}
	cs.SetINTx(dev.INTx())
	return &Conn{conn: conn, dev: dev, cs: cs, mem: mem, log: log, wire: NewWire(conn), pause: transport.NewPauser(conn), resampleFD: -1}
}

// Serve handles messages until the peer hangs up (nil), ctx ends
// (ctx.Err()), Close is called (ErrClosed), the connection fails, or a
// malformed message arrives (an error wrapping ErrProtocol, logged). On
// return the connection and every fd the Conn holds are closed; the
// guestmem.Map stays with its owner. Serve may be called once.
func (c *Conn) Serve(ctx context.Context) (err error) {
	if !c.serving.CompareAndSwap(false, true) {
		return errors.New("mpqemu: Serve called twice")
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		c.conn.Close() // unblocks the read below
	})
	defer func() {
		if !stop() {
			<-done
		}
		if errors.Is(err, ErrPaused) {
			c.serving.Store(false)
			return
		}
		c.Close()
	}()
	for {
		c.pause.Next()
		err := c.serveOne()
		if err == nil {
			continue
		}
		if c.pause.Paused(ctx, &c.closed, err) {
			return ErrPaused
		}
		return transport.ServeEnd(ctx, &c.closed, err, ErrProtocol, c.log, "mpqemu")
	}
}

func (c *Conn) serveOne() error {
	m, err := c.wire.Read()
	if err != nil {
		return err
	}
	switch m.Cmd {
	case CmdSyncSysmem:
		return c.syncSysmem(m)
	case CmdPCICfgRead, CmdPCICfgWrite:
		cm, err := UnmarshalConfigMsg(m.Payload)
		if err != nil {
			return err
		}
		if m.Cmd == CmdPCICfgRead {
			return c.wire.WriteRet(uint64(c.cs.Read(cm.Addr, int(cm.Len))))
		}
		c.cs.Write(cm.Addr, int(cm.Len), cm.Val)
		return c.wire.WriteRet(0)
	case CmdBarRead, CmdBarWrite:
		return c.bar(m)
	case CmdSetIRQFD:
		if err := c.setIRQFD(m.FDs[0], m.FDs[1]); err != nil {
			return fmt.Errorf("SET_IRQFD: %w: %w", ErrProtocol, err)
		}
		return nil
	case CmdDeviceReset:
		c.dev.Reset()
		c.cs.Reset()
		return c.wire.WriteRet(0)
	}
	// RET: the remote never receives replies.
	scmrights.Close(m.FDs)
	return protoErr("unexpected %v", m.Cmd)
}

func (c *Conn) syncSysmem(m Msg) error {
	s, err := UnmarshalSyncSysmemMsg(m.Payload)
	if err != nil {
		scmrights.Close(m.FDs)
		return err
	}
	regions := make([]guestmem.Region, len(m.FDs))
	for i, fd := range m.FDs {
		regions[i] = guestmem.Region{GPA: s.GPAs[i], Size: s.Sizes[i], Offset: s.Offsets[i], FD: fd}
	}
	// Update owns the fds from here on, on success and on failure.
	if err := c.mem.Update(regions); err != nil {
		return fmt.Errorf("sync sysmem: %w: %w", ErrProtocol, err)
	}
	c.log.Debug("mpqemu: guest memory map", "regions", len(regions))
	return nil
}

// bar serves a BAR access. QEMU sends the guest-physical address (BAR
// base + offset); the offset in BAR0 is relative to the base the guest
// programmed in config space. With memory decoding off the access is
// answered like a master abort; an access outside BAR0 is answered the
// same way and then ends the connection, as QEMU's own remote does.
func (c *Conn) bar(m Msg) error {
	bm, err := UnmarshalBarMsg(m.Payload)
	if err != nil {
		return err
	}
	read := m.Cmd == CmdBarRead
	reply := func(v uint64) error {
		if !read {
			v = 0
		}
		return c.wire.WriteRet(v)
	}
	base, memOn := c.cs.BAR0()
	if !memOn {
		c.log.Debug("mpqemu: BAR access with memory decoding off", "addr", bm.Addr)
		return reply(allOnes)
	}
	if !bm.Memory || bm.Addr < uint64(base) || bm.Addr-uint64(base) >= abi.BAR0Size {
		if err := reply(allOnes); err != nil {
			return err
		}
		return protoErr("%v at %#x (memory=%v) outside BAR0 [%#x, +%#x)", m.Cmd, bm.Addr, bm.Memory, base, abi.BAR0Size)
	}
	off := bm.Addr - uint64(base)
	size := -1 // any size the register file rejects
	if bm.Size <= 8 {
		size = int(bm.Size)
	}
	if read {
		return reply(c.dev.ReadBAR(off, size))
	}
	c.dev.WriteBAR(off, size, bm.Val)
	return reply(0)
}

// setIRQFD takes the interrupt and resample eventfds, starts waiting on
// the resample one, and attaches the Conn to the device's line (asserting
// it at once if it is high). Earlier fds are closed after their resample
// goroutine has stopped. Either fd not an eventfd (a pipe the peer keeps
// full would block every interrupt) is refused: both are closed and the
// error wraps irqfd.ErrNotEventfd.
func (c *Conn) setIRQFD(irq, resample int) error {
	if err := irqfd.Prepare(resample); err != nil {
		unix.Close(irq)
		unix.Close(resample)
		return fmt.Errorf("resample fd: %w", err)
	}
	trig, err := irqfd.New(irq, c.log)
	if err != nil {
		unix.Close(resample)
		return fmt.Errorf("interrupt fd: %w", err)
	}
	r, err := startResampler(resample, c.dev.INTx(), c.log)
	if err != nil {
		c.log.Error("mpqemu: no resample wait; a level interrupt will not be re-asserted after EOI", "err", err)
	}
	c.irqMu.Lock()
	if c.closed.Load() {
		c.irqMu.Unlock()
		closeIRQ(trig, resample, r)
		return nil
	}
	oldIRQ, oldRes, oldR := c.irq, c.resampleFD, c.resampler
	c.irq, c.resampleFD, c.resampler = trig, resample, r
	c.irqMu.Unlock()
	closeIRQ(oldIRQ, oldRes, oldR)
	c.dev.INTx().SetSink(c)
	if c.closed.Load() {
		c.dev.INTx().ClearSink(c) // Close ran in between
	}
	return nil
}

// closeIRQ stops r, then closes the fds it waited on, and stops irq.
func closeIRQ(irq *irqfd.Trigger, resample int, r *irqfd.Watcher) {
	r.Stop()
	if resample >= 0 {
		unix.Close(resample)
	}
	irq.Close()
}

// startResampler starts the goroutine that calls x.Resample each time KVM
// signals fd (the guest ended the interrupt; the line was deasserted),
// waiting in the runtime's poller (irqfd.Watch).
func startResampler(fd int, x *mmio.INTx, log *slog.Logger) (*irqfd.Watcher, error) {
	w, err := irqfd.Watch(fd, x.Resample, log.With("eventfd", "resample"))
	if err != nil {
		return nil, fmt.Errorf("resample eventfd: %w", err)
	}
	return w, nil
}

// Pause makes Serve return ErrPaused before it reads the next message
// (an upgrade in place: docs/upgrade.md); the message then waits in the
// socket for whoever serves it next. Resume undoes it.
func (c *Conn) Pause() { c.pause.Pause() }

// Resume clears a Pause; call Serve again.
func (c *Conn) Resume() { c.pause.Resume() }

// FDs returns the descriptors of a paused Conn, still its own: the
// connection, the irqfd and the resample eventfd (-1 when QEMU sent none).
func (c *Conn) FDs() (conn, irq, resample int, err error) {
	rc, err := c.conn.SyscallConn()
	if err != nil {
		return -1, -1, -1, err
	}
	conn = -1
	if err := rc.Control(func(u uintptr) { conn = int(u) }); err != nil {
		return -1, -1, -1, err
	}
	c.irqMu.Lock()
	defer c.irqMu.Unlock()
	if c.irq == nil {
		return conn, -1, c.resampleFD, nil
	}
	return conn, c.irq.FD(), c.resampleFD, nil
}

// Handover is FDs as transport.Pausable wants it: Extra holds the irqfd
// and the resample eventfd, or nothing when QEMU sent none; mpqemu keeps
// no other state of a session.
func (c *Conn) Handover() (transport.Handover, error) {
	conn, irq, res, err := c.FDs()
	if err != nil {
		return transport.Handover{}, err
	}
	h := transport.Handover{Conn: conn}
	if irq >= 0 && res >= 0 {
		h.Extra = []int{irq, res}
	}
	return h, nil
}

// AdoptIRQ takes the irqfd and resample eventfd an earlier vgpud had
// from QEMU for this connection (as SET_IRQFD would give them). Fds that
// are not eventfds are refused (closed) as SET_IRQFD refuses them.
func (c *Conn) AdoptIRQ(irq, resample int) error {
	if irq < 0 || resample < 0 {
		for _, fd := range []int{irq, resample} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		return nil
	}
	if err := c.setIRQFD(irq, resample); err != nil {
		return fmt.Errorf("mpqemu: adopt irqfd: %w", err)
	}
	return nil
}

// RaiseIRQ asserts the device's INTx by signalling the irqfd QEMU sent:
// the irqfd.Trigger writes it soon after, never blocking (a full counter
// means the interrupt is pending anyway). Under TCG QEMU does not wire
// the irqfd to the guest (docs/mpqemu.md).
func (c *Conn) RaiseIRQ() error {
	c.irqMu.Lock()
	defer c.irqMu.Unlock()
	if c.irq == nil {
		return ErrNoIRQ
	}
	c.irq.Signal()
	return nil
}

// Close detaches the Conn from the device's line, stops the resample
// goroutine, closes the connection and the irqfds; a running Serve returns
// ErrClosed. Close is idempotent and safe to call concurrently.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.conn.Close()
		c.dev.INTx().ClearSink(c)
		c.irqMu.Lock()
		irq, res, r := c.irq, c.resampleFD, c.resampler
		c.irq, c.resampleFD, c.resampler = nil, -1, nil
		c.irqMu.Unlock()
		closeIRQ(irq, res, r)
	})
	return nil
}

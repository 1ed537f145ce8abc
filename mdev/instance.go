package mdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/mdev/agentchan"
	"github.com/vgpud/vgpud/mdev/guestmem"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mmio"
)

// ErrAttached is returned when a VM tries to attach to an instance that
// already serves one.
var ErrAttached = errors.New("instance already attached to a VM")

// attachGrace is how long a new VM connection waits for the previous one
// to end: the old peer's hang-up is noticed asynchronously. (A variable so
// tests can shorten it.)
var attachGrace = 5 * time.Second

// Instance is one vGPU: its device state, register file, config space and
// guest memory map, and at most one attached VM connection at a time.
type Instance struct {
	uuid    string
	profile Profile // written holding Manager.mu and mu (SetProfile); read with either
	device  int
	created time.Time
	log     *slog.Logger

	agg  *aggregator.Instance
	mem  *guestmem.Map
	regs *mmio.Device
	cfg  *mmio.ConfigSpace
	// agent is the guest agent channel (nil without a socket directory);
	// set once in Create, read by the aggregator worker's notify hook.
	agent atomic.Pointer[agentchan.Server]

	mu sync.Mutex
	// Guarded by mu.
	conn     *mpqemu.Conn
	connDone chan struct{} // closed when conn's Serve returns
	socket   string
	listener *net.UnixListener
	closed   bool
}

// UUID returns the instance's UUID.
func (i *Instance) UUID() string { return i.uuid }

// Profile returns the instance's vGPU type.
func (i *Instance) Profile() Profile {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.profile
}

// Device returns the index of the physical device the instance is on.
func (i *Instance) Device() int { return i.device }

// Aggregator returns the instance's device state (for stats).
func (i *Instance) Aggregator() *aggregator.Instance { return i.agg }

// Socket returns the path QEMU connects to, or "" when the manager has no
// socket directory.
func (i *Instance) Socket() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.socket
}

// AgentSocket returns the path QEMU's virtio-serial chardev connects to
// for the guest agent channel (docs/agent-channel.md), or "".
func (i *Instance) AgentSocket() string {
	if a := i.agent.Load(); a != nil {
		return a.Path()
	}
	return ""
}

// Agent returns the instance's agent channel, or nil.
func (i *Instance) Agent() *agentchan.Server { return i.agent.Load() }

// notify is the aggregator's completion hook: it latches the completion
// interrupt cause (INTx through the attached Conn's irqfd when the guest
// enabled it; docs/ABI.md "Interrupts") and wakes a guest blocked on the
// agent channel. It never blocks: INTx.Signal takes only the line's own
// lock and writes a non-blocking eventfd. regs is set before the guest can
// reach the ring, so before the first completion.
func (i *Instance) notify(index uint32) {
	i.regs.INTx().Signal(abi.IntCompletion)
	if a := i.agent.Load(); a != nil {
		a.Notify(index)
	}
}

// Attached reports whether a VM connection is being served.
func (i *Instance) Attached() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.conn != nil
}

// ServeQEMU serves one x-pci-proxy-dev connection until it ends. It takes
// ownership of conn. A second connection while one is served is refused
// with ErrAttached.
func (i *Instance) ServeQEMU(ctx context.Context, conn *net.UnixConn) error {
	// A VM that just exited may not have been noticed yet (its hang-up is
	// read asynchronously): give the old connection a moment to end before
	// calling the new one a second VM on the same vGPU.
	deadline := time.NewTimer(attachGrace)
	defer deadline.Stop()
	i.mu.Lock()
	for i.conn != nil && !i.closed {
		done := i.connDone
		i.mu.Unlock()
		select {
		case <-done:
		case <-deadline.C:
			conn.Close()
			return fmt.Errorf("instance %s: %w", i.uuid, ErrAttached)
		case <-ctx.Done():
			conn.Close()
			return ctx.Err()
		}
		i.mu.Lock()
	}
	if i.closed {
		i.mu.Unlock()
		conn.Close()
		return fmt.Errorf("instance %s: %w", i.uuid, aggregator.ErrClosed)
	}
	c := mpqemu.NewConn(conn, i.regs, i.cfg, i.mem, i.log)
	done := make(chan struct{})
	i.conn, i.connDone = c, done
	i.mu.Unlock()

	i.log.Info("vm attached")
	err := c.Serve(ctx)
	i.mu.Lock()
	i.conn, i.connDone = nil, nil
	i.mu.Unlock()
	close(done)
	i.log.Info("vm detached", "err", err)
	return err
}

// Close detaches any VM and frees the instance's device state.
func (i *Instance) close() error {
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return nil
	}
	i.closed = true
	c, l, sock := i.conn, i.listener, i.socket
	i.mu.Unlock()
	var errs []error
	if l != nil {
		l.Close()
		if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if c != nil {
		c.Close()
	}
	if a := i.agent.Load(); a != nil {
		errs = append(errs, a.Close())
	}
	errs = append(errs, i.agg.Close(), i.mem.Close())
	return errors.Join(errs...)
}

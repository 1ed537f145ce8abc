package mdev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/mdev/agentchan"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/sched"
	"github.com/vgpud/vgpud/worker"
)

// attachGrace is how long a new VM connection waits for the previous one
// to end: the old peer's hang-up is noticed asynchronously. (A variable so
// tests can shorten it.)
var attachGrace = 5 * time.Second

// Instance is one vGPU: its device state, register file, config space and
// guest memory map, and at most one attached VM connection at a time.
type Instance struct {
	uuid    string
	name    string            // the operator's name, "" for none; fixed at create
	labels  map[string]string // the operator's labels; fixed at create
	profile Profile           // written holding Manager.mu and mu (SetProfile); read with either
	// device and sched (the device's scheduler) are written holding
	// Manager.mu and mu (a move, overcommit.go); read with either.
	device  int
	sched   *sched.Scheduler
	pool    *worker.Pool
	created time.Time
	log     *slog.Logger

	be   worker.Backend // the device state: in a worker process, or (unsafe) here
	regs *mmio.Device
	cfg  *mmio.ConfigSpace
	// intx is regs' interrupt line, published for the notify hook, which
	// the worker's notice relay may call before Create has made regs.
	intx atomic.Pointer[mmio.INTx]
	// agent is the guest agent channel (nil without a socket directory);
	// set once in Create, read by the aggregator worker's notify hook.
	agent atomic.Pointer[agentchan.Server]

	// Placement features (features.go): the device's memory, the guest
	// RAM the transport mapped, recent counter samples and how far back
	// they look.
	memTotal  atomic.Uint64
	vmMem     atomic.Uint64
	window    featureWindow
	windowLen time.Duration

	// incoming: incomingAwaiting while it waits for a migration to fill
	// it (CreateRequest.Incoming), incomingClaimed once one does.
	incoming atomic.Int32

	// Guarded by Manager.mu.
	reuse      ReuseSetting // the reuse setting: domain (trust domain) and on/off
	overcommit Overcommit   // its own overcommit setting; Policy "": its profile's

	// Overcommit and reallocation (overcommit.go, realloc.go).
	relocating  atomic.Bool  // a move is in progress
	suspended   atomic.Bool  // its state is out in host memory
	movedFailed atomic.Int64 // when a move last failed (UnixNano), 0: never
	peakSince   atomic.Int64 // since when the device ledger's peak counts (UnixNano)
	overStats   struct{ migrations, suspensions, failed atomic.Uint64 }

	mu sync.Mutex
	// Guarded by mu.
	limits   worker.Limits     // what the device state was last given
	conn     transport.Session // the attached VM's, nil when none
	connDone chan struct{}     // closed when conn's Serve returns
	connPID  int               // the PID that connected conn, 0 when unknown or conn is nil
	socket   string
	listener *net.UnixListener
	closed   bool
	// An upgrade in place (handover.go): parked is closed when the
	// connection's server stopped for the pause; resume when it may go
	// on (the handover was abandoned).
	parked chan struct{}
	resume <-chan struct{}
}

// UUID returns the instance's UUID.
func (i *Instance) UUID() string { return i.uuid }

// Name returns the instance's name ("" for none).
func (i *Instance) Name() string { return i.name }

// Labels returns a copy of the instance's labels.
func (i *Instance) Labels() map[string]string { return maps.Clone(i.labels) }

// Profile returns the instance's vGPU type.
func (i *Instance) Profile() Profile {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.profile
}

// scheduler returns the scheduler of the instance's device.
func (i *Instance) scheduler() *sched.Scheduler {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sched
}

// Device returns the index of the physical device the instance is on.
func (i *Instance) Device() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.device
}

// Stats returns the instance's live counters.
func (i *Instance) Stats() *aggregator.Stats { return &i.be.Shared().Stats }

// ContextInfo is one live device context of an instance, as its worker
// reports it (untrusted: shown, never used).
type ContextInfo struct {
	ID      uint32 `json:"id"`
	MemUsed uint64 `json:"mem_used"`
	Lost    bool   `json:"lost,omitempty"`
}

// ContextList lists the instance's live device contexts (ABI 1.5).
func (i *Instance) ContextList() []ContextInfo {
	sh := i.be.Shared()
	live, lost := sh.CtxLive.Load(), sh.CtxLost.Load()
	var out []ContextInfo
	for id := uint32(1); id <= 64 && id <= i.MaxContexts(); id++ {
		if bit := uint64(1) << (id - 1); live&bit != 0 {
			out = append(out, ContextInfo{ID: id, MemUsed: sh.CtxMem[id-1].Load(), Lost: lost&bit != 0})
		}
	}
	return out
}

// MaxContexts returns how many device contexts (ABI 1.5) the instance
// offers besides its default ring.
func (i *Instance) MaxContexts() uint32 { return i.be.Limits().Contexts }

// LiveContexts returns how many device contexts (ABI 1.5) the guest has
// made and not destroyed, as the instance's worker reports it.
func (i *Instance) LiveContexts() uint32 {
	return min(i.be.Shared().LiveContexts(), i.be.Limits().Contexts)
}

// MemUsed returns the device memory the instance holds, in bytes.
func (i *Instance) MemUsed() uint64 { return i.be.Shared().MemUsed.Load() }

// KickStats counts the guest's kicks on its transport's kick eventfd
// (vfio-user's ioeventfd, docs/worker.md "Kicks straight to the
// worker"): Direct, those the instance's worker read itself; Relayed,
// those vgpud's main process applied while no worker could (a
// relocation's freeze, a lost worker). Kicks the transport watches
// itself (an in-process instance) are counted in neither.
type KickStats struct {
	Direct  uint64 `json:"direct"`
	Relayed uint64 `json:"relayed"`
}

// Kicks returns the instance's kick counters.
func (i *Instance) Kicks() KickStats {
	sh := i.be.Shared()
	return KickStats{Direct: sh.DirectKicks.Load(), Relayed: sh.RelayedKicks.Load()}
}

// ProgramBytes returns the bytes of programs the instance holds.
func (i *Instance) ProgramBytes() uint64 { return i.be.Shared().ProgramBytes.Load() }

// WorkerPID returns the process id of the worker serving the instance's
// trust domain (0 in process or while lost).
func (i *Instance) WorkerPID() int { return i.pool.WorkerPID(i.uuid) }

// MemQuota returns the instance's device memory quota, in bytes.
func (i *Instance) MemQuota() uint64 { return i.be.Limits().MemBytes }

// RingEnabled reports whether the instance's ring is fetching.
func (i *Instance) RingEnabled() bool { return i.be.RingEnabled() }

// Head and Done are the instance's fetched and completed command counts.
func (i *Instance) Head() uint32 { return i.be.Head() }
func (i *Instance) Done() uint32 { return i.be.Done() }

// Error returns the instance's latched device error and error count.
func (i *Instance) Error() (abi.Status, uint32) { return i.be.Error() }

// Lost reports whether the instance's device context is gone (its worker
// ended); a guest reset brings it back.
func (i *Instance) Lost() bool { return i.be.Lost() }

// Sched returns the instance's scheduling counters on its device.
func (i *Instance) Sched() sched.ClientStats {
	i.mu.Lock()
	s := i.sched
	i.mu.Unlock()
	return s.Client(i.uuid)
}

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
// lock and writes a non-blocking eventfd. A notice before the register
// file exists (none can complete a command: the guest cannot reach the
// ring yet) only wakes the agent.
func (i *Instance) notify(index uint32) {
	if x := i.intx.Load(); x != nil {
		x.Signal(abi.IntCompletion)
	}
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

// Endpoint returns the instance as a transport sees it: the register
// file, the config space and the guest-RAM map's sink (which forwards the
// fds to the instance's worker).
func (i *Instance) Endpoint() transport.Device {
	return transport.Device{Regs: i.regs, Config: i.cfg, Memory: sizedMemory{i.be, i}, Log: i.log}
}

// Attach serves s, a transport's session for this instance, until it
// ends, and returns its error. It takes ownership of s. One session is
// served at a time: while another is attached, Attach waits a moment
// for it to end (a VM that just exited may not have been noticed yet)
// and then refuses s with ErrAttached.
func (i *Instance) Attach(ctx context.Context, s transport.Session) error {
	return i.attach(ctx, s, 0)
}

// VMPID returns the PID of the process whose connection the instance
// serves (its QEMU), 0 when none is attached or it is not known.
func (i *Instance) VMPID() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.connPID
}

// attach is Attach of a session whose connection pid made, 0 when not
// known.
func (i *Instance) attach(ctx context.Context, s transport.Session, pid int) error {
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
			s.Close()
			return fmt.Errorf("instance %s: %w", i.uuid, ErrAttached)
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		}
		i.mu.Lock()
	}
	if i.closed {
		i.mu.Unlock()
		s.Close()
		return fmt.Errorf("instance %s: %w", i.uuid, aggregator.ErrClosed)
	}
	done := make(chan struct{})
	i.conn, i.connDone, i.connPID = s, done, pid
	i.mu.Unlock()

	i.log.Info("vm attached", "transport", fmt.Sprintf("%T", s), "peer_pid", pid)
	return i.serve(ctx, s, done)
}

// serve runs c until it ends, staying with it across a pause.
func (i *Instance) serve(ctx context.Context, c transport.Session, done chan struct{}) error {
	var err error
	for {
		err = c.Serve(ctx)
		if !errors.Is(err, transport.ErrPaused) {
			break
		}
		i.mu.Lock()
		parked, resume := i.parked, i.resume
		i.mu.Unlock()
		close(parked)
		select {
		case <-resume:
			c.(transport.Pausable).Resume() // only a Pausable session returns ErrPaused
			continue
		case <-ctx.Done():
			c.Close()
			err = ctx.Err()
		}
		break
	}
	i.mu.Lock()
	i.conn, i.connDone, i.connPID = nil, nil, 0
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
	errs = append(errs, i.be.Close())
	return errors.Join(errs...)
}

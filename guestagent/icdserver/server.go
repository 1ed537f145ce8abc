package icdserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("icd server closed")

// DefaultTimeout bounds a Wait and the drain of a closing connection.
const DefaultTimeout = driver.DefaultTimeout

// Config configures a Server.
type Config struct {
	// Devices are the vGPUs served, in the order Hello reports them. The
	// Server does not close them.
	Devices []*driver.Device
	// Timeout bounds each Wait (events still incomplete are then reported
	// as not complete) and the wait for a closing connection's commands.
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// QueuePoll bounds how long a connection's goroutine looks at its
	// empty submission queue before it sleeps on the socket (queue.go):
	// 0 means DefaultQueuePoll, a negative value not at all.
	QueuePoll time.Duration
	// Contexts says whether each client gets a device context of its own
	// (ABI 1.5, docs/icd-protocol.md "Device contexts"); the zero value
	// is ContextsPrefer.
	Contexts ContextPolicy
	// Interrupts, where not nil, are the completion interrupts of
	// Devices (index for index): the reapers of a vGPU and of its device
	// contexts then wake at each interrupt as well as on their timers
	// (docs/icd-protocol.md "Completion interrupts"). The Server does not
	// close them.
	Interrupts []*driver.Interrupts
}

// ContextPolicy says whether each client gets a device context of its
// own on a vGPU: its own ring and handle spaces on the device, kernels
// that reach only its own buffers, a crash that ends only its context.
type ContextPolicy int

const (
	// ContextsPrefer gives each client its own context where the vGPU
	// offers one; where it offers none (a host or profile without them)
	// or all are in use, the client shares the daemon's ring with the
	// others, and the daemon logs it.
	ContextsPrefer ContextPolicy = iota
	// ContextsRequire refuses a client that cannot get a context of its
	// own (its request fails with ErrLimit and the connection closes).
	ContextsRequire
	// ContextsOff makes every client share the daemon's ring (what
	// vgpu-icdd did before ABI 1.5).
	ContextsOff
)

// ParseContextPolicy reads "prefer", "require" or "off".
func ParseContextPolicy(s string) (ContextPolicy, error) {
	switch s {
	case "prefer", "":
		return ContextsPrefer, nil
	case "require":
		return ContextsRequire, nil
	case "off":
		return ContextsOff, nil
	}
	return 0, fmt.Errorf("context policy %q: want prefer, require or off", s)
}

// Server serves the ICD protocol on Unix SOCK_SEQPACKET connections.
type Server struct {
	cfg  Config
	log  *slog.Logger
	devs []*device
	done chan struct{} // closed by Close
	// trim asks the trimmer to hand freed memory back to the kernel; trims
	// counts its runs (tests wait on it).
	trim  chan struct{}
	trims atomic.Uint64
	// waits counts how blocking waits ended (WaitStats).
	waits  waitCounters
	queues queueCounters

	wg     sync.WaitGroup // every goroutine the Server started
	connWG sync.WaitGroup // connection goroutines; Add only under mu while !closed

	mu        sync.Mutex
	closed    bool
	listeners map[*net.UnixListener]struct{}
	conns     map[*conn]struct{}
	nextConn  uint64
}

// device is one served vGPU.
type device struct {
	index int
	d     *driver.Device
	// wake is signalled when commands were submitted: the reaper polls
	// while the device has commands in flight.
	wake chan struct{}

	// reviveMu serialises revive and guards reviveFailed (a failed reopen
	// was logged as an error; the next ones are logged at debug level).
	reviveMu     sync.Mutex
	reviveFailed bool

	infoMu sync.Mutex
	// Guarded by infoMu: the device information, read once and kept
	// while the driver reports the device it was read from (infoOf).
	info   *abi.DeviceInfo
	infoOf driver.Info

	// A client's device context (parent nil: a vGPU's shared ring): the
	// vGPU it is on, its id, and stop, closed when it ends (its reaper
	// returns).
	parent *device
	ctxID  uint32
	stop   chan struct{}
	// irq, where not nil, is the vGPU's completion interrupts (a
	// context's is its vGPU's). sleepers counts the blocking waits
	// asleep on this device's completions: only for them does the reaper
	// arm the interrupt; nudge wakes a sleeping reaper to look at them.
	irq      *driver.Interrupts
	sleepers atomic.Int32
	nudge    chan struct{}
	// For a vGPU: the context ids in use (bit id-1) and whether a
	// client was put on the shared ring (logged once at warning level).
	ctxMu     sync.Mutex
	ctxUsed   uint64
	sharedLog bool
}

// deviceInfo returns the abi device-information blob of dev for a client
// of protocol version proto: of version 4 (the image section with its
// buffer part) from protocol 6, of version 3 (the image section and the il
// word, where the device has them) from protocol 5, of version 2 (the
// image section) from 4, else of version 1; from what it kept, unless
// the driver now reports another device (a migration to another model, a
// new profile), else fresh. Failures are not kept.
func (dev *device) deviceInfo(proto uint32) ([]byte, error) {
	dev.infoMu.Lock()
	defer dev.infoMu.Unlock()
	in := dev.d.Info()
	if dev.info == nil || dev.infoOf != in {
		info, err := dev.d.DeviceInfo()
		if err != nil {
			return nil, err
		}
		// Keyed by the Info from before the command: a migration
		// meanwhile makes the next call ask again.
		dev.info, dev.infoOf = &info, in
	}
	newest := uint32(abi.DeviceInfoVersionImageBuffers)
	switch {
	case proto < 4:
		newest = abi.DeviceInfoVersion
	case proto < 5:
		newest = abi.DeviceInfoVersionImages
	case proto < 6:
		newest = abi.DeviceInfoVersionIL
	}
	info := dev.info.As(min(dev.info.Version, newest))
	return info.Marshal()
}

// sleeping marks a blocking wait asleep on dev's completions (asleep
// true) or awake again; going to sleep, it wakes the reaper to arm the
// completion interrupt for it.
func (d *device) sleeping(asleep bool) {
	if d.irq == nil {
		return
	}
	if !asleep {
		d.sleepers.Add(-1)
		return
	}
	d.sleepers.Add(1)
	select {
	case d.nudge <- struct{}{}:
	default:
	}
}

func (d *device) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// New returns a Server for cfg and starts its device reapers.
func New(cfg Config) *Server {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	s := &Server{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), trim: make(chan struct{}, 1),
		listeners: map[*net.UnixListener]struct{}{}, conns: map[*conn]struct{}{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.trimmer()
	}()
	for i, d := range cfg.Devices {
		dev := &device{index: i, d: d, wake: make(chan struct{}, 1), nudge: make(chan struct{}, 1)}
		if i < len(cfg.Interrupts) {
			dev.irq = cfg.Interrupts[i]
		}
		s.devs = append(s.devs, dev)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.reap(dev)
		}()
	}
	return s
}

// Reaper polling: it starts fast after a submission and backs off to
// reapMaxSleep while nothing completes. Go's timers wake an idle process
// at a millisecond's granularity (epoll_wait's timeout), so in practice
// the first look after an empty one comes about 1 ms later. Looking
// sooner with nanosleep(2) was tried (issue 32): on the host it took a
// blocking 64-byte read through the ICD from ~825 to ~600 us, but in a
// TCG guest every extra wake-up costs the host CPU time the device's
// kernels need (the matmul job through the ICD slowed by 10-20% with 20
// to 100 more wake-ups per wait), and vgpu-icdd runs in guests. A
// blocking wait does not depend on it: it looks for its completions
// itself first (waitpoll.go); the reaper times events nobody waits for
// and wakes the waits that outlast their window.
var (
	reapMinSleep = 20 * time.Microsecond
	reapMaxSleep = time.Millisecond
) // variables for the interrupt test, which turns the timers off

// reap reaps dev's completions while it has commands in flight, so that
// callbacks (and the events' end times) run promptly even when no client
// waits. When the device reports its context lost, the driver has failed
// every command in flight (each client's events end with
// StatusDeviceLost) and the reaper reopens the device for what comes next.
func (s *Server) reap(dev *device) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var irq <-chan struct{} // nil: the timers alone
	if dev.irq != nil {
		c, stop := dev.irq.Subscribe()
		defer stop()
		irq = c
	}
	for {
		select {
		case <-s.done:
			return
		case <-dev.stop:
			return
		case <-dev.wake:
		}
		if dev.d.Lost() && !s.revive(dev) {
			continue
		}
		sleep := reapMinSleep
		for dev.d.Pending() > 0 {
			n, err := dev.d.Reap()
			if errors.Is(err, driver.ErrDeviceLost) && s.revive(dev) {
				continue
			}
			if err != nil {
				s.log.Debug("icd reaper stops polling", "device", dev.index, "err", err)
				break
			}
			if n > 0 {
				sleep = reapMinSleep
				continue
			}
			if irq != nil && dev.sleepers.Load() > 0 && dev.irq.Arm() {
				continue // look once more: a completion before the arm raises nothing
			}
			t.Reset(sleep)
			select {
			case <-s.done:
				return
			case <-t.C:
				sleep = min(2*sleep, reapMaxSleep)
			case <-irq:
				// Every completion before the interrupt is visible.
				s.waits.interrupts.Add(1)
				sleep = reapMinSleep
			case <-dev.nudge:
				// A wait went to sleep: arm for it.
			}
		}
	}
}

// revive reopens dev when its driver reports the device context lost
// (docs/ABI.md "Device lost"; the reset brings the instance back on a
// fresh context). Buffers and programs made before are stale from then
// on: the driver fails requests naming them with ErrDeviceLost (their
// events end with StatusDeviceLost) without reaching the device. It
// reports whether the device is usable.
func (s *Server) revive(dev *device) bool {
	dev.reviveMu.Lock()
	defer dev.reviveMu.Unlock()
	if !dev.d.Lost() {
		return true
	}
	// A context is made again on its vGPU's ring: when the vGPU itself
	// was lost (its worker ended, every context with it), that comes
	// back first.
	if p := dev.parent; p != nil && (p.d.LostSeen() || p.d.CheckLost()) && !s.revive(p) {
		return false
	}
	if err := dev.d.Reopen(); err != nil {
		lvl := slog.LevelError
		if dev.reviveFailed {
			lvl = slog.LevelDebug
		}
		dev.reviveFailed = true
		s.log.Log(context.Background(), lvl, "icd device lost and not reopened", "device", dev.index, "err", err)
		return false
	}
	dev.reviveFailed = false
	dev.infoMu.Lock()
	dev.info = nil
	dev.infoMu.Unlock()
	s.log.Warn("icd device context lost: device reopened; older buffers and programs are gone", "device", dev.index)
	return true
}

// openContext gives a client a device context of its own on vGPU base
// (ContextPolicy), with its own reaper; or base itself when the policy
// or the vGPU does not give one.
func (s *Server) openContext(base *device, log *slog.Logger) (*device, error) {
	if s.cfg.Contexts == ContextsOff {
		return base, nil
	}
	max := min(base.d.Info().MaxContexts, 64)
	base.ctxMu.Lock()
	id := uint32(bits.TrailingZeros64(^base.ctxUsed)) + 1 // the lowest free id
	if id > max {
		id = 0
	} else {
		base.ctxUsed |= 1 << (id - 1)
	}
	base.ctxMu.Unlock()
	var err error
	if id == 0 {
		err = fmt.Errorf("the vGPU offers %d device contexts, all in use", max)
	} else {
		var d *driver.Device
		// With the poll word (ABI 1.6): a blocking wait finds its
		// completion by looking itself (waitpoll.go), so a kick the
		// worker's loop makes needless is skipped.
		opts := driver.ContextOptions{ID: id, Logger: log.With("device", base.index, "context", id)}
		d, err = base.d.OpenContext(opts)
		if errors.Is(err, driver.ErrDeviceLost) && s.revive(base) {
			// The vGPU was lost (and has just come back): once more.
			d, err = base.d.OpenContext(opts)
		}
		if err == nil {
			cd := &device{index: base.index, d: d, wake: make(chan struct{}, 1), nudge: make(chan struct{}, 1),
				parent: base, ctxID: id, stop: make(chan struct{}), irq: base.irq}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.reap(cd)
			}()
			log.Debug("icd client has its own device context", "device", base.index, "context", id)
			return cd, nil
		}
		base.putContext(id)
	}
	if s.cfg.Contexts == ContextsRequire {
		return nil, icdproto.Errorf(icdproto.ErrLimit, "device %d: no device context of its own for this client: %v", base.index, err)
	}
	base.ctxMu.Lock()
	first := !base.sharedLog
	base.sharedLog = true
	base.ctxMu.Unlock()
	lvl := slog.LevelDebug
	if first {
		lvl = slog.LevelWarn
	}
	log.Log(context.Background(), lvl, "icd client shares the vGPU's ring with other clients: its kernels can reach their buffers",
		"device", base.index, "why", err.Error())
	return base, nil
}

// closeContext ends a client's device context: the driver drains and
// destroys it (the host frees its buffers and programs, and touches none
// of its memory again), its reaper stops, its id is free again.
func (s *Server) closeContext(cd *device) error {
	err := cd.d.Close()
	close(cd.stop)
	cd.parent.putContext(cd.ctxID)
	return err
}

func (base *device) putContext(id uint32) {
	base.ctxMu.Lock()
	base.ctxUsed &^= 1 << (id - 1)
	base.ctxMu.Unlock()
}

// trimEvents is the number of events a closing connection must have held
// at once for its cleanup to ask for a trim: a client with a few events
// frees little, and a trim is a full garbage collection.
const trimEvents = 4096

// trimEvery is the least time between two trims.
const trimEvery = time.Second

// trimmer hands the memory of closed connections back to the kernel: a
// garbage collection only makes it free inside the Go heap, and a daemon
// that sits idle after its clients leave would not collect for minutes
// (and keep its peak resident size for longer). Requests during a trim or
// the pause after it are coalesced into one more trim.
func (s *Server) trimmer() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.trim:
		}
		debug.FreeOSMemory()
		s.trims.Add(1)
		t.Reset(trimEvery)
		select {
		case <-s.done:
			return
		case <-t.C:
		}
	}
}

func (s *Server) requestTrim() {
	select {
	case s.trim <- struct{}{}:
	default:
	}
}

// Serve accepts connections on l and serves each on its own goroutine
// until Close (then it returns ErrServerClosed) or until l fails. l should
// be a "unixpacket" listener. Serve closes l when it returns.
func (s *Server) Serve(l *net.UnixListener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		if !s.start(c) {
			return ErrServerClosed
		}
	}
}

// ServeConn serves one connected SOCK_SEQPACKET socket (e.g. one end of a
// socketpair) on its own goroutine; the Server closes it. It reports false,
// closing c, when the Server is closed.
func (s *Server) ServeConn(c *net.UnixConn) bool { return s.start(c) }

func (s *Server) start(c *net.UnixConn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return false
	}
	s.nextConn++
	cn := newConn(s, c, s.nextConn)
	s.conns[cn] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.connWG.Done()
		cn.serve()
		s.mu.Lock()
		delete(s.conns, cn)
		s.mu.Unlock()
	}()
	return true
}

// Conns returns the number of connections being served.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops accepting, closes every connection (each waits for its
// commands, at most Config.Timeout, and frees its objects), stops the
// reapers and waits for all of the Server's goroutines. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.connWG.Wait()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.stop() // its goroutine cleans up and returns
	}
	s.mu.Unlock()
	// Connections drain with the reapers still running; then the reapers go.
	s.connWG.Wait()
	close(s.done)
	s.wg.Wait()
	return nil
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

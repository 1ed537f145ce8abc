package agentchan

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

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/internal/accept"
)

// Defaults for Config.
const (
	DefaultHintEvery    = 100 * time.Millisecond
	DefaultWriteTimeout = 5 * time.Second
	// maxPongs bounds the Pongs owed to a peer; further Pings are dropped.
	maxPongs = 8
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("agentchan: server closed")

// Hinter produces scheduling hints for the guest of one connection.
type Hinter interface {
	// Hints samples the vCPU threads; ok is false when there is nothing
	// to send yet (e.g. the first sample only sets the baseline).
	Hints() (h agentmsg.Hints, ok bool, err error)
}

// Config configures a Server.
type Config struct {
	// Path is the Unix socket QEMU's chardev connects to.
	Path string
	// Group, if positive, is the group ID the socket is shared with
	// (0660); otherwise it is the owner's alone (0600).
	Group int
	// Ident is sent in the host's Hello (the instance UUID).
	Ident string
	// Done returns how many commands the instance has completed since its
	// ring was enabled (aggregator.Instance.Done). Required.
	Done func() uint32
	// NewHinter, if set, is called with the connecting peer's PID (QEMU,
	// from SO_PEERCRED) for each connection; nil or an error means no
	// hints on that connection.
	NewHinter func(pid int) (Hinter, error)
	// HintEvery is the hint period; 0 means DefaultHintEvery.
	HintEvery time.Duration
	// WriteTimeout bounds each write; a peer that does not read for that
	// long is disconnected. 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	Logger       *slog.Logger
	// OnAcceptRetry, if set, is called for each transient accept error
	// (the server survives them, accept.Retry), for counters that outlive
	// the server.
	OnAcceptRetry func()
	// Peer, if set, returns the PID of the VM process attached to the
	// instance (its QEMU), 0 when none is. While one is, a connection
	// from any other process is refused: a QEMU left running after a
	// migration (paused, its chardev reconnecting) must not take the
	// channel from the VM that runs the guest now.
	Peer func() int
}

// Stats count a server's traffic.
type Stats struct {
	Connections atomic.Uint64
	Watches     atomic.Uint64 // Watch messages received
	Wakeups     atomic.Uint64 // Completed messages sent
	Hints       atomic.Uint64 // Hints messages sent
	Malformed   atomic.Uint64 // connections dropped for a bad frame
	Refused     atomic.Uint64 // connections from a process other than the attached VM (Config.Peer)
}

// GuestStats is the last GuestStats message and when it arrived.
type GuestStats struct {
	agentmsg.GuestStats
	At time.Time
}

// Server serves the agent channel of one instance.
type Server struct {
	cfg Config
	log *slog.Logger
	l   *net.UnixListener

	stats Stats
	// watch is 0 or 1<<32|index: the lowest command index the guest asked
	// to be woken for. Notify and the connection's reader swap it.
	watch atomic.Uint64

	wg sync.WaitGroup

	mu sync.Mutex
	// Guarded by mu.
	cur     *conn
	closed  bool
	gstats  GuestStats
	haveGS  bool
	peerPID int
	refused int      // the last PID refused (Config.Peer), logged once
	pending *request // the migration request waiting for its answer (migrate.go)
	cookie  uint64
	helloed chan struct{} // closed (and replaced) when a peer's Hello arrives
	joined  chan struct{} // closed (and replaced) when a peer connects
	// lastHello is when the last Hello arrived (LastHello).
	lastHello time.Time

	// declared is the guest's last Resources (reconfig.go); nil: none yet.
	declared []Declaration

	// An upgrade in place (handover.go): paused, the accept loop and
	// the connection's loops stop, keeping the sockets open.
	paused  bool
	resumed chan struct{} // closed by Resume
	adopted *adoptedConn  // a connection handed over, started by Serve
}

// Listen creates the socket at cfg.Path (replacing a stale one) and
// returns a Server; call Serve to accept.
func Listen(cfg Config) (*Server, error) {
	if cfg.Path == "" || cfg.Done == nil {
		return nil, errors.New("agentchan: listen: path and Done are required")
	}
	if err := os.Remove(cfg.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agentchan: listen: %w", err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agentchan: listen: %w", err)
	}
	mode := os.FileMode(0o600)
	if cfg.Group > 0 {
		mode = 0o660
		if err := os.Chown(cfg.Path, -1, cfg.Group); err != nil {
			l.Close()
			return nil, fmt.Errorf("agentchan: listen: %w", err)
		}
	}
	if err := os.Chmod(cfg.Path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("agentchan: listen: %w", err)
	}
	return newServer(cfg, l), nil
}

// newServer is a Server on l with cfg's defaults filled in.
func newServer(cfg Config, l *net.UnixListener) *Server {
	if cfg.HintEvery <= 0 {
		cfg.HintEvery = DefaultHintEvery
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{cfg: cfg, log: log.With("channel", "agent"), l: l, helloed: make(chan struct{}), joined: make(chan struct{})}
}

// Path returns the socket path.
func (s *Server) Path() string { return s.cfg.Path }

// Stats returns the server's live counters.
func (s *Server) Stats() *Stats { return &s.stats }

// Connected reports whether a peer (QEMU) is connected.
func (s *Server) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur != nil
}

// LastHello is when an agent last said Hello on the channel (zero: never).
func (s *Server) LastHello() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastHello
}

// WaitConnected waits until a peer (QEMU) is connected: ErrNoAgent with
// ctx's error if none is by the time ctx ends.
func (s *Server) WaitConnected(ctx context.Context) error {
	for {
		s.mu.Lock()
		c, ch := s.cur, s.joined
		s.mu.Unlock()
		if c != nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: no connection: %w", ErrNoAgent, ctx.Err())
		}
	}
}

// PeerPID returns the PID of the connected QEMU, or 0.
func (s *Server) PeerPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.peerPID
}

// GuestStats returns the guest's last reported /proc/stat, if any.
func (s *Server) GuestStats() (GuestStats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gstats, s.haveGS
}

// Notify is the aggregator's completion hook: command index has completed.
// It never blocks.
func (s *Server) Notify(index uint32) {
	w := s.watch.Load()
	if w == 0 || int32(index-uint32(w)) < 0 {
		return
	}
	if s.watch.CompareAndSwap(w, 0) {
		s.kick()
	}
}

func (s *Server) kick() {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c != nil {
		c.kick()
	}
}

// setWatch records the guest's interest in index, keeping the lowest
// pending index, and fires at once if it has already completed.
func (s *Server) setWatch(index uint32) {
	for {
		w := s.watch.Load()
		if w != 0 && int32(uint32(w)-index) <= 0 {
			break // an earlier (or the same) index is already watched
		}
		if s.watch.CompareAndSwap(w, 1<<32|uint64(index)) {
			break
		}
	}
	// The completion may have landed before the watch was set.
	if done := s.cfg.Done(); int32(done-1-index) >= 0 {
		s.Notify(done - 1)
	}
}

// Serve accepts connections until Close or ctx ends. It returns
// ErrServerClosed after Close.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	s.mu.Lock()
	if a := s.adopted; a != nil {
		s.adopted = nil
		s.mu.Unlock()
		s.startConn(a.nc, a.unread, true)
	} else {
		s.mu.Unlock()
	}
	for {
		nc, err := accept.Retry(ctx, s.l.AcceptUnix, func(err error, delay time.Duration) {
			if s.cfg.OnAcceptRetry != nil {
				s.cfg.OnAcceptRetry()
			}
			s.log.Warn("agent channel: accept failed, retrying", "err", err, "in", delay)
		})
		if err != nil {
			s.mu.Lock()
			closed, paused, resumed := s.closed, s.paused, s.resumed
			s.mu.Unlock()
			if paused && !closed && errors.Is(err, os.ErrDeadlineExceeded) {
				select {
				case <-resumed:
					continue
				case <-ctx.Done():
					continue // Close ran: the next accept says so
				}
			}
			if closed {
				s.wg.Wait()
				return ErrServerClosed
			}
			return fmt.Errorf("agentchan: accept: %w", err)
		}
		s.start(nc)
	}
}

// start replaces the current connection with nc.
func (s *Server) start(nc *net.UnixConn) { s.startConn(nc, nil, false) }

// startConn starts serving nc; adopted, it was handed over by an earlier
// vgpud, which had read unread of a frame begun on it.
func (s *Server) startConn(nc *net.UnixConn, unread []byte, adopted bool) {
	pid, err := accept.PeerPID(nc)
	if err != nil {
		s.log.Warn("peer credentials", "err", err)
	}
	if want := s.attachedPeer(); !adopted && want != 0 && pid != want {
		s.refuse(nc, pid, want)
		return
	}
	c := &conn{s: s, nc: nc, pid: pid, wake: make(chan struct{}, 1), done: make(chan struct{}), pongs: make(chan uint64, maxPongs),
		asks: make(chan agentmsg.Message, 4), early: make(chan agentmsg.Message, 1),
		in: &frameReader{r: nc, unread: unread}, pause: make(chan struct{})}
	s.mu.Lock()
	if s.closed || s.paused {
		// Paused: QEMU reconnects to whichever vgpud serves next.
		s.mu.Unlock()
		nc.Close()
		return
	}
	old := s.cur
	s.cur, s.peerPID = c, pid
	close(s.joined)
	s.joined = make(chan struct{})
	s.mu.Unlock()
	if old != nil {
		old.close()
	}
	if !adopted {
		s.watch.Store(0)
	}
	s.stats.Connections.Add(1)
	s.log.Info("agent channel connected", "peer_pid", pid)
	c.run()
}

// refuse closes nc, made by process pid while the attached VM is want's
// (Config.Peer), and logs it: at warning level the first time for pid.
func (s *Server) refuse(nc *net.UnixConn, pid, want int) {
	s.mu.Lock()
	first := s.refused != pid
	s.refused = pid
	s.mu.Unlock()
	s.stats.Refused.Add(1) // before the close the peer sees
	nc.Close()
	lvl := slog.LevelDebug
	if first {
		lvl = slog.LevelWarn
	}
	s.log.Log(context.Background(), lvl, "agent channel: refused a process other than the attached VM", "peer_pid", pid, "vm_pid", want)
}

// attachedPeer is Config.Peer's answer, 0 without one. It is asked
// without s.mu: it takes the instance's lock.
func (s *Server) attachedPeer() int {
	if s.cfg.Peer == nil {
		return 0
	}
	return s.cfg.Peer()
}

// run starts the connection's reader and writer.
func (c *conn) run() {
	c.loops.Add(2)
	c.s.wg.Add(2)
	go func() {
		defer c.s.wg.Done()
		defer c.loops.Done()
		c.readLoop()
	}()
	go func() {
		defer c.s.wg.Done()
		defer c.loops.Done()
		c.writeLoop()
	}()
}

// drop forgets c if it is current.
func (s *Server) drop(c *conn) {
	s.mu.Lock()
	if s.cur == c {
		s.cur = nil
	}
	s.mu.Unlock()
}

// Close stops accepting, closes the connection, removes the socket and
// waits for the connection's goroutines. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	err := s.l.Close()
	if c != nil {
		c.close()
	}
	if rerr := os.Remove(s.cfg.Path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("agentchan: close: %w", err)
	}
	return nil
}

// conn is one QEMU connection.
type conn struct {
	s        *Server
	nc       *net.UnixConn
	pid      int
	hinter   Hinter // created lazily: QEMU connects before it starts its vCPU threads
	hintErrs int
	wake     chan struct{} // capacity 1: coalesced "something to send"
	done     chan struct{} // closed by close
	once     sync.Once

	in      *frameReader
	pause   chan struct{}  // closed to stop both loops for a handover
	pausing atomic.Bool    // the loops return without closing
	loops   sync.WaitGroup // the reader and the writer
	// The writer's own, kept across a pause: its first Hello went out;
	// it answered the agent's Hello with the negotiated version.
	sentHello, answered bool

	// Set by the reader, consumed by the writer.
	hello   atomic.Bool // Hello received: the writer may answer it
	version atomic.Uint32
	pongs   chan uint64
	asks    chan agentmsg.Message // migration requests and Stopping to send (migrate.go)
	// early carries a request sent right after the greeting, before the
	// agent's Hello (Server.ResumeArrived).
	early chan agentmsg.Message

	// agentFeatures are the feature bits of the agent's latest Hello.
	agentFeatures atomic.Uint32
}

func (c *conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		c.nc.Close()
	})
	c.s.drop(c)
}

func (c *conn) readLoop() {
	r := agentmsg.NewReader(c.in)
	log := c.s.log
	for {
		c.in.mark()
		m, err := r.Read()
		if err != nil {
			if c.pausing.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
				return // the frame begun stays in c.in (handover.go)
			}
			c.close()
			if errors.Is(err, agentmsg.ErrMalformed) {
				c.s.stats.Malformed.Add(1)
				log.Warn("agent channel: bad frame, dropping the connection", "err", err)
			} else {
				log.Debug("agent channel: read ended", "err", err)
			}
			return
		}
		if _, ok := m.(*agentmsg.Hello); !ok && !c.hello.Load() {
			// A guest agent that greeted another host (the VM migrated
			// here) goes on talking until our Hello reaches it and it
			// greets again: skip, do not act on, what it says meanwhile.
			log.Debug("agent channel: message before hello, skipped", "type", m.Type())
			continue
		}
		switch m := m.(type) {
		case *agentmsg.Hello:
			v, err := agentmsg.Negotiate(m)
			if err != nil {
				log.Warn("agent channel: hello", "ident", m.Ident, "err", err)
				c.close()
				return
			}
			c.version.Store(uint32(v))
			c.agentFeatures.Store(m.Features)
			if c.hello.Swap(true) {
				// The agent answered our greeting as well as greeting on
				// its own: nothing new.
				log.Debug("agent hello again", "ident", m.Ident, "version", v, "features", m.Features)
			} else {
				log.Info("agent hello", "ident", m.Ident, "version", v, "features", m.Features)
			}
			c.kick()
			c.s.helloFrom(c)
		case *agentmsg.Quiesced:
			c.s.answer(agentmsg.TypeQuiesced, m.Cookie, m.Status, m.Programs)
		case *agentmsg.Resumed:
			c.s.answer(agentmsg.TypeResumed, m.Cookie, m.Status, m.Programs)
		case *agentmsg.Checkpointed:
			c.s.answer(agentmsg.TypeCheckpointed, m.Cookie, m.Status, m.Programs)
		case *agentmsg.Reconfigured:
			c.s.answer(agentmsg.TypeReconfigured, m.Cookie, m.Status, m.Programs)
		case *agentmsg.Resources:
			c.s.setDeclared(m)
		case *agentmsg.Watch:
			c.s.stats.Watches.Add(1)
			c.s.setWatch(m.Index)
		case *agentmsg.GuestStats:
			c.s.mu.Lock()
			c.s.gstats, c.s.haveGS = GuestStats{GuestStats: *m, At: time.Now()}, true
			c.s.mu.Unlock()
		case *agentmsg.Ping:
			select {
			case c.pongs <- m.Cookie:
				c.kick()
			default: // a peer that pings faster than it reads loses pongs
			}
		case *agentmsg.Pong, *agentmsg.Completed, *agentmsg.Hints:
			// Host-bound copies of host messages mean nothing; ignore.
		default:
			log.Debug("agent channel: skipping message", "type", m.Type())
		}
	}
}

// features are the host's Hello features on this connection.
func (c *conn) features() uint32 {
	f := uint32(agentmsg.FeatureWatch | agentmsg.FeatureStats | agentmsg.FeatureReconfig)
	if c.pid > 0 && c.s.cfg.NewHinter != nil {
		f |= agentmsg.FeatureHints
	}
	return f
}

func (c *conn) writeLoop() {
	t := time.NewTicker(c.s.cfg.HintEvery)
	defer t.Stop()
	var buf []byte
	// Greet first: a guest agent whose VM arrived by migration (or whose
	// host restarted without its port closing, or whose vgpud was
	// upgraded in place) still believes it is connected and greets again
	// only when it gets a Hello (docs/agent-channel.md "Versioning").
	if !c.sentHello && !c.write(agentmsg.Marshal(&agentmsg.Hello{MinVersion: agentmsg.MinVersion, MaxVersion: agentmsg.Version,
		Features: c.features(), Ident: c.s.cfg.Ident})) {
		c.close()
		return
	}
	c.sentHello = true
	for {
		hint := false
		select {
		case <-c.pause:
			return
		case <-c.done:
			c.close()
			return
		case <-c.wake:
		case <-t.C:
			hint = true
		}
		select {
		case m := <-c.early: // our greeting went first
			if !c.write(agentmsg.Marshal(m)) {
				c.close()
				return
			}
		default:
		}
		if !c.hello.Load() {
			continue
		}
		buf = buf[:0]
		if !c.answered {
			v := uint16(c.version.Load())
			buf = agentmsg.Append(buf, &agentmsg.Hello{MinVersion: v, MaxVersion: v, Features: c.features(), Ident: c.s.cfg.Ident})
			c.answered, hint = true, true
		}
		// A wake may be a satisfied watch: say how far the ring is. An
		// extra Completed is harmless (the guest re-checks its memory).
		if !hint || len(buf) > 0 {
			buf = agentmsg.Append(buf, &agentmsg.Completed{Done: c.s.cfg.Done()})
			c.s.stats.Wakeups.Add(1)
		}
		for len(c.pongs) > 0 {
			buf = agentmsg.Append(buf, &agentmsg.Pong{Cookie: <-c.pongs})
		}
		for len(c.asks) > 0 {
			buf = agentmsg.Append(buf, <-c.asks)
		}
		if hint && c.hinter == nil {
			c.newHinter()
		}
		if hint && c.hinter != nil {
			h, ok, err := c.hinter.Hints()
			if err != nil {
				c.s.log.Debug("vcpu hints", "err", err)
			} else if ok {
				buf = agentmsg.Append(buf, &h)
				c.s.stats.Hints.Add(1)
			}
		}
		if len(buf) == 0 {
			continue
		}
		if !c.write(buf) {
			c.close()
			return
		}
	}
}

// write sends buf under the write deadline; false means the connection
// failed (and was logged).
func (c *conn) write(buf []byte) bool {
	c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	if _, err := c.nc.Write(buf); err != nil {
		c.s.log.Warn("agent channel: write failed, dropping the connection", "err", err)
		return false
	}
	return true
}

// newHinter tries to create the connection's hinter; it logs only the
// first few failures (a VM whose vCPU threads are not up yet).
func (c *conn) newHinter() {
	if c.pid <= 0 || c.s.cfg.NewHinter == nil || c.hintErrs >= 100 {
		return
	}
	h, err := c.s.cfg.NewHinter(c.pid)
	if err != nil {
		c.hintErrs++
		if c.hintErrs == 100 {
			c.s.log.Warn("no vcpu hints", "pid", c.pid, "err", err)
		}
		return
	}
	c.hinter = h
}

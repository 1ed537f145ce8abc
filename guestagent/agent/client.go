package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// PortName is the virtio-serial port name vgpud's VMs carry.
const PortName = "org.vgpud.agent.0"

// Defaults for Options.
const (
	DefaultReopenDelay = 200 * time.Millisecond
	// recheck bounds how long a blocked waiter sleeps without re-checking
	// its completion, in case a wake-up was lost with a connection.
	recheck = 50 * time.Millisecond
)

// ErrClosed is returned by BlockUntil once Run has returned.
var ErrClosed = errors.New("agent: client stopped")

// Options configure a Client.
type Options struct {
	// Ident is sent in Hello.
	Ident string
	// StatsEvery is how often /proc/stat is reported; 0 means never.
	StatsEvery time.Duration
	// ReadStats returns the stats to report; nil means ReadProcStat.
	ReadStats func() (agentmsg.GuestStats, error)
	// ReopenDelay is the pause before reopening a closed channel; 0 means
	// DefaultReopenDelay.
	ReopenDelay time.Duration
	Logger      *slog.Logger
	// OnStopping, if set, is called (on the channel's reader) when the host
	// says vgpud is stopping (agentmsg.Stopping): fetched commands get
	// drain to finish, then the device is gone until a restarted vgpud
	// re-plugs it without its state. It must not block.
	OnStopping func(drain time.Duration)
}

// Client is one end of the agent channel.
type Client struct {
	open func() (io.ReadWriteCloser, error)
	opts Options
	log  *slog.Logger

	// helloMu serialises computing the features and writing a Hello, so
	// that the last Hello on a connection announces the current features.
	helloMu sync.Mutex

	mu sync.Mutex
	// Guarded by mu.
	mig      migrator              // answers Quiesce and Resume; nil: none
	migq     chan agentmsg.Message // to the request worker, while Run runs
	rwc      io.ReadWriteCloser    // nil while disconnected
	ready    bool                  // the peer's Hello arrived
	done     uint32                // last Completed.Done
	hints    agentmsg.Hints
	hintsOK  bool
	changed  chan struct{} // closed and replaced on every state change
	stopped  bool
	connects uint64
	greets   uint64 // host Hellos received; a new one re-arms watches
	stops    uint64 // host Stopping messages received
	stopMs   uint32 // the last one's drain_ms

	// Reconfiguration (reconfig.go).
	rec   migrator               // answers Checkpoint and Reconfigure; nil: none
	recOn bool                   // announce FeatureReconfig
	decls []agentmsg.Declaration // sent in Resources after each Hello
}

// New returns a Client that reaches the peer through open; call Run.
func New(open func() (io.ReadWriteCloser, error), opts Options) *Client {
	if opts.ReopenDelay <= 0 {
		opts.ReopenDelay = DefaultReopenDelay
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.ReadStats == nil {
		opts.ReadStats = ReadProcStat
	}
	return &Client{open: open, opts: opts, log: log, changed: make(chan struct{})}
}

func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Run keeps the channel open until ctx ends, reopening it after errors.
// Migration and reconfiguration requests run one at a time, in order, on a
// goroutine of their own (so the channel keeps being read meanwhile); Run
// waits for the one in progress, whose context ends with ctx, before it
// returns.
func (c *Client) Run(ctx context.Context) error {
	migq := make(chan agentmsg.Message, migrationQueue)
	c.mu.Lock()
	c.migq = migq
	c.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.migrationLoop(ctx, migq)
	}()
	defer func() {
		wg.Wait()
		c.mu.Lock()
		c.stopped = true
		c.migq = nil
		c.notifyLocked()
		c.mu.Unlock()
	}()
	for {
		rwc, err := c.open()
		if err == nil {
			err = c.serve(ctx, rwc)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.log.Debug("agent channel closed, reopening", "err", err)
		t := time.NewTimer(c.opts.ReopenDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// serve runs one connection until it fails or ctx ends.
func (c *Client) serve(ctx context.Context, rwc io.ReadWriteCloser) error {
	stop := context.AfterFunc(ctx, func() { rwc.Close() })
	defer stop()
	defer rwc.Close()
	c.helloMu.Lock()
	c.mu.Lock()
	c.rwc, c.ready = rwc, false
	c.connects++
	hello := c.greetingLocked()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.rwc, c.ready = nil, false
		c.notifyLocked()
		c.mu.Unlock()
	}()
	_, err := rwc.Write(hello)
	c.helloMu.Unlock()
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	connDone := make(chan struct{})
	defer close(connDone)
	if c.opts.StatsEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.reportStats(rwc, connDone)
		}()
	}
	r := agentmsg.NewReader(rwc)
	for {
		m, err := r.Read()
		if err != nil {
			return err
		}
		regreet := false
		c.mu.Lock()
		switch m := m.(type) {
		case *agentmsg.Hello:
			if _, err := agentmsg.Negotiate(m); err != nil {
				c.mu.Unlock()
				return err
			}
			// A Hello on a channel that is already up comes from a host
			// that does not know us: the VM migrated to another vgpud, or
			// vgpud restarted while QEMU kept the port open. Greet again
			// (watches are re-armed on the new greeting).
			regreet = c.ready
			c.ready = true
			c.greets++
			c.log.Debug("agent channel ready", "peer", m.Ident, "version", m.MaxVersion, "again", regreet)
		case *agentmsg.Completed:
			c.done = m.Done
		case *agentmsg.Hints:
			c.hints, c.hintsOK = *m, true
		case *agentmsg.Stopping:
			c.stops, c.stopMs = c.stops+1, m.DrainMs
			c.log.Warn("agent channel: vgpud on the host is stopping; the vGPU is gone until it is back",
				"drain", time.Duration(m.DrainMs)*time.Millisecond)
			if c.opts.OnStopping != nil {
				c.opts.OnStopping(time.Duration(m.DrainMs) * time.Millisecond)
			}
		case *agentmsg.Quiesce, *agentmsg.Resume, *agentmsg.Checkpoint, *agentmsg.Reconfigure:
			select {
			case c.migq <- m:
			default:
				// The host asks faster than programs answer; it will
				// time out on this one.
				c.log.Warn("agent channel: migration or reconfiguration requests queued up, dropping one", "type", m.Type())
			}
		}
		c.notifyLocked()
		c.mu.Unlock()
		if regreet {
			c.helloMu.Lock()
			c.mu.Lock()
			hello := c.greetingLocked()
			c.mu.Unlock()
			_, err := rwc.Write(hello)
			c.helloMu.Unlock()
			if err != nil {
				return fmt.Errorf("hello again: %w", err)
			}
		}
	}
}

// helloLocked is the Hello this client sends now. Caller holds mu.
func (c *Client) helloLocked() *agentmsg.Hello {
	// Every client reads Quiesce's flags; a handler that ignores
	// QuiesceInPlace unmaps BAR0 and reopens the device, as without it.
	features := uint32(agentmsg.FeatureWatch | agentmsg.FeatureHints | agentmsg.FeatureInPlace)
	if c.opts.StatsEvery > 0 {
		features |= agentmsg.FeatureStats
	}
	if c.mig != nil {
		features |= agentmsg.FeatureMigration
	}
	if c.recOn {
		features |= agentmsg.FeatureReconfig
	}
	return &agentmsg.Hello{MinVersion: agentmsg.MinVersion, MaxVersion: agentmsg.Version, Features: features, Ident: c.opts.Ident}
}

func (c *Client) reportStats(w io.Writer, stop <-chan struct{}) {
	t := time.NewTicker(c.opts.StatsEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		st, err := c.opts.ReadStats()
		if err != nil {
			c.log.Debug("guest stats", "err", err)
			continue
		}
		if err := c.send(&st); err != nil {
			return
		}
	}
}

// send writes one message on the current connection.
func (c *Client) send(m agentmsg.Message) error {
	c.mu.Lock()
	rwc := c.rwc
	c.mu.Unlock()
	if rwc == nil {
		return errors.New("agent: not connected")
	}
	// One Write per frame: the port and Unix sockets keep it whole.
	_, err := rwc.Write(agentmsg.Marshal(m))
	return err
}

// Connected reports whether the peer has answered Hello.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// Connects counts the channel openings so far.
func (c *Client) Connects() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connects
}

// Stopping returns how many times the host said vgpud is stopping and
// the last drain time it gave.
func (c *Client) Stopping() (uint64, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stops, time.Duration(c.stopMs) * time.Millisecond
}

// Done returns the last completed count the host reported.
func (c *Client) Done() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// Hints returns the host's last vCPU hints.
func (c *Client) Hints() (agentmsg.Hints, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hints, c.hintsOK
}

// SliceHints converts Hints for driver.SyncOptions.Hints.
func (c *Client) SliceHints() driver.SliceHints {
	h, ok := c.Hints()
	return driver.SliceHints{MeanSlice: time.Duration(h.MeanSliceNs), Wait: float64(h.WaitPPM) / 1e6, Valid: ok && h.MeanSliceNs > 0}
}

// Changed returns a channel closed at the next state change (a message,
// a connection opening or closing).
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// WaitReady blocks until the peer has answered Hello or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		c.mu.Lock()
		ready, stopped, ch := c.ready, c.stopped, c.changed
		c.mu.Unlock()
		if ready {
			return nil
		}
		if stopped {
			return ErrClosed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// BlockUntil implements driver.Blocker: it asks the host to report when
// command index completes and sleeps until done() is true.
func (c *Client) BlockUntil(index uint32, done func() bool, deadline time.Time) error {
	var sentOn io.ReadWriteCloser
	var sentGreets uint64
	for {
		c.mu.Lock()
		rwc, ready, stopped, ch, greets := c.rwc, c.ready, c.stopped, c.changed, c.greets
		c.mu.Unlock()
		if stopped {
			return ErrClosed
		}
		// (Re)arm on every new connection or greeting: a host that
		// reconnected, restarted or took over the VM knows no watch.
		if ready && (rwc != sentOn || greets != sentGreets) {
			if err := c.send(&agentmsg.Watch{Index: index}); err == nil {
				sentOn, sentGreets = rwc, greets
			}
		}
		if done() {
			return nil
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return fmt.Errorf("block for command %d: %w", index, driver.ErrTimeout)
		}
		t := time.NewTimer(min(wait, recheck))
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

var _ driver.Blocker = (*Client)(nil)

package accept

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// LogEvery is how often a Limit logs the connections it refused: at most
// one line per listener in that time, with the count since the last.
const LogEvery = 10 * time.Second

// Limit bounds the connections a listener has open at once, so that a
// flood of connections that never send a byte, or of idle clients, holds
// at most Max of the process's file descriptors: one over the limit is
// closed as soon as it is accepted, counted and logged (at most once per
// LogEvery). The zero Limit (Max 0) refuses nothing. A Limit may be shared
// by several listeners; its methods are safe for concurrent use.
type Limit struct {
	// Max is the most connections open at once; 0 means no limit.
	Max int
	// PerHost, if > 0, is the most a Listener holds from one remote IP
	// address (TCP), so that one host's flood leaves places for others.
	PerHost int
	// Name names the listener in log lines ("migrate", "metrics").
	Name string
	// Logger receives the rate-limited refusal lines; nil: slog.Default.
	Logger *slog.Logger
	// OnRefuse, if set, is called for each connection refused (a metric).
	OnRefuse func()

	open    atomic.Int64
	refused atomic.Uint64

	mu       sync.Mutex
	lastLog  time.Time      // guarded by mu
	lastSeen uint64         // refused at lastLog; guarded by mu
	hosts    map[string]int // open per remote IP (PerHost); guarded by mu
}

// Acquire takes a place for one connection; false when Max are open (the
// refusal is counted and logged). Each true is paired with one Release.
func (g *Limit) Acquire() bool {
	if n := g.open.Add(1); g.Max > 0 && n > int64(g.Max) {
		g.open.Add(-1)
		g.refuse()
		return false
	}
	return true
}

// Release gives back a place that Acquire took.
func (g *Limit) Release() { g.open.Add(-1) }

// Open is the number of connections holding a place.
func (g *Limit) Open() int { return int(g.open.Load()) }

// Refused counts the connections refused so far.
func (g *Limit) Refused() uint64 { return g.refused.Load() }

func (g *Limit) refuse() {
	n := g.refused.Add(1)
	if g.OnRefuse != nil {
		g.OnRefuse()
	}
	g.mu.Lock()
	now := time.Now()
	if !g.lastLog.IsZero() && now.Sub(g.lastLog) < LogEvery {
		g.mu.Unlock()
		return
	}
	since := n - g.lastSeen
	g.lastLog, g.lastSeen = now, n
	g.mu.Unlock()
	log := g.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Warn("listener: too many connections, refusing new ones", "listener", g.Name, "max", g.Max, "refused", since, "refused_total", n)
}

// Listener returns l limited by g: Accept closes each connection over the
// limit (or over PerHost from its address) at once and waits for the next; a connection it returns gives
// its place back when closed (once, however often Close is called).
func (g *Limit) Listener(l net.Listener) net.Listener {
	return &limitListener{Listener: l, g: g}
}

type limitListener struct {
	net.Listener
	g *Limit
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := ""
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && l.g.PerHost > 0 {
			host = a.IP.String()
		}
		if !l.g.acquireHost(host) {
			c.Close()
			l.g.refuse()
			continue
		}
		if !l.g.Acquire() {
			l.g.releaseHost(host)
			c.Close()
			continue
		}
		return &limitConn{Conn: c, g: l.g, host: host}, nil
	}
}

// acquireHost takes one of host's PerHost places ("": no host limit).
func (g *Limit) acquireHost(host string) bool {
	if host == "" {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hosts[host] >= g.PerHost {
		return false
	}
	if g.hosts == nil {
		g.hosts = map[string]int{}
	}
	g.hosts[host]++
	return true
}

func (g *Limit) releaseHost(host string) {
	if host == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hosts[host]--; g.hosts[host] <= 0 {
		delete(g.hosts, host)
	}
}

// limitConn holds a place in g until closed.
type limitConn struct {
	net.Conn
	g    *Limit
	host string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.g.Release()
		c.g.releaseHost(c.host)
	})
	return err
}

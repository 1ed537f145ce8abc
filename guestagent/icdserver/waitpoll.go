package icdserver

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/internal/pollbudget"
)

// Waits that look for themselves (issue 43).
//
// A blocking Wait used to sleep until the device's reaper reaped the
// completion it waits for. The reaper sleeps between looks on Go timers,
// which wake an otherwise idle process at about a millisecond's
// granularity, so a blocking 64-byte read whose command ran in 50 us
// answered a millisecond later whenever the reaper's first look came too
// early. A wait now reaps the devices its connection used itself, looking
// again at once, for a bounded window (waitPollWindow) before it sleeps
// on the reaper as before: a command that completes within the window is
// answered as soon as its completion lands.
//
// The window is spent only where it pays: a connection whose last
// waitPollMisses polled waits all outlasted it (long kernels: the matmul
// job's) sleeps at once, and looks again only on every waitPollProbe-th
// wait, so that it notices when its waits become short again. Under TCG
// a guest's looking costs the host the CPU time the device's kernels
// need; at most one window per waitPollProbe long waits is spent so.

// waitPollWindow bounds how long a wait looks for its completions before
// it sleeps on the reaper: about five times a small command's round trip
// through a worker on a 2-core host. (A variable for tests of sleeping
// waits.)
var waitPollWindow = 250 * time.Microsecond

const (
	// waitPollMisses polled waits in a row that ran out stop the looking.
	waitPollMisses = pollbudget.Misses
	// waitPollProbe: while stopped, every waitPollProbe-th wait looks.
	waitPollProbe = pollbudget.Probe
)

// WaitStats counts how the Server's blocking waits ended: answered by the
// waiting connection's own looks (Polled), looked for the whole window in
// vain and then woken by a reaper (Missed), or slept at once because the
// connection's waits had been long (Slept). Waits already satisfied when
// they began count in none. Interrupts counts the reapers' wake-ups by a
// completion interrupt (Config.Interrupts).
type WaitStats struct {
	Polled, Missed, Slept uint64
	Interrupts            uint64
}

// waitCounters are a Server's WaitStats.
type waitCounters struct {
	polled, missed, slept, interrupts atomic.Uint64
}

// WaitStats returns how the Server's blocking waits have ended.
func (s *Server) WaitStats() WaitStats {
	return WaitStats{Polled: s.waits.polled.Load(), Missed: s.waits.missed.Load(), Slept: s.waits.slept.Load(),
		Interrupts: s.waits.interrupts.Load()}
}

// pollWait reaps the devices c used, looking again at once, until check
// holds (true) or the window passes (false), unless the connection's
// recent waits were too long to look for.
func (c *conn) pollWait(check func() bool) bool {
	p := &c.poller
	if !p.Look() {
		c.s.waits.slept.Add(1)
		return false
	}
	deadline := time.Now().Add(waitPollWindow)
	for {
		c.reap()
		if check() {
			p.Paid()
			c.s.waits.polled.Add(1)
			return true
		}
		if !time.Now().Before(deadline) {
			p.RanOut()
			c.s.waits.missed.Add(1)
			return false
		}
		runtime.Gosched()
	}
}

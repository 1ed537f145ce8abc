package driver

import (
	"fmt"
	"sync"
	"time"
)

// SyncMode selects how a wait for the device spends the vCPU
// (docs/agent-channel.md "Synchronisation").
type SyncMode int

const (
	// SyncPoll spins on the completion in guest RAM until it lands.
	SyncPoll SyncMode = iota
	// SyncBlock asks the host to be woken (Blocker) and sleeps at once.
	SyncBlock
	// SyncHybrid is Elmougy et al.'s Algorithm 1: poll for the key's
	// moving-average wait time T_k, but never longer than the remaining
	// vCPU slice (the max threshold, from the host's hints); if T_k exceeds
	// the threshold, block at once; if the poll runs out, block.
	SyncHybrid
	// SyncAuto is SyncHybrid with a poll budget that covers the key's
	// spread (T_k plus twice its mean deviation, so a wait that lands just
	// after the average does not pay a wake-up), that never blocks when the
	// Blocker's measured wake-up cost is at least T_k (blocking cannot pay
	// off: the guest would sleep longer than the kernel runs), and that
	// falls back to polling when no Blocker is available. The wake-up cost
	// is measured online from blocked waits; while blocking is ruled out,
	// one wait in AutoProbeEvery blocks anyway to keep the measure fresh.
	SyncAuto
)

var syncModeNames = [...]string{"poll", "block", "hybrid", "auto"}

func (m SyncMode) String() string {
	if int(m) >= 0 && int(m) < len(syncModeNames) {
		return syncModeNames[m]
	}
	return fmt.Sprintf("sync-mode-%d", int(m))
}

// ParseSyncMode parses a SyncMode's String.
func ParseSyncMode(s string) (SyncMode, error) {
	for i, n := range syncModeNames {
		if n == s {
			return SyncMode(i), nil
		}
	}
	return 0, fmt.Errorf("sync mode %q (want poll, block, hybrid or auto): %w", s, ErrInvalid)
}

// Blocker sleeps until the device has completed a command, woken by the
// host (the agent channel's Watch/Completed, or an interrupt).
type Blocker interface {
	// BlockUntil returns once done() is true, after asking to be woken
	// when command index (the ring's low 32 bits) completes, or with an
	// error at deadline. It must re-check done() after arming the wake-up
	// so a completion that lands in between is not missed.
	BlockUntil(index uint32, done func() bool, deadline time.Time) error
}

// SliceHints are the host's view of this VM's vCPU scheduling.
type SliceHints struct {
	MeanSlice time.Duration // mean time a vCPU runs before it is switched out
	Wait      float64       // fraction of runnable time spent waiting for a host CPU
	Valid     bool
}

// Clock tells the time; tests pass a fake one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Defaults for SyncOptions.
const (
	DefaultMaxPoll       = 20 * time.Millisecond
	DefaultAlpha         = 0.25
	DefaultContendedWait = 0.05
	// AutoProbeEvery is how often SyncAuto blocks, when it otherwise
	// would not, to re-measure the Blocker's wake-up cost.
	AutoProbeEvery = 64
)

// SyncOptions configure a Sync.
type SyncOptions struct {
	Mode SyncMode
	// Blocker is how the guest sleeps; nil forces SyncPoll behaviour for
	// SyncAuto and makes SyncBlock/SyncHybrid fail when they would block.
	Blocker Blocker
	// Hints returns the latest host hints; nil means none.
	Hints func() SliceHints
	// Clock is the time source; nil means the real clock.
	Clock Clock
	// MaxPoll caps any poll; it is the threshold when the vCPU is not
	// contended. 0 means DefaultMaxPoll.
	MaxPoll time.Duration
	// Alpha is the weight of a new sample in the moving averages. 0 means
	// DefaultAlpha.
	Alpha float64
	// ContendedWait is the run-queue wait fraction above which the vCPU
	// counts as contended and the threshold becomes the remaining slice.
	// 0 means DefaultContendedWait.
	ContendedWait float64
}

// WaitStats describe the waits of one Sync.
type WaitStats struct {
	Waits     uint64        // waits
	Polled    uint64        // waits that saw the completion while polling
	Blocked   uint64        // waits that blocked
	PollTime  time.Duration // time spent polling
	BlockTime time.Duration // time spent blocked
}

// Sync decides how each wait for the device spends the vCPU. It is safe
// for concurrent use.
type Sync struct {
	opts SyncOptions

	mu sync.Mutex
	// Guarded by mu.
	avg   map[string]*keyAvg
	stats WaitStats
	// wake is the Blocker's wake-up cost: how much longer than expected
	// (T_k) blocked waits took. sinceBlock counts SyncAuto waits since the
	// last blocked one.
	wake       movingAvg
	sinceBlock int
}

// keyAvg is what a Sync knows of one key: the moving average of its wait
// times (T_k, Algorithm 1) and, for SyncAuto, of the waits that polled to
// the end (the kernel's own time, without a wake-up in it).
type keyAvg struct {
	movingAvg
	polled movingAvg
}

type movingAvg struct {
	mean, dev float64 // ns
	n         uint64
}

func (a *movingAvg) add(x, alpha float64) {
	if a.n == 0 {
		a.mean, a.dev = x, 0
	} else {
		d := x - a.mean
		if d < 0 {
			d = -d
		}
		a.dev += alpha * (d - a.dev)
		a.mean += alpha * (x - a.mean)
	}
	a.n++
}

// NewSync returns a Sync with opts (defaults filled in).
func NewSync(opts SyncOptions) *Sync {
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.MaxPoll <= 0 {
		opts.MaxPoll = DefaultMaxPoll
	}
	if opts.Alpha <= 0 || opts.Alpha > 1 {
		opts.Alpha = DefaultAlpha
	}
	if opts.ContendedWait <= 0 {
		opts.ContendedWait = DefaultContendedWait
	}
	return &Sync{opts: opts, avg: map[string]*keyAvg{}}
}

// Mode returns the Sync's mode.
func (s *Sync) Mode() SyncMode { return s.opts.Mode }

// Stats returns the waits so far.
func (s *Sync) Stats() WaitStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Expected returns key's moving-average wait time (0 before any sample).
func (s *Sync) Expected(key string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.avg[key]; a != nil {
		return time.Duration(a.mean)
	}
	return 0
}

// Threshold is the longest the guest should poll: the expected remaining
// vCPU slice when the host reports contention, else MaxPoll
// (docs/agent-channel.md "Estimating the remaining slice"). A slice of
// mean length S observed at a random moment has S/2 left on average.
func (s *Sync) Threshold() time.Duration {
	if s.opts.Hints == nil {
		return s.opts.MaxPoll
	}
	h := s.opts.Hints()
	if !h.Valid || h.Wait < s.opts.ContendedWait || h.MeanSlice <= 0 {
		return s.opts.MaxPoll
	}
	return min(h.MeanSlice/2, s.opts.MaxPoll)
}

// WakeCost returns the measured wake-up cost of the Blocker (0 before a
// wait has blocked).
func (s *Sync) WakeCost() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.wake.mean)
}

// plan returns how long to poll before blocking for a wait on key; block
// false means poll until done.
func (s *Sync) plan(key string) (poll time.Duration, block bool) {
	mode := s.opts.Mode
	if mode == SyncAuto && s.opts.Blocker == nil {
		mode = SyncPoll
	}
	switch mode {
	case SyncPoll:
		return 0, false
	case SyncBlock:
		return 0, true
	}
	thr := s.Threshold()
	s.mu.Lock()
	a := s.avg[key]
	var tk, dev time.Duration
	if a != nil {
		tk, dev = time.Duration(a.mean), time.Duration(a.dev)
	}
	var polledN uint64
	if a != nil && mode == SyncAuto {
		polledN = a.polled.n
		tk, dev = time.Duration(a.polled.mean), time.Duration(a.polled.dev)
	}
	wake, wakeKnown, probe := time.Duration(s.wake.mean), s.wake.n > 0, s.sinceBlock >= AutoProbeEvery
	s.mu.Unlock()
	if mode == SyncAuto {
		if polledN == 0 {
			// Learn the kernel's own time: a wait that blocked would
			// have the wake-up in it.
			return 0, false
		}
		if wakeKnown && wake >= tk && !probe {
			// Blocking cannot pay off: the wake-up alone outlasts the
			// kernel.
			return 0, false
		}
	}
	if a == nil {
		// No history: poll up to the threshold to learn T_k cheaply.
		return thr, true
	}
	if tk > thr {
		return 0, true // Algorithm 1 line 4: block instantly
	}
	if mode == SyncAuto {
		tk += 2*dev + tk/16
	}
	return min(tk, thr), true
}

// Wait waits for done() under key: command index is the one whose
// completion makes done() true (for the Blocker). It gives up with
// ErrTimeout at timeout.
func (s *Sync) Wait(key string, index uint32, done func() bool, timeout time.Duration) error {
	clk := s.opts.Clock
	start := clk.Now()
	deadline := start.Add(timeout)
	pollFor, block := s.plan(key)
	if !block {
		pollFor = timeout
	}
	polled := false
	pollEnd := start.Add(pollFor)
	for {
		if done() {
			polled = true
			break
		}
		now := clk.Now()
		if !now.Before(deadline) {
			return fmt.Errorf("wait for command %d after %v: %w", index, timeout, ErrTimeout)
		}
		if !now.Before(pollEnd) {
			break
		}
	}
	pollDone := clk.Now()
	if !polled {
		if s.opts.Blocker == nil {
			return fmt.Errorf("wait for command %d: %v sync without a blocker: %w", index, s.opts.Mode, ErrInvalid)
		}
		if err := s.opts.Blocker.BlockUntil(index, done, deadline); err != nil {
			return fmt.Errorf("wait for command %d: %w", index, err)
		}
	}
	end := clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.avg[key]
	if a == nil {
		a = &keyAvg{}
		s.avg[key] = a
	}
	if polled {
		a.polled.add(float64(end.Sub(start)), s.opts.Alpha)
	} else if a.polled.n > 0 {
		// The wake-up cost: how much longer than the kernel's polled time
		// this blocked wait took (the kernel's own spread averages out).
		s.wake.add(max(float64(end.Sub(start))-a.polled.mean, 0), s.opts.Alpha)
	}
	if s.opts.Mode == SyncAuto {
		if polled {
			s.sinceBlock++
		} else {
			s.sinceBlock = 0
		}
	}
	a.add(float64(end.Sub(start)), s.opts.Alpha)
	s.stats.Waits++
	s.stats.PollTime += pollDone.Sub(start)
	if polled {
		s.stats.Polled++
	} else {
		s.stats.Blocked++
		s.stats.BlockTime += end.Sub(pollDone)
	}
	return nil
}

// FinishSync is Finish with the wait for the fence done by s under key
// (e.g. the program and kernel just launched, the seed's kernel id).
func (d *Device) FinishSync(s *Sync, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	v, err := d.fenceLocked()
	if err != nil {
		return err
	}
	idx := uint32(d.next - 1)
	d.flush()
	d.stats.Waits++
	// A lost device never reaches the fence: the wait ends on it too, and
	// the drain below reports it.
	var lost error
	reached := func() bool {
		if load64(d.fence.buf, 0) >= v {
			return true
		}
		lost = d.deviceLost()
		return lost != nil
	}
	if err := s.Wait(key, idx, reached, d.opts.Timeout); err != nil {
		return fmt.Errorf("fence %d: %w", v, err)
	}
	if lost != nil {
		return fmt.Errorf("fence %d: %w", v, lost)
	}
	return d.drain()
}

package sched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Errors callers tell apart.
var (
	// ErrClosed is returned by Acquire on a closed Scheduler.
	ErrClosed = errors.New("scheduler closed")
	// ErrUnknownPolicy is returned for a policy name that is not one of
	// Policies.
	ErrUnknownPolicy = errors.New("unknown scheduling policy")
	// ErrBadShare is returned for a share outside 1..MaxShare.
	ErrBadShare = errors.New("share out of range")
)

// MaxShare bounds a client's weight.
const MaxShare = 1000

// Scheduler is one physical device's turn arbiter: schedCore under a
// mutex, with a channel per waiting request, a timer for timeslice
// reservations, and a watchdog timer per granted turn of a client with a
// turn limit. It is safe for concurrent use.
type Scheduler struct {
	now       func() time.Time
	onOverrun func(id string, held time.Duration)

	mu     sync.Mutex
	core   *schedCore
	timer  *time.Timer
	closed bool
}

// New returns a Scheduler with policy p. onOverrun, if set, is called
// (from a timer goroutine, holding no lock) when a granted turn of a
// client with a limit (SetLimit) holds the device longer than that: the
// caller ends the turn's holder, whose Release is still awaited.
func New(p Policy, onOverrun func(id string, held time.Duration)) *Scheduler {
	return &Scheduler{now: time.Now, core: newSchedCore(p), onOverrun: onOverrun}
}

// Acquire waits for a device turn of client id (created with share 1 on
// first use) whose expected device time is cost (0: unknown). It returns
// the slice budget of the turn (how long a slice of a long launch may run
// now, 0: run it whole; see docs/scheduler.md) and release, which the
// caller must call exactly once when the turn ends with the device time
// it measured (0: charge the wall time held) and the number of launch
// slices to count for the client. Acquire satisfies the aggregator's
// Arbiter.
func (s *Scheduler) Acquire(ctx context.Context, id string, cost time.Duration) (time.Duration, func(dev time.Duration, slices int), error) {
	r := &request{cost: cost, ready: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, nil, ErrClosed
	}
	r.c = s.core.client(id)
	if err := s.core.enqueue(r, s.now()); err != nil {
		s.mu.Unlock()
		return 0, nil, err
	}
	if !s.core.busy {
		s.grantLocked()
	}
	s.mu.Unlock()
	var once sync.Once
	release := func(dev time.Duration, slices int) { once.Do(func() { s.release(r, dev, slices) }) }
	select {
	case <-r.ready:
		return r.budget, release, nil
	case <-ctx.Done():
		s.mu.Lock()
		if !r.granted {
			s.core.cancel(r)
			s.mu.Unlock()
			return 0, nil, ctx.Err()
		}
		s.mu.Unlock()
		// Granted while we gave up: pass the turn on.
		release(0, 0)
		return 0, nil, ctx.Err()
	}
}

// grantLocked hands the idle device to the next request, or arms the
// timer when a timeslice reservation holds it.
func (s *Scheduler) grantLocked() {
	r, retry := s.core.grant(s.now())
	if r != nil {
		if lim := r.c.limit; lim > 0 && s.onOverrun != nil {
			r.watch = time.AfterFunc(lim, func() { s.overrun(r) })
		}
		close(r.ready)
		return
	}
	if !retry.IsZero() && !s.closed {
		d := max(retry.Sub(s.now()), 0)
		if s.timer == nil {
			s.timer = time.AfterFunc(d, s.retry)
		} else {
			s.timer.Reset(d)
		}
	}
}

// overrun reports a turn that outlived its client's limit, if it still
// holds the device.
func (s *Scheduler) overrun(r *request) {
	s.mu.Lock()
	held := s.core.busy && s.core.holder == r.c && r.watch != nil
	id, d := r.c.id, s.now().Sub(r.start)
	s.mu.Unlock()
	if held {
		s.onOverrun(id, d)
	}
}

func (s *Scheduler) retry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.core.busy {
		s.grantLocked()
	}
}

// release ends r's turn: dev is the device time measured during it (0:
// charge the wall time of the turn); it is never charged more than the
// wall time held, whatever the caller says.
func (s *Scheduler) release(r *request, dev time.Duration, slices int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.watch != nil {
		r.watch.Stop()
		r.watch = nil
	}
	now := s.now()
	held := now.Sub(r.start)
	if dev <= 0 || dev > held {
		dev = held
	}
	if slices > 1 {
		r.c.slices += uint64(slices)
	}
	s.core.charge(r.c, dev, held, now)
	s.grantLocked()
}

// Close fails later Acquires with ErrClosed. Turns in progress end as
// usual.
func (s *Scheduler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

// Remove forgets client id, which has no turn waiting or in progress.
func (s *Scheduler) Remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.core.remove(id)
}

// ClientStats are one client's scheduling counters.
type ClientStats struct {
	ID          string `json:"id"`
	Share       uint32 `json:"share"`
	DeviceNanos uint64 `json:"device_ns"` // measured device time charged
	WaitNanos   uint64 `json:"wait_ns"`   // time spent waiting for turns
	HeldNanos   uint64 `json:"held_ns"`   // wall time holding the device
	Turns       uint64 `json:"turns"`
	Slices      uint64 `json:"slices"` // launch slices cut for the scheduler
	Queued      int    `json:"queued"`
}

// Stats is a device's scheduler state.
type Stats struct {
	Policy    Policy        `json:"policy"`
	HeldNanos uint64        `json:"held_ns"` // wall time the device was held by any client
	Turns     uint64        `json:"turns"`
	Holder    string        `json:"holder,omitempty"` // the client holding the device now
	Clients   []ClientStats `json:"clients"`
}

func statsOf(c *client) ClientStats {
	return ClientStats{ID: c.id, Share: c.share, DeviceNanos: c.devNanos, WaitNanos: c.waitNanos, HeldNanos: c.heldNanos,
		Turns: c.turns, Slices: c.slices, Queued: len(c.queue)}
}

// Stats returns the scheduler's counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Policy: s.core.policy, HeldNanos: s.core.heldNanos, Turns: s.core.grants}
	if s.core.busy && s.core.holder != nil {
		st.Holder = s.core.holder.id
	}
	for _, c := range s.core.clients {
		st.Clients = append(st.Clients, statsOf(c))
	}
	return st
}

// Client returns client id's counters (zero, share 1, if it never asked
// for a turn).
func (s *Scheduler) Client(id string) ClientStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.core.lookup(id); c != nil {
		return statsOf(c)
	}
	return ClientStats{ID: id, Share: 1}
}

// Policy returns the scheduling policy.
func (s *Scheduler) Policy() Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core.policy
}

// SetPolicy switches the policy at once; a turn in progress finishes.
// Share accounting restarts from zero.
func (s *Scheduler) SetPolicy(p Policy) error {
	if _, err := ParsePolicy(string(p)); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.core.setPolicy(p)
	return nil
}

// SetShare sets client id's weight under PolicyFixedShare (1..MaxShare).
// The client need not have asked for a turn yet.
func (s *Scheduler) SetShare(id string, share uint32) error {
	if share == 0 || share > MaxShare {
		return fmt.Errorf("share %d: want 1..%d: %w", share, MaxShare, ErrBadShare)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.core.client(id).share = share
	return nil
}

// SetLimit bounds how long one turn of client id may hold the device (0:
// no bound). A turn that holds it longer is reported to the onOverrun
// callback given to New. It applies from the client's next turn.
func (s *Scheduler) SetLimit(id string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.core.client(id).limit = max(d, 0)
}

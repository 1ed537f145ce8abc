package sched

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// Preemption is what a Preempter did to a running turn.
type Preemption int

const (
	// PreemptRefused: the turn cannot be taken off the device now; it is
	// asked again a slice later.
	PreemptRefused Preemption = iota
	// PreemptStopped: the turn's holder is stopped (a worker process of a
	// CPU device, SIGSTOP) until the continue function is called.
	PreemptStopped
	// PreemptShared: the turn goes on running and the device time-slices
	// it with the next turns (a GPU driver's contexts); it is only
	// accounted.
	PreemptShared
)

// Preempter takes client id's running turn off the device. It is called
// with the Scheduler's lock held, so it must be quick and must not call
// the Scheduler; so is the continue function it returns with
// PreemptStopped, which lets the turn's holder run again.
type Preempter func(id string) (how Preemption, cont func())

// Scheduler is one physical device's turn arbiter: schedCore under a
// mutex, with a channel per waiting request, a timer for timeslice
// reservations, and a timer per granted turn of a client with a kernel
// limit or a slice (the watchdog and preemption). It is safe for
// concurrent use.
type Scheduler struct {
	now       func() time.Time
	onOverrun func(id string, ran time.Duration)

	mu        sync.Mutex
	core      *schedCore
	timer     *time.Timer
	closed    bool
	preempt   Preempter
	noPreempt bool                  // SetPreempting(false), Close
	live      map[*request]struct{} // granted turns not yet released
	contended func(id string)       // SetContended

	offers   Offers  // SetOffers (offer.go)
	noOffers bool    // SetOffering(false), Close
	parked   *parked // the offer out, or the turn taken from it and not claimed
	nextGen  uint64  // the last offer's number
	last     *client // the client whose turn ended last
}

// SetContended sets f, told the id of the client whose turn holds the
// device when another request comes to wait for it (another client's, or
// another of the same client's: a second ring of one instance), and of a client
// granted a turn while others wait: a client that keeps its turns across
// commands (a worker's instance, aggregator.Shared.TurnWanted) gives the
// turn back at once when told. f is called with the scheduler's lock
// held: it must not block or call the scheduler.
func (s *Scheduler) SetContended(f func(id string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contended = f
}

// tellContended calls the contended hook for c, if any.
func (s *Scheduler) tellContended(c *client) {
	if s.contended != nil && c != nil {
		s.contended(c.id)
	}
}

// New returns a Scheduler with policy p. onOverrun, if set, is called
// (from a timer goroutine, holding no lock) when a granted turn of a
// client with a limit (SetLimit) has run longer than that, the time it
// was stopped by a preemption excluded: the caller ends the turn's
// holder, whose Release is still awaited.
func New(p Policy, onOverrun func(id string, ran time.Duration)) *Scheduler {
	return &Scheduler{now: time.Now, core: newSchedCore(p), onOverrun: onOverrun, live: map[*request]struct{}{}}
}

// SetPreempter sets how running turns are taken off the device (nil:
// never; the default). A client's turns are preempted only if it has a
// slice (SetSlice).
func (s *Scheduler) SetPreempter(p Preempter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.preempt = p
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
	} else if cur := s.core.cur; cur != nil {
		// Another ring of the same client (a device context of the
		// holder's instance) waits too.
		s.tellContended(cur.c)
		// A waiter the policy owes service may take the device from a
		// long turn now.
		s.checkLocked(cur, s.now())
	}
	s.mu.Unlock()
	release := s.releaseOnce(r)
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

// releaseOnce returns the function that ends turn r, which does so
// once whoever calls it again.
func (s *Scheduler) releaseOnce(r *request) func(dev time.Duration, slices int) {
	var once sync.Once
	return func(dev time.Duration, slices int) { once.Do(func() { s.release(r, dev, slices) }) }
}

// grantLocked hands the idle device to the next request, or arms the
// timer when a timeslice reservation holds it, or parks it at the client
// whose turn ended last (offer.go). A parked turn is revoked first when
// there is a request to grant (only then: a retry or a wake with nothing
// waiting leaves it out, where its holder may be taking it); if it was
// taken, the device is its holder's.
func (s *Scheduler) grantLocked() {
	now := s.now()
	if !s.core.pending() {
		s.offerLocked(now)
		return
	}
	if s.revokeLocked(now); s.core.busy {
		s.tellContended(s.core.holder)
		return
	}
	r, retry := s.core.grant(now)
	if r != nil {
		if r.resumed {
			r.resumed = false
			if r.cont != nil {
				r.cont()
				r.cont = nil
			}
		} else {
			s.live[r] = struct{}{}
			close(r.ready)
		}
		if s.core.pending() {
			s.tellContended(r.c)
		}
		s.armLocked(r, now)
		return
	}
	if retry.IsZero() {
		s.offerLocked(now)
		return
	}
	if !s.closed {
		d := max(retry.Sub(s.now()), 0)
		if s.timer == nil {
			s.timer = time.AfterFunc(d, s.retry)
		} else {
			s.timer.Reset(d)
		}
	}
}

// preemptible reports whether the running turn r may ever be preempted.
func (s *Scheduler) preemptible(r *request) bool {
	return s.preempt != nil && !s.noPreempt && r.c.slice > 0 && !r.timeSlice &&
		(r.state == stateRunning || r.state == stateShared)
}

// minRunOf is how long r runs at least before a waiter the policy owes
// service takes the device from it: minRun, within its slice.
func minRunOf(r *request) time.Duration { return min(minRun, r.c.slice) }

// shouldPreempt reports whether the running turn r is to be taken off the
// device now: while a client outside its group waits, once it ran its
// slice, or once it ran minRun if the policy would serve that client
// before it (charged for its run so far); a turn continued beside the
// holder, once it ran its slice. Never while another turn of its group
// runs (stopping its process would stop that one too).
func (s *Scheduler) shouldPreempt(r *request, now time.Time) bool {
	if !s.preemptible(r) || s.groupRuns(r) {
		return false
	}
	run := now.Sub(r.runStart)
	if r.state == stateShared {
		return run >= r.c.slice
	}
	if !s.core.othersWait(r.c) {
		return false
	}
	return run >= r.c.slice || (run >= minRunOf(r) && s.core.owed(r.c, run))
}

// checkLocked preempts r if it should be, and sets its timer.
func (s *Scheduler) checkLocked(r *request, now time.Time) {
	if s.shouldPreempt(r, now) {
		s.preemptLocked(r, now)
	}
	s.armLocked(r, now)
}

// armLocked sets r's timer for its next check: the end of its kernel
// limit, or of its slice (a slice later when that passed already).
func (s *Scheduler) armLocked(r *request, now time.Time) {
	if r.state != stateRunning && r.state != stateShared {
		if r.watch != nil {
			r.watch.Stop()
		}
		return
	}
	d := time.Duration(-1)
	if lim := r.c.limit; lim > 0 && s.onOverrun != nil && !r.overran {
		d = max(lim-ranNow(r, now), 0)
	}
	if s.preemptible(r) {
		run := now.Sub(r.runStart)
		sl := r.c.slice - run
		if sl <= 0 {
			sl = r.c.slice
		}
		if r.state == stateRunning && s.core.othersWait(r.c) {
			// Look again when it ran minRun, then every minRun: the
			// waiter may be owed the device by then.
			if mr := minRunOf(r); run < mr {
				sl = min(sl, mr-run)
			} else {
				sl = min(sl, mr)
			}
		}
		if d < 0 || sl < d {
			d = sl
		}
	}
	switch {
	case d < 0 && r.watch != nil:
		r.watch.Stop()
	case d < 0:
	case r.watch == nil:
		r.watch = time.AfterFunc(d, func() { s.tick(r) })
	default:
		r.watch.Reset(d)
	}
}

// tick checks a running turn: past its kernel limit it is reported to
// onOverrun (once); past its slice while another client waits it is
// preempted and the device granted on.
func (s *Scheduler) tick(r *request) {
	s.mu.Lock()
	if r.state != stateRunning && r.state != stateShared {
		s.mu.Unlock()
		return
	}
	now := s.now()
	if lim := r.c.limit; lim > 0 && s.onOverrun != nil && !r.overran {
		if ran := ranNow(r, now); ran >= lim {
			r.overran = true
			id := r.c.id
			s.mu.Unlock()
			s.onOverrun(id, ran)
			return
		}
	}
	s.checkLocked(r, now)
	s.mu.Unlock()
}

// groupRuns reports whether another turn of r's group runs (in r's
// process, which stopping r would stop too).
func (s *Scheduler) groupRuns(r *request) bool {
	if r.c.group == "" {
		return false
	}
	for o := range s.live {
		if o != r && o.c.group == r.c.group && (o.state == stateRunning || (o.state == stateShared && !o.timeSlice)) {
			return true
		}
	}
	return false
}

// preemptLocked asks the Preempter to take r off the device, and grants
// the device on if r held it.
func (s *Scheduler) preemptLocked(r *request, now time.Time) {
	how, cont := s.preempt(r.c.id)
	switch how {
	case PreemptStopped:
		r.cont = cont
		s.core.suspend(r, now, true)
	case PreemptShared:
		r.timeSlice = true
		if r.state == stateRunning {
			s.core.suspend(r, now, false)
		}
	default:
		return
	}
	if !s.core.busy {
		s.grantLocked()
	}
}

// continueLocked lets the stopped turn r run again beside the holder.
func (s *Scheduler) continueLocked(r *request, now time.Time) {
	s.core.unstop(r, now)
	if r.cont != nil {
		r.cont()
		r.cont = nil
	}
	s.armLocked(r, now)
}

// Wake lets the stopped turns of clients ids run again at once, beside
// the holder (their holder must answer something); they may be
// preempted again a slice later.
func (s *Scheduler) Wake(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for r := range s.live {
		if r.state == stateStopped && slices.Contains(ids, r.c.id) {
			s.continueLocked(r, now)
		}
	}
	if !s.core.busy {
		s.grantLocked()
	}
}

// SetPreempting turns preemption off (every stopped turn is continued
// at once and runs beside the holder; none is stopped until it is turned
// on again) or back on. An upgrade in place turns it off before it waits
// for the turns in progress.
func (s *Scheduler) SetPreempting(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noPreempt = !on
	now := s.now()
	for r := range s.live {
		if r.state == stateStopped && !on {
			s.continueLocked(r, now)
		} else {
			s.armLocked(r, now)
		}
	}
	if !s.core.busy && !s.closed {
		s.grantLocked()
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
	if r.cont != nil {
		// Released while stopped (its holder died): whatever is left of
		// it must not stay stopped.
		r.cont()
		r.cont = nil
	}
	delete(s.live, r)
	s.last = r.c
	if slices > 1 {
		r.c.slices += uint64(slices)
	}
	s.core.finish(r, dev, s.now())
	if !s.core.busy {
		s.grantLocked()
	}
}

// Close fails later Acquires with ErrClosed and continues every stopped
// turn. Turns in progress end as usual.
func (s *Scheduler) Close() {
	s.mu.Lock()
	s.closed = true
	s.revokeLocked(s.now())
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
	s.SetPreempting(false)
}

// Remove forgets client id, which has no turn waiting or in progress
// (but for one it took from a parked offer and did not claim: Forfeit).
func (s *Scheduler) Remove(id string) {
	s.Forfeit(id)
	s.mu.Lock()
	if s.last != nil && s.last.id == id {
		s.last = nil
	}
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
	Offers      uint64 `json:"offers"`      // free turns parked at it, taken without a request (offer.go)
	Taken       uint64 `json:"taken"`       // of Turns, those it took from them
	Slices      uint64 `json:"slices"`      // launch slices cut for the scheduler
	Preemptions uint64 `json:"preemptions"` // turns taken off the device past their slice
	Stopped     bool   `json:"stopped,omitempty"`
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
		Turns: c.turns, Offers: c.offers, Taken: c.taken, Slices: c.slices, Preemptions: c.preempts, Stopped: c.stopped != nil, Queued: len(c.queue)}
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

// SetLimit bounds how long one turn of client id may run, the time it
// was stopped by preemptions excluded (0: no bound): the kernel limit. A
// turn that runs longer is reported to the onOverrun callback given to
// New. It applies from the client's next turn.
func (s *Scheduler) SetLimit(id string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.core.client(id).limit = max(d, 0)
}

// SetSlice sets how long a turn of client id may run while a client
// outside its group waits before it is preempted (0: never), and its
// group: clients whose turns run in one process, which a preemption
// stops for all of them. It applies from the client's next check.
func (s *Scheduler) SetSlice(id, group string, slice time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.core.client(id)
	c.slice, c.group = max(slice, 0), group
}

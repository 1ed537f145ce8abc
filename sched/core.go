package sched

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Policy is how a Device shares its turns among the instances on it.
type Policy string

// The policies. All but PolicyTimeslice account measured device time per
// instance; docs/scheduler.md describes each.
const (
	// PolicyBestEffort is work-conserving round-robin: each backlogged
	// instance gets one turn in turn.
	PolicyBestEffort Policy = "best-effort"
	// PolicyEqualShare gives every backlogged instance the same device
	// time, the least-served first, short work first within a small lag.
	PolicyEqualShare Policy = "equal-share"
	// PolicyFixedShare is PolicyEqualShare weighted by each instance's
	// share (the profile's Share, or one set at run time).
	PolicyFixedShare Policy = "fixed-share"
	// PolicyTimeslice is the baseline: round-robin 1 ms time slices, the
	// holder keeping the device for its whole slice while it has work
	// (NVIDIA's best-effort scheduler); long launches are cut at the
	// slice length. It knows nothing of kernel lengths.
	PolicyTimeslice Policy = "timeslice"
)

// DefaultPolicy is a new Device's policy.
const DefaultPolicy = PolicyFixedShare

// Policies lists the policies in the order they are documented.
var Policies = []Policy{PolicyBestEffort, PolicyEqualShare, PolicyFixedShare, PolicyTimeslice}

// ParsePolicy returns the policy named s.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range Policies {
		if string(p) == s {
			return p, nil
		}
	}
	names := make([]string, len(Policies))
	for i, p := range Policies {
		names[i] = string(p)
	}
	return "", fmt.Errorf("%w %q (have %s)", ErrUnknownPolicy, s, strings.Join(names, ", "))
}

// Scheduler tuning.
const (
	// timeQuantum is PolicyTimeslice's slice.
	timeQuantum = time.Millisecond
	// idleGrace: the device stays reserved this long for the client whose
	// turn just ended when the policy would serve it next anyway
	// (reservedUntil), so that a client coming straight back keeps its
	// due.
	idleGrace = 200 * time.Microsecond
	// fairWindow is how far (in weighted device time) a client may run
	// ahead of the least-served backlogged one to let shorter work go
	// first under the share policies.
	fairWindow = time.Millisecond
	// unknownCost stands for work whose length has never been measured.
	unknownCost = fairWindow
	// minSlice and maxSlice bound the device time of one slice of a long
	// launch while other instances are active.
	minSlice = 200 * time.Microsecond
	maxSlice = 4 * time.Millisecond
	// activeWindow: an instance that asked for a turn this recently is
	// active, and long launches of others are sliced for it.
	activeWindow = 20 * time.Millisecond
	// maxQueued bounds one client's waiting requests. An instance has
	// at most one outstanding request per ring: its default one and its
	// device contexts (ABI 1.5: up to 64, which share the instance's
	// turns), so this is never reached by vgpud itself; it keeps the
	// queues bounded by construction.
	maxQueued = 1 + 64
	// ewmaShift: averages move by 1/2^ewmaShift of each new sample.
	ewmaShift = 2
	// minRun: a preemptible turn runs at least this long (within its
	// slice) before a waiting client the policy would serve first takes
	// the device from it; each preemption stops and continues a process.
	minRun = 2 * time.Millisecond
)

// errQueueFull is returned when a client already has maxQueued requests.
var errQueueFull = errors.New("scheduler queue full")

// client is one instance as the scheduler sees it.
type client struct {
	id    string
	share uint32
	seq   int // registration order, for ties

	queue []*request // FIFO, at most maxQueued
	vtime float64    // charged device ns / weight
	seen  time.Time  // last request

	devNanos  uint64 // measured device time charged
	waitNanos uint64 // time requests waited for their turn
	heldNanos uint64 // wall time holding the device
	turns     uint64
	offers    uint64        // free turns parked at it (offer.go)
	taken     uint64        // turns it took from them
	slices    uint64        // slices of launches cut for the scheduler
	avgCost   float64       // moving average of the device time of its turns
	limit     time.Duration // longest a turn may run, stopped time excluded (0: no limit)

	// Preemption (SetSlice): a turn that has run slice while another
	// client waits is stopped and resumed later. Clients of one group
	// share a process: while one's turn is stopped the others cannot run.
	slice    time.Duration
	group    string
	stopped  *request // its preempted turn, waiting to be resumed
	preempts uint64
}

// turnState is where a granted turn is.
type turnState uint8

const (
	stateWaiting turnState = iota
	stateRunning           // it holds the device (schedCore.cur)
	stateStopped           // preempted: off the device until resumed
	stateShared            // it runs beside the holder (a device that time-slices, or continued)
	stateDone              // released
)

// request is one wait for a turn.
type request struct {
	c       *client
	cost    time.Duration // expected device time; 0: unknown
	at      time.Time     // enqueued
	ready   chan struct{} // closed when granted (nil in pure tests)
	granted bool
	start   time.Time     // granted
	budget  time.Duration // slice budget at the grant
	watch   *time.Timer   // checks the turn's kernel limit and slice

	state     turnState
	runStart  time.Time     // the current run began (granted, resumed, continued)
	ran       time.Duration // running time before runStart
	stoppedAt time.Time
	charged   time.Duration // charged at preemptions, before the release
	resumed   bool          // set by grant when it resumed a stopped turn
	cont      func()        // continues the stopped turn's holder
	timeSlice bool          // the device time-slices it: never stopped
	overran   bool          // reported to onOverrun
}

// schedCore is the scheduler's state machine: which request gets the
// device next. It is pure (time is passed in) and not safe for concurrent
// use; scheduler wraps it.
type schedCore struct {
	policy  Policy
	clients []*client // registration order
	nextSeq int
	rr      int     // round-robin cursor: index of the last client served
	vclock  float64 // vtime of the last grant: the floor for newly backlogged clients

	holder   *client  // the running turn's client, or the timeslice owner
	cur      *request // the turn holding the device (nil: none, or a pure test's)
	sliceEnd time.Time
	released time.Time // end of the last turn
	busy     bool

	heldNanos uint64 // device held, all clients
	grants    uint64
}

func newSchedCore(p Policy) *schedCore { return &schedCore{policy: p, rr: -1} }

// lookup returns the client id, or nil.
func (s *schedCore) lookup(id string) *client {
	for _, c := range s.clients {
		if c.id == id {
			return c
		}
	}
	return nil
}

// client returns the client id, creating it with share 1.
func (s *schedCore) client(id string) *client {
	if c := s.lookup(id); c != nil {
		return c
	}
	c := &client{id: id, share: 1, seq: s.nextSeq, vtime: s.vclock}
	s.nextSeq++
	s.clients = append(s.clients, c)
	return c
}

// remove forgets client id; it must have no queued request.
func (s *schedCore) remove(id string) {
	for i, c := range s.clients {
		if c.id == id {
			s.clients = append(s.clients[:i], s.clients[i+1:]...)
			if s.rr >= i {
				s.rr--
			}
			if s.holder == c {
				s.holder = nil
			}
			return
		}
	}
}

func (s *schedCore) setPolicy(p Policy) {
	if p == s.policy {
		return
	}
	s.policy = p
	if !s.busy {
		s.holder = nil
	}
	s.sliceEnd = time.Time{}
	// Start the share accounting afresh: history under another policy
	// must not count as debt.
	for _, c := range s.clients {
		c.vtime = 0
	}
	s.vclock = 0
}

// weight is c's weight under the current policy.
func (s *schedCore) weight(c *client) float64 {
	if s.policy == PolicyFixedShare && c.share > 0 {
		return float64(c.share)
	}
	return 1
}

// enqueue adds r to its client's queue.
func (s *schedCore) enqueue(r *request, now time.Time) error {
	c := r.c
	if len(c.queue) >= maxQueued {
		return errQueueFull
	}
	if !waiting(c) && c != s.holder {
		// Newly backlogged: no credit for the time it was idle.
		c.vtime = max(c.vtime, s.vclock)
	}
	r.at = now
	c.seen = now
	c.queue = append(c.queue, r)
	return nil
}

// cancel removes a request that was not granted.
func (s *schedCore) cancel(r *request) {
	q := r.c.queue
	for i, x := range q {
		if x == r {
			r.c.queue = append(q[:i], q[i+1:]...)
			return
		}
	}
}

// pending reports whether any client waits and may be served.
func (s *schedCore) pending() bool {
	for _, c := range s.clients {
		if s.eligible(c) {
			return true
		}
	}
	return false
}

// waiting reports whether c has a request or a stopped turn.
func waiting(c *client) bool { return len(c.queue) > 0 || c.stopped != nil }

// next is c's request to serve next: its stopped turn first.
func next(c *client) *request {
	if c.stopped != nil {
		return c.stopped
	}
	return c.queue[0]
}

// eligible reports whether c waits and may be served now: not while
// another client of its group has a stopped turn (their process is
// stopped).
func (s *schedCore) eligible(c *client) bool {
	if !waiting(c) {
		return false
	}
	if c.stopped != nil || c.group == "" {
		return true
	}
	for _, o := range s.clients {
		if o != c && o.stopped != nil && o.group == c.group {
			return false
		}
	}
	return true
}

// owed reports whether the policy would serve a waiting client outside
// c's group before c, were c charged for the run of its turn so far: one
// that is less served under the share policies, any under the others.
func (s *schedCore) owed(c *client, run time.Duration) bool {
	fair := s.policy == PolicyEqualShare || s.policy == PolicyFixedShare
	v := c.vtime + float64(run)/s.weight(c)
	for _, o := range s.clients {
		if o != c && (c.group == "" || o.group != c.group) && s.eligible(o) && (!fair || o.vtime < v) {
			return true
		}
	}
	return false
}

// othersWait reports whether a client outside c's group may be served.
func (s *schedCore) othersWait(c *client) bool {
	for _, o := range s.clients {
		if o != c && (c.group == "" || o.group != c.group) && s.eligible(o) {
			return true
		}
	}
	return false
}

// pick chooses the client to serve next, or nil if none waits.
func (s *schedCore) pick(now time.Time) *client {
	switch s.policy {
	case PolicyEqualShare, PolicyFixedShare:
		return s.pickFair()
	case PolicyTimeslice:
		if h := s.holder; h != nil && s.eligible(h) && now.Before(s.sliceEnd) && s.indexOf(h) >= 0 {
			return h
		}
		c := s.pickRR()
		if c != nil {
			s.sliceEnd = now.Add(timeQuantum)
		}
		return c
	default:
		return s.pickRR()
	}
}

func (s *schedCore) indexOf(c *client) int {
	for i, x := range s.clients {
		if x == c {
			return i
		}
	}
	return -1
}

// pickRR returns the next backlogged client after the cursor.
func (s *schedCore) pickRR() *client {
	n := len(s.clients)
	for k := 1; k <= n; k++ {
		i := (s.rr + k) % n
		if c := s.clients[i]; s.eligible(c) {
			s.rr = i
			return c
		}
	}
	return nil
}

// pickFair returns, among the backlogged clients within fairWindow of the
// least-served one, the one whose next request is expected to be
// shortest; ties go to the least served, then to registration order.
func (s *schedCore) pickFair() *client {
	minV := -1.0
	for _, c := range s.clients {
		if s.eligible(c) && (minV < 0 || c.vtime < minV) {
			minV = c.vtime
		}
	}
	if minV < 0 {
		return nil
	}
	limit := minV + float64(fairWindow)
	var best *client
	var bestCost time.Duration
	for _, c := range s.clients {
		if !s.eligible(c) || c.vtime > limit {
			continue
		}
		cost := next(c).cost
		if r := next(c); r.state == stateStopped && cost > 0 {
			cost = max(cost-r.ran, 1) // what is left of it
		}
		if cost <= 0 {
			cost = unknownCost
		}
		if best == nil || cost < bestCost || (cost == bestCost && (c.vtime < best.vtime || (c.vtime == best.vtime && c.seq < best.seq))) {
			best, bestCost = c, cost
		}
	}
	return best
}

// grant picks the next request, marks the device busy and returns it, or
// nil (device idle) if nothing waits. While a timeslice owner's
// reservation holds, it returns nil and the time to try again.
func (s *schedCore) grant(now time.Time) (*request, time.Time) {
	s.busy = false
	s.cur = nil
	if until := s.reservedUntil(); now.Before(until) && s.pending() {
		return nil, until
	}
	c := s.pick(now)
	if c == nil {
		return nil, time.Time{}
	}
	s.busy = true
	s.holder = c
	s.vclock = max(s.vclock, c.vtime)
	if r := c.stopped; r != nil {
		// Resume a preempted turn: the time it was stopped counts as
		// waiting; it is the same turn, not a new one.
		c.stopped = nil
		r.state, r.runStart, r.resumed = stateRunning, now, true
		if w := now.Sub(r.stoppedAt); w > 0 {
			c.waitNanos += uint64(w)
		}
		s.cur = r
		return r, time.Time{}
	}
	r := c.queue[0]
	c.queue = c.queue[1:]
	r.granted = true
	r.start = now
	r.runStart = now
	r.state = stateRunning
	r.budget = s.budget(c, now)
	s.cur = r
	s.grants++
	c.turns++
	if w := now.Sub(r.at); w > 0 {
		c.waitNanos += uint64(w)
	}
	return r, time.Time{}
}

// start makes a running turn of c outside its queue (one taken from a
// parked offer, Scheduler.startLocked): the device, idle, is now c's,
// with no slice budget (c ran alone when the offer was made).
func (s *schedCore) start(c *client, now time.Time) *request {
	r := &request{c: c, at: now, granted: true, start: now, runStart: now, state: stateRunning}
	if !waiting(c) && c != s.holder {
		c.vtime = max(c.vtime, s.vclock)
	}
	c.seen = now
	s.busy = true
	s.holder = c
	s.vclock = max(s.vclock, c.vtime)
	s.cur = r
	s.grants++
	c.turns++
	return r
}

// reservedUntil is when the hold on an idle device for the client whose
// turn just ended expires (zero when there is none). An instance's worker
// asks for one turn at a time, so between two of its turns it is never
// queued: without the hold a work-conserving scheduler would alternate
// between backlogged instances whatever their weights. The hold lasts
// idleGrace after the turn, and only while that client would be served
// first anyway: under the share policies while it is the least served,
// under PolicyTimeslice while its slice lasts.
func (s *schedCore) reservedUntil() time.Time {
	h := s.holder
	if h == nil || waiting(h) || s.released.IsZero() || s.indexOf(h) < 0 {
		return time.Time{}
	}
	until := s.released.Add(idleGrace)
	switch s.policy {
	case PolicyTimeslice:
		if s.sliceEnd.Before(until) {
			until = s.sliceEnd
		}
	case PolicyEqualShare, PolicyFixedShare:
		for _, c := range s.clients {
			if s.eligible(c) && c.vtime <= h.vtime {
				return time.Time{}
			}
		}
	default:
		return time.Time{}
	}
	return until
}

// charge accounts a finished turn of c: dev is the device time measured,
// held the wall time the turn lasted.
func (s *schedCore) charge(c *client, dev, held time.Duration, now time.Time) {
	dev, held = max(dev, 0), max(held, 0)
	s.released = now
	c.devNanos += uint64(dev)
	c.heldNanos += uint64(held)
	s.heldNanos += uint64(held)
	c.vtime += float64(dev) / s.weight(c)
	c.avgCost = ewma(c.avgCost, float64(dev))
}

// ranNow is r's running time until now, stopped time excluded.
func ranNow(r *request, now time.Time) time.Duration {
	if r.state == stateRunning || r.state == stateShared {
		return r.ran + max(now.Sub(r.runStart), 0)
	}
	return r.ran
}

// suspend takes the running or shared turn r off the device's books at
// now: the run so far is charged (its wall time, reconciled at the
// release) and, when it held the device, the device is free. stop: r is
// stopped (its client's stopped turn, resumed by a later grant); else it
// goes on running beside the next holder.
func (s *schedCore) suspend(r *request, now time.Time, stop bool) {
	c := r.c
	seg := max(now.Sub(r.runStart), 0)
	r.ran += seg
	r.runStart = now
	r.charged += seg
	c.devNanos += uint64(seg)
	c.heldNanos += uint64(seg)
	s.heldNanos += uint64(seg)
	c.vtime += float64(seg) / s.weight(c)
	c.preempts++
	if s.cur == r {
		s.cur = nil
		s.busy = false
		s.released = now
	}
	if stop {
		r.state, r.stoppedAt = stateStopped, now
		c.stopped = r
	} else {
		r.state = stateShared
	}
}

// unstop makes the stopped turn r run again beside the holder.
func (s *schedCore) unstop(r *request, now time.Time) {
	if r.c.stopped == r {
		r.c.stopped = nil
	}
	r.state, r.runStart = stateShared, now
	if w := now.Sub(r.stoppedAt); w > 0 {
		r.c.waitNanos += uint64(w)
	}
}

// finish accounts the end of turn r at now: dev is the device time its
// holder measured, clamped to the time it ran (0: that time). It reports
// whether r held the device (which is now free).
func (s *schedCore) finish(r *request, dev time.Duration, now time.Time) bool {
	c := r.c
	var seg time.Duration
	switch r.state {
	case stateRunning, stateShared:
		seg = max(now.Sub(r.runStart), 0)
		r.ran += seg
	case stateStopped:
		if c.stopped == r {
			c.stopped = nil
		}
	}
	if dev <= 0 || dev > r.ran {
		dev = r.ran
	}
	holder := s.cur == r
	released := s.released
	avg := c.avgCost
	// What the preemptions charged already is part of dev.
	s.charge(c, max(dev-r.charged, 0), seg, now)
	c.avgCost = ewma(avg, float64(dev))
	if holder {
		s.cur = nil
		s.busy = false
	} else {
		s.released = released
	}
	r.state = stateDone
	return holder
}

func ewma(avg, x float64) float64 {
	if avg == 0 {
		return x
	}
	return avg + (x-avg)/(1<<ewmaShift)
}

// budget is the device time a slice of c's long launch may take now: 0
// when no other client is active (run the launch whole), else the
// policy's quantum or, for vgpud's policies, half the typical request
// length of the most latency-sensitive other active client, within
// [minSlice, maxSlice].
func (s *schedCore) budget(c *client, now time.Time) time.Duration {
	shortest := time.Duration(-1)
	for _, o := range s.clients {
		if o == c || (!waiting(o) && now.Sub(o.seen) > activeWindow) || o.seen.IsZero() {
			continue
		}
		if cost := time.Duration(o.avgCost); shortest < 0 || cost < shortest {
			shortest = cost
		}
	}
	if shortest < 0 {
		return 0
	}
	if s.policy == PolicyTimeslice {
		return timeQuantum
	}
	// Half the neighbour's typical turn: it then waits on average a
	// quarter of its own length for the slice in progress.
	return min(max(shortest/2, minSlice), maxSlice)
}

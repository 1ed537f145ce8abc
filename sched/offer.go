package sched

import "time"

// Parked turns (issue 42, docs/scheduler.md "Parked turns").
//
// A worker's instance asks for a turn across a process boundary: a
// request and a grant, two cross-process wake-ups, before the first
// command of a doorbell that finds its device free. When a turn ends and
// nothing waits, the scheduler parks the free device at the client whose
// turn it was, if that client runs alone on the device (its slice budget
// would be 0): the Offers hook writes the offer, numbered, where the
// client's holder can take it with a compare-and-swap and no round trip
// (a worker's instance page). The holder then tells the scheduler it took
// it (Take, from a one-way message) and gives the turn back as any other.
//
// At most one offer is out at a time, and only while the device is idle.
// Before the device is granted to anyone (another client's request, or
// the client's own through Acquire) the offer is revoked: if its holder
// took it meanwhile, the turn it took starts then, in the scheduler's
// books, as a running turn of that client with its watchdog and
// preemption armed, and the request waits behind it; the holder is told
// (SetContended) to give it back soon. The turn so started, or the one a
// Take finds still parked, belongs to the holder's Take; a turn started
// at a revocation and never claimed is released by Forfeit when its
// holder is gone.

// Offers writes and revokes parked turns where a client's holder sees
// them. Its methods are called with the scheduler's lock held: they must
// not block or call the Scheduler.
type Offers interface {
	// Offer parks a free turn at client id under number gen; false if
	// it cannot (no place to write it, the holder cannot take one now).
	Offer(id string, gen uint64) bool
	// Revoke takes offer gen of client id back and reports whether its
	// holder had taken it.
	Revoke(id string, gen uint64) (taken bool)
}

// parked is an offer out, or a turn taken from one and started at its
// revocation that its holder has not claimed (Take) yet.
type parked struct {
	c   *client
	gen uint64
	r   *request // nil while the offer is out
}

// SetOffers sets the hook that parks free turns (nil: none are; the
// default), revoking an offer out.
func (s *Scheduler) SetOffers(o Offers) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revokeLocked(s.now())
	s.offers = o
	s.offerLocked(s.now())
}

// SetOffering turns parking off (an offer out is revoked; a turn taken
// from it starts) or back on. An upgrade in place turns it off before it
// waits for the turns in progress.
func (s *Scheduler) SetOffering(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noOffers = !on
	now := s.now()
	if !on {
		s.revokeLocked(now)
		return
	}
	s.offerLocked(now)
}

// offerLocked parks the idle device at the client whose turn ended last,
// if it runs alone on the device.
func (s *Scheduler) offerLocked(now time.Time) {
	c := s.last
	if s.offers == nil || s.noOffers || s.closed || s.core.busy || s.parked != nil || c == nil ||
		s.core.indexOf(c) < 0 || s.core.pending() || s.core.budget(c, now) != 0 {
		return
	}
	s.nextGen++
	if s.offers.Offer(c.id, s.nextGen) {
		s.parked = &parked{c: c, gen: s.nextGen}
		c.offers++
	}
}

// revokeLocked takes an offer out back before the device is granted: a
// turn its holder took starts now, in the books.
func (s *Scheduler) revokeLocked(now time.Time) {
	p := s.parked
	if p == nil || p.r != nil {
		return
	}
	if !s.offers.Revoke(p.c.id, p.gen) {
		s.parked = nil
		return
	}
	p.r = s.startLocked(p.c, now)
}

// startLocked makes a running turn of c, which holds the device from now
// on, as a grant would have.
func (s *Scheduler) startLocked(c *client, now time.Time) *request {
	r := s.core.start(c, now)
	c.taken++
	s.live[r] = struct{}{}
	s.armLocked(r, now)
	return r
}

// Take claims for client id the turn it took from offer gen and returns
// the function that ends it (as Acquire's release); ok is false when the
// scheduler knows of no such offer (it was revoked before it was taken,
// or the number is not one it gave).
func (s *Scheduler) Take(id string, gen uint64) (release func(dev time.Duration, slices int), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parked
	if p == nil || p.c.id != id || p.gen != gen {
		return nil, false
	}
	s.parked = nil
	r := p.r
	if r == nil {
		// Taken, and nobody asked for the device since: the offer is
		// withdrawn (its word says taken, or the holder lies) and the
		// turn starts now.
		s.offers.Revoke(id, gen)
		r = s.startLocked(p.c, s.now())
	}
	return s.releaseOnce(r), true
}

// Forfeit ends client id's part in parked turns, its holder being gone:
// an offer out is revoked, and a turn taken from one and not claimed is
// released.
func (s *Scheduler) Forfeit(id string) {
	s.mu.Lock()
	p := s.parked
	if p == nil || p.c.id != id {
		s.mu.Unlock()
		return
	}
	if p.r == nil {
		s.revokeLocked(s.now())
		if p.r == nil {
			s.mu.Unlock()
			return
		}
	}
	s.parked = nil
	s.mu.Unlock()
	s.release(p.r, 0, 0)
}

// Unclaimed reports whether a turn taken from an offer and started at
// its revocation awaits its holder's Take: an upgrade in place waits for
// it as for any turn in progress.
func (s *Scheduler) Unclaimed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parked != nil && s.parked.r != nil
}

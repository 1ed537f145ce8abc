package sched

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// words is an Offers of one word per client, as a worker's instance page
// holds it: the offer's number times 4, plus 1 while parked or 2 once
// taken.
type words struct {
	mu sync.Mutex
	w  map[string]*atomic.Uint64
}

func newWords() *words { return &words{w: map[string]*atomic.Uint64{}} }

func (o *words) word(id string) *atomic.Uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.w[id]
	if !ok {
		w = new(atomic.Uint64)
		o.w[id] = w
	}
	return w
}

func (o *words) Offer(id string, gen uint64) bool { o.word(id).Store(gen<<2 | 1); return true }

func (o *words) Revoke(id string, gen uint64) bool {
	w := o.word(id)
	if w.CompareAndSwap(gen<<2|1, 0) {
		return false
	}
	return w.Load() == gen<<2|2
}

// take is what the client's holder does: it takes the offer parked at it,
// if any, and returns its number.
func (o *words) take(id string) (uint64, bool) {
	w := o.word(id)
	v := w.Load()
	if v&3 != 1 || !w.CompareAndSwap(v, v&^3|2) {
		return 0, false
	}
	return v >> 2, true
}

func mustAcquire(t testing.TB, s *Scheduler, id string) func(time.Duration, int) {
	t.Helper()
	_, release, err := s.Acquire(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return release
}

// acquireLater asks for a turn of id in a goroutine and hands its
// release over once it is granted.
func acquireLater(t *testing.T, s *Scheduler, id string) <-chan func(time.Duration, int) {
	granted := make(chan func(time.Duration, int))
	go func() {
		_, release, err := s.Acquire(context.Background(), id, 0)
		if err != nil {
			t.Error(err)
		}
		granted <- release
	}()
	return granted
}

// parkedAtA returns a scheduler whose device is parked at client a (its
// turn just ended), with its Offers and the channel its contended hook
// tells.
func parkedAtA(t *testing.T) (*Scheduler, *words, <-chan string) {
	s := New(PolicyEqualShare, nil)
	t.Cleanup(s.Close)
	told := make(chan string, 4)
	s.SetContended(func(id string) {
		select {
		case told <- id:
		default: // under the scheduler's lock: never block
		}
	})
	o := newWords()
	s.SetOffers(o)
	mustAcquire(t, s, "a")(time.Microsecond, 0)
	return s, o, told
}

// TestParkedTurnTakenWithoutRequest: a client alone on the device finds
// the device parked at it when its turn ends, takes it with no request,
// and the scheduler counts the turn it took as its holder's.
func TestParkedTurnTakenWithoutRequest(t *testing.T) {
	s, o, _ := parkedAtA(t)
	for k := range 3 {
		gen, ok := o.take("a")
		if !ok {
			t.Fatalf("round %d: no offer parked at the client whose turn ended", k)
		}
		release, ok := s.Take("a", gen)
		if !ok {
			t.Fatalf("round %d: Take(%d) refused", k, gen)
		}
		if h := s.Stats().Holder; h != "a" {
			t.Fatalf("round %d: holder %q during the taken turn, want a", k, h)
		}
		if _, ok := o.take("a"); ok {
			t.Fatalf("round %d: a second offer out while the first is held", k)
		}
		release(time.Microsecond, 0)
	}
	c := s.Client("a")
	if c.Turns != 4 || c.Taken != 3 || c.Offers != 4 {
		t.Errorf("turns %d, taken %d, offers %d; want 4, 3, 4", c.Turns, c.Taken, c.Offers)
	}
	if _, ok := s.Take("a", 999); ok {
		t.Error("Take of an offer never made succeeded")
	}
}

// TestRevokedOfferGoesToTheRequest: an offer nobody took is withdrawn
// when another client asks, which is granted at once; the parked client
// then finds nothing to take.
func TestRevokedOfferGoesToTheRequest(t *testing.T) {
	s, o, _ := parkedAtA(t)
	if o.word("a").Load()&3 != 1 {
		t.Fatal("no offer parked at a")
	}
	release := mustAcquire(t, s, "b")
	if _, ok := o.take("a"); ok {
		t.Fatal("a took an offer revoked for b's turn")
	}
	release(time.Microsecond, 0)
	// b's turn ended while a was active: b does not run alone, and its
	// long launches would be sliced, so no turn is parked at it.
	if _, ok := o.take("b"); ok {
		t.Error("an offer parked at b while a is active")
	}
}

// TestTakenOfferMakesOthersWait: an offer taken before it could be
// revoked is a running turn of its holder: a request of another client
// waits for its release, the holder is told that it waits, and the turn
// is claimed later by the holder's Take.
func TestTakenOfferMakesOthersWait(t *testing.T) {
	s, o, told := parkedAtA(t)
	gen, ok := o.take("a")
	if !ok {
		t.Fatal("no offer parked at a")
	}
	granted := acquireLater(t, s, "b")
	if id := <-told; id != "a" {
		t.Fatalf("contended told %q, want a", id)
	}
	if !s.Unclaimed() {
		t.Fatal("the taken turn is not in the books before its holder claims it")
	}
	if h := s.Stats().Holder; h != "a" {
		t.Fatalf("holder %q, want a", h)
	}
	select {
	case <-granted:
		t.Fatal("b granted while a holds the turn it took")
	default:
	}
	release, ok := s.Take("a", gen)
	if !ok {
		t.Fatal("Take of the revoked, taken offer refused")
	}
	if s.Unclaimed() {
		t.Fatal("claimed turn still unclaimed")
	}
	release(time.Microsecond, 0)
	(<-granted)(time.Microsecond, 0)
}

// TestForfeitReleasesUnclaimedTurn: a holder that took an offer and died
// before claiming it leaves no turn behind.
func TestForfeitReleasesUnclaimedTurn(t *testing.T) {
	s, o, told := parkedAtA(t)
	if _, ok := o.take("a"); !ok {
		t.Fatal("no offer parked at a")
	}
	granted := acquireLater(t, s, "b")
	if id := <-told; id != "a" { // b's request revoked the offer
		t.Fatalf("contended told %q, want a", id)
	}
	if !s.Unclaimed() {
		t.Fatal("the taken turn is not in the books")
	}
	s.Forfeit("a")
	(<-granted)(time.Microsecond, 0)
	if s.Unclaimed() {
		t.Error("a forfeited turn is still in the books")
	}
}

// TestTakenTurnIsWatched: a turn taken from an offer is watched like a
// granted one: past its client's kernel limit it is reported.
func TestTakenTurnIsWatched(t *testing.T) {
	over := make(chan string, 1)
	s := New(PolicyEqualShare, func(id string, _ time.Duration) { over <- id })
	defer s.Close()
	s.SetLimit("a", time.Millisecond)
	o := newWords()
	s.SetOffers(o)
	mustAcquire(t, s, "a")(time.Microsecond, 0)
	gen, ok := o.take("a")
	if !ok {
		t.Fatal("no offer parked at a")
	}
	release, ok := s.Take("a", gen)
	if !ok {
		t.Fatal("Take refused")
	}
	if id := <-over; id != "a" {
		t.Errorf("overrun reported for %q", id)
	}
	release(0, 0)
}

// TestNoOffersWhileOff: SetOffering(false) revokes the offer out and
// parks none until it is turned on again.
func TestNoOffersWhileOff(t *testing.T) {
	s, o, _ := parkedAtA(t)
	s.SetOffering(false)
	if _, ok := o.take("a"); ok {
		t.Fatal("offer still out after SetOffering(false)")
	}
	mustAcquire(t, s, "a")(time.Microsecond, 0)
	if _, ok := o.take("a"); ok {
		t.Fatal("offer parked while offering is off")
	}
	s.SetOffering(true)
	if _, ok := o.take("a"); !ok {
		t.Fatal("no offer parked once offering is on again")
	}
}

// TestParkedTurnsProperty: whatever the order of requests, releases,
// takes, claims and forfeits of three clients, at most one turn holds the
// device, a parked offer is out only while the device is idle, and once
// every turn ended the device is idle and every request was served.
func TestParkedTurnsProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := New(PolicyEqualShare, nil)
		defer s.Close()
		o := newWords()
		s.SetOffers(o)
		ids := []string{"a", "b", "c"}
		grants := make(chan func(time.Duration, int), 64) // turns granted to requests
		var held []func(time.Duration, int)               // turns claimed
		type took struct {
			id  string
			gen uint64
		}
		var taken []took // offers taken, not yet claimed
		var requests sync.WaitGroup
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0:
				requests.Add(1)
				go func() {
					defer requests.Done()
					_, rel, err := s.Acquire(context.Background(), id, 0)
					if err != nil {
						rt.Error(err)
						return
					}
					grants <- rel
				}()
			case 1: // a turn ends
				if len(held) > 0 {
					held[0](time.Microsecond, 0)
					held = held[1:]
					break
				}
				select {
				case rel := <-grants:
					rel(time.Microsecond, 0)
				default:
				}
			case 2:
				if gen, ok := o.take(id); ok {
					taken = append(taken, took{id, gen})
				}
			case 3:
				if len(taken) > 0 {
					if rel, ok := s.Take(taken[0].id, taken[0].gen); ok {
						held = append(held, rel)
					}
					taken = taken[1:]
				}
			case 4:
				if len(taken) > 0 {
					s.Forfeit(taken[0].id)
					taken = taken[1:]
				}
			}
			s.mu.Lock()
			running := 0
			for r := range s.live {
				if r.state == stateRunning {
					running++
				}
			}
			out := s.parked != nil && s.parked.r == nil
			busy := s.core.busy
			s.mu.Unlock()
			if running > 1 {
				rt.Fatalf("%d turns hold the device", running)
			}
			if out && busy {
				rt.Fatal("an offer is out while the device is busy")
			}
		}
		// Claim what was taken, then end every turn until none is left.
		for _, tk := range taken {
			if rel, ok := s.Take(tk.id, tk.gen); ok {
				held = append(held, rel)
			}
		}
		for _, rel := range held {
			rel(time.Microsecond, 0)
		}
		done := make(chan struct{})
		go func() { requests.Wait(); close(done) }()
		for {
			select {
			case rel := <-grants:
				rel(time.Microsecond, 0)
				continue
			case <-done:
			}
			break
		}
		for len(grants) > 0 {
			(<-grants)(time.Microsecond, 0)
		}
		if s.Unclaimed() || s.Stats().Holder != "" {
			rt.Fatalf("device still held after every turn ended: %+v", s.Stats())
		}
	})
}

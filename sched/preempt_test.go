package sched

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fakeWorker plays the processes that hold turns: Preempt stops a client's
// process (or lets the device time-slice it), cont continues it; it counts
// both and knows which clients are stopped now.
type fakeWorker struct {
	how Preemption

	mu      sync.Mutex
	stopped map[string]bool
	stops   map[string]int
	conts   map[string]int
}

func newFakeWorker(how Preemption) *fakeWorker {
	return &fakeWorker{how: how, stopped: map[string]bool{}, stops: map[string]int{}, conts: map[string]int{}}
}

func (w *fakeWorker) preempt(id string) (Preemption, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.how != PreemptStopped {
		return w.how, nil
	}
	if w.stopped[id] {
		panic(fmt.Sprintf("client %s stopped twice", id))
	}
	w.stopped[id] = true
	w.stops[id]++
	return PreemptStopped, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.stopped[id] = false
		w.conts[id]++
	}
}

func (w *fakeWorker) counts(id string) (stops, conts int, stopped bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stops[id], w.conts[id], w.stopped[id]
}

// TestLongTurnPreemptedAndResumed: a client's turn that never ends by
// itself (a long kernel) does not keep others off the device once it ran
// its slice: a neighbour outside its group completes all its turns while
// the long turn is still held, the long turn is stopped at least once and
// continued as often as it was stopped by the time it is released (it is
// resumed, not lost), and both got service. Under every policy, any
// shares, a stopping or a time-slicing device. A neighbour in the long
// turn's own group (its process is stopped) is never granted while the
// long turn is stopped.
func TestLongTurnPreemptedAndResumed(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pol := rapid.SampledFrom(Policies).Draw(rt, "policy")
		how := rapid.SampledFrom([]Preemption{PreemptStopped, PreemptShared}).Draw(rt, "how")
		slice := time.Duration(rapid.IntRange(1, 4).Draw(rt, "slice_ms")) * time.Millisecond
		turns := rapid.IntRange(1, 12).Draw(rt, "neighbour_turns")
		sibling := rapid.Bool().Draw(rt, "sibling")
		w := newFakeWorker(how)
		s := New(pol, func(id string, ran time.Duration) { rt.Errorf("overrun of %s after %v: no limit was set", id, ran) })
		defer s.Close()
		s.SetPreempter(w.preempt)
		s.SetSlice("long", "domain-a", slice)
		if err := s.SetShare("long", uint32(rapid.IntRange(1, MaxShare).Draw(rt, "long_share"))); err != nil {
			rt.Fatal(err)
		}
		if err := s.SetShare("short", uint32(rapid.IntRange(1, MaxShare).Draw(rt, "short_share"))); err != nil {
			rt.Fatal(err)
		}
		s.SetSlice("short", "domain-b", slice)
		s.SetSlice("sib", "domain-a", slice)
		// Generous: preemption comes a slice after the neighbour asks.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		_, releaseLong, err := s.Acquire(ctx, "long", time.Hour)
		if err != nil {
			rt.Fatal(err)
		}
		for i := range turns {
			_, release, err := s.Acquire(ctx, "short", time.Microsecond)
			if err != nil {
				rt.Fatalf("neighbour's turn %d of %d behind a long turn: %v (long turn preempted %d times)", i+1, turns, err, s.Client("long").Preemptions)
			}
			release(time.Microsecond, 0)
		}
		sib := make(chan error, 1)
		if sibling {
			// The sibling's turn runs in the long turn's process: it is
			// never granted while the long turn is stopped, and (one turn
			// at a time) it is granted once the long turn ends.
			go func() {
				_, release, err := s.Acquire(ctx, "sib", time.Microsecond)
				if err == nil {
					if _, _, stopped := w.counts("long"); stopped {
						err = fmt.Errorf("a turn of the stopped process's group was granted")
					}
					release(time.Microsecond, 0)
				}
				sib <- err
			}()
		} else {
			sib <- nil
		}
		releaseLong(0, 0)
		if err := <-sib; err != nil {
			rt.Error(err)
		}

		long, short := s.Client("long"), s.Client("short")
		if long.Preemptions == 0 || long.Turns != 1 || long.DeviceNanos == 0 {
			rt.Errorf("long client = %+v, want 1 turn, preempted, charged", long)
		}
		if short.Turns != uint64(turns) {
			rt.Errorf("neighbour = %+v, want %d turns", short, turns)
		}
		if long.Stopped {
			rt.Errorf("long client still stopped after its release")
		}
		stops, conts, stopped := w.counts("long")
		if how == PreemptStopped && (stops == 0 || conts != stops || stopped) {
			rt.Errorf("long turn stopped %d times, continued %d times, stopped now %v: want every stop continued", stops, conts, stopped)
		}
		if st := s.Stats(); st.Holder != "" {
			rt.Errorf("Stats().Holder = %q after every turn ended", st.Holder)
		}
	})
}

// TestPreemptingOffContinues: turning preemption off (an upgrade in place,
// Close) continues a stopped turn at once and stops none after it; Wake
// continues one for its client.
func TestPreemptingOffContinues(t *testing.T) {
	for _, tt := range []struct {
		name string
		off  func(s *Scheduler)
	}{
		{"SetPreempting(false)", func(s *Scheduler) { s.SetPreempting(false) }},
		{"Wake", func(s *Scheduler) { s.Wake("long") }},
		{"Close", func(s *Scheduler) { s.Close() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorker(PreemptStopped)
			s := New(PolicyFixedShare, nil)
			defer s.Close()
			s.SetPreempter(w.preempt)
			s.SetSlice("long", "a", time.Millisecond)
			ctx := context.Background()
			_, releaseLong, err := s.Acquire(ctx, "long", 0)
			if err != nil {
				t.Fatal(err)
			}
			// The neighbour gets the device only by preempting the long
			// turn; it keeps it until the long turn was continued.
			_, release, err := s.Acquire(ctx, "short", 0)
			if err != nil {
				t.Fatal(err)
			}
			if stops, _, stopped := w.counts("long"); stops != 1 || !stopped {
				t.Fatalf("long turn stopped %d times, stopped now %v, want once, stopped", stops, stopped)
			}
			tt.off(s)
			if stops, conts, stopped := w.counts("long"); conts != stops || stopped {
				t.Errorf("after %s: long turn stopped %d times, continued %d, stopped now %v", tt.name, stops, conts, stopped)
			}
			release(0, 0)
			releaseLong(0, 0)
			if stops, conts, stopped := w.counts("long"); conts != stops || stopped {
				t.Errorf("at the end: long turn stopped %d times, continued %d, stopped now %v", stops, conts, stopped)
			}
		})
	}
}

// TestRunningTimeExcludesStopped: the kernel limit counts a turn's running
// time: the time it spent stopped by a preemption is not part of it.
func TestRunningTimeExcludesStopped(t *testing.T) {
	s := newSchedCore(PolicyFixedShare)
	c := s.client("long")
	r := &request{c: c, cost: time.Hour}
	if err := s.enqueue(r, simEpoch); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.grant(simEpoch); g != r {
		t.Fatalf("grant = %v, want the long request", g)
	}
	s.suspend(r, simEpoch.Add(5*time.Millisecond), true)
	if got := ranNow(r, simEpoch.Add(time.Hour)); got != 5*time.Millisecond {
		t.Errorf("ranNow while stopped = %v, want 5ms", got)
	}
	if g, _ := s.grant(simEpoch.Add(time.Second)); g != r || !g.resumed {
		t.Fatalf("grant after the stop = %v, want the long request resumed", g)
	}
	if got := ranNow(r, simEpoch.Add(time.Second+3*time.Millisecond)); got != 8*time.Millisecond {
		t.Errorf("ranNow after the resume = %v, want 8ms", got)
	}
	if holder := s.finish(r, 0, simEpoch.Add(time.Second+3*time.Millisecond)); !holder || c.devNanos != uint64(8*time.Millisecond) || c.turns != 1 {
		t.Errorf("finish = %v, charged %v over %d turns, want the holder, 8ms, 1 turn", holder, time.Duration(c.devNanos), c.turns)
	}
}

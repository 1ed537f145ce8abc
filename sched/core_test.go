package sched

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// simClock is the pure tests' time.
var simEpoch = time.Unix(1_700_000_000, 0)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		in      string
		want    Policy
		wantErr bool
	}{
		{"best-effort", PolicyBestEffort, false},
		{"equal-share", PolicyEqualShare, false},
		{"fixed-share", PolicyFixedShare, false},
		{"timeslice", PolicyTimeslice, false},
		{"", "", true},
		{"Fixed-Share", "", true},
		{"fifo", "", true},
	}
	for _, tt := range tests {
		got, err := ParsePolicy(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParsePolicy(%q) = %q, %v, want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrUnknownPolicy) {
			t.Errorf("ParsePolicy(%q) error %v does not wrap ErrUnknownPolicy", tt.in, err)
		}
	}
}

// sim drives a schedCore the way scheduler does, with simulated time: a
// granted turn lasts its request's cost.
type sim struct {
	s       *schedCore
	now     time.Time
	cs      []*client
	granted map[*client][]int // request numbers in grant order
	nextReq map[*client]int
	reqNum  map[*request]int
}

func newSim(p Policy, shares []uint32) *sim {
	m := &sim{s: newSchedCore(p), now: simEpoch, granted: map[*client][]int{}, nextReq: map[*client]int{}, reqNum: map[*request]int{}}
	for i, sh := range shares {
		c := m.s.client(fmt.Sprintf("c%d", i))
		c.share = sh
		m.cs = append(m.cs, c)
	}
	return m
}

func (m *sim) enqueue(c *client, cost time.Duration) error {
	r := &request{c: c, cost: cost}
	if err := m.s.enqueue(r, m.now); err != nil {
		return err
	}
	m.reqNum[r] = m.nextReq[c]
	m.nextReq[c]++
	return nil
}

// step grants the next turn (waiting out a timeslice reservation) and runs
// it for dev; it returns the client served, or nil if nothing waited.
func (m *sim) step(dev func(*request) time.Duration) *client {
	r, retry := m.s.grant(m.now)
	if r == nil && !retry.IsZero() {
		m.now = retry
		r, _ = m.s.grant(m.now)
	}
	if r == nil {
		return nil
	}
	m.granted[r.c] = append(m.granted[r.c], m.reqNum[r])
	d := dev(r)
	m.now = m.now.Add(d)
	m.s.charge(r.c, d, d, m.now)
	return r.c
}

// TestSchedCoreOrderAndBounds: under every policy, with clients enqueuing
// at random, each client's requests are granted in submission order,
// queues never exceed maxQueued, and the device never idles while work
// waits (past a timeslice reservation).
func TestSchedCoreOrderAndBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.SampledFrom(Policies).Draw(t, "policy")
		n := rapid.IntRange(1, 6).Draw(t, "clients")
		shares := rapid.SliceOfN(rapid.Uint32Range(1, 8), n, n).Draw(t, "shares")
		m := newSim(p, shares)
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for range steps {
			if rapid.Bool().Draw(t, "enqueue") {
				c := m.cs[rapid.IntRange(0, n-1).Draw(t, "who")]
				cost := time.Duration(rapid.Int64Range(0, int64(5*time.Millisecond)).Draw(t, "cost"))
				full := len(c.queue) == maxQueued
				if err := m.enqueue(c, cost); (err != nil) != full {
					t.Fatalf("enqueue with %d queued = %v", len(c.queue), err)
				}
				continue
			}
			pending := m.s.pending()
			served := m.step(func(r *request) time.Duration {
				return time.Duration(rapid.Int64Range(1, int64(3*time.Millisecond)).Draw(t, "dev"))
			})
			if pending != (served != nil) {
				t.Fatalf("pending %v but served %v", pending, served)
			}
			for _, c := range m.cs {
				if len(c.queue) > maxQueued {
					t.Fatalf("client %s has %d queued, bound %d", c.id, len(c.queue), maxQueued)
				}
			}
		}
		for c, got := range m.granted {
			for i, r := range got {
				if r != i {
					t.Fatalf("client %s granted requests %v, want submission order", c.id, got)
				}
			}
		}
	})
}

// TestSchedCoreFairShare: with every client always backlogged, the share
// policies keep each client's weighted device time within fairWindow plus
// the longest turn of every other's, and no client waits more than a
// bounded number of turns.
func TestSchedCoreFairShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.SampledFrom([]Policy{PolicyEqualShare, PolicyFixedShare}).Draw(t, "policy")
		n := rapid.IntRange(2, 6).Draw(t, "clients")
		shares := rapid.SliceOfN(rapid.Uint32Range(1, 4), n, n).Draw(t, "shares")
		minCost := time.Duration(rapid.Int64Range(int64(10*time.Microsecond), int64(time.Millisecond)).Draw(t, "min"))
		maxCost := minCost + time.Duration(rapid.Int64Range(0, int64(4*time.Millisecond)).Draw(t, "spread"))
		m := newSim(p, shares)
		for _, c := range m.cs {
			m.enqueue(c, 0)
		}
		last := make(map[*client]int)
		// Each other client can be served at most this many times while
		// one waits: it starts at most fairWindow+maxCost behind the
		// waiting one in weighted time, may run until fairWindow ahead,
		// and gains at least minCost/maxWeight per turn.
		bound := (n - 1) * (int(float64(2*fairWindow+maxCost)*4/float64(minCost)) + 2)
		for step := 1; step <= 400; step++ {
			c := m.step(func(r *request) time.Duration {
				return time.Duration(rapid.Int64Range(int64(minCost), int64(maxCost)).Draw(t, "dev"))
			})
			last[c] = step
			m.enqueue(c, time.Duration(rapid.Int64Range(0, int64(maxCost)).Draw(t, "next")))
			for _, o := range m.cs {
				if step-last[o] > bound {
					t.Fatalf("client %s waited %d turns, bound %d", o.id, step-last[o], bound)
				}
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, o := range m.cs {
				v := float64(o.devNanos) / m.s.weight(o)
				lo, hi = min(lo, v), max(hi, v)
			}
			if lag := hi - lo; lag > float64(fairWindow+maxCost) {
				t.Fatalf("step %d: weighted device time spread %.0f ns > bound %d", step, lag, fairWindow+maxCost)
			}
		}
	})
}

// TestSchedCoreRoundRobin: best-effort serves backlogged clients strictly
// in turn; timeslice lets the holder run until its slice ends and then
// moves on, so every client is served within n slices.
func TestSchedCoreRoundRobin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := rapid.SampledFrom([]Policy{PolicyBestEffort, PolicyTimeslice}).Draw(t, "policy")
		n := rapid.IntRange(2, 6).Draw(t, "clients")
		m := newSim(p, make([]uint32, n))
		for _, c := range m.cs {
			m.enqueue(c, 0)
		}
		var prev *client
		var sliceStart time.Time
		lastServed := make(map[*client]time.Time)
		for range 200 {
			start := m.now
			c := m.step(func(*request) time.Duration {
				return time.Duration(rapid.Int64Range(int64(time.Microsecond), int64(3*time.Millisecond/2)).Draw(t, "dev"))
			})
			m.enqueue(c, 0)
			switch p {
			case PolicyBestEffort:
				if prev != nil && c.seq != (prev.seq+1)%n {
					t.Fatalf("best-effort served %s after %s", c.id, prev.id)
				}
			case PolicyTimeslice:
				if c == prev && start.Sub(sliceStart) >= timeQuantum {
					t.Fatalf("%s kept the device %v into its slice", c.id, start.Sub(sliceStart))
				}
				if c != prev {
					if prev != nil && start.Sub(sliceStart) < timeQuantum {
						t.Fatalf("%s lost the device after %v of its slice", prev.id, start.Sub(sliceStart))
					}
					sliceStart = start
				}
				// A slice lasts at most quantum plus one turn.
				if l, ok := lastServed[c]; ok && start.Sub(l) > time.Duration(n)*(timeQuantum+3*time.Millisecond/2) {
					t.Fatalf("%s waited %v", c.id, start.Sub(l))
				}
			}
			lastServed[c] = m.now
			prev = c
		}
	})
}

// TestSchedCoreShortFirst: under the share policies, a client whose next
// request is short goes before an equally served one with a long request,
// and best-effort ignores lengths.
func TestSchedCoreShortFirst(t *testing.T) {
	tests := []struct {
		policy Policy
		want   string
	}{
		{PolicyEqualShare, "c1"},
		{PolicyFixedShare, "c1"},
		{PolicyBestEffort, "c0"},
		{PolicyTimeslice, "c0"},
	}
	for _, tt := range tests {
		m := newSim(tt.policy, []uint32{1, 1})
		m.enqueue(m.cs[0], 10*time.Millisecond)
		m.enqueue(m.cs[1], 50*time.Microsecond)
		r, _ := m.s.grant(m.now)
		if r == nil || r.c.id != tt.want {
			t.Errorf("%s: grant() = %v, want %s", tt.policy, r, tt.want)
		}
	}
}

// TestSchedCoreIdleCredit: a client that was idle does not bank credit
// that would let it monopolise the device when it comes back.
func TestSchedCoreIdleCredit(t *testing.T) {
	m := newSim(PolicyEqualShare, []uint32{1, 1})
	busy, idle := m.cs[0], m.cs[1]
	for range 50 {
		m.enqueue(busy, time.Millisecond)
		m.step(func(*request) time.Duration { return time.Millisecond })
	}
	m.enqueue(busy, time.Millisecond)
	m.enqueue(idle, time.Millisecond)
	run := 0
	for range 10 {
		c := m.step(func(*request) time.Duration { return time.Millisecond })
		m.enqueue(c, time.Millisecond)
		if c == idle {
			run++
		}
	}
	if run > 7 {
		t.Errorf("returning idle client got %d of 10 turns, want at most 7", run)
	}
}

func TestBudget(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		other  time.Duration // the other client's typical turn; <0: no other client active
		want   time.Duration
	}{
		{"alone", PolicyFixedShare, -1, 0},
		{"short neighbour", PolicyFixedShare, 50 * time.Microsecond, minSlice},
		{"medium neighbour", PolicyEqualShare, 2 * time.Millisecond, time.Millisecond},
		{"long neighbour", PolicyBestEffort, time.Second, maxSlice},
		{"baseline", PolicyTimeslice, 50 * time.Microsecond, timeQuantum},
	}
	for _, tt := range tests {
		m := newSim(tt.policy, []uint32{1, 1})
		if tt.other >= 0 {
			m.enqueue(m.cs[1], tt.other)
			m.step(func(*request) time.Duration { return tt.other })
			m.cs[1].seen = m.now
		}
		if got := m.s.budget(m.cs[0], m.now); got != tt.want {
			t.Errorf("%s: budget() = %v, want %v", tt.name, got, tt.want)
		}
	}
	// An instance idle for longer than activeWindow no longer counts.
	m := newSim(PolicyFixedShare, []uint32{1, 1})
	m.enqueue(m.cs[1], time.Millisecond)
	m.step(func(*request) time.Duration { return time.Millisecond })
	if got := m.s.budget(m.cs[0], m.now.Add(2*activeWindow)); got != 0 {
		t.Errorf("budget() after the neighbour went idle = %v, want 0", got)
	}
}

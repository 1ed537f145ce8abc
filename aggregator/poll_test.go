package aggregator

import (
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// pagedRing plays a worker's instance page (worker/child) around a test
// guest's instance: the guest publishes tails as the main process does
// (store the tail, then signal only if no loop polls), apply is what a
// signal or a poll runs.
type pagedRing struct {
	g       *testGuest
	mu      sync.Mutex
	signals int // publications that had to signal
	publish int
	applyMu sync.Mutex
	sh      *Shared
	// shadows: apply reads the guest's tail shadow first, as worker/child
	// does for a guest with a poll word (notify_test.go)
	shadows bool
}

func newPagedRing(g *testGuest, window time.Duration) *pagedRing {
	p := &pagedRing{g: g, sh: g.in.sh}
	g.in.SetPoll(p.apply)
	p.sh.PollWindow.Store(int64(window))
	return p
}

// apply applies a tail published in the page (worker/child's slot.apply).
func (p *pagedRing) apply() {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if p.shadows {
		if err := p.g.in.PollShadow(); err != nil {
			p.g.in.LatchError(abi.StatusOf(err))
		}
	}
	if p.sh.Rung.Swap(0) == 0 {
		return
	}
	if err := p.g.in.Doorbell(p.sh.Tail.Load()); err != nil {
		p.g.t.Errorf("Doorbell = %v", err)
	}
}

// run submits cmds through the page and waits for their completions.
func (p *pagedRing) run(cmds ...abi.Command) []abi.Completion {
	g := p.g
	g.t.Helper()
	first := g.tail
	for _, c := range cmds {
		var b [abi.CommandSize]byte
		c.Marshal(b[:])
		g.put(g.rb+uint64(g.tail%slots)*abi.CommandSize, b[:])
		g.tail++
	}
	p.sh.Tail.Store(g.tail)
	p.sh.Rung.Store(1)
	p.mu.Lock()
	p.publish++
	if !p.sh.Polling() {
		p.signals++
		p.mu.Unlock()
		go p.apply() // the bells goroutine, woken by the eventfd
	} else {
		p.mu.Unlock()
	}
	recs := make([]abi.Completion, len(cmds))
	for i := range cmds {
		recs[i] = g.wait(first + uint32(i))
	}
	return recs
}

// TestPolledRingNeedsNoSignals is the mechanism test of poll-then-block
// and of renewed turns (issue 42): while the instance's loop polls its
// page, commands the guest sends one at a time, each waited for, are
// found without a signal (a wake-up across processes in a worker) and
// run under one renewed device turn although each one's hold runs out
// (a turn is a round trip to the main process); a turn another instance
// wants goes back at once though the loop keeps polling; and when the
// window ends the loop stops polling, so the next command is signalled.
func TestPolledRingNeedsNoSignals(t *testing.T) {
	arb := newCountingArbiter()
	d := NewDevice(openGPU(t), arb, nil)
	t.Cleanup(func() { d.Close() })
	g := newTestGuest(t, d, "vm0", 64<<20)
	spinSetup(t, g, 64)
	before, _ := arb.idle(t)
	g.in.hold = time.Nanosecond // every command's hold runs out
	g.in.maxKeep = time.Hour
	p := newPagedRing(g, time.Hour)

	const n = 30
	for range n {
		g.mustOK(p.run(g.spin(64, 64, 1))...)
	}
	p.mu.Lock()
	signals := p.signals
	p.mu.Unlock()
	if signals != 1 {
		t.Errorf("%d commands sent one by one to a polling loop needed %d signals, want 1 (the first, to a loop that was blocked)", n, signals)
	}
	if got := g.in.sh.Polled.Load(); got != 0 {
		t.Errorf("Shared.Polled = %d: only the main process counts there", got)
	}
	arb.mu.Lock()
	turns := arb.turns - before
	arb.mu.Unlock()
	if turns != 1 {
		t.Errorf("%d commands, each past its hold, took %d device turns, want 1 (renewed)", n, turns)
	}
	if r := g.in.sh.Renewals.Load(); r == 0 {
		t.Error("no renewal counted")
	}

	// Another instance wants the device: the kept turn goes back while
	// the loop still polls, and the next command takes a new one.
	g.in.sh.TurnWanted.Store(1)
	if got, _ := arb.idle(t); got != before+1 {
		t.Fatalf("turns %d after the turn went back, want %d", got, before+1)
	}
	g.mustOK(p.run(g.spin(64, 64, 1))...)
	arb.mu.Lock()
	turns = arb.turns - before
	arb.mu.Unlock()
	if turns != 2 {
		t.Errorf("the command after the turn went back: %d turns in all, want 2", turns)
	}
	p.mu.Lock()
	signals = p.signals
	p.mu.Unlock()
	if signals != 1 {
		t.Errorf("the command after the turn went back needed a signal (%d in all): the loop stopped polling", signals)
	}

	// A short window: the loop stops polling when it ends, and says so.
	g.in.sh.PollWindow.Store(int64(time.Millisecond))
	g.mustOK(p.run(g.spin(64, 64, 1))...) // found by the hour's poll; the next poll is short
	waitFor(t, "the loop stops polling", func() bool { return g.in.sh.PollUntil.Load() == 0 })
	g.mustOK(p.run(g.spin(64, 64, 1))...)
	p.mu.Lock()
	signals = p.signals
	p.mu.Unlock()
	if signals != 2 {
		t.Errorf("a command after the window needed %d signals in all, want 2", signals)
	}
	if g.in.sh.PollNanos.Load() == 0 {
		t.Error("no polling time counted")
	}
}

// waitFor waits until cond holds (a hang guard of a minute, not a time
// assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	hang := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(hang) {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(time.Millisecond)
	}
}

package icdserver

import (
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// readSetup gives a connection a buffer of 64 bytes and an arena.
func readSetup(t *testing.T, fx *fixture) *client {
	t.Helper()
	cl, _ := fx.hello(t)
	cl.attach(1, 1<<16)
	cl.send(icdproto.OpBufferCreate, &icdproto.BufferCreate{Buffer: 1, Size: 64})
	return cl
}

// blockingRead is what an ICD's blocking clEnqueueReadBuffer sends: a
// Read and a Wait for its event; it returns the Wait's id.
func (cl *client) blockingReadSend(ev uint64) uint64 {
	cl.send(icdproto.OpRead, &icdproto.Transfer{Buffer: 1, Arena: 1, Length: 64, Event: ev})
	return cl.send(icdproto.OpWait, &icdproto.Wait{Events: []uint64{ev}})
}

func (cl *client) waitReply(ev uint64) {
	cl.t.Helper()
	_, body := cl.recv()
	r, ok := body.(*icdproto.WaitReply)
	if !ok || len(r.Events) != 1 || r.Events[0].Event != ev || r.Events[0].Status != 0 {
		cl.t.Fatalf("wait for event %d: %+v", ev, body)
	}
}

// TestBlockingReadNeedsNoReaper is the mechanism test of a blocking
// wait's own looks (issue 43): a read whose completion has landed by the
// time the wait looks is answered by the waiting connection, never by a
// reaper's timer (on the fake device a command completes at its doorbell).
func TestBlockingReadNeedsNoReaper(t *testing.T) {
	fx := newFixture(t)
	cl := readSetup(t, fx)
	before := fx.s.WaitStats()
	const n = 50
	for ev := uint64(1); ev <= n; ev++ {
		cl.blockingReadSend(ev)
		cl.waitReply(ev)
	}
	got := fx.s.WaitStats()
	if got.Polled-before.Polled != n || got.Missed != before.Missed || got.Slept != before.Slept {
		t.Fatalf("%d blocking reads: waits %+v then %+v; want all %d answered by the connection's own look", n, before, got, n)
	}
}

// TestLongWaitsStopLooking: waits that outlast the window twice in a row
// stop the looking (they sleep at once, costing a TCG guest no CPU), and
// every waitPollProbe-th wait looks again, which a short one turns back on.
func TestLongWaitsStopLooking(t *testing.T) {
	fx := newFixture(t)
	cl := readSetup(t, fx)
	fake := fx.fakes[0]
	ev := uint64(0)
	for miss := uint64(1); miss <= waitPollMisses; miss++ {
		ev++
		fake.Hold() // the read stays in flight: a long kernel before it
		cl.blockingReadSend(ev)
		waitStat(t, fx.s, func(w WaitStats) bool { return w.Missed == miss })
		fake.Release() // the reaper finds it
		cl.waitReply(ev)
	}
	for k := uint64(1); k < waitPollProbe; k++ {
		ev++
		cl.blockingReadSend(ev)
		cl.waitReply(ev)
		if w := fx.s.WaitStats(); w.Slept != k || w.Polled != 0 {
			t.Fatalf("wait %d after %d misses: %+v, want %d slept and none polled", k, waitPollMisses, w, k)
		}
	}
	ev++
	cl.blockingReadSend(ev) // the probe: short, so the looking comes back
	cl.waitReply(ev)
	ev++
	cl.blockingReadSend(ev)
	cl.waitReply(ev)
	if w := fx.s.WaitStats(); w.Polled != 2 || w.Slept != waitPollProbe-1 || w.Missed != waitPollMisses {
		t.Fatalf("after the probe: %+v, want 2 polled, %d slept, %d missed", w, waitPollProbe-1, waitPollMisses)
	}
}

// waitStat waits until the server's wait counters satisfy ok.
func waitStat(t *testing.T, s *Server, ok func(WaitStats) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok(s.WaitStats()) {
		if time.Now().After(deadline) {
			t.Fatalf("wait counters %+v: the expected change never came", s.WaitStats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSleepingWaitWakesAtInterrupt is the mechanism test of completion
// interrupts (Config.Interrupts, issue 43): with the reapers' timers
// turned off and waits that do not look for themselves, a blocking read
// whose command completes while its wait sleeps is answered, so the
// completion interrupt alone woke the reaper. Without it the wait would
// end at the server's Timeout with the event incomplete.
func TestSleepingWaitWakesAtInterrupt(t *testing.T) {
	defer func(min, max, window time.Duration) {
		reapMinSleep, reapMaxSleep, waitPollWindow = min, max, window
	}(reapMinSleep, reapMaxSleep, waitPollWindow)
	reapMinSleep, reapMaxSleep, waitPollWindow = time.Hour, time.Hour, 0

	fx := newFixture(t, drivertest.Config{INTx: true})
	cl := readSetup(t, fx)
	fake := fx.fakes[0]
	woken := 0
	for ev := uint64(1); ev <= 5; ev++ {
		fake.Hold() // in flight while the wait goes to sleep
		before := fx.s.WaitStats()
		_, armsBefore := fx.irqs[0].Count()
		cl.blockingReadSend(ev)
		waitStat(t, fx.s, func(w WaitStats) bool { return w.Missed+w.Slept > before.Missed+before.Slept })
		// The reaper arms for the sleeping wait, then reaps once more
		// before it sleeps itself: a completion in that last look is
		// reaped without the interrupt (which stays pending). Waiting
		// for the arm leaves only that look to race the release.
		waitFor(t, func() bool { _, a := fx.irqs[0].Count(); return a > armsBefore })
		fake.Release()
		cl.waitReply(ev)
		if fx.s.WaitStats().Interrupts > before.Interrupts {
			woken++
		}
	}
	// With the reapers' timers at an hour and no polling, every answer
	// above came from a reaper that either still looked or was woken by
	// the interrupt; a reaper that slept through one would have left
	// that read to the server's Timeout.
	if woken == 0 {
		t.Fatalf("5 reads answered, none by a reaper woken by an interrupt: %+v", fx.s.WaitStats())
	}
	if n, arms := fx.irqs[0].Count(); n < 5 || arms < 5 {
		t.Errorf("%d interrupts, %d arms for 5 completions that each came while a wait slept, want at least 5 of each", n, arms)
	}
}

// waitFor waits until ok holds.
func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("the expected change never came")
		}
		time.Sleep(time.Millisecond)
	}
}

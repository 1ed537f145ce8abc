package aggregator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// countingArbiter grants every turn at once and counts turns, releases
// and the device time it was told of.
type countingArbiter struct {
	mu       sync.Mutex
	turns    int
	released int
	dev      time.Duration
	changed  chan struct{} // closed and replaced at every release
}

func newCountingArbiter() *countingArbiter { return &countingArbiter{changed: make(chan struct{})} }

func (a *countingArbiter) Acquire(context.Context, string, time.Duration) (time.Duration, func(time.Duration, int), error) {
	a.mu.Lock()
	a.turns++
	a.mu.Unlock()
	var once sync.Once
	return 0, func(dev time.Duration, _ int) {
		once.Do(func() {
			a.mu.Lock()
			a.released++
			a.dev += dev
			close(a.changed)
			a.changed = make(chan struct{})
			a.mu.Unlock()
		})
	}, nil
}

// idle waits until every turn granted went back and returns the counts.
func (a *countingArbiter) idle(t *testing.T) (turns int, dev time.Duration) {
	t.Helper()
	hang := time.After(time.Minute) // a hang guard, not a time assertion
	for {
		a.mu.Lock()
		turns, released, dev, ch := a.turns, a.released, a.dev, a.changed
		a.mu.Unlock()
		if released == turns {
			return turns, dev
		}
		select {
		case <-ch:
		case <-hang:
			t.Fatalf("%d turns granted, %d given back", turns, released)
		}
	}
}

// TestManyCommandsPerTurn is the mechanism test of issue 32's saved
// round trips: commands the guest queued together run under one device
// turn (in a worker process each turn is a request and a grant across
// the process boundary), the turn goes back once the ring is empty, and
// the arbiter is told the device time of every command run under it.
// With holding off, or a hold too short for a second command, every
// command takes a turn of its own, as before.
func TestManyCommandsPerTurn(t *testing.T) {
	const n = 40
	for _, tt := range []struct {
		name  string
		hold  time.Duration
		turns int
	}{
		{"kept across the queue", time.Hour, 1},
		{"holding off", -1, n},
		{"hold spent after each command", time.Nanosecond, n},
	} {
		t.Run(tt.name, func(t *testing.T) {
			arb := newCountingArbiter()
			d := NewDevice(openGPU(t), arb, nil)
			t.Cleanup(func() { d.Close() })
			g := newTestGuest(t, d, "vm0", 64<<20)
			spinSetup(t, g, 64)
			before, beforeDev := arb.idle(t)
			beforeShared := g.in.sh.Turns.Load()
			g.in.hold = tt.hold // the worker is idle: it reads hold at its next command

			cmds := make([]abi.Command, n)
			for i := range cmds {
				cmds[i] = g.spin(64, 64, 1)
			}
			g.mustOK(g.run(cmds...)...)
			turns, dev := arb.idle(t)
			if got := turns - before; got != tt.turns {
				t.Errorf("%d launches queued together took %d device turns, want %d", n, got, tt.turns)
			}
			if got := g.in.sh.Turns.Load() - beforeShared; got != uint64(tt.turns) {
				t.Errorf("Shared.Turns counted %d turns, want %d", got, tt.turns)
			}
			if dev-beforeDev <= 0 {
				t.Errorf("the arbiter was told of %v device time for %d launches", dev-beforeDev, n)
			}
		})
	}
}

// TestKeptTurnGoesBackBeforeABuild: a build, which may take long and
// needs no device turn, never runs under a kept turn: the turn of the
// launches before it goes back first, and the launches after it take a
// new one.
func TestKeptTurnGoesBackBeforeABuild(t *testing.T) {
	arb := newCountingArbiter()
	d := NewDevice(openGPU(t), arb, nil)
	t.Cleanup(func() { d.Close() })
	g := newTestGuest(t, d, "vm0", 64<<20)
	spinSetup(t, g, 64)
	before, _ := arb.idle(t)
	g.in.hold = time.Hour
	build, _ := g.build(2, spinSource, 0)
	g.mustOK(g.run(g.spin(64, 64, 1), g.spin(64, 64, 1), build, g.spin(64, 64, 1))...)
	turns, _ := arb.idle(t)
	if got := turns - before; got != 2 {
		t.Errorf("launch, launch, build, launch took %d turns, want 2 (one before the build, one after)", got)
	}
}

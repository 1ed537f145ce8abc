package sched

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWatchdogReportsOverrun: a turn of a client with a limit that holds
// the device past it is reported once, with the client's id; a turn that
// ends in time, or of a client without a limit, is not.
func TestWatchdogReportsOverrun(t *testing.T) {
	over := make(chan string, 4)
	s := New(PolicyFixedShare, func(id string, held time.Duration) {
		if held <= 0 {
			t.Errorf("overrun of %s reported after %v", id, held)
		}
		over <- id
	})
	defer s.Close()
	s.SetLimit("slow", time.Millisecond)
	s.SetLimit("quick", time.Hour)
	ctx := context.Background()

	_, release, err := s.Acquire(ctx, "slow", 0)
	if err != nil {
		t.Fatal(err)
	}
	if id := <-over; id != "slow" {
		t.Errorf("overrun reported for %q, want slow", id)
	}
	release(0, 0)

	for _, id := range []string{"quick", "unlimited"} {
		_, release, err := s.Acquire(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		release(time.Microsecond, 0)
	}
	// The next turn of "slow" ends at once: its watchdog is stopped.
	_, release, err = s.Acquire(ctx, "slow", 0)
	if err != nil {
		t.Fatal(err)
	}
	release(0, 0)
	select {
	case id := <-over:
		t.Errorf("overrun reported for %q after turns that ended in time", id)
	default:
	}
}

// TestChargeClamped: a client is never charged more than the wall time it
// held the device, whatever device time it reports (a worker process is
// an untrusted peer), and a negative report is charged the wall time.
func TestChargeClamped(t *testing.T) {
	s := New(PolicyFixedShare, nil)
	defer s.Close()
	for _, dev := range []time.Duration{time.Hour, -time.Second} {
		_, release, err := s.Acquire(context.Background(), "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		release(dev, 0)
	}
	if got := s.Client("c"); got.DeviceNanos > got.HeldNanos || got.Turns != 2 {
		t.Errorf("Client = %+v, want device time <= held time over 2 turns", got)
	}
}

// TestAcquireAfterClose and a cancelled wait.
func TestAcquireAfterClose(t *testing.T) {
	s := New(PolicyBestEffort, nil)
	_, release, err := s.Acquire(context.Background(), "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Acquire(ctx, "b", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire(cancelled) = %v, want context.Canceled", err)
	}
	release(0, 0)
	release(0, 0) // a second release is ignored
	s.Close()
	if _, _, err := s.Acquire(context.Background(), "a", 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close = %v, want ErrClosed", err)
	}
	if err := s.SetShare("a", 0); !errors.Is(err, ErrBadShare) {
		t.Errorf("SetShare(0) = %v, want ErrBadShare", err)
	}
}

// TestContendedTellsTheHolder: the contention hook (issue 42: a worker's
// instance keeps its turn across commands until told) names the client
// holding the device when another request comes to wait, and a client
// granted a turn while others still wait; a turn taken on an idle device
// with nobody waiting is not reported.
func TestContendedTellsTheHolder(t *testing.T) {
	s := New(PolicyFixedShare, nil)
	defer s.Close()
	var mu sync.Mutex
	var told []string
	s.SetContended(func(id string) {
		mu.Lock()
		told = append(told, id)
		mu.Unlock()
	})
	said := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), told...)
	}
	ctx := context.Background()
	_, releaseA, err := s.Acquire(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := said(); len(got) != 0 {
		t.Fatalf("a turn on an idle device was reported contended: %v", got)
	}
	granted := make(chan func(time.Duration, int))
	for _, id := range []string{"b", "c"} {
		go func() {
			_, release, err := s.Acquire(ctx, id, 0)
			if err != nil {
				t.Error(err)
			}
			granted <- release
		}()
	}
	waitUntil(t, func() bool { return len(said()) == 2 })
	if got := said(); got[0] != "a" || got[1] != "a" {
		t.Fatalf("two requests behind a: told %v, want [a a]", got)
	}
	releaseA(0, 0)
	release := <-granted // b or c, while the other waits: told
	waitUntil(t, func() bool { return len(said()) == 3 })
	release(0, 0)
	release = <-granted // the last: nobody waits
	release(0, 0)
	if got := said(); len(got) != 3 || got[2] == "a" {
		t.Errorf("told %v, want a, a and the first granted of b and c", got)
	}
}

// waitUntil waits for cond (a hang guard of a minute, not a time
// assertion).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	hang := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(hang) {
			t.Fatal("condition not met after a minute")
		}
		time.Sleep(time.Millisecond)
	}
}

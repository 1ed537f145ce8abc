package driver_test

import (
	"errors"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// waitFor polls cond (a fake's state: nothing to block on) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestInterruptsWakeEverySubscriber: a completion raises the line once it
// was armed, and each subscriber (a reaper per device context) is woken;
// completions while it is not armed raise nothing.
func TestInterruptsWakeEverySubscriber(t *testing.T) {
	d, f := open(t, drivertest.Config{INTx: true}, driver.Options{})
	irq, err := driver.NewInterrupts(d, f.Line(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, stopA := irq.Subscribe()
	b, stopB := irq.Subscribe()
	defer stopB()
	complete := func() {
		t.Helper()
		f.Hold()
		if _, err := d.CreateBuffer(64); err != nil {
			t.Fatal(err)
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Release() // the completion lands
	}
	complete() // not armed: no interrupt
	if n, arms := irq.Count(); n != 0 || arms != 0 {
		t.Fatalf("before any Arm: %d interrupts, %d arms, want none", n, arms)
	}
	for round := uint64(1); round <= 3; round++ {
		if !irq.Arm() {
			t.Fatalf("round %d: Arm() = false, want true (disarmed by the last interrupt)", round)
		}
		if irq.Arm() {
			t.Fatalf("round %d: second Arm() = true, want false (armed already)", round)
		}
		if v := f.Read32(abi.RegIntEnable); v != abi.IntCompletion {
			t.Fatalf("round %d: RegIntEnable = %#x, want the completion cause", round, v)
		}
		complete()
		for i, c := range []<-chan struct{}{a, b} {
			select {
			case <-c:
			case <-time.After(time.Minute):
				t.Fatalf("round %d: subscriber %d not woken", round, i)
			}
		}
		if n, arms := irq.Count(); n != round || arms != round {
			t.Fatalf("round %d: %d interrupts, %d arms", round, n, arms)
		}
	}
	stopA()
	if err := irq.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if v := f.Read32(abi.RegIntEnable); v != 0 {
		t.Errorf("RegIntEnable = %#x after Close, want 0", v)
	}
}

// TestInterruptsRearmAfterReset: a reset (Reopen after a lost device, or
// a migration) clears RegIntEnable; once an Await ends quiet, the next Arm
// enables the cause again.
func TestInterruptsRearmAfterReset(t *testing.T) {
	defer driver.SetIRQRearm(5 * time.Millisecond)()
	d, f := open(t, drivertest.Config{INTx: true}, driver.Options{})
	irq, err := driver.NewInterrupts(d, f.Line(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer irq.Close()
	irq.Arm()
	f.Lose()
	if err := d.Reopen(); err != nil {
		t.Fatal(err)
	}
	if v := f.Read32(abi.RegIntEnable); v != 0 {
		t.Fatalf("RegIntEnable = %#x after the reset, want 0", v)
	}
	waitFor(t, "an Arm that enables the cause again", func() bool {
		irq.Arm()
		return f.Read32(abi.RegIntEnable) == abi.IntCompletion
	})
}

// TestInterruptsNeedINTx: a device without FeatureINTx is refused with
// ErrNoINTx, and the line is closed.
func TestInterruptsNeedINTx(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{})
	line := f.Line()
	if _, err := driver.NewInterrupts(d, line, nil); !errors.Is(err, driver.ErrNoINTx) {
		t.Fatalf("NewInterrupts without INTx = %v, want ErrNoINTx", err)
	}
	if _, err := line.Await(time.Now().Add(time.Minute)); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Await on the refused line = %v, want ErrClosed (closed)", err)
	}
}

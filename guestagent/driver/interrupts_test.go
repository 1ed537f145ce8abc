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

// TestInterruptsWakeEverySubscriber: a completion raises the line, and
// each subscriber (a reaper per device context) is woken after the cause
// was cleared for the next one.
func TestInterruptsWakeEverySubscriber(t *testing.T) {
	d, f := open(t, drivertest.Config{INTx: true}, driver.Options{})
	irq, err := driver.NewInterrupts(d, f.Line(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, stopA := irq.Subscribe()
	b, stopB := irq.Subscribe()
	defer stopB()
	waitFor(t, "completion cause enabled", func() bool { return f.Read32(abi.RegIntEnable) == abi.IntCompletion })
	for round := uint64(1); round <= 3; round++ {
		f.Hold()
		if _, err := d.CreateBuffer(64); err != nil {
			t.Fatal(err)
		}
		if err := d.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Release() // the completion lands: the line rises
		waitFor(t, "interrupt counted", func() bool { return irq.Count() >= round })
		waitFor(t, "cause cleared", func() bool { return f.Read32(abi.RegIntStatus) == 0 })
		for i, c := range []<-chan struct{}{a, b} {
			select {
			case <-c:
			case <-time.After(time.Minute):
				t.Fatalf("round %d: subscriber %d not woken", round, i)
			}
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
// a migration) clears RegIntEnable; Interrupts enables the cause again
// when its wait ends without an interrupt.
func TestInterruptsRearmAfterReset(t *testing.T) {
	defer driver.SetIRQRearm(5 * time.Millisecond)()
	d, f := open(t, drivertest.Config{INTx: true}, driver.Options{})
	irq, err := driver.NewInterrupts(d, f.Line(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer irq.Close()
	waitFor(t, "completion cause enabled", func() bool { return f.Read32(abi.RegIntEnable) == abi.IntCompletion })
	f.Lose()
	if err := d.Reopen(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "completion cause enabled again after the reset", func() bool { return f.Read32(abi.RegIntEnable) == abi.IntCompletion })
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

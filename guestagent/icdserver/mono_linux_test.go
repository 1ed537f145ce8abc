package icdserver

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestMonoNowIsClockMonotonic: event times are CLOCK_MONOTONIC, the ICD's
// clock for its own stamps, although monoNow makes no system call: a
// reading lies between two clock_gettime calls around it, give or take
// the slack of the offset taken at start.
func TestMonoNowIsClockMonotonic(t *testing.T) {
	slack := int64(monoBase.slack)
	for range 1000 {
		var a, b unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &a); err != nil {
			t.Fatal(err)
		}
		m := monoNow()
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &b); err != nil {
			t.Fatal(err)
		}
		if m < a.Nano()-slack || m > b.Nano()+slack {
			t.Fatalf("monoNow() = %d, outside CLOCK_MONOTONIC's [%d, %d] by more than the slack %d ns", m, a.Nano(), b.Nano(), slack)
		}
	}
}

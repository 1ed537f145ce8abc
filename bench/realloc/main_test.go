package main

import (
	"context"
	"strings"
	"testing"
)

// TestRunRejectsBadFlags: bad settings fail before any vgpud starts.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-seconds", "0"}, {"-bin", "0s"}, {"-frame", "10"}, {"-work", "0"}, {"-working-set", "1"},
		{"-working-set", "268435456"}, {"-preferred", "1"}, {"-modes", "transparent,bogus"}, {"-nosuchflag"},
	} {
		if err := run(context.Background(), args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil error", args)
		}
	}
}

// TestRunTiny runs both modes briefly: each frame is checked against the
// CPU across both reallocations, so a move that lost or corrupted the
// working set, or a program that did not resume, fails here.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a vgpud with workers on two devices")
	}
	var out strings.Builder
	args := []string{"-seconds", "4", "-bin", "1s", "-frame", "4096", "-work", "4", "-working-set", "1048576", "-preferred", "4194304"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"transparent: throughput over time", "cooperative: throughput over time", "STOP -> device 1 small", "after move 2"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

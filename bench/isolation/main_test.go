package main

import (
	"context"
	"strings"
	"testing"
)

// TestRunRejectsBadFlags: bad settings fail before any vgpud starts.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-ops", "0"}, {"-block", "0"}, {"-runs", "0"}, {"-n", "0"}, {"-reps", "0"},
		{"-sections", "command,bogus"}, {"-nosuchflag"},
	} {
		if err := run(context.Background(), args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil error", args)
		}
	}
}

// TestRunTiny runs both tables at a tiny size: both modes serve every
// command and the matmul job checks its products, so a mode that lost or
// corrupted work fails here.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two vgpuds and a worker process")
	}
	var out strings.Builder
	args := []string{"-ops", "4", "-block", "2", "-runs", "1", "-n", "32", "-reps", "2"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"Per-command cost", "nop (doorbell, completion)", "launch of 1 item", "write + read 4 KiB", "matmul job", "in-process", "worker"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

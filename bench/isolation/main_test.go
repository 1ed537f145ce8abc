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
// command and the matmul job checks its products in both modes and on the
// direct baseline, so a mode (or a baseline) that lost or corrupted work
// fails here. The matmul table must show the direct row and the ratios to
// it.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two vgpuds and a worker process")
	}
	var out strings.Builder
	args := []string{"-ops", "4", "-block", "2", "-runs", "1", "-n", "32", "-reps", "2"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"Per-command cost", "nop (doorbell, completion)", "launch of 1 item", "write + read 4 KiB", "matmul job", "in-process", "worker",
		"matmul also:   direct", "vs direct", "vs in-process", "worker/executor / direct", "worker/kernels / direct", "in-process / direct",
		"worker/executor / in-process", "worker/executor / worker/kernels", "worker/executor / worker/kernels paired"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkMatmulRows(t, out.String())
}

// TestRunMatmulOnly: -sections matmul prints the matmul table alone (the
// quick check on a GPU), with its direct baseline.
func TestRunMatmulOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two vgpuds and a worker process")
	}
	var out strings.Builder
	args := []string{"-sections", "matmul", "-runs", "1", "-n", "32", "-reps", "1"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "Per-command cost") {
		t.Errorf("-sections matmul printed the per-command table:\n%s", out.String())
	}
	checkMatmulRows(t, out.String())
}

// checkMatmulRows checks that the matmul table has a row per mode, direct
// first, and that direct's ratio to itself is 1.
func checkMatmulRows(t *testing.T, out string) {
	t.Helper()
	var rows []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "mode" && strings.Contains(line, "vs direct"):
			in = true
		case in && len(f) == 0 && len(rows) > 0:
			in = false
		case in && len(f) > 0:
			rows = append(rows, line)
		}
	}
	names := []string{"direct", "in-process", "worker/kernels", "worker/executor"}
	if len(rows) != len(names) {
		t.Fatalf("matmul table has %d rows, want %d %v:\n%s", len(rows), len(names), names, out)
	}
	for i, name := range names {
		f := strings.Fields(rows[i])
		if f[0] != name {
			t.Errorf("row %d is %q, want %q", i, f[0], name)
		}
		// mode total per-matmul kernel vs-direct vs-in-process totals
		if len(f) != 7 {
			t.Errorf("row %q: %d columns, want 7", rows[i], len(f))
			continue
		}
		if i == 0 && (f[4] != "1.000x" || f[5] != "-") {
			t.Errorf("direct row %q: want vs direct 1.000x and no vs in-process", rows[i])
		}
		if i > 0 && (!strings.HasSuffix(f[4], "x") || !strings.HasSuffix(f[5], "x")) {
			t.Errorf("row %q: want both ratios", rows[i])
		}
	}
}

package main

import (
	"context"
	"strings"
	"testing"
)

// TestRunTiny runs the benchmark's code path (every kernel built and
// launched with reuse off and on, results compared) with the fewest jobs;
// it checks the table's shape, never timings.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("builds six programs on the OpenCL device")
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"-jobs", "2", "-redund", "0,100", "-only", "mmul"}, &out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{"mmul", "0%", "100%", "on/off"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-jobs", "0"}, {"-redund", "150"}, {"-only", "nope"}} {
		if err := run(context.Background(), args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil error", args)
		}
	}
}

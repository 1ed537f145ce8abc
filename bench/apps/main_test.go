package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/guestagent/image/imagetest"
)

// TestRunRejectsBadFlags: bad settings fail before anything starts.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-sections", "bogus"}, {"-n", "0"}, {"-n", "100", "-local", "16"}, {"-reps", "0"}, {"-runs", "0"}, {"-nosuchflag"},
	} {
		if err := run(context.Background(), args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil error", args)
		}
	}
}

// TestRunTiny runs the job section with a tiny job: cljob on the host's
// PoCL and through the ICD in a guest, vgpu-bench in a guest; every run's
// result is checked against the CPU by the programs themselves.
func TestRunTiny(t *testing.T) {
	imagetest.RequireApps(t)
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	args := []string{"-sections", "job", "-n", "64", "-reps", "2", "-local", "8", "-runs", "1"}
	if err := run(t.Context(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"host: cljob on PoCL directly", "guest: vgpu-bench, Go driver library", "guest: cljob through the ICD + vgpu-icdd"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

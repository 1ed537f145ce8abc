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

// TestClpeakFigures parses Debian clpeak's output: sectioned figures,
// names with a hyphen, the kernel latency with its unit, and none of the
// device's own lines.
func TestClpeakFigures(t *testing.T) {
	out := `Platform: vgpud
  Device: pthread-skylake-avx512-AMD EPYC
    Driver version  : 1.4 (Linux x64)
    Compute units   : 2
    Clock frequency : 2096 MHz

    Global memory bandwidth (GBPS)
      float   : 9.44
      float16 : 30.63

    Transfer bandwidth (GBPS)
      enqueueWriteBuffer              : 0.15
      enqueueReadBuffer non-blocking  : 0.20
      enqueueUnmap(after write)       : 0.15

    Kernel launch latency : 16.17 us
`
	keys, vals := clpeakFigures(out)
	want := map[string]float64{
		"Global memory bandwidth (GBPS): float":                     9.44,
		"Global memory bandwidth (GBPS): float16":                   30.63,
		"Transfer bandwidth (GBPS): enqueueWriteBuffer":             0.15,
		"Transfer bandwidth (GBPS): enqueueReadBuffer non-blocking": 0.20,
		"Transfer bandwidth (GBPS): enqueueUnmap(after write)":      0.15,
		"Kernel launch latency (us)":                                16.17,
	}
	if len(keys) != len(want) {
		t.Errorf("keys %q, want %d of them", keys, len(want))
	}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, vals[k], v, vals)
		}
	}
}

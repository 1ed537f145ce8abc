package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

// TestRunTiny runs every section with tiny windows and kernels: the code
// paths, not the figures.
func TestRunTiny(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-window", "20ms", "-short", "50us", "-medium", "100us", "-long", "500us"}, &out)
	if err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	for _, want := range []string{"Aggregate throughput", "Fairness", "Interference", "fixed-share", "timeslice", "memory-copy guest", "Jain"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-sections", "bogus"}, {"-window", "1ms"}, {"-short", "1us"}, {"extra"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", args)
		}
	}
	c, err := parseFlags([]string{"-sections", "fairness,fairness"}, io.Discard)
	if err != nil || len(c.sections) != 1 {
		t.Errorf("parseFlags(fairness twice) = %+v, %v", c, err)
	}
}

func TestJain(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{1, 1}, 1},
		{[]float64{1, 0}, 0.5},
		{[]float64{3, 1}, 0.8},
		{[]float64{0, 0}, 0},
	}
	for _, tt := range tests {
		if got := jain(tt.xs); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("jain(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
}

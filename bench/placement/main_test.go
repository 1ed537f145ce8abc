package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/interference/interferencetest"
)

func TestRunSynthetic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ds.json")
	if err := interferencetest.ShortLong().Save(path); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"-dataset", path, "-eval", path, "-runs", "5", "-hosts", "5", "-trees", "10", "-cost=false"}, &out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	for _, want := range []string{"model accuracy", "mean of the training folds", "forest", "linear", "Spearman",
		"simulated cluster", "round-robin", "oracle (the training measurement)", "oracle (the judging measurement)",
		"forest (select), out-of-fold", "forest (select), trained on all pairs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestMeanBaseline: the baseline of a constant overhead is exact.
func TestMeanBaseline(t *testing.T) {
	d := interferencetest.ShortLong()
	for i := range d.Pairs {
		d.Pairs[i].Overhead = 0.5
	}
	if mse, err := meanBaseline(d, 5, 1); err != nil || mse != 0 {
		t.Errorf("meanBaseline(constant) = %v, %v; want 0", mse, err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-folds", "1"}, {"-runs", "0"}, {"-per-device", "1"}, {"-trees", "0"}, {"extra"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", args)
		}
	}
}

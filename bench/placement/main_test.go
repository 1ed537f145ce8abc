package main

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/interference"
)

// synthetic: short-kernel workloads suffer beside long-kernel ones.
func synthetic() *interference.Dataset {
	d := &interference.Dataset{Version: interference.DatasetVersion, Device: "synthetic", Measured: "test"}
	for i := range 6 {
		f := interference.Features{DeviceUtil: 0.1 * float64(i+1), KernelMeanMs: 0.05 * float64(i+1), LaunchesPerSec: 1000}
		if i >= 3 {
			f.KernelMeanMs, f.LongKernelMeanMs, f.LongShortRatio = 10*float64(i), 10*float64(i), 1
		}
		d.Workloads = append(d.Workloads, interference.Workload{Name: fmt.Sprintf("w%d", i), Features: f, AloneSec: 0.01})
	}
	for _, v := range d.Workloads {
		for _, a := range d.Workloads {
			o := 0.1
			if v.Features.KernelMeanMs < 1 && a.Features.KernelMeanMs >= 1 {
				o = 3
			}
			d.Pairs = append(d.Pairs, interference.Pair{Victim: v.Name, Aggressor: a.Name, Overhead: o})
		}
	}
	return d
}

func TestRunSynthetic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ds.json")
	if err := synthetic().Save(path); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"-dataset", path, "-runs", "5", "-hosts", "5", "-trees", "10", "-cost=false"}, &out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	for _, want := range []string{"model accuracy", "mean of the training folds", "forest", "linear", "Spearman",
		"simulated cluster", "round-robin", "oracle (measured)", "forest (select)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestMeanBaseline: the baseline of a constant overhead is exact.
func TestMeanBaseline(t *testing.T) {
	d := synthetic()
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

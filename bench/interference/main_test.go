package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

// TestRunTiny measures two workloads with a tiny window: the dataset is
// written, valid, and has every ordered pair; the figures are not
// checked (they are measurements).
func TestRunTiny(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ds.json")
	var out bytes.Buffer
	err := run(context.Background(), []string{"-workloads", "short-kernel,copy-heavy", "-window", "50ms", "-out", path, "-measured", "test"},
		&out, io.Discard)
	if err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	d, err := interference.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Workloads) != 2 || len(d.Pairs) != 4 || d.Measured != "test" {
		t.Fatalf("dataset: %d workloads, %d pairs, measured %q; want 2, 4, test", len(d.Workloads), len(d.Pairs), d.Measured)
	}
	for _, p := range d.Pairs {
		if math.IsNaN(p.Overhead) || math.IsInf(p.Overhead, 0) {
			t.Errorf("pair %+v", p)
		}
	}
	short, _ := d.Workload("short-kernel")
	if short.Features.KernelMeanMs <= 0 || short.Features.LaunchesPerSec <= 0 || short.Features.VCPUs != 1 || short.AloneSec <= 0 {
		t.Errorf("short-kernel measured alone: %+v", short)
	}
	if cp, _ := d.Workload("copy-heavy"); cp.Features.ToDevMBps <= 0 || cp.Features.FromDevMBps <= 0 {
		t.Errorf("copy-heavy measured alone: %+v", cp)
	}
	if !strings.Contains(out.String(), "victim \\ aggressor") {
		t.Errorf("no matrix printed:\n%s", out.String())
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-window", "1ms"}, {"-reps", "0"}, {"-workloads", "nosuch"}, {"-out", ""}, {"extra"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", args)
		}
	}
	c, err := parseFlags([]string{"-workloads", "lud, lud,mixed"}, io.Discard)
	if err != nil || len(c.workloads) != 2 {
		t.Errorf("parseFlags(lud twice) = %+v, %v", c, err)
	}
	if len(workloads()) < 10 {
		t.Errorf("%d workload types, want at least 10", len(workloads()))
	}
}

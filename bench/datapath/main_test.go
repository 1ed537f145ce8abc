package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/guestagent/job"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

// TestRunNoQEMU runs both sections with tiny sizes on the real OpenCL
// device and harness, without guests.
func TestRunNoQEMU(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-qemu=false", "-n", "32", "-reps", "2", "-runs", "2", "-harness-mmio-n", "20"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run(%q) = %v\n%s", args, err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"host CPUs:", "OpenCL device:", "QEMU:          not used",
		"MMIO cost:", "vGPU via harness (host process, no QEMU)",
		"Transport cost:", "floor: Unix socket round trip", "mpqemu: harness over the instance socket",
		"vfio-user: REGION_WRITE/READ", "vfio-user: kick on the ioeventfd", "xen: ioreq round trip (fake hypervisor)",
		"Virtualization overhead: 32 x 32 float matmul x 2",
		hostRow, "harness + driver library (host process)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("run(%q) output lacks %q:\n%s", args, want, got)
		}
	}
	if strings.Contains(got, "edu, emulated") || strings.Contains(got, "QEMU guest via") {
		t.Errorf("run(%q) printed guest rows without QEMU:\n%s", args, got)
	}
}

func TestRunSections(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-qemu=false", "-sections", "matmul", "-n", "16", "-reps", "1", "-runs", "1"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run(%q) = %v", args, err)
	}
	if strings.Contains(out.String(), "MMIO cost") || !strings.Contains(out.String(), "Virtualization overhead") {
		t.Errorf("run(%q) printed the wrong sections:\n%s", args, out.String())
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-sections", "mmio,gpu"},
		{"-n", "30"},
		{"-reps", "0"},
		{"-harness-mmio-n", "0"},
		{"-runs", "0"},
		{"-guest-mmio-n", "-1"},
		{"extra"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) = nil error, want one", args)
		}
	}
	c, err := parseFlags([]string{"-sections", "matmul,mmio,matmul"}, &bytes.Buffer{})
	if err != nil || strings.Join(c.sections, ",") != "matmul,mmio" {
		t.Errorf("parseFlags(-sections matmul,mmio,matmul) = %v, %v, want [matmul mmio]", c.sections, err)
	}
}

func TestParseMMIO(t *testing.T) {
	line := func(dev, op string, n int, ns float64) json.RawMessage {
		b, err := json.Marshal(mmioLine{Device: dev, Op: op, N: n, NSPerOp: ns})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := []json.RawMessage{
		line(eduID, "write", 10, 600), line(eduID, "read", 10, 130),
		line(vgpuID, "write", 10, 70000), line(vgpuID, "read", 10, 38000),
	}
	edu, proxy, err := parseMMIO(good, 10)
	if err != nil || edu != (mmioCost{600, 130}) || proxy != (mmioCost{70000, 38000}) {
		t.Errorf("parseMMIO(good) = %v, %v, %v, want {600 130}, {70000 38000}, nil", edu, proxy, err)
	}
	for name, raw := range map[string][]json.RawMessage{
		"missing read": good[:3],
		"wrong n":      {good[0], good[1], good[2], line(vgpuID, "read", 9, 1)},
		"zero time":    {good[0], good[1], good[2], line(vgpuID, "read", 10, 0)},
		"other device": {good[0], good[1], good[2], line("8086:1237", "read", 10, 1)},
		"other op":     {good[0], good[1], good[2], line(vgpuID, "rmw", 10, 1)},
		"not json":     {good[0], json.RawMessage("{")},
	} {
		if _, _, err := parseMMIO(raw, 10); err == nil {
			t.Errorf("parseMMIO(%s) = nil error, want one", name)
		}
	}
}

func TestMedianSpread(t *testing.T) {
	runs := []job.Result{{TotalNS: 3e6, SetupNS: 3}, {TotalNS: 1e6, SetupNS: 1}, {TotalNS: 2e6, SetupNS: 2}, {TotalNS: 9e6, SetupNS: 9}}
	tests := []struct {
		runs       []job.Result
		wantSetup  int64
		wantSpread string
	}{
		{runs[:1], 3, missing},
		{runs[:3], 2, "1-3 ms"},
		{runs, 2, "1-9 ms"}, // even count: the lower middle
	}
	for _, tt := range tests {
		if got := median(tt.runs); got.SetupNS != tt.wantSetup {
			t.Errorf("median(%d runs) = run %d, want run %d", len(tt.runs), got.SetupNS, tt.wantSetup)
		}
		if got := spread(tt.runs); got != tt.wantSpread {
			t.Errorf("spread(%d runs) = %q, want %q", len(tt.runs), got, tt.wantSpread)
		}
	}
	if got := median(nil); got != (job.Result{}) {
		t.Errorf("median(nil) = %+v, want zero", got)
	}
}

func TestParseBench(t *testing.T) {
	s := job.Spec{N: 32, Reps: 2, Local: 16}
	ok := func(total int64) json.RawMessage {
		b, err := json.Marshal(job.Result{N: 32, Reps: 2, Checked: job.Checks, TotalNS: total})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	got, err := parseBench([]json.RawMessage{ok(5), ok(7)}, s)
	if err != nil || len(got) != 2 || got[1].TotalNS != 7 {
		t.Errorf("parseBench(two good lines) = %+v, %v, want 2 results", got, err)
	}
	for name, raw := range map[string]json.RawMessage{
		"other size":  json.RawMessage(`{"n":64,"iterations":2,"checked":32,"total_ns":5}`),
		"not checked": json.RawMessage(`{"n":32,"iterations":2,"checked":3,"total_ns":5}`),
		"no time":     json.RawMessage(`{"n":32,"iterations":2,"checked":32,"total_ns":0}`),
		"not json":    json.RawMessage(`{`),
	} {
		if _, err := parseBench([]json.RawMessage{ok(5), raw}, s); err == nil {
			t.Errorf("parseBench(%s) = nil error, want one", name)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestRunRejectsBadFlags: bad settings fail before any vgpud starts.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-ops", "0"}, {"-block", "0"}, {"-runs", "0"}, {"-n", "0"}, {"-reps", "0"},
		{"-sections", "command,bogus"}, {"-nosuchflag"},
		{"-bwreps", "0"}, {"-bwsizes", "0"}, {"-bwsizes", "4X"}, {"-bwsizes", "4K,,1M"}, {"-bwsizes", "-1M"},
	} {
		if err := run(context.Background(), args, &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil error", args)
		}
	}
}

// TestRunTiny runs every table at a tiny size: every mode serves every
// command (worker/context's on a device context) and the matmul job
// checks its products in every mode and on the direct baseline, so a mode
// (or a baseline) that lost or corrupted work fails here. The matmul
// table must show the direct row and the ratios to it, the command table
// the context's paired ratio, and the context table both rings.
func TestRunTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four vgpuds and their worker and executor processes")
	}
	var out strings.Builder
	args := []string{"-ops", "4", "-block", "2", "-runs", "1", "-n", "32", "-reps", "2"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"Per-command cost", "nop (doorbell, completion)", "launch of 1 item", "write + read 4 KiB", "matmul job", "in-process", "worker",
		"matmul also:   direct", "vs direct", "vs in-process", "worker/executor / direct", "worker/kernels / direct", "in-process / direct",
		"worker/executor / in-process", "worker/executor / worker/kernels", "worker/executor / worker/kernels paired",
		"worker/context", "worker/context / worker/executor paired", "worker/context / worker/executor:", "worker/context / direct",
		"Context creation"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkMatmulRows(t, out.String())
	checkContextRows(t, out.String(), 1)
}

// TestRunContextOnly: -sections context prints the context table alone,
// from worker/context's vgpud only, with a row per ring.
func TestRunContextOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a vgpud and worker and executor processes")
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"-sections", "context", "-runs", "2"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, no := range []string{"Per-command cost", "matmul job"} {
		if strings.Contains(out.String(), no) {
			t.Errorf("-sections context printed %q:\n%s", no, out.String())
		}
	}
	checkContextRows(t, out.String(), 2)
}

// checkContextRows checks that the context table has the device
// context's row and the default ring's, each with positive times, and
// says how many repetitions it ran.
func checkContextRows(t *testing.T, out string, runs int) {
	t.Helper()
	if !strings.Contains(out, fmt.Sprintf("then Close, %d repetitions", runs)) {
		t.Errorf("context table does not say %d repetitions:\n%s", runs, out)
	}
	for _, name := range []string{"device context (OpenContext, id 1)", "default ring (driver.Open)"} {
		i := strings.Index(out, "  "+name)
		if i < 0 {
			t.Errorf("context table lacks the row %q:\n%s", name, out)
			continue
		}
		line, _, _ := strings.Cut(out[i+2+len(name):], "\n")
		// open, first nop, open -> first nop done, min-max, Close
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Errorf("row %q: %d cells %q, want 5", name, len(f), f)
			continue
		}
		for _, c := range []string{f[0], f[1], f[2], f[4]} {
			if v, err := strconv.ParseFloat(c, 64); err != nil || v < 0 {
				t.Errorf("row %q: cell %q is not a time in ms", name, c)
			}
		}
		if v, _ := strconv.ParseFloat(f[2], 64); v <= 0 {
			t.Errorf("row %q: open -> first nop done %q, want > 0", name, f[2])
		}
	}
	if !strings.Contains(out, "executor process started for the context") {
		t.Errorf("context table does not say that it includes an executor start:\n%s", out)
	}
}

// TestRunMatmulOnly: -sections matmul prints the matmul table alone (the
// quick check on a GPU), with its direct baseline.
func TestRunMatmulOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four vgpuds and their worker and executor processes")
	}
	var out strings.Builder
	args := []string{"-sections", "matmul", "-runs", "1", "-n", "32", "-reps", "1"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, no := range []string{"Per-command cost", "Context creation"} {
		if strings.Contains(out.String(), no) {
			t.Errorf("-sections matmul printed %q:\n%s", no, out.String())
		}
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
	names := []string{"direct", "in-process", "worker/kernels", "worker/executor", "worker/context"}
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

// TestRunBandwidth runs the bandwidth table at tiny sizes, over each
// transport the harness speaks: a row per size and direction with a
// positive rate on every path, each size one copy command (an upload's
// fence besides), and every download checked against its upload (a path
// that lost or corrupted bytes fails run).
func TestRunBandwidth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four vgpuds and their worker and executor processes")
	}
	for _, tr := range []string{"mpqemu", "vfio-user"} {
		t.Run(tr, func(t *testing.T) { testRunBandwidth(t, tr) })
	}
}

func testRunBandwidth(t *testing.T, transport string) {
	var out strings.Builder
	args := []string{"-sections", "bandwidth", "-bwsizes", "4K,64K", "-bwreps", "2", "-transport", transport}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "transport:     "+transport) {
		t.Errorf("the header does not name transport %s:\n%s", transport, out.String())
	}
	for _, no := range []string{"Per-command cost", "matmul job", "Context creation", "hop by hop"} {
		if strings.Contains(out.String(), no) {
			t.Errorf("-sections bandwidth printed %q:\n%s", no, out.String())
		}
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "size" && f[1] == "direction":
			in = true
		case in && len(f) == 0 && len(rows) > 0:
			in = false
		case in && len(f) > 0:
			rows = append(rows, f)
		}
	}
	var want [][3]string
	for _, size := range []string{"4KiB", "64KiB"} {
		for _, order := range []string{"rotating", "back-to-back"} {
			want = append(want, [3]string{size, "upload", order}, [3]string{size, "download", order})
		}
	}
	if len(rows) != len(want) {
		t.Fatalf("bandwidth table has %d rows, want %d:\n%s", len(rows), len(want), out.String())
	}
	for i, f := range rows {
		// size direction order reps, 4 rates, 3 percentages, commands doorbells rung turns
		if len(f) != 15 {
			t.Errorf("row %q: %d cells, want 15", f, len(f))
			continue
		}
		if f[0] != want[i][0] || f[1] != want[i][1] || f[2] != want[i][2] || f[3] != "2" {
			t.Errorf("row %d is %q, want %s %s %s with 2 reps", i, f, want[i][0], want[i][1], want[i][2])
		}
		f = append(f[:2], f[3:]...) // the cells below as before the order column
		for _, c := range f[3:7] {
			if v, err := strconv.ParseFloat(c, 64); err != nil || v <= 0 {
				t.Errorf("row %q: rate %q is not a positive MB/s", f, c)
			}
		}
		for _, c := range f[7:10] {
			if v, err := strconv.ParseFloat(strings.TrimSuffix(c, "%"), 64); err != nil || v <= 0 || !strings.HasSuffix(c, "%") {
				t.Errorf("row %q: %q is not a percentage of direct", f, c)
			}
		}
		if cmds := map[string]string{"upload": "1+1", "download": "1"}[f[1]]; f[10] != cmds {
			t.Errorf("row %q: commands %q, want %q (one copy command%s)", f, f[10], cmds, map[string]string{"upload": " and Finish's fence"}[f[1]])
		}
		if f[11] != "1" {
			t.Errorf("row %q: doorbells %q, want 1 (rung or skipped)", f, f[11])
		}
		if rung := strings.Split(f[12], "/"); len(rung) != 3 {
			t.Errorf("row %q: rung %q, want one per rung", f, f[12])
		}
		if turns := strings.Split(f[13], "/"); len(turns) != 3 {
			t.Errorf("row %q: turns %q, want one per rung", f, f[13])
		}
	}
	// 2 sizes x 4 paths (direct, 3 rungs) x (2 rotating repetitions + the
	// last back-to-back one)
	if !strings.Contains(out.String(), "(24 checks, all equal)") {
		t.Errorf("bandwidth table does not say that it checked 24 downloads:\n%s", out.String())
	}
}

// TestParseSizes: -bwsizes' units, and sizeName's names for them.
func TestParseSizes(t *testing.T) {
	got, err := parseSizes("4K, 1M,16M,256M,1G,100")
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{4 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30, 100}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseSizes = %v, want %v", got, want)
	}
	if s := sizeList(got); s != "4KiB, 1MiB, 16MiB, 256MiB, 1GiB, 100B" {
		t.Errorf("sizeList = %q", s)
	}
}

package main

import (
	"context"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/image/imagetest"
)

// TestRunRejectsBadFlags: bad settings fail before anything starts.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-sections", "bogus"}, {"-n", "0"}, {"-n", "100", "-local", "16"}, {"-reps", "0"}, {"-runs", "0"}, {"-nosuchflag"},
		{"-small-launches", "0"}, {"-small-reads", "-1"}, {"-small-steps", "0"}, {"-small-runs", "0"}, {"-small-runs", "101"},
		{"-small-guest=maybe"},
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
	t.Chdir("../..")
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

// TestSmallFlags: the small section's flags, their defaults, the modes
// (and clsmall's arguments) they make, and which settings need a guest.
func TestSmallFlags(t *testing.T) {
	c, err := parseFlags([]string{"-sections", "small"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (smallConfig{launches: 10000, reads: 10000, steps: 2000, runs: 3, guest: true}); c.small != want {
		t.Errorf("defaults %+v, want %+v", c.small, want)
	}
	if !c.needsGuest() {
		t.Errorf("small with its guest rows: needsGuest false")
	}
	c, err = parseFlags([]string{"-sections", "small", "-small-launches", "5", "-small-reads", "6", "-small-steps", "7",
		"-small-runs", "2", "-small-guest=false"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (smallConfig{launches: 5, reads: 6, steps: 7, runs: 2}); c.small != want {
		t.Errorf("parsed %+v, want %+v", c.small, want)
	}
	if c.needsGuest() {
		t.Errorf("small without its guest rows: needsGuest true")
	}
	var args [][]string
	for _, m := range c.small.modes() {
		args = append(args, m.args())
	}
	want := [][]string{{"launches", "5"}, {"reads", "6"}, {"steps", "7"}, {"startup"}}
	if !slices.EqualFunc(args, want, slices.Equal) {
		t.Errorf("clsmall arguments %q, want %q", args, want)
	}
	if c, _ := parseFlags([]string{"-sections", "small,job", "-small-guest=false"}, io.Discard); !c.needsGuest() {
		t.Errorf("small and job: needsGuest false")
	}
	if c, _ := parseFlags(nil, io.Discard); !c.has(sectionSmall) {
		t.Errorf("default sections %q lack small", c.sections)
	}
}

// TestSmallResults parses clsmall's CLSMALL lines among other output (a
// guest's console) and rejects a result that is not of the run asked for.
func TestSmallResults(t *testing.T) {
	lines := []string{
		"[    1.0] vgpu: probe",
		`CLSMALL {"mode":"launches","n":100,"setup_ns":5000000,"run_ns":2000000,"total_ns":7500000}`,
		`CLSMALL {"mode":"reads","n":50,"setup_ns":5000000,"run_ns":1000000,"total_ns":6100000}`,
		`CLSMALL {"mode":"launches","n":100,"setup_ns":5000000,"run_ns":3000000,"total_ns":8500000}`,
		"time=... prog=vgpu-icdd msg=closed",
	}
	rs, err := smallResults(lines, smallMode{"launches", 100}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].RunNS != 2000000 || rs[1].RunNS != 3000000 || rs[0].SetupNS != 5000000 || rs[1].TotalNS != 8500000 {
		t.Errorf("launches results %+v", rs)
	}
	if rs, err := smallResults(lines, smallMode{"reads", 50}, 1); err != nil || rs[0].N != 50 {
		t.Errorf("reads: %+v, %v", rs, err)
	}
	m := mediansOf(map[string][]smallResult{"launches": rs})
	if m["launches"].run != 2000000 || m["launches"].total != 7500000 {
		t.Errorf("medians %+v (the lower of two)", m)
	}
	for _, c := range []struct {
		name  string
		lines []string
		m     smallMode
		want  int
	}{
		{"too few", lines, smallMode{"launches", 100}, 3},
		{"other n", lines, smallMode{"launches", 99}, 2},
		{"none of the mode", lines, smallMode{"steps", 10}, 1},
		{"no line", []string{"clsmall: a[3] = 7 after 100 steps, want 9"}, smallMode{"launches", 100}, 1},
		{"bad json", []string{`CLSMALL {"mode":"launches",`}, smallMode{"launches", 100}, 1},
		{"zero run", []string{`CLSMALL {"mode":"startup","n":1,"setup_ns":5,"run_ns":0,"total_ns":9}`}, startupMode, 1},
		{"total short", []string{`CLSMALL {"mode":"startup","n":1,"setup_ns":5,"run_ns":5,"total_ns":9}`}, startupMode, 1},
	} {
		if rs, err := smallResults(c.lines, c.m, c.want); err == nil {
			t.Errorf("%s: %+v, nil error", c.name, rs)
		}
	}
}

// TestSmallGoals: the goals (issue 43's run times, issue 32's start-up)
// on given figures, at and past their bounds.
func TestSmallGoals(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		icd, direct int64
		want        bool
		mode        string
	}{{149, 100, true, "launches"}, {151, 100, false, "reads"}, {50, 100, true, "launches"}, {199, 100, true, "steps"}, {201, 100, false, "steps"}} {
		if got := commandsGoal(c.icd, c.direct, runGoal(c.mode)); got != c.want {
			t.Errorf("%s: commandsGoal(%d, %d) = %v", c.mode, c.icd, c.direct, got)
		}
	}
	for _, c := range []struct {
		icd, direct int64
		want        bool
	}{{169 * ms, 100 * ms, true}, {171 * ms, 100 * ms, false}, {55 * ms, 5 * ms, true}, {57 * ms, 5 * ms, false}} {
		if got := startupGoal(c.icd, c.direct); got != c.want {
			t.Errorf("startupGoal(%v, %v) = %v", time.Duration(c.icd), time.Duration(c.direct), got)
		}
	}
}

// TestRunSmallHost runs the small section's host rows with tiny N: clsmall
// on PoCL and through the ICD and tests/icdhost, every result checked by
// clsmall itself. No guest boots. It asserts the rows, not their times.
func TestRunSmallHost(t *testing.T) {
	if testing.Short() {
		t.Skip("needs an OpenCL device, gcc and the ICD (make icd)")
	}
	t.Chdir("../..")
	var out strings.Builder
	args := []string{"-sections", "small", "-small-launches", "20", "-small-reads", "10", "-small-steps", "5", "-small-runs", "1", "-small-guest=false"}
	if err := run(t.Context(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, row := range []string{`launches +20 `, `reads +10 `, `steps +5 `, `startup +1 .* total <= 1\.2x \+ 50 ms: `} {
		if re := regexp.MustCompile(`(?m)^ *host: ICD \+ icdhost +` + row); !re.MatchString(out.String()) {
			t.Errorf("output lacks a row matching %q:\n%s", re, out.String())
		}
	}
	for _, mode := range []string{"launches", "reads", "steps"} {
		if re := regexp.MustCompile(`(?m)^ *host: the same, no queue +` + mode + ` `); !re.MatchString(out.String()) {
			t.Errorf("output lacks the row without the queue matching %q:\n%s", re, out.String())
		}
	}
	if !strings.Contains(out.String(), "Guest rows left out") {
		t.Errorf("output lacks the note on the guest rows:\n%s", out.String())
	}
	if strings.Contains(out.String(), "guest: ") {
		t.Errorf("guest rows with -small-guest=false:\n%s", out.String())
	}
}

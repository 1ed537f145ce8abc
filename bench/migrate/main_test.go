package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/migrate"
)

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"-sizes", "16, 1024", "-rates", "high"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.sizes) != 2 || c.sizes[0] != 16<<20 || c.sizes[1] != 1<<30 || len(c.rates) != 1 || c.rates[0] != "high" {
		t.Errorf("parseFlags = %+v", c)
	}
	if len(c.transports) != 2 || c.transports[0] != "mpqemu" || c.transports[1] != "vfio-user" {
		t.Errorf("parseFlags transports = %q, want both by default", c.transports)
	}
	for _, bad := range [][]string{{"-sizes", "0"}, {"-sizes", "x"}, {"-rates", "medium"}, {"-n", "0"}, {"extra"}, {"-transports", "xen"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) = nil error", bad)
		}
	}
}

// TestPlan: each mode runs once in each direction, and the VM ends where
// it started.
func TestPlan(t *testing.T) {
	for tr, modes := range map[string][]mode{mpqemuT: {precopy, stopCopy}, vfioUserT: {precopy, stopCopy, quiesceFirst}} {
		seen := map[mode]map[bool]int{}
		onA := true
		for _, p := range planFor(tr) {
			if p.aToB != onA {
				t.Fatalf("%s: plan moves from %v but the VM is on A=%v", tr, p.aToB, onA)
			}
			onA = !onA
			if seen[p.m] == nil {
				seen[p.m] = map[bool]int{}
			}
			seen[p.m][p.aToB]++
		}
		if !onA || len(seen) != len(modes) {
			t.Errorf("%s: the VM ends on A=%v; modes %v", tr, onA, seen)
		}
		for _, m := range modes {
			if seen[m][true] != 1 || seen[m][false] != 1 {
				t.Errorf("%s: mode %s runs %v, want once each way", tr, m, seen[m])
			}
		}
	}
}

// TestTables: the phases of each cell are the mean of its migrations,
// vgpud's part counts the final round only beyond the unplug it overlaps,
// and the baseline table pairs each pre-copy cell with its stop-and-copy.
func TestTables(t *testing.T) {
	rep := func(final, unplug time.Duration, finalBytes uint64, rounds int) *migrate.Report {
		r := &migrate.Report{Quiesce: 10 * time.Millisecond, Final: final, Unplug: unplug, QEMU: time.Second,
			Plug: 5 * time.Millisecond, Resume: time.Second, Stun: 3 * time.Second}
		for i := range rounds {
			r.Rounds = append(r.Rounds, migrate.RoundReport{Number: uint32(i), StreamBytes: 1 << 20})
		}
		r.Rounds = append(r.Rounds, migrate.RoundReport{Number: uint32(rounds), Final: true, StreamBytes: finalBytes})
		return r
	}
	rs := []result{
		{size: 16 << 20, rate: "low", mode: precopy, rep: rep(10*time.Millisecond, 200*time.Millisecond, 1<<20, 2)},
		{size: 16 << 20, rate: "low", mode: stopCopy, rep: rep(400*time.Millisecond, 200*time.Millisecond, 16<<20, 0)},
		{size: 16 << 20, rate: "low", mode: stopCopy, rep: rep(600*time.Millisecond, 200*time.Millisecond, 16<<20, 0)},
		{size: 16 << 20, rate: "low", mode: precopy, rep: rep(30*time.Millisecond, 200*time.Millisecond, 3<<20, 2)},
	}
	cs := cells(rs)
	if len(cs) != 2 || cs[0].n != 2 || cs[1].n != 2 {
		t.Fatalf("cells = %+v", cs)
	}
	if p := cs[0].sum.div(cs[0].n); p.final != 20*time.Millisecond || p.vgpud() != 15*time.Millisecond {
		t.Errorf("pre-copy cell: final %v, vgpud part %v; want 20ms, 15ms (the final round hides under the unplug)", p.final, p.vgpud())
	}
	if p := cs[1].sum.div(cs[1].n); p.vgpud() != 315*time.Millisecond {
		t.Errorf("stop-and-copy vgpud part %v, want 315ms (10 + 500 - 200 + 5)", p.vgpud())
	}
	var out bytes.Buffer
	for _, tb := range tables(rs) {
		tb.Print(&out)
	}
	for _, want := range []string{"16 MiB, low, pre-copy", "16 MiB, low, stop-and-copy", "0.048x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("tables lack %q:\n%s", want, out.String())
		}
	}
}

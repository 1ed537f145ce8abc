package tests

import (
	"sync"
	"testing"

	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/reuse"
)

// TestReuseAcrossGuests: guests a and b are in the operator-named domain
// "team", c in its private domain. Each runs the correctness suite twice
// with the same inputs (vgpu-suite -mode reuse). a runs first (its second
// run records the results), then b, whose launches are answered from the
// table: the host counts hits for b and the guest's checks against its CPU
// reference pass. c, run alongside a with the same inputs, gets no hit.
func TestReuseAcrossGuests(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	m := host(t)
	create := func(domain string) *mdev.Instance {
		t.Helper()
		inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small", ReuseDomain: domain})
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	a, b, c := create("team"), create("team"), create("")
	if got, want := c.ReuseDomain(), reuse.PrivatePrefix+c.UUID(); got != want {
		t.Fatalf("c's domain = %q, want %q", got, want)
	}
	args := []string{"-mode=reuse", "-repeat=2", "-seed=7"}
	check := func(name string, rep suite.Report, console string, err error) {
		t.Helper()
		if err != nil || !rep.OK() || rep.Mode != "reuse" || len(rep.Cases) < 10 {
			t.Fatalf("guest %s: err %v\n%s\nconsole:\n%s", name, err, rep, console)
		}
	}
	var wg sync.WaitGroup
	var repC suite.Report
	var conC string
	var errC error
	wg.Add(1)
	go func() {
		defer wg.Done()
		repC, conC, errC = runGuest(t.Context(), t, c, args...)
	}()
	repA, conA, errA := runGuest(t.Context(), t, a, args...)
	wg.Wait()
	check("a", repA, conA, errA)
	check("c", repC, conC, errC)
	repB, conB, errB := runGuest(t.Context(), t, b, args...)
	check("b", repB, conB, errB)

	sa, sb, sc := a.ReuseStats(), b.ReuseStats(), c.ReuseStats()
	t.Logf("reuse counters: a %+v; b %+v; c %+v", sa, sb, sc)
	// b's two suite runs are answered from a's recordings: 3 launches per
	// run were counted on this machine (the rest are not candidates, e.g.
	// uploads the guest driver splits into partial copies).
	if launches := b.Aggregator().Stats().Launches.Load(); sb.Hits < 6 || sb.Hits > launches {
		t.Errorf("b: %d hits of %d launches, want at least 6", sb.Hits, launches)
	}
	if sc.Hits != 0 {
		t.Errorf("c (private domain): %d hits, want 0", sc.Hits)
	}
	if sa.Recorded == 0 || sc.Recorded == 0 {
		t.Errorf("recorded: a %d, c %d, want both > 0 (each second run records)", sa.Recorded, sc.Recorded)
	}
	var team mdev.ReuseDomainStatus
	for _, d := range m.ReuseDomains() {
		if d.Name == "team" {
			team = d
		}
	}
	if team.Users != 2 || team.Hits < sb.Hits || team.Entries == 0 {
		t.Errorf("domain team = %+v, want 2 users, at least b's %d hits, some entries", team, sb.Hits)
	}
}

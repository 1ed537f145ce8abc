package tests

import (
	"fmt"
	"sync"
	"testing"

	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/reuse"
)

// TestReuseAcrossGuests: guests a and b are in the operator-named domain
// "team", c in its private domain (the default). Each runs the correctness
// suite with the same inputs (vgpu-suite -mode reuse): a and b twice, c
// three times. a runs first (its second run records the results), then b
// and c together. b's launches are answered from a's recordings: the host
// counts hits for b and the guest's checks against its CPU reference pass.
// c, in its private domain, is served only from its own recordings: its
// third run hits (a launch is recorded at its second occurrence), and no
// more than that run's launches do, so nothing of team's table reached it.
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
	args := func(repeat int) []string {
		return []string{"-mode=reuse", fmt.Sprintf("-repeat=%d", repeat), "-seed=7"}
	}
	check := func(name string, rep suite.Report, console string, err error) {
		t.Helper()
		if err != nil || !rep.OK() || rep.Mode != "reuse" || len(rep.Cases) < 10 {
			t.Fatalf("guest %s: err %v\n%s\nconsole:\n%s", name, err, rep, console)
		}
	}
	repA, conA, errA := runGuest(t.Context(), t, a, args(2)...)
	check("a", repA, conA, errA)
	var wg sync.WaitGroup
	var repC suite.Report
	var conC string
	var errC error
	wg.Add(1)
	go func() {
		defer wg.Done()
		repC, conC, errC = runGuest(t.Context(), t, c, args(3)...)
	}()
	repB, conB, errB := runGuest(t.Context(), t, b, args(2)...)
	wg.Wait()
	check("b", repB, conB, errB)
	check("c", repC, conC, errC)

	sa, sb, sc := a.ReuseStats(), b.ReuseStats(), c.ReuseStats()
	t.Logf("reuse counters: a %+v; b %+v; c %+v", sa, sb, sc)
	// b's two suite runs are answered from a's recordings: 3 launches per
	// run were counted on this machine (the rest are not candidates, e.g.
	// launches whose inputs a kernel rewrote in place).
	if launches := b.Stats().Launches.Load(); sb.Hits < 6 || sb.Hits > launches {
		t.Errorf("b: %d hits of %d launches, want at least 6", sb.Hits, launches)
	}
	// c: its third run is served as each of b's runs is (the suite's
	// vector-add and matmul write fresh output buffers, GRU's job pattern,
	// which a private domain must key as a shared one does), and its first
	// two runs are not: had team's results reached c, they would hit too.
	if sc.Hits != sb.Hits/2 {
		t.Errorf("c (private domain): %d hits in 3 runs, want %d: as many as b gets per run, all in the third", sc.Hits, sb.Hits/2)
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

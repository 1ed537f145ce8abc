package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/interference/interferencetest"
	"github.com/vgpud/vgpud/mdev"
)

func TestPlaceCommands(t *testing.T) {
	sock := daemon(t)
	out, err := ctl(t, sock, "place")
	if err != nil || !strings.Contains(out, "policy: fewest") || !strings.Contains(out, "dataset: none") {
		t.Fatalf("place = %q, %v", out, err)
	}
	if _, err := ctl(t, sock, "place", "-policy", "interference"); err == nil {
		t.Error("place -policy interference without a dataset succeeded")
	}
	path := filepath.Join(t.TempDir(), "ds.json")
	if err := interferencetest.ShortLong().Save(path); err != nil {
		t.Fatal(err)
	}
	out, err = ctl(t, sock, "place", "-dataset", path)
	if err != nil || !strings.Contains(out, "policy: interference") || !strings.Contains(out, "8 workloads, 64 pairs") {
		t.Fatalf("place -dataset = %q, %v", out, err)
	}
	out, err = ctl(t, sock, "place", "-explain", "-profile", "vgpu-small", "-workload", "short0")
	if err != nil || !strings.Contains(out, "workload short0") || !strings.Contains(out, "<-") {
		t.Errorf("place -explain = %q, %v", out, err)
	}
	for _, args := range [][]string{
		{"place", "-explain"}, // no profile
		{"place", "-explain", "-profile", "vgpu-small", "-policy", "fewest"}, // explains, sets nothing
		{"place", "-workload", "short0"},                                     // hint without -explain
		{"place", "-explain", "-profile", "vgpu-small", "-workload", "a", "-like", "b"},
		{"place", "-dataset", filepath.Join(t.TempDir(), "missing.json")},
		{"create", "-profile", "vgpu-small", "-device", "0", "-workload", "short0"},
	} {
		if _, err := ctl(t, sock, args...); err == nil {
			t.Errorf("%q succeeded", args)
		}
	}
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small", "-workload", "long0")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ctl(t, sock, "show", strings.TrimSpace(id)); err != nil || !strings.Contains(out, `"features"`) {
		t.Errorf("show = %q, %v; want the placement features", out, err)
	}
}

// TestPlaceAcrossHosts: three daemons stand for three hosts; vgpuctl
// scores every device of every host, skips a host that is down, and
// spreads instances over the hosts where each adds the least predicted
// interference (here: an empty host before one with a resident). That
// residents' measured features steer the choice is mdev's
// TestPlaceByInterference.
func TestPlaceAcrossHosts(t *testing.T) {
	cfg := mdev.Config{Placement: mdev.PlacementConfig{Dataset: interferencetest.ShortLong()}}
	hosts := []string{daemonWith(t, cfg), daemonWith(t, cfg), daemonWith(t, cfg)}
	for _, h := range hosts {
		if out, err := ctl(t, h, "place"); err != nil || !strings.Contains(out, "policy: interference") {
			t.Fatalf("host %s: place = %q, %v", h, out, err)
		}
	}
	down := filepath.Join(t.TempDir(), "down.sock")
	list := strings.Join(append(hosts, down), ",")
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-socket", hosts[0], "place", "-explain", "-profile", "vgpu-small", "-workload", "short0", "-hosts", list}, &out, &errOut)
	if err != nil {
		t.Fatalf("place -explain -hosts = %v\n%s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "down.sock skipped") {
		t.Errorf("stderr %q does not say the down host was skipped", errOut.String())
	}
	for _, h := range hosts {
		if !strings.Contains(out.String(), h) {
			t.Errorf("explain does not list host %s:\n%s", h, out.String())
		}
	}
	// Fill: each create lands on the host with the least predicted
	// interference; with empty hosts first, one per host.
	seen := map[string]bool{}
	for range hosts {
		errOut.Reset()
		out.Reset()
		if err := run(context.Background(), []string{"create", "-profile", "vgpu-small", "-workload", "short0", "-hosts", strings.Join(hosts, ",")}, &out, &errOut); err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(errOut.String(), "placed on ")
		host, _, _ := strings.Cut(rest, " ")
		seen[host] = true
	}
	if len(seen) != len(hosts) {
		t.Errorf("three creates on three empty hosts went to %v, want one each", seen)
	}
	if _, err := os.Stat(down); err == nil {
		t.Fatal("the down host's socket exists")
	}
}

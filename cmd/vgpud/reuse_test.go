package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/mdev/control"
)

func TestDaemonReuseConfig(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "vgpud.json")
	if err := os.WriteFile(cfg, []byte(`{"reuse": {"budget": 1048576},
		"instances": [{"profile": "vgpu-small", "reuse_domain": "team"}, {"profile": "vgpu-small", "no_reuse": true}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, _ := startDaemon(t, "-config", cfg, "-metrics-addr", "")
	r, err := control.NewClient(sock).Reuse(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Domains) != 1 || r.Domains[0].Name != "team" || r.Domains[0].Budget != 1<<20 {
		t.Errorf("Reuse().Domains = %+v, want team with the whole 1 MiB budget", r.Domains)
	}
	var doms []string
	for _, in := range r.Instances {
		doms = append(doms, in.Domain)
	}
	if got := strings.Join(doms, ","); got != "team," && got != ",team" {
		t.Errorf("instance domains = %q, want team and none", got)
	}
}

func TestDaemonReuseOff(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "vgpud.json")
	if err := os.WriteFile(cfg, []byte(`{"reuse": {"off": true}, "instances": [{"profile": "vgpu-small", "reuse_domain": "team"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"-config", cfg, "-run-dir", t.TempDir(), "-metrics-addr", ""}, &strings.Builder{}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "reuse is off") {
		t.Errorf("run(reuse off, instance in a domain) = %v, want a reuse-off error", err)
	}
}

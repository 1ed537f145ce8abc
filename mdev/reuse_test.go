package mdev

import (
	"errors"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

func TestReuseWiring(t *testing.T) {
	m := newManager(t, nil)
	a := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	if got, want := a.ReuseDomain(), reuse.PrivatePrefix+a.UUID(); got != want {
		t.Errorf("default ReuseDomain() = %q, want %q", got, want)
	}
	b := mustCreate(t, m, CreateRequest{Profile: "vgpu-small", ReuseDomain: "team"})
	c := mustCreate(t, m, CreateRequest{Profile: "vgpu-small", NoReuse: true})
	if got := b.ReuseDomain(); got != "team" {
		t.Errorf("ReuseDomain() = %q, want team", got)
	}
	if got := c.ReuseDomain(); got != "" {
		t.Errorf("no-reuse ReuseDomain() = %q, want none", got)
	}
	if _, err := m.Create(CreateRequest{Profile: "vgpu-small", ReuseDomain: "bad name"}); !errors.Is(err, reuse.ErrBadDomain) {
		t.Errorf("Create(bad domain) = %v, want %v", err, reuse.ErrBadDomain)
	}
	d := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	// a holds no device state: it may move to team's worker.
	if err := m.SetReuse(a.UUID(), ReuseSetting{Domain: "team"}); err != nil {
		t.Fatal(err)
	}
	if got := a.ReuseDomain(); got != "team" {
		t.Errorf("after the move: ReuseDomain() = %q, want team", got)
	}
	doms := m.ReuseDomains()
	if len(doms) != 2 {
		t.Fatalf("ReuseDomains() = %+v, want team and d's private domain (a's has no instance left)", doms)
	}
	for _, dom := range doms {
		if dom.Budget != DefaultReuseBudget/2 {
			t.Errorf("domain %s budget = %d, want %d (even split)", dom.Name, dom.Budget, DefaultReuseBudget/2)
		}
		if dom.Name == "team" && dom.Users != 2 {
			t.Errorf("team users = %d, want 2", dom.Users)
		}
	}
	// One worker per trust domain: team, d's, and c's (reuse off, alone).
	if n := m.Pool().Workers(); n != 3 {
		t.Errorf("%d workers, want 3 (team, d, c)", n)
	}
	if err := m.SetReuseBudget("team", 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, dom := range m.ReuseDomains() {
		want := int64(DefaultReuseBudget)
		if dom.Name == "team" {
			want = 1 << 20
		}
		if dom.Budget != want {
			t.Errorf("after pin: domain %s budget = %d, want %d", dom.Name, dom.Budget, want)
		}
	}
	if err := m.SetReuseBudget("nope", 1); !errors.Is(err, ErrNoDomain) {
		t.Errorf("SetReuseBudget(nope) = %v, want %v", err, ErrNoDomain)
	}
	if err := m.Destroy(d.UUID()); err != nil {
		t.Fatal(err)
	}
	for _, dom := range m.ReuseDomains() {
		if dom.Name == reuse.PrivatePrefix+d.UUID() {
			t.Errorf("private domain of a destroyed instance still listed")
		}
	}
	if err := m.Destroy(a.UUID()); err != nil {
		t.Fatal(err)
	}
	for _, dom := range m.ReuseDomains() {
		if dom.Name == "team" && dom.Users != 1 {
			t.Errorf("team users after destroy = %d, want 1", dom.Users)
		}
	}
	if n := m.Pool().Workers(); n != 2 {
		t.Errorf("%d workers after two destroys, want 2 (team, c)", n)
	}
}

func TestReuseOff(t *testing.T) {
	m, err := NewManager(Config{Devices: []gpu.Device{openGPU(t)}, Reuse: ReuseConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	a := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	if got := a.ReuseDomain(); got != "" {
		t.Errorf("ReuseDomain() = %q, want none", got)
	}
	if _, err := m.Create(CreateRequest{Profile: "vgpu-small", ReuseDomain: "x"}); !errors.Is(err, ErrReuseOff) {
		t.Errorf("Create(domain) = %v, want %v", err, ErrReuseOff)
	}
	if err := m.SetReuse(a.UUID(), ReuseSetting{}); !errors.Is(err, ErrReuseOff) {
		t.Errorf("SetReuse = %v, want %v", err, ErrReuseOff)
	}
	if d := m.ReuseDomains(); d != nil {
		t.Errorf("ReuseDomains() = %v, want none", d)
	}
}

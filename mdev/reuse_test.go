package mdev

import (
	"errors"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

func TestReuseWiring(t *testing.T) {
	m := newManager(t, nil)
	a, err := m.Create(CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.ReuseDomain(), reuse.PrivatePrefix+a.UUID(); got != want {
		t.Errorf("default ReuseDomain() = %q, want %q", got, want)
	}
	b, err := m.Create(CreateRequest{Profile: "vgpu-small", ReuseDomain: "team"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Create(CreateRequest{Profile: "vgpu-small", NoReuse: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.ReuseDomain(); got != "team" {
		t.Errorf("ReuseDomain() = %q, want team", got)
	}
	if got := c.ReuseDomain(); got != "" {
		t.Errorf("no-reuse ReuseDomain() = %q, want none", got)
	}
	if _, err := m.Create(CreateRequest{Profile: "vgpu-small", ReuseDomain: "bad name"}); !errors.Is(err, reuse.ErrBadDomain) {
		t.Errorf("Create(bad domain) = %v, want %v", err, reuse.ErrBadDomain)
	}
	if err := m.SetReuse(a.UUID(), ReuseSetting{Domain: "team"}); err != nil {
		t.Fatal(err)
	}
	doms := m.ReuseDomains()
	if len(doms) != 2 {
		t.Fatalf("ReuseDomains() = %+v, want the private domain of a and team", doms)
	}
	for _, d := range doms {
		if d.Budget != DefaultReuseBudget/2 {
			t.Errorf("domain %s budget = %d, want %d (even split)", d.Name, d.Budget, DefaultReuseBudget/2)
		}
		if d.Name == "team" && d.Users != 2 {
			t.Errorf("team users = %d, want 2", d.Users)
		}
	}
	if err := m.SetReuseBudget("team", 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, d := range m.ReuseDomains() {
		want := int64(DefaultReuseBudget)
		if d.Name == "team" {
			want = 1 << 20
		}
		if d.Budget != want {
			t.Errorf("after pin: domain %s budget = %d, want %d", d.Name, d.Budget, want)
		}
	}
	if err := m.SetReuseBudget("nope", 1); !errors.Is(err, ErrNoDomain) {
		t.Errorf("SetReuseBudget(nope) = %v, want %v", err, ErrNoDomain)
	}
	if err := m.Destroy(a.UUID()); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.reuse.Lookup(reuse.PrivatePrefix + a.UUID()); ok {
		t.Errorf("private domain of a destroyed instance still exists")
	}
	for _, d := range m.ReuseDomains() {
		if d.Name == "team" && d.Users != 1 {
			t.Errorf("team users after destroy = %d, want 1", d.Users)
		}
	}
}

func TestReuseOff(t *testing.T) {
	m, err := NewManager(Config{Devices: []gpu.Device{openGPU(t)}, Reuse: ReuseConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	a, err := m.Create(CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
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

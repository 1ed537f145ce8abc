package control

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/reuse"
)

func TestReuseAPI(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	info, err := c.Create(ctx, mdev.CreateRequest{Profile: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Reuse == nil || info.Reuse.Domain != reuse.PrivatePrefix+info.UUID {
		t.Errorf("Create().Reuse = %+v, want the private domain", info.Reuse)
	}
	got, err := c.SetReuse(ctx, info.UUID, mdev.ReuseSetting{Domain: "team"})
	if err != nil || got.Reuse == nil || got.Reuse.Domain != "team" {
		t.Errorf("SetReuse(team) = %+v, %v", got.Reuse, err)
	}
	d, err := c.SetReuseBudget(ctx, "team", 4096)
	if err != nil || d.Name != "team" || d.Budget != 4096 || !d.Pinned || d.Users != 1 {
		t.Errorf("SetReuseBudget(team, 4096) = %+v, %v", d, err)
	}
	r, err := c.Reuse(ctx)
	// The instance left its private domain (a trust domain with no
	// instance is gone with its worker) for team's.
	if err != nil || len(r.Domains) != 1 || r.Domains[0].Name != "team" || len(r.Instances) != 1 || r.Instances[0].Domain != "team" {
		t.Errorf("Reuse() = %+v, %v; want team alone", r, err)
	}
	if got, err := c.SetReuse(ctx, info.UUID, mdev.ReuseSetting{Off: true}); err != nil || got.Reuse == nil || got.Reuse.Domain != "" {
		t.Errorf("SetReuse(off) = %+v, %v", got.Reuse, err)
	}
	tests := []struct {
		name string
		call func() error
		code int
	}{
		{"bad domain name", func() error { _, err := c.SetReuse(ctx, info.UUID, mdev.ReuseSetting{Domain: "a b"}); return err }, 400},
		{"unknown instance", func() error { _, err := c.SetReuse(ctx, "nope", mdev.ReuseSetting{}); return err }, 404},
		{"unknown domain", func() error { _, err := c.SetReuseBudget(ctx, "nope", 1); return err }, 404},
	}
	for _, tt := range tests {
		err := tt.call()
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != tt.code {
			t.Errorf("%s: error %v, want http %d", tt.name, err, tt.code)
		}
	}
}

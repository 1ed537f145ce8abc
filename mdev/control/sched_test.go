package control

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/sched"
)

func TestSchedAPI(t *testing.T) {
	c := serve(t)
	ctx := context.Background()
	info, err := c.Create(ctx, mdev.CreateRequest{Profile: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := c.Policy(ctx, 0); err != nil || p != string(sched.DefaultPolicy) {
		t.Errorf("Policy(0) = %q, %v, want %q", p, err, sched.DefaultPolicy)
	}
	for _, p := range sched.Policies {
		if err := c.SetPolicy(ctx, 0, string(p)); err != nil {
			t.Fatalf("SetPolicy(0, %s) = %v", p, err)
		}
		if got, err := c.Policy(ctx, 0); err != nil || got != string(p) {
			t.Errorf("Policy(0) after SetPolicy(%s) = %q, %v", p, got, err)
		}
	}
	got, err := c.SetShare(ctx, info.UUID, 7)
	if err != nil || got.Sched.Share != 7 || got.UUID != info.UUID {
		t.Errorf("SetShare(7) = %+v, %v", got, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || len(st.Devices) != 1 || len(st.Instances) != 1 || st.Instances[0].Sched.Share != 7 ||
		st.Devices[0].Policy != sched.PolicyTimeslice || st.Time.IsZero() {
		t.Errorf("Stats() = %+v, %v", st, err)
	}

	tests := []struct {
		name string
		call func() error
		code int
	}{
		{"unknown policy", func() error { return c.SetPolicy(ctx, 0, "fifo") }, 400},
		{"no such device", func() error { return c.SetPolicy(ctx, 3, "best-effort") }, 404},
		{"device not a number", func() error { _, err := c.Policy(ctx, -1); return err }, 404},
		{"share 0", func() error { _, err := c.SetShare(ctx, info.UUID, 0); return err }, 400},
		{"share too big", func() error { _, err := c.SetShare(ctx, info.UUID, sched.MaxShare+1); return err }, 400},
		{"share of unknown instance", func() error { _, err := c.SetShare(ctx, "nope", 2); return err }, 404},
	}
	for _, tt := range tests {
		err := tt.call()
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != tt.code {
			t.Errorf("%s: error %v, want http %d", tt.name, err, tt.code)
		}
	}
}

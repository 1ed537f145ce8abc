package mdev

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/suite"
)

// TestSetProfileWhileAttached changes an attached instance's type: the
// guest reads the new quota and profile name from its registers and keeps
// computing.
func TestSetProfileWhileAttached(t *testing.T) {
	m := newManager(t, []Profile{
		{Name: "small", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 4},
		{Name: "big", MemBytes: 64 << 20, Share: 3, MaxPerDevice: 1},
	})
	a, err := m.Create(CreateRequest{Profile: "small"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(CreateRequest{Profile: "small"})
	if err != nil {
		t.Fatal(err)
	}
	vm := attach(t, a)
	d := openDriver(t, vm)
	if err := m.SetProfile(a.UUID(), "big"); err != nil {
		t.Fatal(err)
	}
	lo, hi := vm.Read32(abi.RegMemSizeLo), vm.Read32(abi.RegMemSizeHi)
	if got := uint64(hi)<<32 | uint64(lo); got != 64<<20 {
		t.Errorf("RegMemSize after SetProfile = %d, want %d", got, 64<<20)
	}
	if got := a.Profile().Name; got != "big" {
		t.Errorf("Profile() = %q", got)
	}
	tests := []struct {
		id, profile string
		want        error
	}{
		{b.UUID(), "big", ErrNoCapacity}, // big allows one per device
		{b.UUID(), "huge", ErrUnknownProfile},
		{"nope", "small", ErrNotFound},
	}
	for _, tt := range tests {
		if err := m.SetProfile(tt.id, tt.profile); !errors.Is(err, tt.want) {
			t.Errorf("SetProfile(%s, %s) = %v, want %v", tt.id, tt.profile, err, tt.want)
		}
	}
	if rep := suite.Run(context.Background(), d, suite.Options{VectorN: 4096, ReduceN: 4096}); !rep.OK() {
		t.Errorf("guest after the change:\n%s", rep)
	}
}

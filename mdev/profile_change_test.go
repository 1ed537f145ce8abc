package mdev

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/worker"
)

// TestSetProfileWhileAttached changes an attached instance's type: the
// guest reads the new quota and profile name from its registers and keeps
// computing.
func TestSetProfileWhileAttached(t *testing.T) {
	m := newManager(t, []Profile{
		{Name: "small", MemBytes: 16 << 20, Share: 1, MaxPerDevice: 4},
		{Name: "big", MemBytes: 64 << 20, Share: 3, MaxPerDevice: 1},
	})
	a := mustCreate(t, m, CreateRequest{Profile: "small"})
	b := mustCreate(t, m, CreateRequest{Profile: "small"})
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

// TestCarried: a profile change keeps each limit and the share an
// operator set (they differ from the old profile's) and takes the new
// profile's for the rest; the memory quota always follows the new one.
func TestCarried(t *testing.T) {
	ps := DefaultProfiles()
	small, medium := ps[0], ps[1]
	base := limitsOf(small)
	set := base
	set.KernelTimeout, set.ProgramBytes = 3*time.Second, 1<<20
	for _, c := range []struct {
		name      string
		cur       worker.Limits
		share     uint32
		wantLim   worker.Limits
		wantShare uint32
	}{
		{"nothing set", base, small.Share, limitsOf(medium), medium.Share},
		{"share set", base, 7, limitsOf(medium), 7},
		{"limits set", set, small.Share, func() worker.Limits {
			l := limitsOf(medium)
			l.KernelTimeout, l.ProgramBytes = 3*time.Second, 1<<20
			return l
		}(), medium.Share},
	} {
		lim, share := carried(c.cur, c.share, small, medium)
		if lim != c.wantLim || share != c.wantShare {
			t.Errorf("%s: carried = %+v, %d; want %+v, %d", c.name, lim, share, c.wantLim, c.wantShare)
		}
	}
}

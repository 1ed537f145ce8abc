package vfiouser_test

import (
	"context"
	"errors"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mdev"
)

// TestUpgradeRefusedWhileAttached: an upgrade in place cannot hand a
// vfio-user session over, so pausing the manager for one fails with
// ErrNotPausable, and after Unpause the VM goes on as if nothing happened.
func TestUpgradeRefusedWhileAttached(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	m, _, c := attachedVM(t)
	if err := m.Pause(context.Background()); !errors.Is(err, mdev.ErrNotPausable) {
		t.Errorf("Pause with a vfio-user VM attached = %v, want ErrNotPausable", err)
	}
	m.Unpause()
	if got := c.Read32(abi.RegID); got != abi.IDMagic {
		t.Errorf("RegID after the refused upgrade = %#x (%v)", got, c.Err())
	}
	if _, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"}); err != nil {
		t.Errorf("Create after the refused upgrade: %v", err)
	}
}

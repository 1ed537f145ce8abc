package mdev

import (
	"errors"
	"fmt"
)

// An instance's part in an incoming migration (Instance.incoming).
const (
	incomingNone     = 0
	incomingAwaiting = 1
	incomingClaimed  = 2
)

// ErrNotAwaiting: a migration brings an instance whose UUID names one here
// that was not created to await it (CreateRequest.Incoming), or that
// another migration has claimed, or whose profile differs. It is never
// filled: that would hand one VM's vGPU to another.
var ErrNotAwaiting = errors.New("instance is not awaiting this migration")

// ClaimIncoming returns the instance id if it awaits an incoming
// migration of an instance of profile, and marks it claimed; nil and no
// error if there is no instance id (the migration creates it). A claimed
// instance is the migration's: if it fails, the destination destroys it,
// as one it created.
func (m *Manager) ClaimIncoming(id, profile string) (*Instance, error) {
	inst, err := m.Get(id)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p := inst.Profile().Name; p != profile {
		return nil, fmt.Errorf("%w: %s has profile %s, the migration brings %s", ErrNotAwaiting, id, p, profile)
	}
	if !inst.incoming.CompareAndSwap(incomingAwaiting, incomingClaimed) {
		return nil, fmt.Errorf("%w: %s exists (created without -incoming, or claimed by another migration)", ErrNotAwaiting, id)
	}
	return inst, nil
}

// Awaiting reports whether the instance awaits an incoming migration
// (created with CreateRequest.Incoming, not yet claimed).
func (i *Instance) Awaiting() bool { return i.incoming.Load() == incomingAwaiting }

// KeepsDeviceOnMigration reports whether this manager's VMMs keep the
// vGPU attached across their own migration: vfio-user-pci carries no
// device state and sets no migration blocker, so the vGPU stays plugged
// and vgpud moves its state beside QEMU's stream (docs/migration.md);
// mpqemu's x-pci-proxy-dev blocks migration, so the vGPU is unplugged
// first.
func (m *Manager) KeepsDeviceOnMigration() bool {
	k, ok := m.transport.(interface{ KeepsDeviceOnMigration() bool })
	return ok && k.KeepsDeviceOnMigration()
}

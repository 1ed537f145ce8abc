package mdev

import (
	"path/filepath"

	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/worker"
)

// What live migration (package migrate, docs/migration.md) needs of an
// instance. The state itself moves between worker processes; the main
// process only passes streams through.

// QMPSocket returns where the instance's VM is expected to serve QMP:
// <socket dir>/<uuid>.qmp ("" without a socket directory). `vgpuctl vm`
// starts QEMU with it; an operator who starts QEMU by hand passes
// -qmp unix:PATH,server=on,wait=off for migration to work.
func (i *Instance) QMPSocket() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.socket == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(i.socket), i.uuid+".qmp")
}

// SpareNextReset makes the register file spare the instance's state from
// the next reset: the one QEMU sends a re-plugged device (a rolled-back
// migration plugs the vGPU back into the source VM).
func (i *Instance) SpareNextReset() { i.regs.SpareNextReset() }

// Migrator returns the instance's state extraction and reinjection, or
// worker.ErrNotMigratable when vgpud runs without worker processes.
func (i *Instance) Migrator() (worker.Migrator, error) { return worker.AsMigrator(i.be) }

// HoldBackend makes the VMM's device resets spare the instance's backend
// while on (mmio.Device.HoldBackend): an incoming migration whose
// destination QEMU connects only after the device state arrived (one
// libvirt starts during its own migration) resets the device as it
// starts.
func (i *Instance) HoldBackend(on bool) { i.regs.HoldBackend(on) }

// Restore tells the register file the ring state a migration restored,
// and makes it spare the restored state from the reset QEMU sends right
// after it hot-plugs the device (mmio.Device.Restore).
func (i *Instance) Restore(base, complBase uint64, slots, tail uint32) {
	i.regs.Restore(mmio.RingConfig{Base: base, ComplBase: complBase, Slots: slots}, tail)
}

// ReuseSettingOf returns the instance's reuse setting (an operator-named
// domain or its private one, on or off): a migration recreates it.
func (m *Manager) ReuseSettingOf(i *Instance) ReuseSetting {
	m.mu.Lock()
	defer m.mu.Unlock()
	return i.reuse
}

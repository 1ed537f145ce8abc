package mdev

import (
	"fmt"

	"github.com/vgpud/vgpud/sched"
)

func (m *Manager) device(i int) (*sched.Scheduler, error) {
	if i < 0 || i >= len(m.infos) {
		return nil, fmt.Errorf("device %d (have %d): %w", i, len(m.infos), ErrNoDevice)
	}
	return m.pool.Sched(i), nil
}

// Policy returns physical device i's scheduling policy.
func (m *Manager) Policy(i int) (sched.Policy, error) {
	d, err := m.device(i)
	if err != nil {
		return "", err
	}
	return d.Policy(), nil
}

// SetPolicy switches physical device i's scheduling policy at run time.
func (m *Manager) SetPolicy(i int, name string) (err error) {
	defer m.changedUnless(&err)
	d, err := m.device(i)
	if err != nil {
		return err
	}
	p, err := sched.ParsePolicy(name)
	if err != nil {
		return err
	}
	if err := d.SetPolicy(p); err != nil {
		return err
	}
	m.log.Info("scheduling policy set", "device", i, "policy", p)
	return nil
}

// Sched returns physical device i's scheduler counters.
func (m *Manager) Sched(i int) (sched.Stats, error) {
	d, err := m.device(i)
	if err != nil {
		return sched.Stats{}, err
	}
	return d.Stats(), nil
}

// SetShare sets an instance's weight under the fixed-share policy at run
// time (1..sched.MaxShare); it overrides the profile's Share.
func (m *Manager) SetShare(id string, share uint32) (err error) {
	defer m.changedUnless(&err)
	inst, err := m.Get(id)
	if err != nil {
		return err
	}
	if err := inst.scheduler().SetShare(inst.uuid, share); err != nil {
		return fmt.Errorf("set share of %s: %w", id, err)
	}
	inst.log.Info("share set", "share", share)
	return nil
}

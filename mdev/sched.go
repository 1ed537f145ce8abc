package mdev

import (
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/aggregator"
)

// ErrNoDevice is returned for a physical device index out of range.
var ErrNoDevice = errors.New("no such device")

func (m *Manager) device(i int) (*aggregator.Device, error) {
	if i < 0 || i >= len(m.devs) {
		return nil, fmt.Errorf("device %d (have %d): %w", i, len(m.devs), ErrNoDevice)
	}
	return m.devs[i], nil
}

// Policy returns physical device i's scheduling policy.
func (m *Manager) Policy(i int) (aggregator.Policy, error) {
	d, err := m.device(i)
	if err != nil {
		return "", err
	}
	return d.Policy(), nil
}

// SetPolicy switches physical device i's scheduling policy at run time.
func (m *Manager) SetPolicy(i int, name string) error {
	d, err := m.device(i)
	if err != nil {
		return err
	}
	p, err := aggregator.ParsePolicy(name)
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
func (m *Manager) Sched(i int) (aggregator.SchedStats, error) {
	d, err := m.device(i)
	if err != nil {
		return aggregator.SchedStats{}, err
	}
	return d.SchedStats(), nil
}

// SetShare sets an instance's weight under the fixed-share policy at run
// time (1..aggregator.MaxShare); it overrides the profile's Share.
func (m *Manager) SetShare(id string, share uint32) error {
	inst, err := m.Get(id)
	if err != nil {
		return err
	}
	if err := m.devs[inst.device].SetShare(inst.uuid, share); err != nil {
		return fmt.Errorf("set share of %s: %w", id, err)
	}
	inst.log.Info("share set", "share", share)
	return nil
}

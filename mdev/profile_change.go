package mdev

import "fmt"

// SetProfile moves an instance to another vGPU type at run time, with the
// VM attached: its device memory quota, its share and the profile name the
// guest reads follow the new type. It fails without changing anything when
// the instance holds more device memory than the new type allows or its
// device already has the new type's maximum of instances.
func (m *Manager) SetProfile(id, name string) (err error) {
	defer m.changedUnless(&err)
	p, ok := m.profiles[name]
	if !ok {
		return fmt.Errorf("set profile of %s: %w %q", id, ErrUnknownProfile, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	inst, ok := m.instances[id]
	if !ok {
		return fmt.Errorf("set profile of %s: %w", id, ErrNotFound)
	}
	old := inst.Profile()
	if old.Name == p.Name {
		return nil
	}
	same := 0
	for _, in := range m.instances {
		if in != inst && in.device == inst.device && in.Profile().Name == p.Name {
			same++
		}
	}
	if same >= p.MaxPerDevice {
		return fmt.Errorf("set profile of %s: device %d holds %d %s instances: %w", id, inst.device, same, p.Name, ErrNoCapacity)
	}
	inst.mu.Lock()
	prev := inst.limits
	inst.mu.Unlock()
	if err := inst.setLimits(limitsOf(p)); err != nil {
		return fmt.Errorf("set profile of %s: %w", id, err)
	}
	if err := inst.scheduler().SetShare(inst.uuid, p.Share); err != nil {
		inst.setLimits(prev) // back to where it was; it held less than either quota
		return fmt.Errorf("set profile of %s: %w", id, err)
	}
	inst.mu.Lock()
	inst.profile = p
	inst.mu.Unlock()
	inst.log.Info("profile changed", "from", old.Name, "to", p.Name)
	return nil
}

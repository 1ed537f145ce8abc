package mdev

import (
	"fmt"

	"github.com/vgpud/vgpud/sched"
	"github.com/vgpud/vgpud/worker"
)

// SetProfile moves an instance to another vGPU type at run time, with the
// VM attached: its device memory quota, its share and the profile name the
// guest reads follow the new type, except a share or limit the operator
// set (carried). It fails without changing anything when
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
	lim, share := carried(prev, inst.Sched().Share, old, p)
	if err := inst.setLimits(lim); err != nil {
		return fmt.Errorf("set profile of %s: %w", id, err)
	}
	if err := inst.scheduler().SetShare(inst.uuid, share); err != nil {
		inst.setLimits(prev) // back to where it was; it held less than either quota
		return fmt.Errorf("set profile of %s: %w", id, err)
	}
	inst.mu.Lock()
	inst.profile = p
	inst.mu.Unlock()
	inst.log.Info("profile changed", "from", old.Name, "to", p.Name)
	return nil
}

// carried is what an instance of profile old, running under limits cur
// and share, gets when it moves to profile p: p's limits and share, except
// each time budget, the program quota and the share that differ from
// old's, which an operator set (vgpuctl limits, set-share) and which it
// keeps. The memory quota always follows p.
func carried(cur worker.Limits, share uint32, old, p Profile) (worker.Limits, uint32) {
	was, next := limitsOf(old), limitsOf(p)
	if cur.KernelTimeout != was.KernelTimeout {
		next.KernelTimeout = cur.KernelTimeout
	}
	if cur.Slice != was.Slice {
		next.Slice = cur.Slice
	}
	if cur.BuildTimeout != was.BuildTimeout {
		next.BuildTimeout = cur.BuildTimeout
	}
	if cur.ProgramBytes != was.ProgramBytes {
		next.ProgramBytes = cur.ProgramBytes
	}
	s := min(p.Share, sched.MaxShare)
	if share != 0 && share != min(old.Share, sched.MaxShare) {
		s = share
	}
	return next, s
}

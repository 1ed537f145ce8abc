package mdev

import (
	"fmt"

	"github.com/vgpud/vgpud/worker"
)

// Limits are an instance's time budgets and program quota (docs/isolation.md),
// set from its profile and changeable at run time.
type Limits struct {
	// KernelTimeout bounds how long one device turn may run, the time it
	// was preempted excluded; a worker whose turn runs longer is ended and
	// its domain's instances lose their device context.
	KernelTimeout Duration `json:"kernel_timeout,omitempty"`
	// TurnTimeout is KernelTimeout's former name, still accepted (from
	// older clients and state files); KernelTimeout wins when both are
	// set. Limits read back carry the value in KernelTimeout only.
	TurnTimeout Duration `json:"turn_timeout,omitempty"`
	// Slice is how long one turn may run while another domain's instance
	// waits before it is preempted (docs/scheduler.md); at least MinSlice.
	Slice Duration `json:"slice,omitempty"`
	// BuildTimeout bounds one program build the same way.
	BuildTimeout Duration `json:"build_timeout,omitempty"`
	// ProgramBytes bounds the programs the instance holds.
	ProgramBytes uint64 `json:"program_bytes,omitempty"`
}

// Limits returns the instance's limits now.
func (i *Instance) Limits() Limits {
	i.mu.Lock()
	defer i.mu.Unlock()
	return Limits{KernelTimeout: Duration(i.limits.KernelTimeout), Slice: Duration(i.limits.Slice),
		BuildTimeout: Duration(i.limits.BuildTimeout), ProgramBytes: i.limits.ProgramBytes}
}

// SetLimits changes an instance's limits at run time; zero fields keep
// their value. It fails without changing anything when the instance holds
// more programs than the new quota (abi.StatusBusy). A later SetProfile
// sets them from the new profile.
func (m *Manager) SetLimits(id string, l Limits) (err error) {
	defer m.changedUnless(&err)
	inst, err := m.Get(id)
	if err != nil {
		return err
	}
	if l.KernelTimeout < 0 || l.TurnTimeout < 0 || l.BuildTimeout < 0 {
		return fmt.Errorf("set limits of %s: negative timeout", id)
	}
	if l.Slice < 0 || (l.Slice != 0 && l.Slice.D() < MinSlice) {
		return fmt.Errorf("set limits of %s: slice %v below %v", id, l.Slice.D(), MinSlice)
	}
	inst.mu.Lock()
	next := inst.limits
	inst.mu.Unlock()
	switch {
	case l.KernelTimeout != 0:
		next.KernelTimeout = l.KernelTimeout.D()
	case l.TurnTimeout != 0:
		next.KernelTimeout = l.TurnTimeout.D()
	}
	if l.Slice != 0 {
		next.Slice = l.Slice.D()
	}
	if l.BuildTimeout != 0 {
		next.BuildTimeout = l.BuildTimeout.D()
	}
	if l.ProgramBytes != 0 {
		next.ProgramBytes = l.ProgramBytes
	}
	if err := inst.setLimits(next); err != nil {
		return fmt.Errorf("set limits of %s: %w", id, err)
	}
	inst.log.Info("limits set", "kernel_timeout", next.KernelTimeout, "slice", next.Slice, "build_timeout", next.BuildTimeout, "program_bytes", next.ProgramBytes)
	return nil
}

// setLimits applies l to the instance's device state and records it.
func (i *Instance) setLimits(l worker.Limits) error {
	if err := i.be.SetLimits(l); err != nil {
		return err
	}
	i.mu.Lock()
	i.limits = l
	i.mu.Unlock()
	return nil
}

package mdev

import (
	"fmt"

	"github.com/vgpud/vgpud/worker"
)

// Limits are an instance's time budgets and program quota (docs/isolation.md),
// set from its profile and changeable at run time.
type Limits struct {
	// TurnTimeout bounds one device turn; a worker whose turn overruns it
	// is ended and its domain's instances lose their device context.
	TurnTimeout Duration `json:"turn_timeout,omitempty"`
	// BuildTimeout bounds one program build the same way.
	BuildTimeout Duration `json:"build_timeout,omitempty"`
	// ProgramBytes bounds the programs the instance holds.
	ProgramBytes uint64 `json:"program_bytes,omitempty"`
}

// Limits returns the instance's limits now.
func (i *Instance) Limits() Limits {
	i.mu.Lock()
	defer i.mu.Unlock()
	return Limits{TurnTimeout: Duration(i.limits.TurnTimeout), BuildTimeout: Duration(i.limits.BuildTimeout),
		ProgramBytes: i.limits.ProgramBytes}
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
	if l.TurnTimeout < 0 || l.BuildTimeout < 0 {
		return fmt.Errorf("set limits of %s: negative timeout", id)
	}
	inst.mu.Lock()
	next := inst.limits
	inst.mu.Unlock()
	if l.TurnTimeout != 0 {
		next.TurnTimeout = l.TurnTimeout.D()
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
	inst.log.Info("limits set", "turn_timeout", next.TurnTimeout, "build_timeout", next.BuildTimeout, "program_bytes", next.ProgramBytes)
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

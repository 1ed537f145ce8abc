package mdev

import (
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/reuse"
)

// DefaultReuseBudget is a manager's byte budget for shadow results when
// ReuseConfig.Budget is 0. It is split evenly among the reuse domains
// that have no budget of their own (docs/reuse.md).
const DefaultReuseBudget = 256 << 20

// ErrReuseOff is returned for reuse settings of a manager whose reuse is
// turned off.
var ErrReuseOff = errors.New("result reuse is off in this vgpud")

// ErrNoDomain is returned for a reuse domain that does not exist.
var ErrNoDomain = errors.New("no such reuse domain")

// ReuseConfig configures result reuse (package reuse) of a Manager.
type ReuseConfig struct {
	// Off turns result reuse off for every instance; no setting can turn
	// it on at run time.
	Off bool `json:"off,omitempty"`
	// Budget bounds the bytes of shadow results the manager holds, split
	// evenly among the domains without a budget set by the operator;
	// 0 means DefaultReuseBudget.
	Budget int64 `json:"budget,omitempty"`
}

// ReuseSetting is an instance's reuse setting.
type ReuseSetting struct {
	// Domain names an operator-defined domain whose instances share
	// results; empty means the instance's private domain.
	Domain string `json:"domain,omitempty"`
	// Off turns reuse off for the instance.
	Off bool `json:"off,omitempty"`
}

// ReuseDomainStatus describes one reuse domain.
type ReuseDomainStatus struct {
	Name    string `json:"name"`
	Shared  bool   `json:"shared"`
	Users   int    `json:"users"`
	Entries int    `json:"entries"`
	Bytes   int64  `json:"bytes"`
	Budget  int64  `json:"budget"`
	Pinned  bool   `json:"pinned_budget,omitempty"` // budget set by the operator
	reuse.Snapshot
}

// ReuseDomains describes the reuse domains ordered by name (none when
// reuse is off).
func (m *Manager) ReuseDomains() []ReuseDomainStatus {
	if m.reuse == nil {
		return nil
	}
	m.mu.Lock()
	pinned := make(map[string]bool, len(m.reusePinned))
	for n := range m.reusePinned {
		pinned[n] = true
	}
	m.mu.Unlock()
	var out []ReuseDomainStatus
	for _, d := range m.reuse.Domains() {
		out = append(out, ReuseDomainStatus{Name: d.Name(), Shared: d.Shared(), Users: d.Users(), Entries: d.Entries(),
			Bytes: d.Bytes(), Budget: d.Budget(), Pinned: pinned[d.Name()], Snapshot: d.Stats.Snapshot()})
	}
	return out
}

// ReuseDomain returns the name of the instance's reuse domain, "" when
// reuse is off for it.
func (i *Instance) ReuseDomain() string {
	if d := i.agg.ReuseDomain(); d != nil {
		return d.Name()
	}
	return ""
}

// ReuseStats returns the instance's reuse counters.
func (i *Instance) ReuseStats() reuse.Snapshot { return i.agg.ReuseStats().Snapshot() }

// SetReuse changes an instance's reuse domain at run time. Results the
// instance recorded stay in the domain they were recorded in (a private
// domain keeps them until the instance is destroyed).
func (m *Manager) SetReuse(id string, s ReuseSetting) error {
	inst, err := m.Get(id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.applyReuseLocked(inst, s); err != nil {
		return fmt.Errorf("set reuse of %s: %w", id, err)
	}
	inst.log.Info("reuse set", "domain", inst.ReuseDomain())
	return nil
}

// applyReuseLocked attaches inst to the domain s names.
func (m *Manager) applyReuseLocked(inst *Instance, s ReuseSetting) error {
	if s.Off {
		inst.agg.SetReuseDomain(nil)
		return nil
	}
	if m.reuse == nil {
		return ErrReuseOff
	}
	var d *reuse.Domain
	if s.Domain == "" {
		d = m.reuse.Private(inst.uuid)
	} else {
		var err error
		if d, err = m.reuse.Shared(s.Domain); err != nil {
			return err
		}
	}
	inst.agg.SetReuseDomain(d)
	m.rebalanceReuseLocked()
	return nil
}

// dropReuseLocked detaches a departing instance and frees its private
// domain.
func (m *Manager) dropReuseLocked(inst *Instance) {
	if m.reuse == nil {
		return
	}
	inst.agg.SetReuseDomain(nil)
	if d, ok := m.reuse.Lookup(reuse.PrivatePrefix + inst.uuid); ok {
		m.reuse.Drop(d)
	}
	m.rebalanceReuseLocked()
}

// SetReuseBudget pins domain name's byte budget (it then no longer takes
// part in the even split of the manager's budget); a negative n unpins it.
func (m *Manager) SetReuseBudget(name string, n int64) error {
	if m.reuse == nil {
		return ErrReuseOff
	}
	d, ok := m.reuse.Lookup(name)
	if !ok {
		return fmt.Errorf("reuse domain %q: %w", name, ErrNoDomain)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 {
		delete(m.reusePinned, name)
	} else {
		m.reusePinned[name] = n
		d.SetBudget(n)
	}
	m.rebalanceReuseLocked()
	m.log.Info("reuse budget set", "domain", name, "budget", n)
	return nil
}

// rebalanceReuseLocked splits the manager's budget evenly among the
// domains whose budget is not pinned.
func (m *Manager) rebalanceReuseLocked() {
	doms := m.reuse.Domains()
	var free []*reuse.Domain
	for _, d := range doms {
		if n, ok := m.reusePinned[d.Name()]; ok {
			d.SetBudget(n)
		} else {
			free = append(free, d)
		}
	}
	for _, d := range free {
		d.SetBudget(m.reuseBudget / int64(len(free)))
	}
	for n := range m.reusePinned { // forget pins of dropped domains
		if _, ok := m.reuse.Lookup(n); !ok {
			delete(m.reusePinned, n)
		}
	}
}

package mdev

import (
	"fmt"

	"github.com/vgpud/vgpud/reuse"
)

// DefaultReuseBudget is a manager's byte budget for shadow results when
// ReuseConfig.Budget is 0. It is split evenly among the reuse domains
// that have no budget of their own (docs/reuse.md).
const DefaultReuseBudget = 256 << 20

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
// reuse is off): each is one trust domain, with its worker processes'
// reuse tables.
func (m *Manager) ReuseDomains() []ReuseDomainStatus {
	if !m.reuseOn {
		return nil
	}
	m.mu.Lock()
	pinned := make(map[string]bool, len(m.reusePinned))
	for n := range m.reusePinned {
		pinned[n] = true
	}
	users := m.domainUsersLocked()
	m.mu.Unlock()
	var out []ReuseDomainStatus
	for _, d := range m.pool.Domains() {
		if users[d.Name] == 0 {
			continue // a domain whose instances all have reuse off
		}
		out = append(out, ReuseDomainStatus{Name: d.Name, Shared: d.Shared, Users: users[d.Name], Entries: int(d.Entries),
			Bytes: d.Bytes, Budget: d.Budget, Pinned: pinned[d.Name], Snapshot: reuse.Snapshot{
				Hits: d.Hits, Misses: d.Misses, Skipped: d.Skipped, Recorded: d.Recorded, Evictions: d.Evictions,
				BytesSaved: d.BytesSaved, DeviceNanos: d.DeviceNanos,
			}})
	}
	return out
}

// domainUsersLocked counts, per domain, the instances with reuse on in it.
func (m *Manager) domainUsersLocked() map[string]int {
	users := map[string]int{}
	for _, in := range m.instances {
		if !in.reuse.Off {
			users[trustDomain(in.uuid, in.reuse)]++
		}
	}
	return users
}

// ReuseDomain returns the name of the instance's reuse domain, "" when
// reuse is off for it.
func (i *Instance) ReuseDomain() string {
	if i.reuse.Off {
		return ""
	}
	return i.be.Domain()
}

// ReuseStats returns the instance's reuse counters.
func (i *Instance) ReuseStats() reuse.Snapshot { return i.be.Shared().Reuse.Snapshot() }

// SetReuse changes an instance's reuse setting at run time. Turning reuse
// off or on keeps the instance in its trust domain; naming another domain
// moves it to that domain's worker, which only an instance that holds no
// buffer or program can do (its device state stays behind; reset its
// device first): otherwise it fails with abi.StatusBusy.
func (m *Manager) SetReuse(id string, s ReuseSetting) (err error) {
	defer m.changedUnless(&err)
	inst, err := m.Get(id)
	if err != nil {
		return err
	}
	if !s.Off && !m.reuseOn {
		return fmt.Errorf("set reuse of %s: %w", id, ErrReuseOff)
	}
	if s.Domain != "" {
		if err := reuse.ValidDomainName(s.Domain); err != nil {
			return fmt.Errorf("set reuse of %s: %w", id, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := inst.reuse
	if s.Off {
		// Off: stay in the trust domain it is in.
		s.Domain = cur.Domain
	} else if trustDomain(id, s) != trustDomain(id, cur) {
		if err := inst.be.Move(trustDomain(id, s), s.Domain != ""); err != nil {
			return fmt.Errorf("set reuse of %s: %w", id, err)
		}
	}
	if err := inst.be.SetReuse(!s.Off); err != nil {
		return fmt.Errorf("set reuse of %s: %w", id, err)
	}
	inst.reuse = s
	m.rebalanceReuseLocked()
	inst.log.Info("reuse set", "domain", inst.ReuseDomain())
	return nil
}

// SetReuseBudget pins domain name's byte budget (it then no longer takes
// part in the even split of the manager's budget); a negative n unpins it.
func (m *Manager) SetReuseBudget(name string, n int64) (err error) {
	defer m.changedUnless(&err)
	if !m.reuseOn {
		return ErrReuseOff
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.domainUsersLocked()[name] == 0 {
		return fmt.Errorf("reuse domain %q: %w", name, ErrNoDomain)
	}
	if n < 0 {
		delete(m.reusePinned, name)
	} else {
		m.reusePinned[name] = n
	}
	m.rebalanceReuseLocked()
	m.log.Info("reuse budget set", "domain", name, "budget", n)
	return nil
}

// rebalanceReuseLocked splits the manager's budget evenly among the
// domains in use whose budget is not pinned, and forgets domains no
// instance uses any more.
func (m *Manager) rebalanceReuseLocked() {
	if !m.reuseOn {
		return
	}
	users := m.domainUsersLocked()
	var free []string
	for name := range users {
		if n, ok := m.reusePinned[name]; ok {
			m.pool.SetBudget(name, n)
		} else {
			free = append(free, name)
		}
	}
	for _, name := range free {
		m.pool.SetBudget(name, m.reuseBudget/int64(len(free)))
	}
	for name := range m.reusePinned {
		if users[name] == 0 {
			delete(m.reusePinned, name)
		}
	}
	for name := range m.budgeted {
		if users[name] == 0 {
			m.pool.DropDomain(name)
			delete(m.budgeted, name)
		}
	}
	for name := range users {
		m.budgeted[name] = true
	}
}

package mdev

import (
	"context"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/worker"
)

// OvercommitPolicy is what happens when an instance's allocation fits its
// quota (the memory its profile advertises) but not its physical device
// (docs/overcommit.md).
type OvercommitPolicy string

// The overcommit policies.
const (
	// OvercommitNone: the allocation fails at once with
	// abi.StatusOutOfResources.
	OvercommitNone OvercommitPolicy = "none"
	// OvercommitBlock: the command waits until other instances free
	// memory, up to the timeout, then fails with StatusOutOfResources.
	OvercommitBlock OvercommitPolicy = "block"
	// OvercommitMigrate: the instance moves to another device of this
	// daemon with room, where the command completes; with none, it
	// waits as with block.
	OvercommitMigrate OvercommitPolicy = "migrate"
	// OvercommitSuspend: the instance's device state goes out to host
	// memory, freeing the device; it comes back, and the command
	// completes, once the device has room for it and the allocation.
	OvercommitSuspend OvercommitPolicy = "suspend"
)

// DefaultOvercommitTimeout bounds a blocked allocation when the setting
// leaves it 0.
const DefaultOvercommitTimeout = 30 * time.Second

// retryAfterFailedMove is how long after a move that failed an instance's
// shortages wait (block) instead of moving again.
const retryAfterFailedMove = 30 * time.Second

// Overcommit is an overcommit setting: a profile's default, or an
// instance's own.
type Overcommit struct {
	Policy OvercommitPolicy `json:"policy,omitempty"` // "": none (a profile), the profile's (an instance)
	// Timeout bounds how long a blocked allocation waits; 0:
	// DefaultOvercommitTimeout.
	Timeout Duration `json:"timeout,omitempty"`
}

// Validate checks o.
func (o Overcommit) Validate() error {
	switch o.Policy {
	case "", OvercommitNone, OvercommitBlock, OvercommitMigrate, OvercommitSuspend:
	default:
		return fmt.Errorf("overcommit policy %q: want none, block, migrate or suspend", o.Policy)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("overcommit timeout %v is negative", o.Timeout.D())
	}
	return nil
}

func (o Overcommit) timeout() time.Duration {
	if o.Timeout == 0 {
		return DefaultOvercommitTimeout
	}
	return o.Timeout.D()
}

// OvercommitStats counts an instance's moves for want of device memory.
type OvercommitStats struct {
	Migrations  uint64 `json:"migrations"`  // moves to another device
	Suspensions uint64 `json:"suspensions"` // trips out to host memory
	Failed      uint64 `json:"failed"`      // moves that went back
	Suspended   bool   `json:"suspended"`   // out in host memory now
}

// OvercommitOf returns the setting in force for an instance: its own, or
// its profile's.
func (m *Manager) OvercommitOf(id string) (Overcommit, error) {
	inst, err := m.Get(id)
	if err != nil {
		return Overcommit{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.overcommitLocked(inst), nil
}

// OwnOvercommit returns the instance's own setting (Policy "": none; it
// follows its profile's).
func (m *Manager) OwnOvercommit(inst *Instance) Overcommit {
	m.mu.Lock()
	defer m.mu.Unlock()
	return inst.overcommit
}

func (m *Manager) overcommitLocked(inst *Instance) Overcommit {
	if inst.overcommit.Policy != "" {
		return inst.overcommit
	}
	o := m.profileOC[inst.Profile().Name]
	if o.Policy == "" {
		o.Policy = OvercommitNone
	}
	return o
}

// SetOvercommit sets an instance's own overcommit setting (Policy "":
// follow its profile's).
func (m *Manager) SetOvercommit(id string, o Overcommit) (err error) {
	defer m.changedUnless(&err)
	if err := o.Validate(); err != nil {
		return fmt.Errorf("set overcommit of %s: %w", id, err)
	}
	inst, err := m.Get(id)
	if err != nil {
		return err
	}
	m.mu.Lock()
	inst.overcommit = o
	m.mu.Unlock()
	inst.log.Info("overcommit set", "policy", o.Policy, "timeout", o.timeout())
	return nil
}

// SetProfileOvercommit changes a vGPU type's default overcommit setting
// at run time; instances of it without their own setting follow.
func (m *Manager) SetProfileOvercommit(name string, o Overcommit) (err error) {
	defer m.changedUnless(&err)
	if err := o.Validate(); err != nil {
		return fmt.Errorf("set overcommit of profile %s: %w", name, err)
	}
	if _, ok := m.profiles[name]; !ok {
		return fmt.Errorf("set overcommit of profile %s: %w", name, ErrUnknownProfile)
	}
	m.mu.Lock()
	m.profileOC[name] = o
	m.profileOCSet[name] = true
	m.mu.Unlock()
	m.log.Info("profile overcommit set", "profile", name, "policy", o.Policy, "timeout", o.timeout())
	return nil
}

// ProfileOvercommitSet returns the profiles whose overcommit setting an
// operator changed at run time, with it, by name.
func (m *Manager) ProfileOvercommitSet() []Profile {
	var out []Profile
	for _, p := range m.Profiles() {
		m.mu.Lock()
		set := m.profileOCSet[p.Name]
		m.mu.Unlock()
		if set {
			out = append(out, p)
		}
	}
	return out
}

// shortage is the pool's Shortage: what an allocation of want bytes by
// instance id that does not fit device dev does (docs/overcommit.md).
func (m *Manager) shortage(dev int, id string, want uint64) (plan worker.ShortagePlan) {
	m.mu.Lock()
	inst := m.instances[id]
	if inst == nil || m.closed {
		m.mu.Unlock()
		return worker.ShortagePlan{Why: "instance going away"}
	}
	oc := m.overcommitLocked(inst)
	moves := oc.Policy == OvercommitMigrate || oc.Policy == OvercommitSuspend
	switch {
	case !moves:
	case m.paused:
		// An upgrade in place is handing the instances over: no move now.
		m.mu.Unlock()
		return worker.ShortagePlan{Wait: oc.timeout(), Why: fmt.Sprintf("policy %s, but vgpud is being upgraded: waiting", oc.Policy)}
	case !inst.relocating.CompareAndSwap(false, true):
		// Claimed under mu, so that Pause and Realloc see it.
		m.mu.Unlock()
		return worker.ShortagePlan{Why: "the instance is being moved"}
	}
	m.mu.Unlock()
	if moves {
		// Unless a move starts, the claim goes.
		defer func() {
			if !plan.Relocate {
				inst.relocating.Store(false)
			}
		}()
	}
	ledger := m.pool.Memory(dev)
	held := ledger.Held(id)
	switch {
	case oc.Policy == OvercommitBlock:
		return worker.ShortagePlan{Wait: oc.timeout(), Why: "policy block"}
	case !moves:
		return worker.ShortagePlan{Why: "policy none"}
	}
	if failed := inst.movedFailed.Load(); failed != 0 && time.Since(time.Unix(0, failed)) < retryAfterFailedMove {
		return worker.ShortagePlan{Wait: oc.timeout(), Why: fmt.Sprintf("policy %s, but the last move failed: waiting", oc.Policy)}
	}
	if oc.Policy == OvercommitMigrate {
		target := m.roomFor(inst, dev, held+want)
		if target < 0 {
			return worker.ShortagePlan{Wait: oc.timeout(), Why: "policy migrate, but no other device has room: waiting"}
		}
		if !m.goOwned(func() {
			defer inst.relocating.Store(false)
			if _, err := m.move(m.ctx, inst, target, nil, nil); err != nil {
				m.pool.Memory(target).DropCredit(id)
				inst.log.Warn("overcommit: move failed", "to", target, "err", err)
				return
			}
			inst.overStats.migrations.Add(1)
		}) {
			m.pool.Memory(target).DropCredit(id)
			return worker.ShortagePlan{Why: "vgpud is stopping"}
		}
		return worker.ShortagePlan{Relocate: true, Why: fmt.Sprintf("policy migrate: to device %d", target)}
	}
	// Suspend.
	if need := held + want; need > ledger.Capacity() {
		return worker.ShortagePlan{Why: fmt.Sprintf("policy suspend, but the device can never hold %d bytes", need)}
	}
	if !m.goOwned(func() {
		defer inst.relocating.Store(false)
		hold := func(ctx context.Context, _ uint64) error {
			inst.suspended.Store(true)
			defer inst.suspended.Store(false)
			inst.log.Info("overcommit: suspended to host memory until the device has room", "device", dev, "need", held+want)
			return ledger.ReserveCredit(ctx, id, held+want)
		}
		st, err := m.move(m.ctx, inst, dev, nil, hold)
		if err != nil {
			ledger.DropCredit(id)
			inst.log.Warn("overcommit: suspension failed", "err", err)
			return
		}
		inst.overStats.suspensions.Add(1)
		inst.log.Info("overcommit: resumed from host memory", "suspended", st.Held)
	}) {
		return worker.ShortagePlan{Why: "vgpud is stopping"}
	}
	return worker.ShortagePlan{Relocate: true, Why: "policy suspend"}
}

// goOwned runs f in a goroutine the manager waits for on Close, unless it
// is closing.
func (m *Manager) goOwned(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// roomFor returns a device other than from whose ledger now holds need
// bytes for the instance (as a credit) and that takes another instance of
// its profile, or -1.
func (m *Manager) roomFor(inst *Instance, from int, need uint64) int {
	p := inst.Profile()
	m.mu.Lock()
	defer m.mu.Unlock()
	same := make([]int, len(m.infos))
	for _, in := range m.instances {
		if in != inst && in.Profile().Name == p.Name {
			same[in.device]++
		}
	}
	for dev := range m.infos {
		if dev == from || same[dev] >= p.MaxPerDevice {
			continue
		}
		if m.pool.Memory(dev).TryCredit(inst.uuid, need) {
			return dev
		}
	}
	return -1
}

// move relocates inst's device state to device to (the same device: out
// to host memory and back, after hold), optionally under new limits,
// and records where it landed.
func (m *Manager) move(ctx context.Context, inst *Instance, to int, lim *worker.Limits, hold func(context.Context, uint64) error) (worker.ReallocStats, error) {
	r, err := worker.AsReallocator(inst.be)
	if err != nil {
		return worker.ReallocStats{}, err
	}
	inst.mu.Lock()
	from, oldSched := inst.device, inst.sched
	inst.mu.Unlock()
	share := oldSched.Client(inst.uuid).Share
	if to != from {
		if err := m.pool.Sched(to).SetShare(inst.uuid, share); err != nil {
			return worker.ReallocStats{}, fmt.Errorf("move %s: %w", inst.uuid, err)
		}
	}
	st, err := r.Realloc(ctx, worker.ReallocTarget{Device: to, Limits: lim, Hold: hold})
	if st.To != from {
		m.mu.Lock()
		inst.mu.Lock()
		inst.device, inst.sched = st.To, m.pool.Sched(st.To)
		inst.memTotal.Store(m.infos[st.To].GlobalMemBytes)
		inst.mu.Unlock()
		m.mu.Unlock()
	} else if to != from {
		m.pool.Sched(to).Remove(inst.uuid)
	}
	if err != nil {
		inst.overStats.failed.Add(1)
		inst.movedFailed.Store(time.Now().UnixNano())
		return st, err
	}
	inst.peakSince.Store(time.Now().UnixNano())
	if m.onChange != nil && st.To != from {
		m.onChange()
	}
	return st, nil
}

// Overcommit returns the instance's overcommit counters.
func (i *Instance) Overcommit() OvercommitStats {
	return OvercommitStats{Migrations: i.overStats.migrations.Load(), Suspensions: i.overStats.suspensions.Load(),
		Failed: i.overStats.failed.Load(), Suspended: i.suspended.Load()}
}

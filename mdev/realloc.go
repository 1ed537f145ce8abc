package mdev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vgpud/vgpud/mdev/agentchan"
	"github.com/vgpud/vgpud/worker"
)

// Reallocation errors callers tell apart.
var (
	// ErrReallocRefused: the guest's programs declared a minimum the new
	// limits do not meet, or did not answer and what the instance holds
	// does not fit the new profile.
	ErrReallocRefused = errors.New("reallocation refused")
	// ErrReallocating: the instance is already being moved.
	ErrReallocating = errors.New("the instance is being moved")
)

// DefaultReallocDeadline bounds each of the guest's answers to a
// reallocation (checkpoint, reconfigure) when the request leaves it 0.
const DefaultReallocDeadline = 30 * time.Second

// ReallocRequest asks to move an instance to another physical device or
// profile (or both) while its VM runs (docs/overcommit.md
// "Reallocation").
type ReallocRequest struct {
	Device  *int   `json:"device,omitempty"`  // nil: stay on its device
	Profile string `json:"profile,omitempty"` // "": keep its profile
	// Deadline bounds each of the guest's two answers; 0:
	// DefaultReallocDeadline.
	Deadline Duration `json:"deadline,omitempty"`
}

// ReallocResult says what a reallocation did.
type ReallocResult struct {
	From        int    `json:"from"`
	To          int    `json:"to"`
	FromProfile string `json:"from_profile"`
	ToProfile   string `json:"to_profile"`
	// Programs is how many guest programs checkpointed and resumed
	// (the reconfiguration API); Transparent: the state moved whole
	// without them (none registered, or they did not answer).
	Programs    uint32 `json:"programs"`
	Transparent bool   `json:"transparent"`
	StateBytes  uint64 `json:"state_bytes"`
	// Stopped is how long the ring was frozen; Checkpoint and Resume
	// how long the guest's programs took to answer.
	Stopped    Duration `json:"stopped"`
	Checkpoint Duration `json:"checkpoint"`
	Resume     Duration `json:"resume"`
	Total      Duration `json:"total"`
}

// limitsFor are the limits a guest is told for profile p on device dev.
func (m *Manager) limitsFor(p Profile, dev int) agentchan.ReconfigLimits {
	return agentchan.ReconfigLimits{MemBytes: p.MemBytes, ComputeUnits: m.infos[dev].ComputeUnits,
		Device: m.infos[dev].Name, Profile: p.Name}
}

// Realloc moves an instance to another device or profile while its VM
// runs. When programs in the guest registered for reconfiguration, they
// are asked first to checkpoint and release their device state (R.1,
// R.2); after the move they are told the new limits and resume (R.3,
// R.4). A program whose declared minimum the new limits do not meet
// refuses, and nothing moves. Programs that do not answer in time are
// moved transparently (their device state whole) if it fits the new
// profile; otherwise the reallocation is refused and they are told to
// resume as they were.
func (m *Manager) Realloc(ctx context.Context, id string, req ReallocRequest) (res ReallocResult, err error) {
	start := time.Now()
	inst, err := m.Get(id)
	if err != nil {
		return res, err
	}
	if _, err := worker.AsReallocator(inst.be); err != nil {
		return res, fmt.Errorf("realloc %s: %w", id, err)
	}
	from, old := inst.Device(), inst.Profile()
	to, p := from, old
	if req.Device != nil {
		if *req.Device < 0 || *req.Device >= len(m.infos) {
			return res, fmt.Errorf("realloc %s: device %d (have %d): %w", id, *req.Device, len(m.infos), ErrNoDevice)
		}
		to = *req.Device
	}
	if req.Profile != "" {
		var ok bool
		if p, ok = m.profiles[req.Profile]; !ok {
			return res, fmt.Errorf("realloc %s: %w %q", id, ErrUnknownProfile, req.Profile)
		}
	}
	res = ReallocResult{From: from, To: to, FromProfile: old.Name, ToProfile: p.Name}
	if to == from && p.Name == old.Name {
		return res, fmt.Errorf("realloc %s: already %s on device %d", id, p.Name, to)
	}
	if err := m.roomForProfile(inst, p, to); err != nil {
		return res, fmt.Errorf("realloc %s: %w", id, err)
	}
	m.mu.Lock() // claimed under mu, so that Pause sees it
	paused := m.paused
	claimed := !paused && inst.relocating.CompareAndSwap(false, true)
	m.mu.Unlock()
	switch {
	case paused:
		return res, fmt.Errorf("realloc %s: vgpud is being upgraded in place: %w", id, ErrReallocating)
	case !claimed:
		return res, fmt.Errorf("realloc %s: %w", id, ErrReallocating)
	}
	defer inst.relocating.Store(false)
	deadline := req.Deadline.D()
	if deadline <= 0 {
		deadline = DefaultReallocDeadline
	}
	log := inst.log.With("from", from, "to", to, "from_profile", old.Name, "to_profile", p.Name)

	// R.1, R.2: the guest's programs checkpoint and let go.
	a := inst.Agent()
	coop := a != nil && a.Reconfigurable()
	if coop {
		t := time.Now()
		n, err := a.Checkpoint(ctx, m.limitsFor(p, to), deadline)
		res.Checkpoint = Duration(time.Since(t))
		switch {
		case err == nil:
			res.Programs = n
		case errors.Is(err, agentchan.ErrBelowMinimum):
			m.abortRealloc(a, old, from, deadline, log)
			return res, fmt.Errorf("realloc %s: %w: a guest program needs more than %s on %s: %w", id, ErrReallocRefused, p.Name, m.infos[to].Name, err)
		default:
			log.Warn("reallocation: the guest's programs did not checkpoint; moving their state whole", "err", err)
			coop = false
		}
	}
	res.Transparent = !coop
	if held := inst.MemUsed(); held > p.MemBytes {
		if a != nil && a.Reconfigurable() {
			m.abortRealloc(a, old, from, deadline, log)
		}
		return res, fmt.Errorf("realloc %s: %w: it holds %d bytes, %s allows %d", id, ErrReallocRefused, held, p.Name, p.MemBytes)
	}

	// The move (or, on the same device, the new quota), keeping the
	// limits and share an operator set (carried).
	inst.mu.Lock()
	cur := inst.limits
	inst.mu.Unlock()
	lim, share := carried(cur, inst.Sched().Share, old, p)
	if to == from {
		err = inst.setLimits(lim)
	} else {
		if !m.pool.Memory(to).TryCredit(id, inst.MemUsed()) {
			err = fmt.Errorf("device %d has %d bytes free, the instance holds %d", to, m.pool.Memory(to).Free(), inst.MemUsed())
		} else {
			var st worker.ReallocStats
			st, err = m.move(ctx, inst, to, &lim, nil)
			res.StateBytes, res.Stopped = st.StateBytes, Duration(st.Stopped)
			m.pool.Memory(to).DropCredit(id)
		}
	}
	if err != nil {
		if a != nil && a.Reconfigurable() {
			m.abortRealloc(a, old, from, deadline, log)
		}
		return res, fmt.Errorf("realloc %s: %w", id, err)
	}
	m.mu.Lock()
	inst.mu.Lock()
	inst.profile = p
	inst.limits = lim // what the worker now runs under (setLimits or the move)
	inst.mu.Unlock()
	m.mu.Unlock()
	if err := inst.scheduler().SetShare(id, share); err != nil {
		log.Warn("reallocation: share", "err", err)
	}
	inst.peakSince.Store(time.Now().UnixNano())
	if m.onChange != nil {
		m.onChange()
	}

	// R.3, R.4: the new limits; the programs continue.
	if a != nil && a.Reconfigurable() {
		t := time.Now()
		n, err := a.Reconfigure(ctx, m.limitsFor(p, to), false, deadline)
		res.Resume = Duration(time.Since(t))
		if err != nil {
			log.Warn("reallocation: the guest's programs did not all resume", "resumed", n, "err", err)
		}
	}
	res.Total = Duration(time.Since(start))
	log.Info("instance reallocated", "programs", res.Programs, "transparent", res.Transparent,
		"state_bytes", res.StateBytes, "stopped", res.Stopped.D(), "total", res.Total.D())
	return res, nil
}

// abortRealloc tells the guest's programs the reallocation did not
// happen: they resume under the limits they had.
func (m *Manager) abortRealloc(a *agentchan.Server, p Profile, dev int, deadline time.Duration, log interface {
	Warn(string, ...any)
}) {
	ctx, cancel := context.WithTimeout(m.ctx, deadline)
	defer cancel()
	if _, err := a.Reconfigure(ctx, m.limitsFor(p, dev), true, deadline); err != nil {
		log.Warn("reallocation abandoned: the guest's programs did not all resume", "err", err)
	}
}

// roomForProfile checks that device dev takes one more instance of p.
func (m *Manager) roomForProfile(inst *Instance, p Profile, dev int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	same := 0
	for _, in := range m.instances {
		if in != inst && in.device == dev && in.Profile().Name == p.Name {
			same++
		}
	}
	if same >= p.MaxPerDevice {
		return fmt.Errorf("device %d holds %d %s instances: %w", dev, same, p.Name, ErrNoCapacity)
	}
	return nil
}

// Resources is what an instance's guest programs declared and what it
// holds (vgpuctl resources).
type Resources struct {
	UUID      string                  `json:"uuid"`
	Profile   string                  `json:"profile"`
	Device    int                     `json:"device"`
	Declared  []agentchan.Declaration `json:"declared"`
	Quota     uint64                  `json:"quota_bytes"`      // what the profile advertises
	Used      uint64                  `json:"used_bytes"`       // buffers the instance holds
	Peak      uint64                  `json:"peak_bytes"`       // the most it held on its device since it got there
	PeakSince time.Time               `json:"peak_since"`       // since when Peak counts
	CUs       uint32                  `json:"compute_units"`    // the device's
	DevFree   uint64                  `json:"device_free"`      // device memory no instance holds
	DevMem    uint64                  `json:"device_capacity"`  // device memory instances may hold together
	Policy    Overcommit              `json:"overcommit"`       // the setting in force
	Stats     OvercommitStats         `json:"overcommit_stats"` // moves and suspensions
	Proposal  *DowngradeProposal      `json:"proposal,omitempty"`
	Moving    bool                    `json:"moving"`
	Reconfig  bool                    `json:"reconfigurable"` // some guest program registered for reconfiguration
}

// Resources returns an instance's declared and used resources.
func (m *Manager) Resources(id string) (Resources, error) {
	inst, err := m.Get(id)
	if err != nil {
		return Resources{}, err
	}
	dev, p := inst.Device(), inst.Profile()
	l := m.pool.Memory(dev)
	r := Resources{UUID: id, Profile: p.Name, Device: dev, Quota: inst.MemQuota(), Used: inst.MemUsed(),
		Peak: l.Peak(id), PeakSince: time.Unix(0, inst.peakSince.Load()), CUs: m.infos[dev].ComputeUnits,
		DevFree: l.Free(), DevMem: l.Capacity(), Stats: inst.Overcommit(), Moving: inst.relocating.Load()}
	if oc, err := m.OvercommitOf(id); err == nil {
		r.Policy = oc
	}
	if a := inst.Agent(); a != nil {
		r.Declared = a.Declared()
		r.Reconfig = a.Reconfigurable()
	}
	if pr, ok := m.proposal(inst, 0); ok {
		r.Proposal = &pr
	}
	return r, nil
}

// DowngradeProposal proposes a smaller profile for an instance whose peak
// device memory stayed below it.
type DowngradeProposal struct {
	UUID   string    `json:"uuid"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Peak   uint64    `json:"peak_bytes"`
	Since  time.Time `json:"since"`
	Saving uint64    `json:"saving_bytes"` // quota given back
}

// downgradeMargin is the headroom a proposal keeps above the peak.
const downgradeMargin = 1.25

// proposal returns a downgrade for inst if its peak since peakSince, a
// stretch at least window long, fits a smaller profile with headroom.
func (m *Manager) proposal(inst *Instance, window time.Duration) (DowngradeProposal, bool) {
	since := time.Unix(0, inst.peakSince.Load())
	if time.Since(since) < window {
		return DowngradeProposal{}, false
	}
	cur := inst.Profile()
	peak := m.pool.Memory(inst.Device()).Peak(inst.uuid)
	if u := inst.MemUsed(); u > peak {
		peak = u // in process there is no ledger
	}
	var best *Profile
	for _, q := range sortedProfiles(m.profiles) {
		if q.MemBytes >= cur.MemBytes || float64(q.MemBytes) < float64(peak)*downgradeMargin {
			continue
		}
		if best == nil || q.MemBytes < best.MemBytes {
			best = &q
		}
	}
	if best == nil {
		return DowngradeProposal{}, false
	}
	return DowngradeProposal{UUID: inst.uuid, From: cur.Name, To: best.Name, Peak: peak, Since: since,
		Saving: cur.MemBytes - best.MemBytes}, true
}

// Proposals lists the downgrades the policy proposes: instances whose peak
// device memory over at least window stayed below a smaller profile
// (with 25% headroom). Nothing is moved: an operator (or an automation
// through the control API) applies one with Realloc.
func (m *Manager) Proposals(window time.Duration) []DowngradeProposal {
	var out []DowngradeProposal
	for _, inst := range m.List() {
		if p, ok := m.proposal(inst, window); ok {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b DowngradeProposal) int { return int(b.Saving>>20) - int(a.Saving>>20) })
	return out
}

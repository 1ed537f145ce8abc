package runstate

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/vgpud/vgpud/mdev"
)

// Capture is m's state now: every instance in creation order, every
// device's policy, every pinned reuse budget, the placement set at run
// time.
func Capture(m *mdev.Manager) State {
	var st State
	for _, in := range m.List() {
		st.Instances = append(st.Instances, Instance{
			UUID: in.UUID(), Profile: in.Profile().Name, Device: in.Device(),
			Reuse: m.ReuseSettingOf(in), Share: in.Sched().Share, Limits: in.Limits(),
			Overcommit: m.OwnOvercommit(in), Name: in.Name(), Labels: in.Labels(),
		})
	}
	for i := range m.Devices() {
		if p, err := m.Policy(i); err == nil {
			st.Policies = append(st.Policies, Policy{Device: i, Policy: string(p)})
		}
	}
	for _, d := range m.ReuseDomains() {
		if d.Pinned {
			st.ReuseBudgets = append(st.ReuseBudgets, ReuseBudget{Domain: d.Name, Bytes: d.Budget})
		}
	}
	if p, ds, ok := m.PlacementSet(); ok {
		st.Placement = &Placement{Policy: string(p), Dataset: ds}
	}
	for _, p := range m.ProfileOvercommitSet() {
		st.ProfileOvercommit = append(st.ProfileOvercommit, ProfileOvercommit{Profile: p.Name, Overcommit: p.Overcommit})
	}
	return st
}

// Restore recreates st in m: the instances with their UUIDs, profiles,
// devices, reuse settings, shares and limits, then the policies, the
// pinned budgets and the placement. It goes on past what m refuses (a profile or device the
// daemon no longer has): kept are the records of the instances it could
// not create, to be written back rather than forgotten, and err says what
// failed.
func Restore(m *mdev.Manager, st State) (kept []Instance, err error) {
	var errs []error
	for _, r := range st.Instances {
		dev := r.Device
		in, cerr := m.Create(mdev.CreateRequest{UUID: r.UUID, Profile: r.Profile, Device: &dev,
			ReuseDomain: r.Reuse.Domain, NoReuse: r.Reuse.Off, Name: r.Name, Labels: r.Labels})
		if cerr != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", r.UUID, cerr))
			kept = append(kept, r)
			continue
		}
		if r.Share != 0 && r.Share != in.Profile().Share {
			if serr := m.SetShare(r.UUID, r.Share); serr != nil {
				errs = append(errs, fmt.Errorf("instance %s: %w", r.UUID, serr))
			}
		}
		if lerr := m.SetLimits(r.UUID, r.Limits); lerr != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", r.UUID, lerr))
		}
		if r.Overcommit != (mdev.Overcommit{}) {
			if oerr := m.SetOvercommit(r.UUID, r.Overcommit); oerr != nil {
				errs = append(errs, fmt.Errorf("instance %s: %w", r.UUID, oerr))
			}
		}
	}
	for _, p := range st.Policies {
		if perr := m.SetPolicy(p.Device, p.Policy); perr != nil {
			errs = append(errs, fmt.Errorf("device %d policy: %w", p.Device, perr))
		}
	}
	for _, b := range st.ReuseBudgets {
		if berr := m.SetReuseBudget(b.Domain, b.Bytes); berr != nil {
			errs = append(errs, fmt.Errorf("reuse budget of %s: %w", b.Domain, berr))
		}
	}
	for _, p := range st.ProfileOvercommit {
		if oerr := m.SetProfileOvercommit(p.Profile, p.Overcommit); oerr != nil {
			errs = append(errs, fmt.Errorf("profile %s overcommit: %w", p.Profile, oerr))
		}
	}
	if p := st.Placement; p != nil {
		if perr := m.SetPlacement(mdev.PlacementPolicy(p.Policy), p.Dataset); perr != nil {
			errs = append(errs, fmt.Errorf("placement: %w", perr))
		}
	}
	return kept, errors.Join(errs...)
}

// Store writes the run directory's state file whenever the manager it is
// attached to changes (mdev.Config.OnChange = Store.Changed). Saves are
// synchronous, so an operator's change is on disk when the API answers.
type Store struct {
	dir string
	log *slog.Logger

	mu sync.Mutex
	// Guarded by mu.
	m    *mdev.Manager
	kept []Instance // records Restore could not bring back
	err  error      // the last save's error
}

// NewStore is a store for run directory dir; it saves nothing until
// Attach.
func NewStore(dir string, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{dir: dir, log: log}
}

// Attach starts saving m's state, with kept (Restore's) carried along,
// and saves once now.
func (s *Store) Attach(m *mdev.Manager, kept []Instance) error {
	s.mu.Lock()
	s.m, s.kept = m, kept
	s.mu.Unlock()
	return s.save()
}

// Changed saves the attached manager's state; a failed save is logged
// and returned by Err until a later one succeeds.
func (s *Store) Changed() {
	if err := s.save(); err != nil {
		s.log.Error("the run directory's state file was not saved: a restart would lose the last change", "err", err)
	}
}

// Err is the last save's error.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Store) save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		return nil
	}
	st := Capture(s.m)
	have := map[string]bool{}
	for _, in := range st.Instances {
		have[in.UUID] = true
	}
	for _, k := range s.kept {
		if !have[k.UUID] {
			st.Instances = append(st.Instances, k)
		}
	}
	s.err = Save(s.dir, st)
	return s.err
}

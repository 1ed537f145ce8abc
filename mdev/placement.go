package mdev

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/vgpud/vgpud/interference"
)

// PlacementPolicy names how the manager picks the device of a new
// instance that asks for none (docs/placement.md).
type PlacementPolicy string

// The placement policies.
const (
	// PlaceFewest: the device with the fewest instances (with room).
	PlaceFewest PlacementPolicy = "fewest"
	// PlaceRoundRobin: the devices in turn, skipping those without room.
	PlaceRoundRobin PlacementPolicy = "round-robin"
	// PlaceInterference: the device where the interference model predicts
	// the least added slowdown, for the newcomer and its neighbours.
	PlaceInterference PlacementPolicy = "interference"
)

// PlacementPolicies lists the policies.
var PlacementPolicies = []PlacementPolicy{PlaceFewest, PlaceRoundRobin, PlaceInterference}

// ErrUnknownPlacement is returned for a policy name that is not one of
// PlacementPolicies; ErrNoModel for the interference policy, or a hint
// naming a dataset workload, with no dataset loaded.
var (
	ErrUnknownPlacement = errors.New("unknown placement policy")
	ErrNoModel          = errors.New("no interference dataset loaded")
)

// ParsePlacementPolicy checks a policy name.
func ParsePlacementPolicy(s string) (PlacementPolicy, error) {
	p := PlacementPolicy(s)
	if !slices.Contains(PlacementPolicies, p) {
		names := make([]string, len(PlacementPolicies))
		for i, q := range PlacementPolicies {
			names[i] = string(q)
		}
		return "", fmt.Errorf("%w %q (want %s)", ErrUnknownPlacement, s, strings.Join(names, ", "))
	}
	return p, nil
}

// Candidate is a device a new instance may go on.
type Candidate struct {
	Device    int
	Instances int                     // instances on it now
	Residents []interference.Features // theirs, over the feature window
}

// Placer scores the candidate devices of a new instance: lower is better.
// The manager picks the lowest score, then the fewest instances, then the
// lowest index, and tells the placer with Placed.
type Placer interface {
	Policy() PlacementPolicy
	Score(newcomer interference.Features, cands []Candidate) []float64
	Placed(device int)
}

// fewestPlacer scores a device by its instances.
type fewestPlacer struct{}

func (fewestPlacer) Policy() PlacementPolicy { return PlaceFewest }
func (fewestPlacer) Placed(int)              {}
func (fewestPlacer) Score(_ interference.Features, cands []Candidate) []float64 {
	out := make([]float64, len(cands))
	for i, c := range cands {
		out[i] = float64(c.Instances)
	}
	return out
}

// roundRobinPlacer scores a device by how far after the last one placed
// on it comes.
type roundRobinPlacer struct {
	devices int
	mu      sync.Mutex
	next    int // guarded by mu
}

func (r *roundRobinPlacer) Policy() PlacementPolicy { return PlaceRoundRobin }

func (r *roundRobinPlacer) Placed(dev int) {
	r.mu.Lock()
	r.next = (dev + 1) % r.devices
	r.mu.Unlock()
}

func (r *roundRobinPlacer) Score(_ interference.Features, cands []Candidate) []float64 {
	r.mu.Lock()
	next := r.next
	r.mu.Unlock()
	out := make([]float64, len(cands))
	for i, c := range cands {
		out[i] = float64((c.Device - next + r.devices) % r.devices)
	}
	return out
}

// interferencePlacer scores a device by the predicted added overhead.
type interferencePlacer struct{ model interference.Model }

func (interferencePlacer) Policy() PlacementPolicy { return PlaceInterference }
func (interferencePlacer) Placed(int)              {}
func (p interferencePlacer) Score(newcomer interference.Features, cands []Candidate) []float64 {
	out := make([]float64, len(cands))
	for i, c := range cands {
		out[i] = interference.AddedInterference(p.model, newcomer, c.Residents)
	}
	return out
}

// PlacementConfig configures placement (Config.Placement).
type PlacementConfig struct {
	// Policy is the placement policy; empty: interference when a dataset
	// is given, else fewest.
	Policy PlacementPolicy `json:"policy,omitempty"`
	// Dataset is the co-run dataset the interference model learns from
	// (docs/placement.md "Dataset"); nil: none yet.
	Dataset *interference.Dataset `json:"-"`
	// Model chooses the model; the zero value is DefaultModel.
	Model interference.Options `json:"model,omitzero"`
}

// DefaultModel is the interference model used unless configured: a
// regression forest on the seed's Select features, which had the lowest
// error there (docs/placement.md "Model").
var DefaultModel = interference.Options{Kind: interference.Forest, Set: interference.Select, Seed: 1}

// placement is the manager's placement state, guarded by Manager.mu.
type placement struct {
	placer  Placer
	dataset *interference.Dataset
	model   interference.Model
	opts    interference.Options
	// set: the policy or dataset came from SetPlacement (an operator at
	// run time, or a restored state), not the configuration.
	set bool
}

// newPlacement validates c and trains its model.
func newPlacement(c PlacementConfig, devices int) (placement, error) {
	pl := placement{dataset: c.Dataset, opts: c.Model}
	if pl.opts.Kind == "" && pl.opts.Set == "" {
		pl.opts = DefaultModel
	}
	if c.Dataset != nil {
		model, err := interference.Train(c.Dataset, pl.opts)
		if err != nil {
			return pl, fmt.Errorf("interference model: %w", err)
		}
		pl.model = model
	}
	policy := c.Policy
	if policy == "" {
		policy = PlaceFewest
		if pl.model != nil {
			policy = PlaceInterference
		}
	}
	var err error
	pl.placer, err = pl.placerFor(policy, devices)
	return pl, err
}

func (pl placement) placerFor(p PlacementPolicy, devices int) (Placer, error) {
	if _, err := ParsePlacementPolicy(string(p)); err != nil {
		return nil, err
	}
	switch p {
	case PlaceRoundRobin:
		return &roundRobinPlacer{devices: devices}, nil
	case PlaceInterference:
		if pl.model == nil {
			return nil, fmt.Errorf("placement policy %s: %w (vgpuctl place -dataset FILE)", p, ErrNoModel)
		}
		return interferencePlacer{pl.model}, nil
	}
	return fewestPlacer{}, nil
}

// PlaceHint says what a new instance will run, for the interference
// policy: at most one of its fields is set; none means "unknown", read
// as the dataset's mean workload.
type PlaceHint struct {
	// Workload names a workload of the dataset (its features alone).
	Workload string `json:"workload,omitempty"`
	// Like names a running instance whose features to assume.
	Like string `json:"like,omitempty"`
	// Features are given outright (another host's instance, say).
	Features *interference.Features `json:"features,omitempty"`
}

// CandidateScore is one device's part of an Explanation.
type CandidateScore struct {
	Device    int      `json:"device"`
	Instances int      `json:"instances"`
	Residents []string `json:"residents,omitempty"` // their UUIDs
	// Room is false when the profile has no room left on the device; the
	// device is not scored then.
	Room  bool    `json:"room"`
	Score float64 `json:"score"`
}

// Explanation says how the manager would place an instance now.
type Explanation struct {
	Policy PlacementPolicy `json:"policy"`
	// Newcomer are the features assumed for the new instance and From
	// where they came from.
	Newcomer   interference.Features `json:"newcomer"`
	From       string                `json:"from"`
	Candidates []CandidateScore      `json:"candidates"`
	// Chosen is the device picked, -1 when none has room.
	Chosen int `json:"chosen"`
	// Score is the chosen device's score (what a placement across hosts
	// compares).
	Score float64 `json:"score"`
}

// PlacementStatus describes the placement policy and the model.
type PlacementStatus struct {
	Policy   PlacementPolicy      `json:"policy"`
	Model    interference.Options `json:"model"`
	Dataset  *DatasetSummary      `json:"dataset,omitempty"`
	Policies []PlacementPolicy    `json:"policies"`
}

// DatasetSummary describes the loaded dataset.
type DatasetSummary struct {
	Device    string   `json:"device"`
	Measured  string   `json:"measured"`
	Workloads []string `json:"workloads"`
	Pairs     int      `json:"pairs"`
}

// Placement returns the placement policy and what the model learned from.
func (m *Manager) Placement() PlacementStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := PlacementStatus{Policy: m.place.placer.Policy(), Model: m.place.opts, Policies: PlacementPolicies}
	if d := m.place.dataset; d != nil {
		s := &DatasetSummary{Device: d.Device, Measured: d.Measured, Pairs: len(d.Pairs)}
		for _, w := range d.Workloads {
			s.Workloads = append(s.Workloads, w.Name)
		}
		st.Dataset = s
	}
	return st
}

// PlacementSet returns the policy and dataset an operator set at run time
// (SetPlacement); ok is false while the configuration's hold.
func (m *Manager) PlacementSet() (p PlacementPolicy, ds *interference.Dataset, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.place.set {
		return "", nil, false
	}
	return m.place.placer.Policy(), m.place.dataset, true
}

// PlacementDataset returns the dataset the model learned from, or nil.
func (m *Manager) PlacementDataset() *interference.Dataset {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.place.dataset
}

// SetPlacement changes the placement policy ("" keeps it, or with a new
// dataset picks interference) and, when ds is not nil, retrains the model
// on ds. Instances already placed stay where they are.
func (m *Manager) SetPlacement(policy PlacementPolicy, ds *interference.Dataset) (err error) {
	defer m.changedUnless(&err)
	m.mu.Lock()
	cur := m.place
	m.mu.Unlock()
	next := cur
	if ds != nil {
		if err := ds.Validate(); err != nil {
			return fmt.Errorf("set placement: dataset: %w", err)
		}
		// Training takes milliseconds; it runs without the lock.
		model, err := interference.Train(ds, cur.opts)
		if err != nil {
			return fmt.Errorf("set placement: interference model: %w", err)
		}
		next.dataset, next.model = ds, model
		if policy == "" {
			policy = PlaceInterference
		}
	}
	if policy == "" {
		policy = cur.placer.Policy()
	}
	if next.placer, err = next.placerFor(policy, len(m.infos)); err != nil {
		return fmt.Errorf("set placement: %w", err)
	}
	next.set = true
	m.mu.Lock()
	m.place = next
	m.mu.Unlock()
	m.log.Info("placement set", "policy", policy, "dataset", ds != nil)
	return nil
}

// newcomerLocked resolves a hint into the features assumed for a new
// instance.
func (m *Manager) newcomerLocked(h PlaceHint) (interference.Features, string, error) {
	set := 0
	for _, b := range []bool{h.Workload != "", h.Like != "", h.Features != nil} {
		if b {
			set++
		}
	}
	if set > 1 {
		return interference.Features{}, "", errors.New("placement hint: give at most one of workload, like and features")
	}
	switch {
	case h.Features != nil:
		if err := h.Features.Validate(); err != nil {
			return interference.Features{}, "", fmt.Errorf("placement hint: %w", err)
		}
		return *h.Features, "given", nil
	case h.Like != "":
		in, ok := m.instances[h.Like]
		if !ok {
			return interference.Features{}, "", fmt.Errorf("placement hint: like %s: %w", h.Like, ErrNotFound)
		}
		return in.Features(), "instance " + h.Like, nil
	case h.Workload != "":
		if m.place.dataset == nil {
			return interference.Features{}, "", fmt.Errorf("placement hint: workload %q: %w", h.Workload, ErrNoModel)
		}
		w, ok := m.place.dataset.Workload(h.Workload)
		if !ok {
			return interference.Features{}, "", fmt.Errorf("placement hint: workload %q is not in the dataset", h.Workload)
		}
		return w.Features, "workload " + h.Workload, nil
	case m.place.dataset != nil:
		return m.place.dataset.Mean(), "dataset mean", nil
	}
	return interference.Features{}, "none", nil
}

// explainLocked scores every device for an instance of p. want, if set,
// is the only device considered.
func (m *Manager) explainLocked(p Profile, want *int, h PlaceHint) (Explanation, error) {
	newcomer, from, err := m.newcomerLocked(h)
	if err != nil {
		return Explanation{}, err
	}
	ex := Explanation{Policy: m.place.placer.Policy(), Newcomer: newcomer, From: from, Chosen: -1}
	cands := make([]Candidate, len(m.infos))
	ex.Candidates = make([]CandidateScore, len(m.infos))
	same := make([]int, len(m.infos))
	for dev := range m.infos {
		cands[dev].Device, ex.Candidates[dev].Device = dev, dev
	}
	for _, in := range m.listLocked() {
		c := &cands[in.device]
		c.Instances++
		c.Residents = append(c.Residents, in.Features())
		ex.Candidates[in.device].Residents = append(ex.Candidates[in.device].Residents, in.uuid)
		if in.profile.Name == p.Name {
			same[in.device]++
		}
	}
	var open []Candidate
	for dev := range m.infos {
		cs := &ex.Candidates[dev]
		cs.Instances = cands[dev].Instances
		cs.Room = same[dev] < p.MaxPerDevice && (want == nil || *want == dev)
		if cs.Room {
			open = append(open, cands[dev])
		}
	}
	scores := m.place.placer.Score(newcomer, open)
	for i, c := range open {
		s := scores[i]
		if math.IsNaN(s) || math.IsInf(s, 0) {
			s = math.MaxFloat64 // a model gone wrong never wins
		}
		ex.Candidates[c.Device].Score = s
		if ex.Chosen < 0 || s < ex.Score || (s == ex.Score && c.Instances < cands[ex.Chosen].Instances) {
			ex.Chosen, ex.Score = c.Device, s
		}
	}
	return ex, nil
}

// Explain says where an instance of profile would go now and why; it
// places nothing.
func (m *Manager) Explain(profile string, h PlaceHint) (Explanation, error) {
	p, ok := m.profiles[profile]
	if !ok {
		return Explanation{}, fmt.Errorf("explain: %w %q (have %s)", ErrUnknownProfile, profile, strings.Join(m.profileNames(), ", "))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.explainLocked(p, nil, h)
}

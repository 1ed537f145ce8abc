package interference

import (
	"math"
	"strings"
	"testing"
)

// fakeModel predicts from one feature: v.KernelMeanMs * 10 + a.KernelMeanMs.
type fakeModel struct{}

func (fakeModel) Predict(v, a Features) float64 { return v.KernelMeanMs*10 + a.KernelMeanMs }
func (fakeModel) Options() Options              { return Options{} }

func TestAddedInterference(t *testing.T) {
	n := Features{KernelMeanMs: 1}
	tests := []struct {
		residents []Features
		want      float64
	}{
		{nil, 0},
		{[]Features{{KernelMeanMs: 2}}, (10 + 2) + (20 + 1)},
		{[]Features{{KernelMeanMs: 2}, {}}, (10 + 2) + (20 + 1) + 10 + 1},
	}
	for _, tt := range tests {
		if got := AddedInterference(fakeModel{}, n, tt.residents); got != tt.want {
			t.Errorf("AddedInterference(%v) = %v, want %v", tt.residents, got, tt.want)
		}
	}
}

var seedCluster = SimConfig{Hosts: 50, DevicesPerHost: 1, PerDevice: 2, Runs: 100, Seed: 1}

// TestSimulateStructured guards the headline mechanism: on data where
// short kernels suffer beside long ones, placing by the measured overheads
// (the oracle) or by a forest learned from the features separates the two
// kinds and cuts the total overhead well below round-robin's.
func TestSimulateStructured(t *testing.T) {
	d := structured(t)
	forest := mustTrain(t, d, Options{Kind: Forest, Set: Select, Trees: 50, Seed: 1})
	for _, cfg := range []SimConfig{seedCluster, {Hosts: 10, DevicesPerHost: 2, PerDevice: 3, Runs: 30, Seed: 2}} {
		res, err := Simulate(d, cfg, []NamedCost{{"ideal", MeasuredCost(d)}, {"forest", ModelCost(forest, d)}})
		if err != nil {
			t.Fatalf("Simulate = %v", err)
		}
		t.Logf("%+v: %+v", cfg, res)
		if len(res) != 3 || res[0].Policy != RoundRobin || res[1].Policy != "ideal" || res[2].Policy != "forest" {
			t.Fatalf("Simulate policies = %+v, want round-robin, ideal, forest", res)
		}
		rr := res[0]
		if rr.Reduction != 0 || rr.Overhead <= 0 {
			t.Errorf("round-robin = %+v, want overhead > 0, reduction 0", rr)
		}
		for _, r := range res[1:] {
			if r.Overhead > rr.Overhead || r.Reduction < 0.5 {
				t.Errorf("%s = %+v, round-robin's overhead %v: want a reduction >= 0.5", r.Policy, r, rr.Overhead)
			}
		}
	}
}

// TestSimulatePaired: a policy whose cost is the same for every pair
// places like round-robin's spread (fewest residents first) and so, on
// the same draw, its total is round-robin's exactly when PerDevice is 2.
func TestSimulatePaired(t *testing.T) {
	d := structured(t)
	flat := func(string, string) float64 { return 1 }
	res, err := Simulate(d, SimConfig{Hosts: 7, DevicesPerHost: 1, PerDevice: 2, Runs: 20, Seed: 9},
		[]NamedCost{{"flat", flat}})
	if err != nil {
		t.Fatal(err)
	}
	// Greedy with a flat cost fills devices 0..6 first, then pairs VM 7+i
	// with VM i: exactly round-robin's placement.
	if res[1].Overhead != res[0].Overhead || res[1].Reduction != 0 {
		t.Errorf("flat = %+v, round-robin %+v: want the same", res[1], res[0])
	}
	again, _ := Simulate(d, SimConfig{Hosts: 7, DevicesPerHost: 1, PerDevice: 2, Runs: 20, Seed: 9}, nil)
	if again[0] != res[0] {
		t.Errorf("round-robin %+v, then %+v: want deterministic", res[0], again[0])
	}
}

// TestSimulateTies: on a tie the device with fewer residents wins, then
// the lower index.
func TestSimulateTies(t *testing.T) {
	d := &Dataset{Version: DatasetVersion,
		Workloads: []Workload{{Name: "a", AloneSec: 1}},
		Pairs:     []Pair{{Victim: "a", Aggressor: "a", Overhead: 0.5}}}
	s := &sim{n: 1, per: 3, actual: []float64{0.5}, placed: make([]int, 6), count: make([]int, 2)}
	zero := &memoCost{name: "zero", cost: func(string, string) float64 { return 0 }, d: d, val: make([]float64, 1), have: make([]bool, 1)}
	total, err := s.greedy([]int{0, 0, 0, 0, 0, 0}, zero)
	if err != nil {
		t.Fatal(err)
	}
	// Spread: 3 and 3, each device 6 ordered pairs of 0.5.
	if s.count[0] != 3 || s.count[1] != 3 || total != 6 {
		t.Errorf("counts %v, total %v; want [3 3], 6", s.count, total)
	}
}

func TestSimulateRejects(t *testing.T) {
	d := structured(t)
	gap := structured(t)
	gap.Pairs = gap.Pairs[1:]
	nan := func(string, string) float64 { return math.NaN() }
	tests := []struct {
		name     string
		d        *Dataset
		cfg      SimConfig
		policies []NamedCost
		want     string
	}{
		{"missing pair", gap, seedCluster, nil, `no overhead measured for "short0" beside "short0"`},
		{"no workloads", &Dataset{Version: DatasetVersion}, seedCluster, nil, "no workloads"},
		{"hosts", d, SimConfig{DevicesPerHost: 1, PerDevice: 2, Runs: 1}, nil, "hosts 0"},
		{"runs", d, SimConfig{Hosts: 1, DevicesPerHost: 1, PerDevice: 2}, nil, "runs 0"},
		{"huge", d, SimConfig{Hosts: 1 << 40, DevicesPerHost: 1 << 40, PerDevice: 2, Runs: 1}, nil, "at most"},
		{"reserved name", d, seedCluster, []NamedCost{{RoundRobin, MeasuredCost(d)}}, "unique name"},
		{"duplicate name", d, seedCluster, []NamedCost{{"x", MeasuredCost(d)}, {"x", MeasuredCost(d)}}, "unique name"},
		{"nil cost", d, seedCluster, []NamedCost{{"x", nil}}, "unique name"},
		{"nan cost", d, seedCluster, []NamedCost{{"nan", nan}}, "NaN"},
		{"invalid dataset", &Dataset{}, seedCluster, nil, "version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Simulate(tt.d, tt.cfg, tt.policies)
			if res != nil || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Simulate = %v, %v; want nil and an error containing %q", res, err, tt.want)
			}
		})
	}
	// One VM per device needs no pairs.
	if _, err := Simulate(gap, SimConfig{Hosts: 3, DevicesPerHost: 1, PerDevice: 1, Runs: 2}, nil); err != nil {
		t.Errorf("Simulate(PerDevice 1) = %v", err)
	}
}

func BenchmarkAddedInterference(b *testing.B) {
	d := structured(b)
	m := mustTrain(b, d, Options{Kind: Forest, Set: Extend, Trees: 100, Seed: 1})
	newcomer := d.Mean()
	residents := []Features{d.Workloads[0].Features, d.Workloads[1].Features, d.Workloads[2].Features, d.Workloads[3].Features}
	b.ReportAllocs()
	var sink float64
	for b.Loop() {
		sink += AddedInterference(m, newcomer, residents)
	}
	_ = sink
}

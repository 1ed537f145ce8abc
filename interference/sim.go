package interference

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// SimConfig is the cluster Simulate fills.
type SimConfig struct {
	// Hosts, DevicesPerHost and PerDevice shape the cluster (the seed's
	// is 50, 1, 2): every device holds PerDevice VMs, and each run draws
	// exactly as many VMs as fill the cluster.
	Hosts, DevicesPerHost, PerDevice int
	// Runs is the number of independent draws (the seed's is 100).
	Runs int
	// Seed seeds the draws.
	Seed uint64
}

// Bounds on SimConfig.
const (
	maxSimVMs  = 1 << 20
	maxSimRuns = 1 << 20
)

// Cost returns a (predicted or actual) overhead of victim beside
// aggressor, by workload name.
type Cost func(victim, aggressor string) float64

// NamedCost is a placement policy for Simulate: the greedy placement by
// Cost, under Name.
type NamedCost struct {
	Name string
	Cost Cost
}

// RoundRobin is the name of Simulate's baseline policy.
const RoundRobin = "round-robin"

// SimResult is one policy's outcome over Simulate's runs.
type SimResult struct {
	Policy string
	// Overhead is the mean over runs of the total actual overhead: the
	// sum over devices of the sum over ordered pairs of its residents of
	// the victim's measured overhead beside the aggressor.
	Overhead float64
	// Reduction is the mean over runs of 1 - total/total of round-robin
	// (a run where round-robin's total is 0 counts as 0).
	Reduction float64
}

// simStream is the second PCG word of Simulate's draws.
const simStream = 0x73696d // "sim"

// Simulate is the seed's placement simulation on measured data. Each run
// draws Hosts*DevicesPerHost*PerDevice VMs uniformly, with repetition,
// from d's workloads, and places them online in their order of arrival:
// round-robin puts VM i on device i mod the number of devices; each named
// policy puts each VM on the device with room that minimises the sum over
// its residents r of cost(vm, r) + cost(r, vm), ties going to the device
// with the fewest residents, then to the lowest index. Every policy
// places the same draw in a run (a paired comparison).
//
// Actual overheads come from d, which must measure every ordered pair of
// its workloads (each beside itself included) when PerDevice > 1: a
// missing one is an error, returned before any run. A cost that returns
// NaN is an error too. The results are round-robin's first, then the
// policies' in the order given.
func Simulate(d *Dataset, cfg SimConfig, policies []NamedCost) ([]SimResult, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	if cfg.Hosts < 1 || cfg.DevicesPerHost < 1 || cfg.PerDevice < 1 || cfg.Runs < 1 {
		return nil, fmt.Errorf("simulate: hosts %d, devices per host %d, per device %d, runs %d: want each >= 1",
			cfg.Hosts, cfg.DevicesPerHost, cfg.PerDevice, cfg.Runs)
	}
	if cfg.Hosts > maxSimVMs/cfg.DevicesPerHost || cfg.Hosts*cfg.DevicesPerHost > maxSimVMs/cfg.PerDevice || cfg.Runs > maxSimRuns {
		return nil, fmt.Errorf("simulate: at most %d VMs and %d runs", maxSimVMs, maxSimRuns)
	}
	n := len(d.Workloads)
	if n == 0 {
		return nil, errors.New("simulate: no workloads")
	}
	seen := map[string]bool{RoundRobin: true}
	for _, p := range policies {
		if p.Name == "" || seen[p.Name] || p.Cost == nil {
			return nil, fmt.Errorf("simulate: policy %q: want a unique name other than %q and a cost", p.Name, RoundRobin)
		}
		seen[p.Name] = true
	}

	index := make(map[string]int, n)
	for i, w := range d.Workloads {
		index[w.Name] = i
	}
	actual := make([]float64, n*n)
	have := make([]bool, n*n)
	for _, p := range d.Pairs {
		k := index[p.Victim]*n + index[p.Aggressor]
		actual[k], have[k] = p.Overhead, true
	}
	if cfg.PerDevice > 1 {
		for k, ok := range have {
			if !ok {
				return nil, fmt.Errorf("simulate: no overhead measured for %q beside %q",
					d.Workloads[k/n].Name, d.Workloads[k%n].Name)
			}
		}
	}
	costs := make([]*memoCost, len(policies))
	for i, p := range policies {
		costs[i] = &memoCost{name: p.Name, cost: p.Cost, d: d,
			val: make([]float64, n*n), have: make([]bool, n*n)}
	}

	devices := cfg.Hosts * cfg.DevicesPerHost
	vms := make([]int, devices*cfg.PerDevice)
	s := &sim{n: n, per: cfg.PerDevice, actual: actual,
		placed: make([]int, len(vms)), count: make([]int, devices)}
	results := make([]SimResult, 1+len(policies))
	results[0].Policy = RoundRobin
	for i, p := range policies {
		results[1+i].Policy = p.Name
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, simStream))
	for range cfg.Runs {
		for i := range vms {
			vms[i] = rng.IntN(n)
		}
		rr := s.roundRobin(vms)
		results[0].Overhead += rr
		for i, c := range costs {
			total, err := s.greedy(vms, c)
			if err != nil {
				return nil, fmt.Errorf("simulate: %w", err)
			}
			results[1+i].Overhead += total
			if rr != 0 {
				results[1+i].Reduction += 1 - total/rr
			}
		}
	}
	for i := range results {
		results[i].Overhead /= float64(cfg.Runs)
		results[i].Reduction /= float64(cfg.Runs)
	}
	return results, nil
}

// memoCost remembers a policy's cost of each ordered pair of workloads,
// asked once.
type memoCost struct {
	name string
	cost Cost
	d    *Dataset
	val  []float64
	have []bool
}

func (m *memoCost) get(v, a, n int) (float64, error) {
	k := v*n + a
	if !m.have[k] {
		c := m.cost(m.d.Workloads[v].Name, m.d.Workloads[a].Name)
		if math.IsNaN(c) {
			return 0, fmt.Errorf("policy %q: cost of %q beside %q is NaN", m.name, m.d.Workloads[v].Name, m.d.Workloads[a].Name)
		}
		m.val[k], m.have[k] = c, true
	}
	return m.val[k], nil
}

// sim holds one run's placement state.
type sim struct {
	n, per int
	actual []float64 // victim*n + aggressor
	placed []int     // the workloads on device dev: placed[dev*per : dev*per+count[dev]]
	count  []int
}

func (s *sim) reset() {
	clear(s.count)
}

func (s *sim) put(dev, w int) {
	s.placed[dev*s.per+s.count[dev]] = w
	s.count[dev]++
}

// total returns the actual overhead of the placement.
func (s *sim) total() float64 {
	var t float64
	for dev, c := range s.count {
		res := s.placed[dev*s.per : dev*s.per+c]
		for i, v := range res {
			for j, a := range res {
				if i != j {
					t += s.actual[v*s.n+a]
				}
			}
		}
	}
	return t
}

func (s *sim) roundRobin(vms []int) float64 {
	s.reset()
	for i, w := range vms {
		s.put(i%len(s.count), w)
	}
	return s.total()
}

func (s *sim) greedy(vms []int, c *memoCost) (float64, error) {
	s.reset()
	for _, w := range vms {
		best, bestCost := -1, 0.0
		for dev, cnt := range s.count {
			if cnt == s.per {
				continue
			}
			var sum float64
			for _, r := range s.placed[dev*s.per : dev*s.per+cnt] {
				x, err := c.get(w, r, s.n)
				if err != nil {
					return 0, err
				}
				y, err := c.get(r, w, s.n)
				if err != nil {
					return 0, err
				}
				sum += x + y
			}
			if best < 0 || sum < bestCost || sum == bestCost && cnt < s.count[best] {
				best, bestCost = dev, sum
			}
		}
		s.put(best, w)
	}
	return s.total(), nil
}

package interference

import "math"

// AddedInterference is the predicted total overhead that placing a
// newcomer beside residents adds: the sum over residents r of
// m.Predict(newcomer, r) (what r does to the newcomer) and
// m.Predict(r, newcomer) (what the newcomer does to r). A placement
// policy puts the newcomer where this is least; with no residents it is 0.
func AddedInterference(m Model, newcomer Features, residents []Features) float64 {
	var sum float64
	for _, r := range residents {
		sum += m.Predict(newcomer, r) + m.Predict(r, newcomer)
	}
	return sum
}

// ModelCost returns m's predictions as a Cost over d's workloads, for
// Simulate; a name d does not know counts as d's mean workload.
func ModelCost(m Model, d *Dataset) Cost {
	byName := make(map[string]Features, len(d.Workloads))
	for _, w := range d.Workloads {
		byName[w.Name] = w.Features
	}
	mean := d.Mean()
	get := func(name string) Features {
		if f, ok := byName[name]; ok {
			return f
		}
		return mean
	}
	return func(victim, aggressor string) float64 {
		return m.Predict(get(victim), get(aggressor))
	}
}

// MeasuredCost returns d's measured overheads as a Cost: the seed's
// "ideal" policy. A pair d did not measure costs NaN, which Simulate
// refuses.
func MeasuredCost(d *Dataset) Cost {
	byKey := make(map[Key]float64, len(d.Pairs))
	for _, p := range d.Pairs {
		byKey[Key{p.Victim, p.Aggressor}] = p.Overhead
	}
	return func(victim, aggressor string) float64 {
		if v, ok := byKey[Key{victim, aggressor}]; ok {
			return v
		}
		return math.NaN()
	}
}

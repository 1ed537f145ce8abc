package interference

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Score is how well out-of-fold predictions match the measured overheads.
type Score struct {
	// MSE is the mean squared error.
	MSE float64
	// Spearman is the rank correlation of predicted and measured
	// overheads: what placement needs is the order.
	Spearman float64
	// N is the number of predictions.
	N int
}

// Key names an ordered (victim, aggressor) pair of workloads.
type Key struct{ Victim, Aggressor string }

// cvStream is the second PCG word of CrossValidate's shuffle.
const cvStream = 0x6376 // "cv"

// CrossValidate splits d's pairs into folds (shuffled deterministically by
// o.Seed), trains a model with o on the other folds for each, and predicts
// each of its pairs. It returns the score over all the out-of-fold
// predictions and those predictions, one per pair. folds must be within
// [2, number of pairs].
func CrossValidate(d *Dataset, o Options, folds int) (Score, map[Key]float64, error) {
	if err := d.Validate(); err != nil {
		return Score{}, nil, fmt.Errorf("cross-validate: %w", err)
	}
	o, feats, err := o.withDefaults()
	if err != nil {
		return Score{}, nil, fmt.Errorf("cross-validate: %w", err)
	}
	n := len(d.Pairs)
	if folds < 2 || folds > n {
		return Score{}, nil, fmt.Errorf("cross-validate: %d folds of %d pairs: want 2..%d", folds, n, n)
	}
	x, y := samples(d, feats)
	byName := make(map[string]Features, len(d.Workloads))
	for _, w := range d.Workloads {
		byName[w.Name] = w.Features
	}
	fold := foldOf(n, folds, o.Seed)
	pred := make([]float64, n)
	for k := range folds {
		var tx [][]float64
		var ty []float64
		for i := range n {
			if fold[i] != k {
				tx, ty = append(tx, x[i]), append(ty, y[i])
			}
		}
		m, err := train(tx, ty, o, feats)
		if err != nil {
			return Score{}, nil, fmt.Errorf("cross-validate: fold %d: %w", k, err)
		}
		for i, p := range d.Pairs {
			if fold[i] == k {
				pred[i] = m.Predict(byName[p.Victim], byName[p.Aggressor])
			}
		}
	}
	out := make(map[Key]float64, n)
	var se float64
	for i, p := range d.Pairs {
		out[Key{p.Victim, p.Aggressor}] = pred[i]
		se += (pred[i] - y[i]) * (pred[i] - y[i])
	}
	return Score{MSE: se / float64(n), Spearman: Spearman(pred, y), N: n}, out, nil
}

// foldOf returns the fold of each of n samples: a deterministic shuffle
// by seed, then dealt round the folds, so their sizes differ by at most 1.
func foldOf(n, folds int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, cvStream))
	perm := rng.Perm(n)
	fold := make([]int, n)
	for pos, i := range perm {
		fold[i] = pos % folds
	}
	return fold
}

// Spearman returns the rank correlation of x and y: Pearson's correlation
// of their ranks, tied values getting the average of their ranks. It is 0
// where undefined: different lengths, fewer than two values, a NaN, or a
// constant x or y.
func Spearman(x, y []float64) float64 {
	if len(x) != len(y) || len(x) < 2 || slices.ContainsFunc(x, math.IsNaN) || slices.ContainsFunc(y, math.IsNaN) {
		return 0
	}
	rx, ry := ranks(x), ranks(y)
	n := float64(len(x))
	mean := (n + 1) / 2 // of ranks, ties or not
	var sxy, sxx, syy float64
	for i := range rx {
		dx, dy := rx[i]-mean, ry[i]-mean
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0
	}
	return max(-1, min(1, sxy/math.Sqrt(sxx*syy)))
}

// ranks returns the 1-based ranks of v, ties averaged.
func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmpFloat(v[a], v[b]) })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && v[idx[j+1]] == v[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

package interference

import (
	"fmt"
	"math"
)

// linear is ordinary least squares on standardised inputs, with a ridge of
// ridgeLambda times the number of samples so that constant or collinear
// inputs leave the normal equations solvable. A constant input gets no
// weight.
type linear struct {
	opts  Options
	feats []Feature
	// Input j is standardised as ((x/scale[j]) - mean[j]) / sd[j]; scaling
	// by the column's largest magnitude first keeps the sums finite.
	scale, mean, sd []float64
	w               []float64 // weights of the standardised inputs; 0 for a constant one
	b               float64   // the labels' mean
}

// ridgeLambda is the ridge, relative to the diagonal (n) of the
// standardised normal equations.
const ridgeLambda = 1e-6

func trainLinear(x [][]float64, y []float64, o Options, feats []Feature) (*linear, error) {
	n, p := len(x), len(x[0])
	m := &linear{opts: o, feats: feats,
		scale: make([]float64, p), mean: make([]float64, p), sd: make([]float64, p), w: make([]float64, p)}
	for _, v := range y {
		m.b += v
	}
	m.b /= float64(n)

	// Standardise the columns; active lists the non-constant ones.
	var active []int
	z := make([][]float64, p) // z[j][i]: column-major
	for j := range p {
		m.scale[j], m.sd[j] = 1, 1
		constant := true
		for i := range n {
			m.scale[j] = max(m.scale[j], math.Abs(x[i][j]))
			constant = constant && x[i][j] == x[0][j]
		}
		if constant {
			continue
		}
		col := make([]float64, n)
		var mean float64
		for i := range n {
			col[i] = x[i][j] / m.scale[j]
			mean += col[i]
		}
		mean /= float64(n)
		var ss float64
		for i := range n {
			col[i] -= mean
			ss += col[i] * col[i]
		}
		sd := math.Sqrt(ss / float64(n))
		if sd == 0 || !finite(sd) {
			continue
		}
		for i := range n {
			col[i] /= sd
		}
		m.mean[j], m.sd[j] = mean, sd
		z[j] = col
		active = append(active, j)
	}
	if len(active) == 0 {
		return m, nil // every input constant: predict the mean
	}

	// Normal equations (ZᵀZ + λnI) w = Zᵀ(y - ȳ) over the active columns.
	k := len(active)
	a := make([][]float64, k)
	rhs := make([]float64, k)
	for r, jr := range active {
		a[r] = make([]float64, k)
		for c, jc := range active[:r+1] {
			var s float64
			for i := range n {
				s += z[jr][i] * z[jc][i]
			}
			a[r][c], a[c][r] = s, s
		}
		a[r][r] += ridgeLambda * float64(n)
		var s float64
		for i := range n {
			s += z[jr][i] * (y[i] - m.b)
		}
		rhs[r] = s
	}
	w, err := cholSolve(a, rhs)
	if err != nil {
		return nil, fmt.Errorf("linear model: %w", err)
	}
	for r, j := range active {
		m.w[j] = w[r]
	}
	return m, nil
}

// cholSolve solves a·x = b for a symmetric positive definite a, by
// Cholesky factorisation a = L·Lᵀ (which overwrites a's lower triangle).
func cholSolve(a [][]float64, b []float64) ([]float64, error) {
	k := len(a)
	for j := range k {
		d := a[j][j]
		for c := range j {
			d -= a[j][c] * a[j][c]
		}
		if !(d > 0) || !finite(d) {
			return nil, fmt.Errorf("normal equations not positive definite at %d (%v)", j, d)
		}
		a[j][j] = math.Sqrt(d)
		for r := j + 1; r < k; r++ {
			s := a[r][j]
			for c := range j {
				s -= a[r][c] * a[j][c]
			}
			a[r][j] = s / a[j][j]
		}
	}
	x := make([]float64, k)
	for r := range k { // L·u = b
		s := b[r]
		for c := range r {
			s -= a[r][c] * x[c]
		}
		x[r] = s / a[r][r]
	}
	for r := k - 1; r >= 0; r-- { // Lᵀ·x = u
		s := x[r]
		for c := r + 1; c < k; c++ {
			s -= a[c][r] * x[c]
		}
		x[r] = s / a[r][r]
	}
	return x, nil
}

func (m *linear) Options() Options { return m.opts }

// Predict returns the linear prediction. Far outside the training data it
// saturates at ±math.MaxFloat64 rather than overflowing, and it returns
// the labels' mean where the sum is undefined (Inf - Inf, NaN features).
func (m *linear) Predict(v, a Features) float64 {
	var buf [2 * NumFeatures]float64
	x := appendInput(buf[:0], m.feats, v, a)
	s := m.b
	for j, w := range m.w {
		if w != 0 {
			s += w * ((x[j]/m.scale[j] - m.mean[j]) / m.sd[j])
		}
	}
	return saturate(s, m.b)
}

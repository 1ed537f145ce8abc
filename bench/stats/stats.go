// Package stats holds the statistics the benchmark programs print: the
// median and the paired ratio with its confidence interval, which lets a
// comparison of two modes measured back to back resolve a few percent on a
// noisy machine. It knows nothing of what is measured.
package stats

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Median returns the median of d (0 for none).
func Median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Paired is the geometric mean of per-pair ratios with a 95% confidence
// interval.
type Paired struct {
	Mean, Lo, Hi float64
	N            int
}

// PairedRatio compares a[i] with b[i], measured back to back: the
// geometric mean of a[i]/b[i] and its 95% confidence interval from
// Student's t over the log ratios. Pairing cancels the drift of a shared
// machine's speed, which moves both members of a pair alike; pairs with
// a non-positive member are skipped.
func PairedRatio(a, b []float64) Paired {
	var logs []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 {
			logs = append(logs, math.Log(a[i]/b[i]))
		}
	}
	n := len(logs)
	if n == 0 {
		return Paired{}
	}
	mean := 0.0
	for _, l := range logs {
		mean += l
	}
	mean /= float64(n)
	if n == 1 {
		return Paired{Mean: math.Exp(mean), Lo: math.NaN(), Hi: math.NaN(), N: 1}
	}
	ss := 0.0
	for _, l := range logs {
		ss += (l - mean) * (l - mean)
	}
	se := math.Sqrt(ss / float64(n-1) / float64(n))
	h := TQuantile975(n-1) * se
	return Paired{Mean: math.Exp(mean), Lo: math.Exp(mean - h), Hi: math.Exp(mean + h), N: n}
}

func (p Paired) String() string {
	if p.N < 2 {
		return "-"
	}
	return fmt.Sprintf("%.3fx [%.3f, %.3f]", p.Mean, p.Lo, p.Hi)
}

// TQuantile975 is the 0.975 quantile of Student's t with df degrees of
// freedom: exact for df <= 5, Cornish-Fisher's expansion above (within
// 0.1% for df >= 6).
func TQuantile975(df int) float64 {
	exact := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571}
	if df < len(exact) {
		return exact[max(df, 1)]
	}
	const z = 1.959964
	d := float64(df)
	z3, z5, z7 := z*z*z, z*z*z*z*z, z*z*z*z*z*z*z
	return z + (z3+z)/(4*d) + (5*z5+16*z3+3*z)/(96*d*d) + (3*z7+19*z5+17*z3-15*z)/(384*d*d*d)
}

package stats

import (
	"math"
	"testing"
	"time"
)

func TestTQuantile(t *testing.T) {
	// Student's t 0.975 quantiles from tables.
	for _, tt := range []struct {
		df   int
		want float64
	}{{1, 12.706}, {5, 2.571}, {6, 2.447}, {10, 2.228}, {20, 2.086}, {30, 2.042}, {100, 1.984}, {1000, 1.962}} {
		if got := TQuantile975(tt.df); math.Abs(got-tt.want) > 0.002*tt.want {
			t.Errorf("TQuantile975(%d) = %.4f, want %.3f", tt.df, got, tt.want)
		}
	}
}

func TestPairedRatio(t *testing.T) {
	// b is exactly half of a in every pair: ratio 2, no spread.
	p := PairedRatio([]float64{2, 4, 6}, []float64{1, 2, 3})
	if math.Abs(p.Mean-2) > 1e-9 || math.Abs(p.Lo-2) > 1e-9 || math.Abs(p.Hi-2) > 1e-9 || p.N != 3 {
		t.Errorf("PairedRatio(exact halves) = %+v, want 2 [2, 2]", p)
	}
	// Spread: the interval brackets the mean and widens with it.
	p = PairedRatio([]float64{1, 1, 1, 1}, []float64{0.9, 1.1, 0.95, 1.05})
	if !(p.Lo < p.Mean && p.Mean < p.Hi) || p.Hi-p.Lo < 0.05 {
		t.Errorf("PairedRatio(spread) = %+v, want a bracketing interval", p)
	}
	if p := PairedRatio([]float64{1}, []float64{1}); p.String() != "-" {
		t.Errorf("one pair printed %q, want -", p)
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []time.Duration
		want time.Duration
	}{{nil, 0}, {[]time.Duration{3}, 3}, {[]time.Duration{5, 1, 3}, 3}, {[]time.Duration{4, 1, 3, 2}, 2}} {
		if got := Median(tt.in); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

package interference

import (
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestSpearman(t *testing.T) {
	tests := []struct {
		name string
		x, y []float64
		want float64
	}{
		{"identical", []float64{1, 2, 3}, []float64{1, 2, 3}, 1},
		{"reversed", []float64{1, 2, 3}, []float64{9, 5, 1}, -1},
		{"monotone", []float64{1, 2, 3, 4}, []float64{1, 10, 100, 1000}, 1},
		{"ties", []float64{1, 2, 2, 3}, []float64{1, 2, 3, 4}, 0.9486832980505138},
		{"constant", []float64{1, 1, 1}, []float64{1, 2, 3}, 0},
		{"one", []float64{1}, []float64{1}, 0},
		{"empty", nil, nil, 0},
		{"lengths", []float64{1, 2}, []float64{1, 2, 3}, 0},
		{"nan", []float64{1, math.NaN(), 3}, []float64{1, 2, 3}, 0},
	}
	for _, tt := range tests {
		if got := Spearman(tt.x, tt.y); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Spearman(%s: %v, %v) = %v, want %v", tt.name, tt.x, tt.y, got, tt.want)
		}
	}
}

// TestSpearmanMonotone: the rank correlation of x with a strictly
// increasing transform of it is 1, with a decreasing one -1.
func TestSpearmanMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x := rapid.SliceOfN(rapid.Float64Range(-1e6, 1e6), 2, 50).Draw(t, "x")
		if slices.Min(x) == slices.Max(x) {
			return
		}
		up, down := make([]float64, len(x)), make([]float64, len(x))
		for i, v := range x {
			up[i] = math.Atan(v/1e3) + 2*v // strictly increasing
			down[i] = -up[i]
		}
		if got := Spearman(x, up); math.Abs(got-1) > 1e-12 {
			t.Fatalf("Spearman(x, up(x)) = %v, want 1", got)
		}
		if got := Spearman(x, down); math.Abs(got+1) > 1e-12 {
			t.Fatalf("Spearman(x, down(x)) = %v, want -1", got)
		}
	})
}

// TestFoldsPartition: the folds are disjoint, cover every sample, and
// differ in size by at most one.
func TestFoldsPartition(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 300).Draw(t, "n")
		k := rapid.IntRange(2, n).Draw(t, "folds")
		fold := foldOf(n, k, rapid.Uint64().Draw(t, "seed"))
		size := make([]int, k)
		for _, f := range fold {
			if f < 0 || f >= k {
				t.Fatalf("fold %d of %d", f, k)
			}
			size[f]++
		}
		if slices.Max(size)-slices.Min(size) > 1 {
			t.Fatalf("fold sizes %v", size)
		}
	})
}

// TestCrossValidateCovers: every pair gets exactly one out-of-fold
// prediction, and the score counts each once.
func TestCrossValidateCovers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := drawDataset(t)
		if len(d.Pairs) < 4 {
			return
		}
		folds := rapid.IntRange(2, min(5, len(d.Pairs)/2)).Draw(t, "folds")
		o := Options{Kind: rapid.SampledFrom(Kinds).Draw(t, "kind"), Set: Base, Trees: 3, Seed: rapid.Uint64().Draw(t, "seed")}
		s, pred, err := CrossValidate(d, o, folds)
		if err != nil {
			t.Fatalf("CrossValidate = %v", err)
		}
		if s.N != len(d.Pairs) || len(pred) != len(d.Pairs) {
			t.Fatalf("N = %d, %d predictions; want %d", s.N, len(pred), len(d.Pairs))
		}
		for _, p := range d.Pairs {
			if _, ok := pred[Key{p.Victim, p.Aggressor}]; !ok {
				t.Fatalf("no prediction for %v", p)
			}
		}
		if math.IsNaN(s.MSE) || s.MSE < 0 || s.Spearman < -1 || s.Spearman > 1 {
			t.Fatalf("score %+v", s)
		}
	})
}

// TestCrossValidateStructured: on the structured dataset the forest
// predicts held-out pairs well, better than the linear model (which cannot
// represent the short-beside-long interaction), as in the seed's Table 2.
func TestCrossValidateStructured(t *testing.T) {
	d := structured(t)
	scores := map[Kind]Score{}
	for _, k := range Kinds {
		o := Options{Kind: k, Set: Select, Trees: 50, Seed: 3}
		s, _, err := CrossValidate(d, o, 5)
		if err != nil {
			t.Fatalf("CrossValidate(%s) = %v", k, err)
		}
		s2, _, _ := CrossValidate(d, o, 5)
		if s2 != s {
			t.Errorf("CrossValidate(%s) twice: %+v, then %+v", k, s, s2)
		}
		t.Logf("%s: %+v", k, s)
		scores[k] = s
	}
	if f, l := scores[Forest], scores[Linear]; f.MSE >= l.MSE || f.Spearman < 0.7 {
		t.Errorf("forest %+v, linear %+v: want the forest's MSE lower, its Spearman >= 0.7", f, l)
	}
}

func TestCrossValidateRejects(t *testing.T) {
	d := small()
	for _, folds := range []int{0, 1, 4} {
		if _, _, err := CrossValidate(d, Options{Kind: Linear, Set: Base}, folds); err == nil || !strings.Contains(err.Error(), "folds") {
			t.Errorf("CrossValidate(%d folds of 3 pairs) = %v, want a folds error", folds, err)
		}
	}
	// 3 folds of 3 pairs leave 2 to train on.
	if _, _, err := CrossValidate(d, Options{Kind: Linear, Set: Base}, 3); err != nil {
		t.Errorf("CrossValidate(3 folds of 3 pairs) = %v", err)
	}
	if _, _, err := CrossValidate(d, Options{Kind: "x", Set: Base}, 2); err == nil {
		t.Errorf("CrossValidate(kind x) = nil error")
	}
}

package interference

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestTrainRejects(t *testing.T) {
	d := small()
	one := small()
	one.Pairs = one.Pairs[:1]
	tests := []struct {
		name string
		d    *Dataset
		o    Options
		want string
	}{
		{"kind", d, Options{Kind: "svm", Set: Base}, "kind"},
		{"no kind", d, Options{Set: Base}, "kind"},
		{"set", d, Options{Kind: Forest, Set: "all"}, "feature set"},
		{"trees", d, Options{Kind: Forest, Set: Base, Trees: -1}, "trees"},
		{"too many trees", d, Options{Kind: Forest, Set: Base, Trees: maxTrees + 1}, "trees"},
		{"min leaf", d, Options{Kind: Forest, Set: Base, MinLeaf: -1}, "min leaf"},
		{"depth", d, Options{Kind: Forest, Set: Base, MaxDepth: maxDepth + 1}, "depth"},
		{"one pair", one, Options{Kind: Linear, Set: Base}, "at least 2"},
		{"invalid dataset", &Dataset{}, Options{Kind: Linear, Set: Base}, "version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Train(tt.d, tt.o)
			if m != nil || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Train = %v, %v; want nil and an error containing %q", m, err, tt.want)
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	m := mustTrain(t, small(), Options{Kind: Forest, Set: Select, Seed: 7})
	want := Options{Kind: Forest, Set: Select, Trees: 100, MinLeaf: 2, MaxDepth: 12, Seed: 7}
	if got := m.Options(); got != want {
		t.Errorf("Options() = %+v, want %+v", got, want)
	}
}

// TestDeterministic: the same data and options give the same predictions;
// another seed gives another forest.
func TestDeterministic(t *testing.T) {
	d := structured(t)
	for _, k := range Kinds {
		o := Options{Kind: k, Set: Extend, Trees: 20, Seed: 1}
		m1, m2 := mustTrain(t, d, o), mustTrain(t, d, o)
		o.Seed = 2
		m3 := mustTrain(t, d, o)
		same, differ := true, false
		for _, v := range d.Workloads {
			for _, a := range d.Workloads {
				p1, p2, p3 := m1.Predict(v.Features, a.Features), m2.Predict(v.Features, a.Features), m3.Predict(v.Features, a.Features)
				same = same && p1 == p2
				differ = differ || p1 != p3
			}
		}
		if !same {
			t.Errorf("%s: two models trained alike predict differently", k)
		}
		if k == Forest && !differ {
			t.Errorf("%s: seeds 1 and 2 give identical predictions", k)
		}
	}
}

// TestFitsStructured: both models rank the structured dataset's pairs
// right in sample, and the forest fits it closely.
func TestFitsStructured(t *testing.T) {
	d := structured(t)
	for _, k := range Kinds {
		for _, s := range Sets {
			m := mustTrain(t, d, Options{Kind: k, Set: s, Trees: 30})
			var pred, y []float64
			var se float64
			for _, p := range d.Pairs {
				v, _ := d.Workload(p.Victim)
				a, _ := d.Workload(p.Aggressor)
				got := m.Predict(v.Features, a.Features)
				pred, y = append(pred, got), append(y, p.Overhead)
				se += (got - p.Overhead) * (got - p.Overhead)
			}
			mse := se / float64(len(y))
			rho := Spearman(pred, y)
			t.Logf("%s/%s: in-sample MSE %.4f, Spearman %.3f", k, s, mse, rho)
			if rho < 0.5 {
				t.Errorf("%s/%s: Spearman %v, want >= 0.5", k, s, rho)
			}
			// Base lacks the kernel lengths: the forest can only tell
			// the workloads apart by unrelated features.
			if k == Forest && s != Base && mse > 0.2 {
				t.Errorf("%s/%s: MSE %v, want <= 0.2", k, s, mse)
			}
		}
	}
}

// drawDataset draws a small valid dataset whose pairs are a random subset
// of at least 2 of the ordered pairs of its workloads.
func drawDataset(t *rapid.T) *Dataset {
	n := rapid.IntRange(1, 6).Draw(t, "workloads")
	feature := rapid.OneOf(rapid.Float64Range(0, 1), rapid.Float64Range(0, 1e6), rapid.Just(0.0), rapid.Just(math.MaxFloat64))
	d := &Dataset{Version: DatasetVersion}
	for i := range n {
		var v [NumFeatures]float64
		for f := range NumFeatures {
			v[f] = feature.Draw(t, fmt.Sprintf("w%d.%s", i, f))
		}
		d.Workloads = append(d.Workloads, Workload{Name: fmt.Sprintf("w%d", i), Features: fromVector(v), AloneSec: 1})
	}
	overhead := rapid.OneOf(rapid.Float64Range(MinOverhead, MaxOverhead), rapid.Float64Range(-0.1, 3), rapid.Just(0.5))
	for _, v := range d.Workloads {
		for _, a := range d.Workloads {
			if len(d.Pairs) < 2 || rapid.Bool().Draw(t, "pair") {
				d.Pairs = append(d.Pairs, Pair{Victim: v.Name, Aggressor: a.Name, Overhead: overhead.Draw(t, "overhead")})
			}
		}
	}
	if len(d.Pairs) < 2 { // one workload: pair it with a second
		d.Workloads = append(d.Workloads, Workload{Name: "x", AloneSec: 1})
		d.Pairs = append(d.Pairs, Pair{Victim: "x", Aggressor: "w0", Overhead: overhead.Draw(t, "overhead")})
	}
	return d
}

func drawFeatures(t *rapid.T, label string) Features {
	g := rapid.OneOf(rapid.Float64Range(0, 10), rapid.Float64Range(0, math.MaxFloat64), rapid.Just(0.0), rapid.Just(math.NaN()))
	var v [NumFeatures]float64
	for f := range NumFeatures {
		v[f] = g.Draw(t, label+"."+f.String())
	}
	return fromVector(v)
}

// TestForestWithinLabels: a forest's prediction lies within the range of
// its training labels, whatever the features.
func TestForestWithinLabels(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := drawDataset(t)
		o := Options{Kind: Forest, Set: rapid.SampledFrom(Sets).Draw(t, "set"), Trees: 5,
			MinLeaf: rapid.IntRange(0, 4).Draw(t, "minleaf"), MaxDepth: rapid.IntRange(0, 6).Draw(t, "depth"),
			Seed: rapid.Uint64().Draw(t, "seed")}
		m, err := Train(d, o)
		if err != nil {
			t.Fatalf("Train = %v", err)
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range d.Pairs {
			lo, hi = min(lo, p.Overhead), max(hi, p.Overhead)
		}
		for i := range 5 {
			v, a := drawFeatures(t, fmt.Sprintf("v%d", i)), drawFeatures(t, fmt.Sprintf("a%d", i))
			// Rounding in the mean of equal labels may step just past them.
			if got := m.Predict(v, a); !(got >= lo-1e-9*math.Abs(lo) && got <= hi+1e-9*math.Abs(hi)) {
				t.Fatalf("Predict = %v, want within [%v, %v]", got, lo, hi)
			}
		}
	})
}

// TestLinearFinite: the linear model's predictions are finite for finite
// features, whatever the data (constant, huge or collinear features).
func TestLinearFinite(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := drawDataset(t)
		m, err := Train(d, Options{Kind: Linear, Set: rapid.SampledFrom(Sets).Draw(t, "set")})
		if err != nil {
			t.Fatalf("Train = %v", err)
		}
		for i := range 5 {
			v, a := drawFeatures(t, fmt.Sprintf("v%d", i)), drawFeatures(t, fmt.Sprintf("a%d", i))
			if got := m.Predict(v, a); math.IsNaN(got) || math.IsInf(got, 0) {
				t.Fatalf("Predict(%+v, %+v) = %v, want finite", v, a, got)
			}
		}
	})
}

// TestLinearRecovers: on data where the overhead is an exact linear
// function of the inputs, the linear model predicts it, in and out of
// sample, up to the ridge's bias.
func TestLinearRecovers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		set := rapid.SampledFrom(Sets).Draw(t, "set")
		feats, _ := set.Features()
		k := len(feats)
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
		scale := make([]float64, NumFeatures)
		for f := range scale {
			scale[f] = math.Pow(10, float64(rng.IntN(7)-3)) // 1e-3 .. 1e3
		}
		random := func() Features {
			var v [NumFeatures]float64
			for f := range v {
				v[f] = scale[f] * rng.Float64()
			}
			return fromVector(v)
		}
		coef := rapid.SliceOfN(rapid.Float64Range(-5, 5), 2*k, 2*k).Draw(t, "coef")
		bias := rapid.Float64Range(-1, 1).Draw(t, "bias")
		lin := func(v, a Features) float64 {
			s := bias
			for j, f := range feats {
				s += coef[j]*v.Get(f)/scale[f] + coef[k+j]*a.Get(f)/scale[f]
			}
			return 4.5 + 5*s/float64(10*k+1) // |s| <= 10k + 1: within [-0.5, 9.5]
		}
		d := &Dataset{Version: DatasetVersion}
		for i := range k + 4 + rapid.IntRange(0, 6).Draw(t, "extra") {
			d.Workloads = append(d.Workloads, Workload{Name: fmt.Sprintf("w%d", i), Features: random(), AloneSec: 1})
		}
		for _, v := range d.Workloads {
			for _, a := range d.Workloads {
				d.Pairs = append(d.Pairs, Pair{Victim: v.Name, Aggressor: a.Name, Overhead: lin(v.Features, a.Features)})
			}
		}
		m, err := Train(d, Options{Kind: Linear, Set: set})
		if err != nil {
			t.Fatalf("Train = %v", err)
		}
		check := func(v, a Features) {
			want, got := lin(v, a), m.Predict(v, a)
			if math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
				t.Fatalf("Predict = %v, want %v", got, want)
			}
		}
		for _, p := range d.Pairs[:10] {
			v, _ := d.Workload(p.Victim)
			a, _ := d.Workload(p.Aggressor)
			check(v.Features, a.Features)
		}
		for range 5 {
			check(random(), random())
		}
	})
}

// TestConstantFeatures: features that never vary (every VM field unknown)
// yield finite predictions from both models, the mean label where nothing
// varies at all.
func TestConstantFeatures(t *testing.T) {
	d := small()
	for i := range d.Workloads {
		d.Workloads[i].Features = Features{VCPUs: 2}
	}
	for _, k := range Kinds {
		m := mustTrain(t, d, Options{Kind: k, Set: Extend, Trees: 3})
		want := (2.2 + 0.05 - 0.01) / 3
		if got := m.Predict(Features{VCPUs: 4, KernelMeanMs: 1}, Features{}); math.Abs(got-want) > 1e-12 && k == Linear {
			t.Errorf("%s: Predict = %v, want the mean label %v", k, got, want)
		} else if math.IsNaN(got) || math.IsInf(got, 0) {
			t.Errorf("%s: Predict = %v, want finite", k, got)
		}
	}
}

func TestCholSolve(t *testing.T) {
	a := [][]float64{{4, 2, 0}, {2, 5, 1}, {0, 1, 3}}
	want := []float64{1, -2, 3}
	b := []float64{4*1 + 2*-2, 2*1 + 5*-2 + 3, -2 + 9}
	x, err := cholSolve(a, b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Abs(x[i]-want[i]) > 1e-12 {
			t.Errorf("cholSolve = %v, want %v", x, want)
		}
	}
	if _, err := cholSolve([][]float64{{1, 2}, {2, 1}}, []float64{1, 1}); err == nil {
		t.Errorf("cholSolve(indefinite) = nil error")
	}
}

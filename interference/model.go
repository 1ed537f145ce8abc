package interference

import (
	"fmt"
	"math"
)

// Kind names a kind of model.
type Kind string

// The kinds of model (docs/placement.md "Model").
const (
	// Forest is a random regression forest: the seed's better model.
	Forest Kind = "forest"
	// Linear is ordinary least squares (with a tiny ridge) on
	// standardised features: the seed's baseline.
	Linear Kind = "linear"
)

// Kinds lists the kinds of model.
var Kinds = []Kind{Forest, Linear}

// Options say which model to train and how.
type Options struct {
	Kind Kind `json:"kind"`
	// Set is the feature set the model reads, of the victim and of the
	// aggressor.
	Set Set `json:"set"`
	// Trees is the forest's number of trees (0: 100; at most 10000).
	Trees int `json:"trees,omitempty"`
	// MinLeaf is the forest's least number of samples in a leaf (0: 2).
	MinLeaf int `json:"min_leaf,omitempty"`
	// MaxDepth is the forest's greatest depth of a tree (0: 12; at most
	// 64).
	MaxDepth int `json:"max_depth,omitempty"`
	// Seed seeds the forest's bootstrap samples and feature choices (and
	// CrossValidate's folds): the same data and Options give the same
	// model.
	Seed uint64 `json:"seed,omitempty"`
}

// Bounds on Options.
const (
	maxTrees = 10000
	maxDepth = 64
)

// withDefaults returns o with its zero fields replaced by their defaults,
// and the features of its set, or an error for an option out of range.
func (o Options) withDefaults() (Options, []Feature, error) {
	switch o.Kind {
	case Forest, Linear:
	default:
		return o, nil, fmt.Errorf("model kind %q: want forest or linear", string(o.Kind))
	}
	feats, err := o.Set.Features()
	if err != nil {
		return o, nil, err
	}
	if o.Trees < 0 || o.Trees > maxTrees {
		return o, nil, fmt.Errorf("trees %d: want 0..%d", o.Trees, maxTrees)
	}
	if o.MinLeaf < 0 {
		return o, nil, fmt.Errorf("min leaf %d: want >= 0", o.MinLeaf)
	}
	if o.MaxDepth < 0 || o.MaxDepth > maxDepth {
		return o, nil, fmt.Errorf("max depth %d: want 0..%d", o.MaxDepth, maxDepth)
	}
	if o.Trees == 0 {
		o.Trees = 100
	}
	if o.MinLeaf == 0 {
		o.MinLeaf = 2
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = 12
	}
	return o, feats, nil
}

// Model predicts the overhead of one workload beside another. A trained
// model is immutable: safe for concurrent use.
type Model interface {
	// Predict returns the predicted overhead of a victim with features v
	// beside an aggressor with features a. It is finite for any finite
	// features.
	Predict(v, a Features) float64
	// Options returns the options the model was trained with, defaults
	// filled in.
	Options() Options
}

// Train trains a model on d: one sample per pair, whose inputs are the
// victim's features of o.Set followed by the aggressor's, and whose label
// is the pair's overhead. It needs at least 2 pairs.
func Train(d *Dataset, o Options) (Model, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	o, feats, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	x, y := samples(d, feats)
	m, err := train(x, y, o, feats)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	return m, nil
}

// samples returns one input row and label per pair of d, which Validate
// accepted.
func samples(d *Dataset, feats []Feature) (x [][]float64, y []float64) {
	byName := make(map[string]*Features, len(d.Workloads))
	for i := range d.Workloads {
		byName[d.Workloads[i].Name] = &d.Workloads[i].Features
	}
	x = make([][]float64, len(d.Pairs))
	y = make([]float64, len(d.Pairs))
	for i, p := range d.Pairs {
		var row [2 * NumFeatures]float64
		x[i] = appendInput(row[:0], feats, *byName[p.Victim], *byName[p.Aggressor])
		y[i] = p.Overhead
	}
	return x, y
}

// appendInput appends the model input for victim v beside aggressor a.
func appendInput(dst []float64, feats []Feature, v, a Features) []float64 {
	for _, f := range feats {
		dst = append(dst, v.Get(f))
	}
	for _, f := range feats {
		dst = append(dst, a.Get(f))
	}
	return dst
}

// train trains the model o (defaults filled in) says on rows x, labels y.
func train(x [][]float64, y []float64, o Options, feats []Feature) (Model, error) {
	if len(y) < 2 {
		return nil, fmt.Errorf("%d samples: want at least 2", len(y))
	}
	switch o.Kind {
	case Forest:
		return trainForest(x, y, o, feats), nil
	case Linear:
		return trainLinear(x, y, o, feats)
	}
	return nil, fmt.Errorf("model kind %q: want forest or linear", string(o.Kind))
}

// saturate returns v, or ±math.MaxFloat64 for ±Inf, or fallback for NaN.
func saturate(v, fallback float64) float64 {
	switch {
	case math.IsNaN(v):
		return fallback
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	}
	return v
}

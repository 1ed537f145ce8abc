package interference

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// forest is a random regression forest: each tree grown on a bootstrap
// sample of the training set, choosing each split among a random third of
// the inputs by the greatest reduction of the sum of squared errors;
// leaves predict their samples' mean, the forest its trees' mean.
type forest struct {
	opts  Options
	feats []Feature
	trees [][]node
}

// node is a node of a tree, stored in a slice with the root first. A leaf
// has feat < 0.
type node struct {
	feat        int32   // input compared, or -1 for a leaf
	left, right int32   // children: input <= thr goes left
	thr         float64 // threshold
	val         float64 // a leaf's prediction
}

// forestStream is the second PCG word, so that a forest's stream differs
// from CrossValidate's and Simulate's for the same Seed.
const forestStream = 0x666f72657374 // "forest"

func trainForest(x [][]float64, y []float64, o Options, feats []Feature) *forest {
	rng := rand.New(rand.NewPCG(o.Seed, forestStream))
	p := len(x[0])
	g := &grower{
		x: x, y: y, rng: rng,
		minLeaf:  o.MinLeaf,
		maxDepth: o.MaxDepth,
		mtry:     max(1, p/3),
		perm:     make([]int, p),
		scratch:  make([]int, len(y)),
	}
	f := &forest{opts: o, feats: feats, trees: make([][]node, o.Trees)}
	idx := make([]int, len(y))
	for t := range f.trees {
		for i := range idx {
			idx[i] = rng.IntN(len(y))
		}
		g.nodes = nil
		g.grow(idx, 0)
		f.trees[t] = g.nodes
	}
	return f
}

// grower grows one tree at a time.
type grower struct {
	x        [][]float64
	y        []float64
	rng      *rand.Rand
	minLeaf  int
	maxDepth int
	mtry     int
	perm     []int // the inputs, shuffled at each node
	scratch  []int // idx sorted by one input
	nodes    []node
}

// grow appends the subtree over the samples idx (which it reorders) at
// depth, returning its index.
func (g *grower) grow(idx []int, depth int) int32 {
	at := int32(len(g.nodes))
	g.nodes = append(g.nodes, node{feat: -1})
	var sum float64
	constant := true
	for _, i := range idx {
		sum += g.y[i]
		constant = constant && g.y[i] == g.y[idx[0]]
	}
	g.nodes[at].val = sum / float64(len(idx))
	if depth >= g.maxDepth || len(idx) < 2*g.minLeaf || constant {
		return at
	}
	feat, thr, ok := g.split(idx, sum)
	if !ok {
		return at
	}
	// Partition idx: input <= thr first.
	n := 0
	for k, i := range idx {
		if g.x[i][feat] <= thr {
			idx[n], idx[k] = idx[k], idx[n]
			n++
		}
	}
	left := g.grow(idx[:n], depth+1)
	right := g.grow(idx[n:], depth+1)
	g.nodes[at] = node{feat: int32(feat), left: left, right: right, thr: thr}
	return at
}

// split returns the best split of idx (whose labels sum to sum) among the
// first mtry inputs, in a random order, that are not constant over idx;
// ok is false when there is none that leaves MinLeaf samples each side.
// As in CART, a split that reduces the error by nothing is still taken
// when it is the best: where the label depends on two inputs together
// (short victim and long aggressor), neither alone may reduce it.
func (g *grower) split(idx []int, sum float64) (feat int, thr float64, ok bool) {
	for i := range g.perm {
		g.perm[i] = i
	}
	g.rng.Shuffle(len(g.perm), func(i, j int) { g.perm[i], g.perm[j] = g.perm[j], g.perm[i] })
	n := len(idx)
	// The split maximising sumL²/nL + sumR²/nR minimises the children's
	// sum of squared errors.
	best := math.Inf(-1)
	sorted := g.scratch[:n]
	tried := 0
	for _, f := range g.perm {
		if tried == g.mtry {
			break
		}
		copy(sorted, idx)
		slices.SortFunc(sorted, func(a, b int) int {
			if c := cmp.Compare(g.x[a][f], g.x[b][f]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		if g.x[sorted[0]][f] == g.x[sorted[n-1]][f] {
			continue // constant here: does not count against mtry
		}
		tried++
		var sumL float64
		for k := 0; k < n-g.minLeaf; k++ {
			sumL += g.y[sorted[k]]
			nL := k + 1
			lo, hi := g.x[sorted[k]][f], g.x[sorted[k+1]][f]
			if nL < g.minLeaf || lo == hi {
				continue
			}
			sumR := sum - sumL
			score := sumL*sumL/float64(nL) + sumR*sumR/float64(n-nL)
			if score > best {
				best, feat, ok = score, f, true
				thr = lo/2 + hi/2 // halves first: no overflow
				if thr >= hi {
					thr = lo
				}
			}
		}
	}
	return feat, thr, ok
}

func (f *forest) Options() Options { return f.opts }

// Predict returns the mean of the trees' predictions; it lies within the
// range of the training labels whatever the features (NaN ones included).
func (f *forest) Predict(v, a Features) float64 {
	var buf [2 * NumFeatures]float64
	x := appendInput(buf[:0], f.feats, v, a)
	var sum float64
	for _, t := range f.trees {
		n := &t[0]
		for n.feat >= 0 {
			if x[n.feat] <= n.thr {
				n = &t[n.left]
			} else {
				n = &t[n.right]
			}
		}
		sum += n.val
	}
	return sum / float64(len(f.trees))
}

// Command placement measures the interference placement of docs/placement.md
// on a co-run dataset measured by bench/interference, and prints the
// seed's tables (bench/README.md):
//
//   - model accuracy: k-fold cross-validated mean squared error and rank
//     correlation of the forest and the linear model on the Base, Extend
//     and Select feature sets, beside a baseline that predicts the
//     training folds' mean overhead;
//   - placement: the seed's cluster simulation (50 hosts x 2 devices x 2
//     VMs, 100 runs, VMs drawn from the measured workloads), total
//     overhead and its reduction against round-robin for the linear
//     model, the forest and the oracle that knows the measured overheads.
//     The models' costs are their out-of-fold predictions: every pair is
//     predicted by a model trained without it;
//   - the cost of one placement decision with each model against the
//     fewest-instances policy's.
//
// Usage:
//
//	go run ./bench/placement [-dataset FILE] [-folds 5] [-runs 100] [-hosts 50] [-devices 2] [-per-device 2]
//
// It owns nothing the rest of vgpud uses; it drives the interference
// package's public API.
package main

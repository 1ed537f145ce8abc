// Package interference owns what vgpud knows about performance
// interference between workloads sharing one physical device: the
// dataset format in which it is measured (each workload's Features run
// alone, and each victim's overhead beside each aggressor), the models
// that predict that overhead from the two workloads' features (a
// regression forest and a linear baseline, after the seed's Table 2),
// their cross-validation, the added interference a placement decision
// weighs, and the cluster placement simulation that compares policies
// (round-robin, a model, the measured "ideal") on measured data.
//
// It is a leaf: it imports only the standard library and knows nothing of
// vgpud's instances, devices, OpenCL or processes. mdev fills Features
// from its counters; whoever places instances calls AddedInterference.
// docs/placement.md describes the dataset ("Dataset") and the models
// ("Model").
//
// Everything here is deterministic: the same inputs and seeds give the
// same models, folds, draws and results.
package interference

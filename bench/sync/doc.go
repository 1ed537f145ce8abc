// Command sync reproduces Elmougy et al.'s CPU-sharing experiment on this
// machine (bench/README.md "Sync"): an in-process vgpud, one TCG guest
// running vgpu-sync (a NAMD-like loop: CPU step, short kernel, wait) once
// per sync mode (poll, block, hybrid, auto), first with the guest's vCPU
// thread pinned to a host core of its own, then pinned to a core shared
// with a CPU-hog process. It prints one table: runtime, launches per
// second, this instance's device utilisation, and the mean latency to
// launch and to notice completion, with ratios to the best of Poll and
// Block in the same run.
//
// Run it pinned off the vCPU core, so vgpud and the OpenCL device do not
// compete with the guest: `taskset -c 0 go run ./bench/sync`.
package main

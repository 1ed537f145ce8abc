// Command reuse reproduces GRU's Figure 4 for vgpud's result reuse: six
// Rodinia-style OpenCL C kernels (madd, mmul, srad, backprop, hotspot,
// lud) run as repeated jobs at 0, 20, 50, 80 and 100% redundancy (the
// share of jobs whose inputs equal an earlier job's), each with reuse off
// and on, in one run, and it prints the throughput ratio on/off of the
// median jobs and, to resolve small differences on a noisy machine, the
// geometric mean of the per-pair ratios (an off job and an on job run
// back to back) with its 95% confidence interval, in wall time and in the
// process's CPU time.
//
// It drives the aggregator directly (no QEMU, no transport): a guest RAM
// slice, the command ring and completion records as a guest driver would
// write them. So it measures the reuse engine and the aggregator's data
// path, not MMIO or TCG costs. Off and on have a scheduler each over the
// one OpenCL device, so that neither pays the other's launch slicing.
//
// TestDefaultConfigServesRepeats guards the mechanism behind the figures
// on vgpud's default configuration (a private domain per instance), with
// the guest driver library on the QEMU-less harness.
//
//	go run ./bench/reuse [-jobs 10] [-only KERNEL] [-redund 0,100]
package main

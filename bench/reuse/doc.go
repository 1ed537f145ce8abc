// Command reuse reproduces GRU's Figure 4 for vgpud's result reuse: six
// Rodinia-style OpenCL C kernels (madd, mmul, srad, backprop, hotspot,
// lud) run as repeated jobs at 0, 20, 50, 80 and 100% redundancy (the
// share of jobs whose inputs equal an earlier job's), each with reuse off
// and on, in one run, and it prints the throughput ratio on/off.
//
// It drives the aggregator directly (no QEMU, no transport): a guest RAM
// slice, the command ring and completion records as a guest driver would
// write them. So it measures the reuse engine and the aggregator's data
// path, not MMIO or TCG costs.
//
//	go run ./bench/reuse [-jobs 10] [-n 512]
package main

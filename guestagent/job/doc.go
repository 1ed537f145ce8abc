// Package job is the matmul-heavy workload of the data-path benchmark
// (bench/README.md), defined once so that every path runs identical work:
// the host baseline (bench/datapath on gpu.Queue), the QEMU-less harness and
// the guest program vgpu-bench (both through the guest driver library).
//
// It owns the job's sizes and inputs, the sequence of operations, the timing
// and the check of the result against a CPU reference. It reaches a device
// only through the small Device interface; DriverDevice adapts the guest
// driver library. It knows nothing of OpenCL, QEMU or vgpud's internals and
// must stay plain Go (no cgo): it is built into the static guest binary.
package job

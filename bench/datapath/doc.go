// Command datapath prints the first benchmark figures of vgpud's data path
// (bench/README.md), each compared with a baseline measured in the same run:
//
//   - MMIO cost: one trapped 32-bit register write and read into vgpud
//     through QEMU's x-pci-proxy-dev, against the same access to QEMU's own
//     emulated edu device, both timed inside one TCG guest; plus the vGPU
//     register through the QEMU-less harness (host process -> socket ->
//     vgpud).
//   - Virtualization overhead of a matmul-heavy job (package guestagent/job):
//     directly on gpu.Queue (the baseline), through the harness and the
//     guest driver library in this process, and from inside a TCG guest
//     (guestagent/cmd/vgpu-bench).
//
// Usage:
//
//	go run ./bench/datapath [-sections mmio,matmul] [-qemu=false] [-n 512 -reps 10 -runs 3] [-serial]
//
// It owns nothing the rest of vgpud uses; it drives the public APIs of gpu,
// mdev, mdev/qemuvm, mdev/mpqemu/mpqemutest and the guest driver library.
package main

// Command sched measures vgpud's scheduler with many QEMU-less guests
// (mdev/mpqemu/mpqemutest plus the guest driver library) sharing one
// OpenCL device, and prints three tables with ratios against baselines
// measured in the same run (bench/README.md):
//
//   - throughput: aggregate launches per second with 1, 2, 4 and 8 guests,
//     relative to one guest;
//   - fairness: Jain's index over per-instance device time (divided by the
//     weight) for every policy, with weights 1:1 and 1:3;
//   - interference: a short-kernel guest's slowdown next to a long-kernel
//     guest, a memory-copy guest and another short-kernel guest, under
//     vgpud's fixed-share scheduler and under the 1 ms time-slice baseline.
//
// Usage:
//
//	go run ./bench/sched [-window 2s] [-sections throughput,fairness,interference] [-device D]
//
// It owns nothing the rest of vgpud uses; it drives the public APIs of gpu,
// mdev, mdev/mpqemu/mpqemutest and the guest driver library.
package main

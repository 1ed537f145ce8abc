// Command interference measures the training data of vgpud's
// interference placement model (docs/placement.md): it runs a set of
// workload types through vgpud's real data path (QEMU-less guests on
// mdev/mpqemu/mpqemutest with the guest driver library, against an
// mdev.Manager whose device work runs in sandboxed worker processes),
// each alone and then every pair of them at once on one physical device,
// after the seed's method: a workload's overhead beside another is its
// time per iteration while the other runs repeatedly, over its time
// alone, minus 1. It writes an interference.Dataset and prints the
// overhead matrix.
//
// The workloads: the six Rodinia-style kernels of bench/reuse (madd,
// mmul, srad, backprop, hotspot, lud; each iteration launches and reads
// the output back), copy-heavy, short-kernel, long-kernel, mixed and
// cpu-think (short kernels between bursts of guest CPU work). Features
// come from vgpud's own counters (mdev.FeaturesBetween) over the
// workload's measured interval alone, except vcpus and vcpu_util: a
// QEMU-less guest has no guest agent reporting /proc/stat, so the tool
// records one vCPU and the fraction of the guest loop's wall time spent
// computing rather than waiting for the device.
//
// Usage:
//
//	go run ./bench/interference [-window 3s] [-reps 1] [-workloads a,b,...] [-out build/interference.json] [-device D] [-measured TEXT]
//
// It owns nothing the rest of vgpud uses.
package main

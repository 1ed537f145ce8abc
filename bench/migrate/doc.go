// Command migrate measures live migration of a running VM and its vGPU
// between two vgpud daemons on PoCL's two CPU device models (pthread, 2
// compute units; basic, 1): the GPU stun (the guest's programs cannot use
// the vGPU) split into its phases, QEMU's own downtime, the total time and
// the device-state bytes sent, with pre-copy against the baseline of a
// plain stop-and-copy of the same state (-no-precopy), measured in the
// same run on the same VM.
//
// For every device-memory size and dirty rate it boots one TCG guest on
// vgpud A running vgpu-iterate (an iterative job whose vectors live in
// device buffers, beside a ballast of the given size filled on the device;
// the high dirty rate rewrites one 64 MiB ballast buffer every step), and
// migrates it four times, alternating the mode and the direction so that
// each mode runs once each way:
//
//	A -> B pre-copy, B -> A stop-and-copy, A -> B stop-and-copy, B -> A pre-copy
//
// The job ends after the fourth migration and checks its vectors against
// the CPU and its ballast on the device: a wrong result fails the run.
//
// It does so on each transport (-transports): mpqemu, the host's QEMU 7.2
// with x-pci-proxy-dev, where the vGPU is unplugged before QEMU migrates
// and plugged again on the destination; and vfio-user, QEMU 11.1 from the
// VMM root with vfio-user-pci, where the vGPU stays attached (the
// destination's instance is created to await the migration, and its QEMU
// attaches to it at start; docs/migration.md).
//
//	go run ./bench/migrate [-sizes 16,256,1024] [-rates low,high] [-transports mpqemu,vfio-user]
//
// It needs the guest kernel (make kernel), QEMU with x-pci-proxy-dev, the
// VMM root (make vmm-root) and PoCL; it builds vgpud, vgpuctl and the
// guest image itself.
package main

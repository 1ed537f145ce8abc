// Package qemuvm builds and runs the QEMU command line of a test VM with
// vGPU instances attached, as x-pci-proxy-dev devices (QEMU 7.2's
// multi-process protocol, docs/mpqemu.md) or as vfio-user-pci devices
// (QEMU >= 10.1, docs/vfio-user.md), or both (docs/guest-image.md, "QEMU
// command line").
//
// It owns the process: argument construction, passing the proxy devices'
// socket file descriptors, running QEMU under a command prefix (VMMRoot:
// QEMU 11.1 from the VMM root of docs/vmm-root.md), capturing the serial
// console line by line and killing QEMU when the caller's context ends.
// It knows nothing of what the sockets carry (the mdev transports serve
// them) nor of what runs in the guest beyond the console lines a caller
// waits for.
package qemuvm

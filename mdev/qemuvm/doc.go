// Package qemuvm builds and runs the QEMU command line of a test VM with
// vGPU instances attached as x-pci-proxy-dev devices (docs/guest-image.md,
// "QEMU command line").
//
// It owns the process: argument construction, passing the proxy devices'
// socket file descriptors, capturing the serial console line by line and
// killing QEMU when the caller's context ends. It knows nothing of what the
// proxy sockets carry (the mdev transport serves them) nor of what runs in
// the guest beyond the console lines a caller waits for.
package qemuvm

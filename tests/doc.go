// Package tests holds vgpud's end-to-end tests: each boots real
// qemu-system-x86_64 guests (TCG) with Debian's kernel and an initramfs of
// our guest programs, attaches vGPU instances served by an in-process
// vgpud stack, and checks what the guests report on their consoles. The
// host's QEMU 7.2 attaches them over x-pci-proxy-dev (mdev/mpqemu); the
// tests run over qemuTransports (the guest suite, the hostile guest, the
// agent channel, the ICD) run also on QEMU 11.1 from the VMM root over
// vfio-user-pci (mdev/vfiouser, docs/vmm-root.md), and the libvirt tests
// of libvirt_vfiouser_test.go run the root's libvirtd 11.3 with QEMU 11.1
// (virsh start, vgpuctl attach -libvirt, virsh migrate between two).
//
// They need the guest kernel (make kernel), an OpenCL platform and, for
// QEMU 11.1, the VMM root (make vmm-root); when one is missing they fail
// with a message saying what to build or install. With -short they are
// skipped.
package tests

// Package tests holds vgpud's end-to-end tests: each boots real
// qemu-system-x86_64 guests (TCG) with Debian's kernel and an initramfs of
// our guest programs, attaches vGPU instances served by an in-process
// vgpud stack over x-pci-proxy-dev, and checks what the guests report on
// their consoles.
//
// They need the guest kernel (make kernel) and an OpenCL platform; when
// either is missing they fail with a message saying what to install. With
// -short they are skipped.
package tests

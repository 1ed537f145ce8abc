// Package mpqemutest plays QEMU's side of the multi-process protocol so
// that the guest driver library runs in ordinary host processes against
// vgpud, without QEMU or a guest kernel: a VM owns guest RAM (a memfd,
// announced with SYNC_SYSMEM in QEMU's pc-machine split around the VGA
// hole), an irqfd pair, probes config space and sizes BARs as QEMU's
// x-pci-proxy-dev does, programs BAR0 and then serves as the guest's
// driver.Registers (BAR0 accesses become BAR_READ/BAR_WRITE messages) and
// driver.Memory (pages of guest RAM above 1 MiB, handed out in a shuffled
// order so scatter-gather is exercised).
//
// It is test infrastructure: it knows the wire format (package mpqemu)
// and the PCI identity (package abi), nothing of the device behind them.
package mpqemutest

// Package mmio emulates the guest-visible hardware of a vgpud virtual GPU:
// its PCI type-0 configuration header (ConfigSpace) and the BAR0 register
// file (Device) whose semantics are defined in package abi.
//
// mmio owns register semantics only. It knows nothing of sockets, QEMU, Xen
// or how accesses reach it: a transport decodes its protocol and calls
// ConfigSpace.Read/Write and Device.ReadBAR/WriteBAR with plain offsets. The
// device behind the register file is a Backend (the aggregator's
// per-instance state); mmio never interprets commands.
//
// Lock order: Device.mu is held while the register file calls Backend
// methods, so a Backend's own locks nest inside Device.mu. A Backend must
// never call back into its Device. ConfigSpace has its own mutex and never
// calls out while holding it.
package mmio

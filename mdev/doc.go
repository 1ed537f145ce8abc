// Package mdev owns vGPU types (profiles) and instances: their UUIDs,
// their placement on physical devices, their lifecycle, and the endpoints
// through which a VM attaches to them. An instance ties together the
// aggregator's device state, the mmio register file and config space, and
// the guest-memory map the transport fills.
//
// The transports live in subpackages: mpqemu (QEMU's multi-process
// protocol, x-pci-proxy-dev) with guestmem (guest RAM from fds), and
// qemuvm (building and running the QEMU command line). mdev knows nothing
// of command semantics: it never decodes a ring entry.
//
// Lock order: Manager.mu, then Instance.mu. Neither is held while calling
// into a transport or the aggregator.
package mdev

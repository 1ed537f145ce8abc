// Package mdev owns vGPU types (profiles) and instances: their UUIDs,
// their placement on physical devices, their lifecycle, and the endpoints
// through which a VM attaches to them. An instance ties together the
// aggregator's device state, the mmio register file and config space, and
// the guest-memory map the transport fills.
//
// mdev knows no transport protocol: a transport (mpqemu, vfiouser, xen)
// attaches to an instance from below through the seam in mdev/transport
// (Instance.Endpoint, Instance.Attach); a socket transport is chosen in
// Config.Transport and mdev only listens for it. guestmem maps guest RAM
// from fds (in the worker), qemuvm builds and runs QEMU command lines.
// mdev knows nothing of command semantics: it never decodes a ring entry.
//
// mdev also decides what an instance's allocation that its device cannot
// hold does (overcommit.go: the policies) and moves instances between
// devices and profiles at run time (realloc.go), asking the guest's
// programs through the agent channel when they registered; the ledger and
// the moves themselves are the worker pool's (docs/overcommit.md).
//
// A VM's connection is handed to the connection keeper (mdev/keeper,
// Config.Keeper) for as long as its session lasts, so that it ends in
// order if vgpud dies.
//
// Lock order: Manager.mu, then Instance.mu. Neither is held while calling
// into a transport or the aggregator.
package mdev

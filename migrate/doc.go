// Package migrate moves a running VM and its vGPU to another vgpud, onto
// the same or a different GPU model (docs/migration.md): pre-copy of the
// device state while the guest computes, quiesce through the guest agent,
// stop-and-copy, QEMU's own migration driven over QMP, and the commit that
// plugs the vGPU into the VM on the destination; any failure rolls back
// to the source. Where the vGPU stays attached (vfio-user) it keeps
// running while QEMU copies the VM (live.go): the worker logs its writes
// to guest RAM, the guest quiesces as QEMU's copy nears its end, and the
// final round, with the VM stopped before QEMU's switchover, carries the
// pages the device wrote. Reattach uses the same QMP plumbing to give a running VM
// its vGPU back after vgpud restarted (docs/operating.md). Plugging and
// unplugging work over the small Monitor interface, which *qmp.Monitor
// implements and migrate/libvirt implements through virsh (ReattachVia,
// Plug), so libvirt domains share the same code.
//
// It owns the orchestration (Migrate, the source; Destination, the
// receiving daemon), the channel between two daemons (mutual TLS, the
// migration stream one way, JSON step replies the other) and the
// operator's TLS directory layout. Device state moves only as stream
// records that workers write and read (worker.Migrator): this package
// relays them, checking their framing, and never decodes buffer data. It
// must not know the aggregator's internals nor the ABI's register layout.
package migrate

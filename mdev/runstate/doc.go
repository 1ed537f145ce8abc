// Package runstate keeps what vgpud must not forget across a restart, in
// its run directory (docs/operating.md): the lock that makes one daemon
// the owner of the directory, and the state file that records every
// instance created at run time (UUID, profile, device, reuse setting,
// share, limits), the devices' scheduling policies and the reuse budgets
// an operator pinned, so that a restarted vgpud brings them back.
//
// It owns the state file's format (versioned JSON, written atomically and
// fsynced) and the translation between it and an mdev.Manager (Capture,
// Restore). It knows nothing of transports, workers or QEMU, and it trusts
// the file no more than any input: a file it cannot read is refused with
// the reason, and a record the manager refuses is reported and kept, not
// dropped.
package runstate

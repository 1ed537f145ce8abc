// Package agentchan is the host end of the control channel between vgpud
// and the guest agent of one vGPU instance (docs/agent-channel.md).
//
// A Server listens on a Unix socket per instance; QEMU connects to it as
// the client side of a `-chardev socket,...,reconnect=1` backing a
// `virtserialport`, so QEMU finds vgpud again after vgpud restarts, and the
// guest agent sees its port close and reopens it. One connection is served
// at a time; a new one replaces the old (it is QEMU reconnecting), unless
// the caller names the attached VM's process (Config.Peer) and the new
// one is another's: a QEMU left over from a migration is refused.
//
// The aggregator's worker calls Notify after each completion record; Notify
// only loads and swaps atomics and does a non-blocking send, so a slow or
// dead agent can never block the data path. Everything the host sends is
// coalescable state (the completed count, the latest hints), so nothing
// queues up behind a reader that does not read: the writer goroutine blocks
// alone, under a write deadline, and the connection is dropped when it
// expires.
//
// The package also samples the scheduling statistics of the VM's vCPU
// threads from procfs (ProcHinter) to send the guest hints about its vCPU
// slices (the estimator is described in docs/agent-channel.md).
//
// It knows the agent wire format (abi/agentmsg) and nothing of the
// aggregator, mmio or QEMU's multi-process protocol: its caller passes in
// how to read the completed count.
package agentchan

// Package transport is the seam between mdev and the protocols that carry
// a VM's accesses to a vGPU: QEMU's multi-process protocol (mdev/mpqemu),
// vfio-user (mdev/vfiouser) and Xen ioreq servers (xen). A transport
// attaches to an instance from below: mdev hands it a Device (the register
// file, the config space, the sink for the guest-RAM map, the interrupt
// line inside the register file) and the transport serves its protocol on
// its own connection or event loop until the VM goes away, as a Session.
//
// transport owns only these types, ServeEnd, the one ending of a socket
// session's Serve its transports share, and an upgrade's pause of a
// socket session (Pauser, and the readers that keep it from splitting a
// message: pause.go). It knows nothing of any protocol (the
// transports import it, never the reverse) and nothing of instances,
// profiles or workers (mdev). Register semantics stay in mmio.
package transport

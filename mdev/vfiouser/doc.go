// Package vfiouser is the server side of the vfio-user protocol (QEMU's
// docs/interop/vfio-user.rst), the transport behind QEMU 10.1's
// `-device vfio-user-pci`: the VMM forwards the vGPU's config space
// and BAR0 accesses, maps guest RAM for DMA (file descriptors), and wires
// INTx through eventfds, over one Unix socket per instance.
//
// Like mpqemu it has two layers. The codec (Header, the payload types,
// ReadMsg/WriteMsg on a Wire) is the wire format and nothing else; package
// vfiousertest reuses it to play the client. Session serves one
// connection, net/http style, as a transport.Session; Transport is the
// transport.Socket mdev listens for. A Session pauses between two
// messages and describes itself for an upgrade in place (Handover); a new
// process's Transport.Adopt checks that description as it would a
// client's messages (handover_linux.go). When vgpud is gone, the
// connection keeper answers the requests the client still waits on
// (RefuseWaiting, farewell_linux.go). vfiouser knows nothing of
// register semantics or commands (mmio and the aggregator own them), nor
// of how a handover travels (package handover, mdev).
//
// docs/vfio-user.md lists the messages as implemented, what differs from
// the specification, and what ran here (a client written from the
// specification, and QEMU 11.1.3 from the VMM root) and what did not
// (QEMU 10.1).
package vfiouser

// Package wire is the protocol between vgpud's main process and its worker
// processes (docs/worker.md): one message per datagram on a SOCK_SEQPACKET
// socket pair, a 16-byte little-endian header, a fixed-layout payload per
// type, file descriptors (guest RAM, the instance page, eventfds) as
// SCM_RIGHTS. It defines every message once, encodes and decodes them, and
// sends and receives them on a Conn.
//
// Both ends treat the other as untrusted: Unmarshal never panics, bounds
// every length before it slices, refuses unknown types, trailing bytes,
// reserved bits, lengths over the limits and a descriptor count other than
// the type's, and every such error wraps ErrProtocol, on which the
// receiver ends the connection. What a message means (a slot that exists,
// a turn in progress) is the receiver's to check.
//
// wire knows nothing of guests' commands, OpenCL or scheduling policy.
package wire

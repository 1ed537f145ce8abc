// Package icdproto is the wire protocol between the guest OpenCL ICD (a C
// library loaded into unprivileged applications, guestagent/icd) and
// vgpu-icdd, the privileged guest daemon that owns the vGPUs
// (docs/icd-protocol.md).
//
// It is the single definition of that protocol: operation numbers, limits,
// error codes, the message header, every request and reply body, the device
// and event records and the launch header with its argument entries. The C
// header guestagent/icd/vgpu_icdproto.h is generated from this package by
// abi/cabi (go generate ./guestagent/icdproto), so the two sides cannot
// disagree.
//
// Every message is one SOCK_SEQPACKET datagram, or (protocol version 2)
// one entry of the client's submission queue (queue.go: its layout, a
// reader that checks what a hostile client writes there, and a writer):
// a 16-byte Header and a body
// whose layout the operation fixes. All integers are little-endian and every
// field is naturally aligned. Fixed-size bodies are Go structs whose fields
// are the wire fields in wire order (reserved fields included, named
// Reserved). The six bodies with a variable tail (HelloReply,
// DeviceInfoReply, Wait, WaitReply, Launch, Error) have a fixed head type
// (HelloReplyHead, DeviceInfoReplyHead, WaitHead, WaitReplyHead,
// LaunchHead, ErrorHead) that the C header describes.
//
// Each wire structure lists its fields once, in an unexported method that
// passes them, in wire order, through a small field codec over
// internal/codec (fields.go); the same method encodes and decodes it, with
// no reflection. A body with a variable tail has one such method too,
// which passes its head, checks the head's counts when decoding, and
// passes its tail.
//
// Unmarshal decodes hostile bytes: it never panics, checks the header's
// length against the datagram, every length and count against the limits
// below, and refuses nonzero reserved fields. It checks what can be checked
// without state (ranges of values, argument kinds, pattern lengths); object
// ids and arena ranges are the daemon's to check (package icdserver).
//
// The package knows the guest ABI's limits (package abi) and nothing of the
// driver, the daemon, sockets or file descriptors.
package icdproto

//go:generate go run ../../abi/cabi -proto -o ../icd/vgpu_icdproto.h

// Package abi defines the guest-visible hardware interface of the vgpud
// virtual GPU: its PCI identity, the BAR0 register file, the command ring
// and completion records that live in guest RAM, the command payloads,
// scatter-gather lists, launch descriptors and status codes.
//
// Every type here is the single definition of a wire format documented in
// docs/ABI.md; each type's comment names its section there. All fields are
// fixed width, little-endian, with explicit padding. Decoding functions take
// hostile bytes: they check lengths before slicing, never panic and return
// an error (wrapping ErrMalformed) for anything out of range.
//
// This package is a leaf: it imports only the standard library and knows
// nothing of transports, devices or scheduling. The guest driver and the
// host side share it, so the two ends cannot disagree.
package abi

//go:generate go run ./cabi -o ../guestagent/icd/vgpu_abi.h

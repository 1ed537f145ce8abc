// Package mpqemu is the remote (device) side of QEMU's multi-process
// protocol, the transport behind `-device x-pci-proxy-dev,fd=N`: QEMU
// forwards the vGPU's PCI config space accesses, every BAR0 access, the
// guest RAM layout (as file descriptors) and an irqfd pair over a Unix
// stream socket, and vgpud answers.
//
// The package has two layers. The codec (Msg, ConfigMsg, BarMsg,
// SyncSysmemMsg, Decode, Encode, ReadMsg, WriteMsg) is the wire format and
// nothing else; package mpqemutest reuses it to play QEMU's side. Conn
// serves one connection, net/http style: NewConn, then Serve(ctx) until the
// peer hangs up, the context ends, Close is called or a malformed message
// arrives (ErrProtocol). Serve translates BAR addresses through the BAR0
// base the guest programmed in config space and hands plain offsets to the
// mmio register file; guest RAM updates go to a guestmem.Map.
//
// mpqemu knows nothing of register semantics or commands: those belong to
// mmio and the aggregator. docs/mpqemu.md describes the protocol as
// implemented and how it differs from QEMU's own remote.
package mpqemu

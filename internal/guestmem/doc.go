// Package guestmem maps a VM's RAM into vgpud from the file descriptors a
// transport receives (QEMU's SYNC_SYSMEM message, a vfio-user DMA map) and
// serves bounds-checked reads, writes and atomic stores by guest-physical
// address. *Map implements aggregator.GuestMemory without importing it.
//
// guestmem owns the mappings and their lifetime: an Update swaps in a new
// memory map atomically and unmaps the old one once no access uses it.
// It maps only the windows the transport announced, never a whole file,
// and refuses maps larger than the host's memory (Limit). While a
// migration asks (LogWrites), it records which pages were written
// through it (TakeWritten), since QEMU cannot see the device's writes. It
// knows nothing of protocols, register semantics or commands.
package guestmem

// Package xentest is a fake Xen for package xen: a Hypervisor that keeps
// an HVM domain's ioreq pages, event channels and RAM in ordinary memory
// (the pages and RAM in memfds, each event channel handle an eventfd), and
// a Guest whose vCPUs drive the ioreq state machine exactly as Xen does:
// fill the vCPU's slot, set it STATE_IOREQ_READY, notify the vCPU's port,
// wait for STATE_IORESP_READY, read the data, set STATE_IOREQ_NONE.
//
// Config space accesses become IOREQ_TYPE_PCI_CONFIG requests for the
// claimed PCI function and BAR accesses IOREQ_TYPE_COPY requests at BAR0's
// guest-physical address, which reach the server only inside a range it
// claimed with map_io_range; like Xen (with QEMU as the default device
// model) anything unclaimed reads all ones without reaching it.
// Interrupts are counted at set_pci_intx_level: a rising level is one
// delivery, and an EOI (Resample) while the level is still high is
// another, as a level-triggered IOAPIC pin behaves.
//
// The Guest implements transporttest.Guest (driver.Registers,
// driver.Memory, config access, interrupts) and mirrors
// mdev/mpqemu/mpqemutest's VM; Conformance adapts it to
// transporttest.Transport, with Xen-specific hostile peers. It is test
// infrastructure: nothing here has been compared with a running Xen.
package xentest

// Package xen attaches a vGPU to a Xen HVM guest as an ioreq server: a
// device model beside the domain's QEMU that claims one PCI function
// (config space arrives as IOREQ_TYPE_PCI_CONFIG) and the MMIO range of
// BAR0 once the guest programs it (IOREQ_TYPE_COPY). Xen parks the vCPU
// that made the access, fills that vCPU's slot in the shared ioreq page,
// sets it STATE_IOREQ_READY and signals the vCPU's event channel; the
// Server answers, sets STATE_IORESP_READY and signals back.
//
// A Server is a transport.Session for one vGPU in one domain. It talks to
// Xen only through the Hypervisor interface: xen/xenctl is the real one
// (privcmd and evtchn ioctls, pure Go), xen/xentest a fake in memory that
// plays Xen's side so the whole path runs without a hypervisor.
//
// The layouts of struct ioreq and struct buffered_iopage (xen/hvm/ioreq.h)
// are decoded from the shared pages with atomic loads and stores where
// Xen uses barriers. Everything in those pages is treated as untrusted:
// a slot or ring that breaks the protocol stops that Server with an error
// wrapping ErrProtocol, never the process and never another instance.
//
// docs/xen.md describes the flow, the setup and what was (not) tested.
package xen

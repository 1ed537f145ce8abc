package xen

import (
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/internal/guestmem"
)

// Errors a caller must tell apart.
var (
	// ErrProtocol wraps what breaks the ioreq protocol: a slot in a state
	// Xen never leaves it in, an unknown type, a size other than 1, 2, 4
	// or 8, a port that is not the vCPU's, a config access for another
	// function, a buffered ring whose pointers jump. The Server stops.
	ErrProtocol = errors.New("xen: ioreq protocol violation")
	// ErrNoDomain is returned (wrapped) by a Hypervisor for a domain that
	// does not exist (any more): ESRCH from Xen. Serve then returns nil,
	// as a socket transport does when its VM hangs up.
	ErrNoDomain = errors.New("xen: no such domain")
	// ErrNoGuestRAMFDs is returned (wrapped) by Hypervisor.GuestRAM when
	// the guest's RAM cannot be handed to the device: under real Xen when
	// the guest's RAM size (Config.RAM) is not known, since it decides
	// the window of guest-physical space the device may touch
	// (docs/xen.md "Guest RAM"). The Server keeps serving registers; the
	// device cannot reach guest RAM.
	ErrNoGuestRAMFDs = errors.New("xen: guest RAM is not available to the device")
)

// BufIOReqMode is the handle_bufioreq argument of create_ioreq_server.
type BufIOReqMode uint8

// HVM_IOREQSRV_BUFIOREQ_* (xen/hvm/hvm_op.h).
const (
	BufIOReqOff    BufIOReqMode = 0
	BufIOReqLegacy BufIOReqMode = 1
	BufIOReqAtomic BufIOReqMode = 2
)

// RangeType is the type of an I/O range claimed by an ioreq server.
type RangeType uint32

// XEN_DMOP_IO_RANGE_* (xen/hvm/dm_op.h).
const (
	RangePort   RangeType = 0
	RangeMemory RangeType = 1
	RangePCI    RangeType = 2
)

// SBDF names a PCI function: segment, bus, device (slot), function.
type SBDF struct {
	Seg     uint16
	Bus     uint8
	Dev, Fn uint8 // Dev < 32, Fn < 8
}

// Uint32 is XEN_DMOP_PCI_SBDF(s, b, d, f), also what an
// IOREQ_TYPE_PCI_CONFIG request carries in addr's high 32 bits.
func (s SBDF) Uint32() uint32 {
	return uint32(s.Seg)<<16 | uint32(s.Bus)<<8 | uint32(s.Dev&0x1f)<<3 | uint32(s.Fn&7)
}

func (s SBDF) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%d", s.Seg, s.Bus, s.Dev, s.Fn)
}

// ParseSBDF parses "ssss:bb:dd.f" or "bb:dd.f" (segment 0).
func ParseSBDF(v string) (SBDF, error) {
	var s SBDF
	var seg, bus, dev, fn uint
	n, err := fmt.Sscanf(v, "%x:%x:%x.%d", &seg, &bus, &dev, &fn)
	if err != nil || n != 4 {
		seg = 0
		if n, err = fmt.Sscanf(v, "%x:%x.%d", &bus, &dev, &fn); err != nil || n != 3 {
			return s, fmt.Errorf("pci address %q: want ssss:bb:dd.f", v)
		}
	}
	if seg > 0xffff || bus > 0xff || dev > 0x1f || fn > 7 {
		return s, fmt.Errorf("pci address %q: out of range", v)
	}
	return SBDF{Seg: uint16(seg), Bus: uint8(bus), Dev: uint8(dev), Fn: uint8(fn)}, nil
}

// IOReqPages are an ioreq server's pages mapped into this process
// (xenforeignmemory_map_resource of XENMEM_resource_ioreq_server frames 0
// and 1).
type IOReqPages struct {
	Buffered []byte // frame 0: struct buffered_iopage
	Sync     []byte // frame 1: struct shared_iopage, one slot per vCPU
	// Unmap releases the mapping; the slices are invalid afterwards.
	Unmap func() error
}

// Mapping is guest memory mapped into this process
// (xenforeignmemory_map): Bytes()[i*PageSize:] is the i-th page asked for.
type Mapping interface {
	Bytes() []byte
	Unmap() error
}

// Hypervisor is what a device model needs of Xen, one method per
// operation of libxendevicemodel, libxenforeignmemory and libxenevtchn
// that the Server uses. Methods may be called from several goroutines.
// Errors for a dead domain wrap ErrNoDomain.
type Hypervisor interface {
	// CreateIOReqServer creates an ioreq server for dom
	// (XEN_DMOP_create_ioreq_server); it starts disabled.
	CreateIOReqServer(dom DomID, buf BufIOReqMode) (ServerID, error)
	// DestroyIOReqServer destroys it, releasing its ranges and pages.
	DestroyIOReqServer(dom DomID, id ServerID) error
	// IOReqServerInfo returns the buffered ring's event channel port
	// (Xen's end), XEN_DMOP_get_ioreq_server_info with XEN_DMOP_no_gfns.
	IOReqServerInfo(dom DomID, id ServerID) (bufPort Port, err error)
	// MapIOReqPages maps frames 0 (buffered) and 1 (synchronous).
	MapIOReqPages(dom DomID, id ServerID) (IOReqPages, error)
	// SetIOReqServerState enables or disables the server. Enabling
	// writes each vCPU's port into its slot's vp_eport.
	SetIOReqServerState(dom DomID, id ServerID, enabled bool) error
	// MapIORange claims [start, end] (inclusive) of t for the server.
	MapIORange(dom DomID, id ServerID, t RangeType, start, end uint64) error
	// UnmapIORange releases a range claimed with MapIORange.
	UnmapIORange(dom DomID, id ServerID, t RangeType, start, end uint64) error
	// MapPCIDev claims a PCI function's config space
	// (xendevicemodel_map_pcidev_to_ioreq_server).
	MapPCIDev(dom DomID, id ServerID, f SBDF) error
	// UnmapPCIDev releases it.
	UnmapPCIDev(dom DomID, id ServerID, f SBDF) error
	// SetPCIINTxLevel drives the function's INTx pin (0 = INTA#) to
	// level; Xen's INTx is level-driven by the device model.
	SetPCIINTxLevel(dom DomID, f SBDF, pin uint8, level bool) error
	// NrVCPUs returns the domain's vCPU count (XEN_DMOP_nr_vcpus).
	NrVCPUs(dom DomID) (int, error)
	// OpenEvents opens an event channel handle (xenevtchn_open).
	OpenEvents() (Events, error)
	// MapGuest maps guest frames gfns of dom, read-only or read-write.
	MapGuest(dom DomID, gfns []uint64, write bool) (Mapping, error)
	// GuestRAM returns dom's RAM as regions for the device
	// (transport.MemoryMap.Update); the caller owns the fds. ram is the
	// guest's memory in bytes (Config.RAM, 0 if unknown). Real Xen
	// returns one guestmem.Region marked Foreign: a privcmd fd restricted
	// to dom and the window [0, RAMWindow(ram)), which the device's
	// process maps on demand; with ram 0 it returns an error wrapping
	// ErrNoGuestRAMFDs. The fake returns memfd regions.
	GuestRAM(dom DomID, ram uint64) ([]guestmem.Region, error)
	// Restrict limits this handle's device-model and foreign-memory calls
	// to dom (xendevicemodel_restrict, xenforeignmemory_restrict); it
	// cannot be undone. Only for a handle that serves one domain.
	Restrict(dom DomID) error
}

// Events is an event channel handle (libxenevtchn). Fd is readable while
// a port is pending; Pending returns them one by one without blocking. A
// port that fired stays masked until Unmask.
type Events interface {
	Fd() int
	BindInterdomain(dom DomID, remote Port) (local Port, err error)
	Unbind(local Port) error
	Notify(local Port) error
	// Pending returns the next pending port, or ok false when none is.
	Pending() (p Port, ok bool, err error)
	Unmask(local Port) error
	// Restrict limits the handle to dom (xenevtchn_restrict).
	Restrict(dom DomID) error
	Close() error
}

// RAMWindow is the end of the guest-physical window a device may touch in
// an HVM guest with ram bytes of memory. hvmloader puts RAM below the
// MMIO hole and the rest from 4 GiB, and may move the hole's start down
// to make room for BARs (to 2 GiB by default; libxl's mmio_hole can ask
// for up to 3 GiB). So RAM lies in [0, ram) when ram <= 1 GiB, and
// otherwise within [0, 3 GiB + ram): the window covers every layout, and
// the frames in it that are not RAM (the hole, the top) Xen refuses to
// map, which fails the accesses that touch them (guestmem.ErrRefused).
// The result is page-aligned; 0 for ram 0.
func RAMWindow(ram uint64) uint64 {
	const gib = 1 << 30
	const page = 4096
	end := ram
	if ram > gib {
		end = ram + 3*gib
		if end < ram {
			end = ^uint64(0)
		}
	}
	if end > ^uint64(0)-page {
		return (^uint64(0) - page + 1) &^ (page - 1)
	}
	return (end + page - 1) &^ (page - 1)
}

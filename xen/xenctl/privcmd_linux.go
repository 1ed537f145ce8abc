package xenctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/xen"
)

// Device nodes of the Linux Xen drivers.
const (
	PrivcmdPath = "/dev/xen/privcmd"
	EvtchnPath  = "/dev/xen/evtchn"
)

// ioctl numbers: _IOC(_IOC_NONE, type, nr, size) = type<<8 | nr | size<<16.
const (
	ioctlPrivcmdMmapBatchV2  = 'P'<<8 | 4 | sizeofMmapBatchV2<<16
	ioctlPrivcmdDMOp         = 'P'<<8 | 5 | sizeofPrivcmdDMOp<<16
	ioctlPrivcmdRestrict     = 'P'<<8 | 6 | 2<<16 // sizeof(domid_t)
	ioctlPrivcmdMmapResource = 'P'<<8 | 7 | sizeofMmapResource<<16

	sizeofPrivcmdDMOp    = 16 // domid_t dom; __u16 num; const privcmd_dm_op_buf_t *ubufs
	sizeofPrivcmdDMOpBuf = 16 // void *uptr; size_t size
	sizeofMmapResource   = 32 // domid_t dom; __u32 type, id, idx; __u64 num, addr
	sizeofMmapBatchV2    = 32 // unsigned int num; domid_t dom; __u64 addr; xen_pfn_t *arr; int *err
)

// XEN_DMOP_* operations and the layout of struct xen_dm_op: op, pad,
// then the union at offset 8; the whole struct is 32 bytes.
const (
	dmopCreateIOReqServer   = 1
	dmopGetIOReqServerInfo  = 2
	dmopMapIORange          = 3
	dmopUnmapIORange        = 4
	dmopSetIOReqServerState = 5
	dmopDestroyIOReqServer  = 6
	dmopSetPCIINTxLevel     = 8
	dmopNrVCPUs             = 20

	sizeofXenDMOp = 32
	dmopU         = 8 // offset of the union
	dmopNoGFNs    = 1 // XEN_DMOP_no_gfns

	resourceIOReqServer = 0 // XENMEM_resource_ioreq_server
	pageSize            = 4096
)

// Handle is a privcmd handle: device-model operations and foreign
// memory. It is safe for concurrent use (one dm_op at a time).
type Handle struct {
	fd int

	mu      sync.Mutex
	scratch []byte // one page outside the Go heap: the dm_op buffer
}

var _ xen.Hypervisor = (*Handle)(nil)

// Open opens /dev/xen/privcmd.
func Open() (*Handle, error) {
	fd, err := unix.Open(PrivcmdPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xenctl: open %s: %w", PrivcmdPath, err)
	}
	scratch, err := unix.Mmap(-1, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("xenctl: dm_op buffer: %w", err)
	}
	return &Handle{fd: fd, scratch: scratch}, nil
}

// Close closes the handle; no call may be in progress or follow.
// Mappings made through it stay valid until unmapped.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.scratch == nil {
		return nil
	}
	unix.Munmap(h.scratch)
	h.scratch = nil
	return unix.Close(h.fd)
}

func (h *Handle) ioctl(req uintptr, arg unsafe.Pointer) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(h.fd), req, uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// wrap names the operation and maps ESRCH (no such domain) to
// xen.ErrNoDomain.
func wrap(op string, dom xen.DomID, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("xenctl: %s domain %d: %w: %w", op, dom, xen.ErrNoDomain, err)
	}
	return fmt.Errorf("xenctl: %s domain %d: %w", op, dom, err)
}

// dmOp runs one XEN_DMOP: fill writes the union, read reads it back.
func (h *Handle) dmOp(name string, dom xen.DomID, op uint32, fill func(u []byte), read func(u []byte)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.scratch == nil {
		return fmt.Errorf("xenctl: %s: %w", name, os.ErrClosed)
	}
	b := h.scratch[:sizeofXenDMOp]
	clear(b)
	binary.LittleEndian.PutUint32(b[0:], op)
	if fill != nil {
		fill(b[dmopU:])
	}
	buf := h.scratch[64 : 64+sizeofPrivcmdDMOpBuf]
	binary.LittleEndian.PutUint64(buf[0:], uint64(uintptr(unsafe.Pointer(&b[0]))))
	binary.LittleEndian.PutUint64(buf[8:], sizeofXenDMOp)
	var arg [sizeofPrivcmdDMOp]byte
	binary.LittleEndian.PutUint16(arg[0:], uint16(dom))
	binary.LittleEndian.PutUint16(arg[2:], 1)
	binary.LittleEndian.PutUint64(arg[8:], uint64(uintptr(unsafe.Pointer(&buf[0]))))
	if _, err := h.ioctl(ioctlPrivcmdDMOp, unsafe.Pointer(&arg)); err != nil {
		return wrap(name, dom, err)
	}
	if read != nil {
		read(b[dmopU:])
	}
	return nil
}

var le = binary.LittleEndian

// CreateIOReqServer is xendevicemodel_create_ioreq_server.
func (h *Handle) CreateIOReqServer(dom xen.DomID, buf xen.BufIOReqMode) (xen.ServerID, error) {
	var id xen.ServerID
	err := h.dmOp("create_ioreq_server", dom, dmopCreateIOReqServer,
		func(u []byte) { u[0] = byte(buf) },
		func(u []byte) { id = xen.ServerID(le.Uint16(u[4:])) })
	return id, err
}

// DestroyIOReqServer is xendevicemodel_destroy_ioreq_server.
func (h *Handle) DestroyIOReqServer(dom xen.DomID, id xen.ServerID) error {
	return h.dmOp("destroy_ioreq_server", dom, dmopDestroyIOReqServer,
		func(u []byte) { le.PutUint16(u[0:], uint16(id)) }, nil)
}

// IOReqServerInfo is xendevicemodel_get_ioreq_server_info without gfns.
func (h *Handle) IOReqServerInfo(dom xen.DomID, id xen.ServerID) (xen.Port, error) {
	var p xen.Port
	err := h.dmOp("get_ioreq_server_info", dom, dmopGetIOReqServerInfo,
		func(u []byte) { le.PutUint16(u[0:], uint16(id)); le.PutUint16(u[2:], dmopNoGFNs) },
		func(u []byte) { p = xen.Port(le.Uint32(u[4:])) })
	return p, err
}

// SetIOReqServerState is xendevicemodel_set_ioreq_server_state.
func (h *Handle) SetIOReqServerState(dom xen.DomID, id xen.ServerID, enabled bool) error {
	return h.dmOp("set_ioreq_server_state", dom, dmopSetIOReqServerState, func(u []byte) {
		le.PutUint16(u[0:], uint16(id))
		if enabled {
			u[2] = 1
		}
	}, nil)
}

func (h *Handle) ioRange(name string, op uint32, dom xen.DomID, id xen.ServerID, t xen.RangeType, start, end uint64) error {
	return h.dmOp(name, dom, op, func(u []byte) {
		le.PutUint16(u[0:], uint16(id))
		le.PutUint32(u[4:], uint32(t))
		le.PutUint64(u[8:], start)
		le.PutUint64(u[16:], end)
	}, nil)
}

// MapIORange is xendevicemodel_map_io_range_to_ioreq_server.
func (h *Handle) MapIORange(dom xen.DomID, id xen.ServerID, t xen.RangeType, start, end uint64) error {
	return h.ioRange("map_io_range_to_ioreq_server", dmopMapIORange, dom, id, t, start, end)
}

// UnmapIORange is xendevicemodel_unmap_io_range_from_ioreq_server.
func (h *Handle) UnmapIORange(dom xen.DomID, id xen.ServerID, t xen.RangeType, start, end uint64) error {
	return h.ioRange("unmap_io_range_from_ioreq_server", dmopUnmapIORange, dom, id, t, start, end)
}

// MapPCIDev is xendevicemodel_map_pcidev_to_ioreq_server: a PCI range of
// one function.
func (h *Handle) MapPCIDev(dom xen.DomID, id xen.ServerID, f xen.SBDF) error {
	s := uint64(f.Uint32())
	return h.ioRange("map_pcidev_to_ioreq_server", dmopMapIORange, dom, id, xen.RangePCI, s, s)
}

// UnmapPCIDev is xendevicemodel_unmap_pcidev_from_ioreq_server.
func (h *Handle) UnmapPCIDev(dom xen.DomID, id xen.ServerID, f xen.SBDF) error {
	s := uint64(f.Uint32())
	return h.ioRange("unmap_pcidev_from_ioreq_server", dmopUnmapIORange, dom, id, xen.RangePCI, s, s)
}

// SetPCIINTxLevel is xendevicemodel_set_pci_intx_level.
func (h *Handle) SetPCIINTxLevel(dom xen.DomID, f xen.SBDF, pin uint8, level bool) error {
	return h.dmOp("set_pci_intx_level", dom, dmopSetPCIINTxLevel, func(u []byte) {
		le.PutUint16(u[0:], f.Seg)
		u[2], u[3], u[4] = f.Bus, f.Dev, pin
		if level {
			u[5] = 1
		}
	}, nil)
}

// NrVCPUs is xendevicemodel_nr_vcpus.
func (h *Handle) NrVCPUs(dom xen.DomID) (int, error) {
	var n int
	err := h.dmOp("nr_vcpus", dom, dmopNrVCPUs, nil, func(u []byte) { n = int(le.Uint32(u[0:])) })
	return n, err
}

// Restrict is xendevicemodel_restrict and xenforeignmemory_restrict (one
// privcmd fd serves both).
func (h *Handle) Restrict(dom xen.DomID) error {
	d := uint16(dom)
	_, err := h.ioctl(ioctlPrivcmdRestrict, unsafe.Pointer(&d))
	return wrap("restrict", dom, err)
}

// GuestRAM opens a privcmd fd of its own, restricts it to dom
// (IOCTL_PRIVCMD_RESTRICT, irreversible) and returns it as one Foreign
// region, the window [0, xen.RAMWindow(ram)): the device's worker maps
// that domain's frames through it, on demand (guestmem's mapcache), and
// can reach no other domain. The caller owns the fd. ram 0 (the guest's
// size unknown) is an error wrapping xen.ErrNoGuestRAMFDs.
func (h *Handle) GuestRAM(dom xen.DomID, ram uint64) ([]guestmem.Region, error) {
	if ram == 0 {
		return nil, fmt.Errorf("xenctl: domain %d: the guest's RAM size is not configured (xen.Config.RAM): %w", dom, xen.ErrNoGuestRAMFDs)
	}
	fd, err := unix.Open(PrivcmdPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xenctl: guest RAM of domain %d: open %s: %w", dom, PrivcmdPath, err)
	}
	d := uint16(dom)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlPrivcmdRestrict, uintptr(unsafe.Pointer(&d))); errno != 0 {
		unix.Close(fd)
		return nil, wrap("restrict guest RAM fd to", dom, errno)
	}
	return []guestmem.Region{{GPA: 0, Size: xen.RAMWindow(ram), FD: fd, Foreign: true, Domain: d}}, nil
}

// mapping is a privcmd mapping.
type mapping struct {
	b    []byte
	once sync.Once
}

func (m *mapping) Bytes() []byte { return m.b }

func (m *mapping) Unmap() error {
	var err error
	m.once.Do(func() { err = unix.Munmap(m.b) })
	return err
}

// MapIOReqPages is xenforeignmemory_map_resource of the ioreq server's
// frames 0 (buffered) and 1 (synchronous): reserve the range on the
// privcmd fd, then ask privcmd to fill it.
func (h *Handle) MapIOReqPages(dom xen.DomID, id xen.ServerID) (xen.IOReqPages, error) {
	b, err := h.privcmdMmap(2, unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return xen.IOReqPages{}, wrap("map ioreq server resource", dom, err)
	}
	var arg [sizeofMmapResource]byte
	le.PutUint16(arg[0:], uint16(dom))
	le.PutUint32(arg[4:], resourceIOReqServer)
	le.PutUint32(arg[8:], uint32(id))
	le.PutUint32(arg[12:], xen.FrameBufIOReq) // first frame
	le.PutUint64(arg[16:], 2)
	le.PutUint64(arg[24:], uint64(uintptr(unsafe.Pointer(&b[0]))))
	if _, err := h.ioctl(ioctlPrivcmdMmapResource, unsafe.Pointer(&arg)); err != nil {
		unix.Munmap(b)
		return xen.IOReqPages{}, wrap("map ioreq server resource", dom, err)
	}
	m := &mapping{b: b}
	return xen.IOReqPages{Buffered: b[:pageSize], Sync: b[pageSize:], Unmap: m.Unmap}, nil
}

func (h *Handle) privcmdMmap(pages, prot int) ([]byte, error) {
	return unix.Mmap(h.fd, 0, pages*pageSize, prot, unix.MAP_SHARED)
}

// MapGuest is xenforeignmemory_map (IOCTL_PRIVCMD_MMAPBATCH_V2). The
// frame and error arrays live outside the Go heap. A frame that cannot
// be mapped fails the whole mapping.
func (h *Handle) MapGuest(dom xen.DomID, gfns []uint64, write bool) (xen.Mapping, error) {
	n := len(gfns)
	if n == 0 || n > 1<<16 {
		return nil, fmt.Errorf("xenctl: map %d frames of domain %d: %w", n, dom, unix.EINVAL)
	}
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	b, err := h.privcmdMmap(n, prot)
	if err != nil {
		return nil, wrap("map foreign", dom, err)
	}
	arrays, err := unix.Mmap(-1, 0, n*12, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Munmap(b)
		return nil, fmt.Errorf("xenctl: map foreign: %w", err)
	}
	defer unix.Munmap(arrays)
	for i, g := range gfns {
		le.PutUint64(arrays[8*i:], g) // xen_pfn_t is unsigned long on x86-64
	}
	errs := arrays[8*n:]
	var arg [sizeofMmapBatchV2]byte
	le.PutUint32(arg[0:], uint32(n))
	le.PutUint16(arg[4:], uint16(dom))
	le.PutUint64(arg[8:], uint64(uintptr(unsafe.Pointer(&b[0]))))
	le.PutUint64(arg[16:], uint64(uintptr(unsafe.Pointer(&arrays[0]))))
	le.PutUint64(arg[24:], uint64(uintptr(unsafe.Pointer(&errs[0]))))
	if _, err := h.ioctl(ioctlPrivcmdMmapBatchV2, unsafe.Pointer(&arg)); err != nil {
		unix.Munmap(b)
		return nil, wrap("map foreign", dom, err)
	}
	for i := range n {
		if e := int32(le.Uint32(errs[4*i:])); e != 0 {
			unix.Munmap(b)
			return nil, wrap(fmt.Sprintf("map foreign frame %#x", gfns[i]), dom, unix.Errno(-e))
		}
	}
	return &mapping{b: b}, nil
}

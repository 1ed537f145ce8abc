package xentest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/xen"
)

// Guest-physical layout of the fake domain's RAM, as hvmloader leaves a
// small HVM guest: low RAM below the VGA hole, the rest from 1 MiB. The
// memfd holds RAM at offset == gpa.
const (
	LowRAMEnd  = 0xa0000
	HighRAM    = 0x100000
	MinRAM     = 2 << 20
	BAR0Addr   = 0xfebf0000 // where the Guest programs BAR0
	DomainID   = xen.DomID(7)
	firstPort  = 16 // Xen-side ports the fake hands out start here
	firstLocal = 1000
)

// DefaultSBDF is the PCI function the fake guest expects the vGPU at.
var DefaultSBDF = xen.SBDF{Dev: 0x10}

// Errors of the fake.
var (
	// ErrServerGone is what a vCPU's access meets when the ioreq server
	// it waited on was destroyed (the device model stopped).
	ErrServerGone = errors.New("xentest: ioreq server destroyed while a vcpu waited")
	// ErrTimeout is a device model that did not answer in time.
	ErrTimeout = errors.New("xentest: no answer from the device model")
	// ErrBadState is a slot the device model left in a state Xen rejects.
	ErrBadState = errors.New("xentest: device model left the ioreq slot in a bad state")
	// ErrClosed is returned after the domain was destroyed.
	ErrClosed = errors.New("xentest: domain destroyed")
)

// Hypervisor is a fake Xen with one HVM domain. It implements
// xen.Hypervisor; the methods outside that interface play the guest's
// and Xen's side. It runs no goroutines: a vCPU's access runs on the
// caller's goroutine.
//
// Lock order: Hypervisor.mu, then Events.mu.
type Hypervisor struct {
	// IOTimeout bounds how long a vCPU waits for the device model
	// (default 10 s): a device model that hangs fails the access.
	IOTimeout time.Duration

	dom     xen.DomID
	vcpus   int
	ramSize uint64
	ramFD   int
	ram     []byte

	mu         sync.Mutex
	gone       bool
	goneCh     chan struct{}
	changed    chan struct{} // closed and replaced on every server change
	servers    map[xen.ServerID]*ioServer
	nextID     xen.ServerID
	nextPort   xen.Port
	bound      map[xen.Port]binding // Xen-side port -> the handle and local port bound to it
	handles    []*Events
	restricted bool
	maps       int // mappings handed out and not yet unmapped
	deadPages  []*ioServer
	inflight   sync.WaitGroup // vCPU accesses in progress
	calls      map[string]int

	level   bool
	asserts uint64
	irqs    uint64
	irqCh   chan struct{} // closed and replaced on every delivery
}

type binding struct {
	h     *Events
	local xen.Port
}

type ioServer struct {
	id       xen.ServerID
	bufMode  xen.BufIOReqMode
	enabled  bool
	pagesFD  int
	pages    []byte // Xen's own view of frames 0 and 1
	ioreq    xen.IOReqPage
	buf      xen.BufPage
	vcpuPort []xen.Port
	bufPort  xen.Port
	ranges   []ioRange
	pci      []xen.SBDF
	wake     []chan struct{} // per vCPU: the device model notified
	dead     chan struct{}   // closed on destroy
}

type ioRange struct {
	t          xen.RangeType
	start, end uint64
}

var _ xen.Hypervisor = (*Hypervisor)(nil)

// New returns a fake Xen with one domain of ramBytes RAM (a page
// multiple, at least MinRAM) and vcpus vCPUs (1..xen.MaxVCPUs).
func New(ramBytes uint64, vcpus int) (*Hypervisor, error) {
	if ramBytes < MinRAM || ramBytes%pageSize != 0 || ramBytes > 1<<40 {
		return nil, fmt.Errorf("xentest: ram size %#x: want a page multiple >= %#x", ramBytes, MinRAM)
	}
	if vcpus < 1 || vcpus > xen.MaxVCPUs {
		return nil, fmt.Errorf("xentest: %d vcpus: want 1..%d", vcpus, xen.MaxVCPUs)
	}
	h := &Hypervisor{
		IOTimeout: 10 * time.Second,
		dom:       DomainID, vcpus: vcpus, ramSize: ramBytes, ramFD: -1,
		goneCh: make(chan struct{}), changed: make(chan struct{}), irqCh: make(chan struct{}),
		servers: map[xen.ServerID]*ioServer{}, nextID: 1, nextPort: firstPort,
		bound: map[xen.Port]binding{}, calls: map[string]int{},
	}
	// Sealed against shrinking: vgpud refuses guest RAM that could shrink.
	fd, err := guestmem.NewSealed("xentest-ram", int64(ramBytes))
	if err != nil {
		return nil, fmt.Errorf("xentest: guest ram: %w", err)
	}
	h.ramFD = fd
	if h.ram, err = unix.Mmap(fd, 0, int(ramBytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("xentest: map guest ram: %w", err)
	}
	return h, nil
}

// Domain returns the fake domain's id.
func (h *Hypervisor) Domain() xen.DomID { return h.dom }

// VCPUs returns the domain's vCPU count.
func (h *Hypervisor) VCPUs() int { return h.vcpus }

// Destroy destroys the domain: its ioreq servers go, waiting vCPUs fail,
// every event channel handle wakes (Xen sends nothing, but the fake need
// not make a server wait for its liveness timer), and later calls fail
// with xen.ErrNoDomain. Guest RAM stays mapped for the handles still
// holding it. Idempotent.
func (h *Hypervisor) Destroy() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return
	}
	h.gone = true
	close(h.goneCh)
	for id, s := range h.servers {
		h.destroyLocked(id, s)
	}
	for _, e := range h.handles {
		e.kick()
	}
}

// Kill makes the domain die the way Xen kills one whose memory a device
// model still maps (domain_kill): its ioreq servers are destroyed and
// vCPUs waiting on them fail, but the domain stays known (a zombie until
// its last page is released), so domain-level calls such as nr_vcpus
// still succeed, and no event wakes the device model. What Xen 4.20 did
// under make test-xen when a guest served by vgpud powered off.
func (h *Hypervisor) Kill() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, s := range h.servers {
		h.destroyLocked(id, s)
	}
}

// Close destroys the domain and releases its RAM. Mappings the device
// model holds stay valid until it unmaps them.
func (h *Hypervisor) Close() error {
	h.Destroy()
	h.inflight.Wait() // Destroy woke them all
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.deadPages {
		unix.Munmap(s.pages)
		unix.Close(s.pagesFD)
	}
	h.deadPages = nil
	if h.ram != nil {
		unix.Munmap(h.ram)
		h.ram = nil
		unix.Close(h.ramFD)
		h.ramFD = -1
	}
	return nil
}

// Calls returns how often each operation was called, by name.
func (h *Hypervisor) Calls() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.calls))
	for k, v := range h.calls {
		out[k] = v
	}
	return out
}

// Mappings returns how many ioreq page and guest mappings are live.
func (h *Hypervisor) Mappings() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.maps
}

func (h *Hypervisor) noDomain() error {
	return fmt.Errorf("xentest: domain %d: %w", h.dom, xen.ErrNoDomain)
}

// opLocked counts a call and checks the domain.
func (h *Hypervisor) opLocked(name string, dom xen.DomID) error {
	h.calls[name]++
	if h.gone || dom != h.dom {
		return h.noDomain()
	}
	return nil
}

func (h *Hypervisor) serverLocked(name string, dom xen.DomID, id xen.ServerID) (*ioServer, error) {
	if err := h.opLocked(name, dom); err != nil {
		return nil, err
	}
	s, ok := h.servers[id]
	if !ok {
		return nil, fmt.Errorf("xentest: %s: ioreq server %d: %w", name, id, unix.ENOENT)
	}
	return s, nil
}

// changedLocked wakes WaitServing and WaitServerGone.
func (h *Hypervisor) changedLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// CreateIOReqServer allocates the server's two pages and its ports.
func (h *Hypervisor) CreateIOReqServer(dom xen.DomID, buf xen.BufIOReqMode) (xen.ServerID, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.opLocked("create_ioreq_server", dom); err != nil {
		return 0, err
	}
	if buf > xen.BufIOReqAtomic {
		return 0, fmt.Errorf("xentest: handle_bufioreq %d: %w", buf, unix.EINVAL)
	}
	fd, err := unix.MemfdCreate("xentest-ioreq", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("xentest: ioreq pages: %w", err)
	}
	if err := unix.Ftruncate(fd, 2*pageSize); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("xentest: ioreq pages: %w", err)
	}
	pages, err := unix.Mmap(fd, 0, 2*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("xentest: ioreq pages: %w", err)
	}
	s := &ioServer{id: h.nextID, bufMode: buf, pagesFD: fd, pages: pages, dead: make(chan struct{})}
	s.buf, _ = xen.NewBufPage(pages[:pageSize])
	s.ioreq, _ = xen.NewIOReqPage(pages[pageSize:])
	for range h.vcpus {
		s.vcpuPort = append(s.vcpuPort, h.nextPort)
		s.wake = append(s.wake, make(chan struct{}, 1))
		h.nextPort++
	}
	s.bufPort = h.nextPort
	h.nextPort++
	h.servers[s.id] = s
	h.nextID++
	h.changedLocked()
	return s.id, nil
}

// DestroyIOReqServer releases the server; vCPUs waiting on it fail.
func (h *Hypervisor) DestroyIOReqServer(dom xen.DomID, id xen.ServerID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("destroy_ioreq_server", dom, id)
	if err != nil {
		return err
	}
	h.destroyLocked(id, s)
	return nil
}

func (h *Hypervisor) destroyLocked(id xen.ServerID, s *ioServer) {
	delete(h.servers, id)
	close(s.dead)
	for _, p := range append(slices.Clone(s.vcpuPort), s.bufPort) {
		if b, ok := h.bound[p]; ok {
			b.h.orphan(b.local) // Xen closes its end; the local port stays bound
			delete(h.bound, p)
		}
	}
	// Xen's view stays until Close: a vCPU may still be reading its slot.
	h.deadPages = append(h.deadPages, s)
	h.changedLocked()
}

// IOReqServerInfo returns the buffered ring's port.
func (h *Hypervisor) IOReqServerInfo(dom xen.DomID, id xen.ServerID) (xen.Port, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("get_ioreq_server_info", dom, id)
	if err != nil {
		return 0, err
	}
	if s.bufMode == xen.BufIOReqOff {
		return 0, nil
	}
	return s.bufPort, nil
}

// MapIOReqPages maps frames 0 and 1 again, as the device model's foreign
// mapping of the resource: the same memory Xen's view sees.
func (h *Hypervisor) MapIOReqPages(dom xen.DomID, id xen.ServerID) (xen.IOReqPages, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("map_resource", dom, id)
	if err != nil {
		return xen.IOReqPages{}, err
	}
	m, err := unix.Mmap(s.pagesFD, 0, 2*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return xen.IOReqPages{}, fmt.Errorf("xentest: map ioreq pages: %w", err)
	}
	h.maps++
	var once sync.Once
	return xen.IOReqPages{Buffered: m[:pageSize], Sync: m[pageSize:], Unmap: func() error {
		var err error
		once.Do(func() {
			err = unix.Munmap(m)
			h.mu.Lock()
			h.maps--
			h.mu.Unlock()
		})
		return err
	}}, nil
}

// SetIOReqServerState enables or disables the server; enabling writes
// each vCPU's port into its slot.
func (h *Hypervisor) SetIOReqServerState(dom xen.DomID, id xen.ServerID, enabled bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("set_ioreq_server_state", dom, id)
	if err != nil {
		return err
	}
	s.enabled = enabled
	if enabled {
		for i, p := range s.vcpuPort {
			s.ioreq.Slot(i).SetVPEport(p)
		}
	}
	h.changedLocked()
	return nil
}

// MapIORange claims [start, end]; like Xen it refuses an overlap with
// another range of the same server's type (EEXIST).
func (h *Hypervisor) MapIORange(dom xen.DomID, id xen.ServerID, t xen.RangeType, start, end uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("map_io_range", dom, id)
	if err != nil {
		return err
	}
	if end < start || t > xen.RangePCI {
		return fmt.Errorf("xentest: map range %d [%#x, %#x]: %w", t, start, end, unix.EINVAL)
	}
	for _, o := range h.servers {
		for _, r := range o.ranges {
			if r.t == t && start <= r.end && r.start <= end {
				return fmt.Errorf("xentest: map range [%#x, %#x]: %w", start, end, unix.EEXIST)
			}
		}
	}
	s.ranges = append(s.ranges, ioRange{t, start, end})
	h.changedLocked()
	return nil
}

// UnmapIORange releases an exact range claimed before.
func (h *Hypervisor) UnmapIORange(dom xen.DomID, id xen.ServerID, t xen.RangeType, start, end uint64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("unmap_io_range", dom, id)
	if err != nil {
		return err
	}
	i := slices.Index(s.ranges, ioRange{t, start, end})
	if i < 0 {
		return fmt.Errorf("xentest: unmap range [%#x, %#x]: %w", start, end, unix.ENOENT)
	}
	s.ranges = slices.Delete(s.ranges, i, i+1)
	h.changedLocked()
	return nil
}

// MapPCIDev claims a PCI function.
func (h *Hypervisor) MapPCIDev(dom xen.DomID, id xen.ServerID, f xen.SBDF) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("map_pcidev", dom, id)
	if err != nil {
		return err
	}
	for _, o := range h.servers {
		if slices.Contains(o.pci, f) {
			return fmt.Errorf("xentest: map pci %v: %w", f, unix.EEXIST)
		}
	}
	s.pci = append(s.pci, f)
	h.changedLocked()
	return nil
}

// UnmapPCIDev releases it.
func (h *Hypervisor) UnmapPCIDev(dom xen.DomID, id xen.ServerID, f xen.SBDF) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, err := h.serverLocked("unmap_pcidev", dom, id)
	if err != nil {
		return err
	}
	i := slices.Index(s.pci, f)
	if i < 0 {
		return fmt.Errorf("xentest: unmap pci %v: %w", f, unix.ENOENT)
	}
	s.pci = slices.Delete(s.pci, i, i+1)
	h.changedLocked()
	return nil
}

// SetPCIINTxLevel drives the line; a rise is one delivery.
func (h *Hypervisor) SetPCIINTxLevel(dom xen.DomID, f xen.SBDF, pin uint8, level bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.opLocked("set_pci_intx_level", dom); err != nil {
		return err
	}
	if pin > 3 || f.Dev > 31 || f.Fn > 7 {
		return fmt.Errorf("xentest: intx %v pin %d: %w", f, pin, unix.EINVAL)
	}
	if level {
		h.asserts++
		if !h.level {
			h.deliverLocked()
		}
	}
	h.level = level
	return nil
}

func (h *Hypervisor) deliverLocked() {
	h.irqs++
	close(h.irqCh)
	h.irqCh = make(chan struct{})
}

// NrVCPUs returns the vCPU count.
func (h *Hypervisor) NrVCPUs(dom xen.DomID) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.opLocked("nr_vcpus", dom); err != nil {
		return 0, err
	}
	return h.vcpus, nil
}

// Restrict records the restriction; calls for other domains then fail.
func (h *Hypervisor) Restrict(dom xen.DomID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["restrict"]++
	if dom != h.dom {
		return fmt.Errorf("xentest: restrict to %d: %w", dom, unix.EPERM)
	}
	h.restricted = true
	return nil
}

// GuestRAM returns the RAM as two regions of the memfd (duplicated fds,
// owned by the caller): [0, LowRAMEnd) and [HighRAM, end). The fake
// knows its RAM's size, so ram is ignored.
func (h *Hypervisor) GuestRAM(dom xen.DomID, ram uint64) ([]guestmem.Region, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.opLocked("guest_ram", dom); err != nil {
		return nil, err
	}
	var fds []int
	for range 2 {
		fd, err := unix.FcntlInt(uintptr(h.ramFD), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			return nil, fmt.Errorf("xentest: dup guest ram: %w", err)
		}
		fds = append(fds, fd)
	}
	return []guestmem.Region{
		{GPA: 0, Size: LowRAMEnd, Offset: 0, FD: fds[0]},
		{GPA: HighRAM, Size: h.ramSize - HighRAM, Offset: HighRAM, FD: fds[1]},
	}, nil
}

// isRAM reports whether the page at gfn is guest RAM.
func (h *Hypervisor) isRAM(gfn uint64) bool {
	gpa := gfn * pageSize
	return gfn < h.ramSize/pageSize && (gpa < LowRAMEnd || gpa >= HighRAM)
}

type mapping struct {
	b    []byte
	h    *Hypervisor
	once sync.Once
}

func (m *mapping) Bytes() []byte { return m.b }

func (m *mapping) Unmap() error {
	var err error
	m.once.Do(func() {
		err = unmap(m.b)
		m.h.mu.Lock()
		m.h.maps--
		m.h.mu.Unlock()
	})
	return err
}

// MapGuest maps guest frames; a frame that is not RAM fails (EFAULT), as
// a foreign mapping of an MMIO hole or beyond the domain's memory does.
func (h *Hypervisor) MapGuest(dom xen.DomID, gfns []uint64, write bool) (xen.Mapping, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.opLocked("map_foreign", dom); err != nil {
		return nil, err
	}
	if len(gfns) == 0 || len(gfns) > 1024 {
		return nil, fmt.Errorf("xentest: map %d frames: %w", len(gfns), unix.EINVAL)
	}
	gpas := make([]uint64, len(gfns))
	for i, g := range gfns {
		if !h.isRAM(g) {
			return nil, fmt.Errorf("xentest: map frame %#x: not guest RAM: %w", g, unix.EFAULT)
		}
		gpas[i] = g * pageSize
	}
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	b, err := mapScattered(h.ramFD, gpas, prot)
	if err != nil {
		return nil, fmt.Errorf("xentest: %w", err)
	}
	h.maps++
	return &mapping{b: b, h: h}, nil
}

// ReadRAM copies guest RAM at gpa into p.
func (h *Hypervisor) ReadRAM(gpa uint64, p []byte) error {
	return h.ramCopy(gpa, p, false)
}

// WriteRAM copies p into guest RAM at gpa.
func (h *Hypervisor) WriteRAM(gpa uint64, p []byte) error {
	return h.ramCopy(gpa, p, true)
}

func (h *Hypervisor) ramCopy(gpa uint64, p []byte, write bool) error {
	end := gpa + uint64(len(p))
	if end < gpa || end > h.ramSize || (gpa < HighRAM && end > LowRAMEnd) {
		return fmt.Errorf("guest ram %#x+%#x: %w", gpa, len(p), abi.Errorf(abi.StatusBadAddress, "outside guest ram"))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ram == nil {
		return ErrClosed
	}
	if write {
		copy(h.ram[gpa:], p)
	} else {
		copy(p, h.ram[gpa:])
	}
	return nil
}

// --- Xen's side of the ioreq protocol ---

// serving returns the enabled server that claims the access, or nil.
func (h *Hypervisor) servingLocked(req xen.IOReq) *ioServer {
	for _, s := range h.servers {
		if !s.enabled {
			continue
		}
		switch req.Type {
		case xen.TypePCIConfig:
			for _, f := range s.pci {
				if f.Uint32() == uint32(req.Addr>>32) {
					return s
				}
			}
		case xen.TypeCopy:
			lo, hi := req.Addr, req.Addr+uint64(req.Size)*uint64(max(req.Count, 1))-1
			for _, r := range s.ranges {
				if r.t == xen.RangeMemory && lo >= r.start && hi <= r.end {
					return s
				}
			}
		}
	}
	return nil
}

// WaitServing waits until an enabled ioreq server claims f.
func (h *Hypervisor) WaitServing(f xen.SBDF, timeout time.Duration) error {
	return h.waitFor(timeout, func() bool {
		for _, s := range h.servers {
			if s.enabled && slices.Contains(s.pci, f) {
				return true
			}
		}
		return false
	})
}

// WaitServerGone waits until no ioreq server exists (the device model
// tore its server down).
func (h *Hypervisor) WaitServerGone(timeout time.Duration) error {
	return h.waitFor(timeout, func() bool { return len(h.servers) == 0 })
}

// WaitBAR waits until an enabled server claims the MMIO page at gpa.
func (h *Hypervisor) WaitBAR(gpa uint64, timeout time.Duration) error {
	return h.waitFor(timeout, func() bool {
		return h.servingLocked(xen.IOReq{Type: xen.TypeCopy, Addr: gpa, Size: 4, Count: 1}) != nil
	})
}

func (h *Hypervisor) waitFor(timeout time.Duration, cond func() bool) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		h.mu.Lock()
		ok, ch := cond(), h.changed
		h.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-h.goneCh:
			return ErrClosed
		case <-t.C:
			return fmt.Errorf("xentest: wait after %v: %w", timeout, ErrTimeout)
		}
	}
}

// IO issues req on vCPU vcpu as Xen does for a trapped access: to the
// server that claimed it (all ones for a read nobody claimed), through
// the vCPU's slot. req.State and VPEport are filled in unless raw, which
// writes req as given (a hostile Xen; a zero VPEport still gets the
// vCPU's) to the first enabled server, claimed or not.
// It returns the slot's data after STATE_IORESP_READY.
func (h *Hypervisor) IO(vcpu int, req xen.IOReq, raw bool) (uint64, error) {
	h.mu.Lock()
	if h.gone {
		h.mu.Unlock()
		return ^uint64(0), ErrClosed
	}
	if vcpu < 0 || vcpu >= h.vcpus {
		h.mu.Unlock()
		return ^uint64(0), fmt.Errorf("xentest: vcpu %d of %d", vcpu, h.vcpus)
	}
	var s *ioServer
	if raw {
		for _, o := range h.servers {
			if o.enabled {
				s = o
			}
		}
	} else {
		s = h.servingLocked(req)
	}
	if s == nil {
		h.mu.Unlock()
		if req.Dir == xen.IOReqRead {
			return ^uint64(0), nil
		}
		return req.Data, nil
	}
	slot := s.ioreq.Slot(vcpu)
	if st := slot.State(); st != xen.StateNone {
		h.mu.Unlock()
		return ^uint64(0), fmt.Errorf("vcpu %d slot in state %d before a request: %w", vcpu, st, ErrBadState)
	}
	if !raw {
		req.State = xen.StateReady
	}
	if !raw || req.VPEport == 0 {
		req.VPEport = s.vcpuPort[vcpu]
	}
	select {
	case <-s.wake[vcpu]: // a stale notification
	default:
	}
	slot.Store(req) // contents, then the state word
	h.signalLocked(s.vcpuPort[vcpu])
	wake, dead := s.wake[vcpu], s.dead
	h.inflight.Add(1)
	defer h.inflight.Done()
	h.mu.Unlock()
	return h.wait(vcpu, slot, wake, dead, req.State != xen.StateReady)
}

// wait is hvm_wait_for_io: the vCPU sleeps until its slot reads
// IORESP_READY. With noAnswer (the request was not READY) it returns as
// soon as the server is gone or the device model notified.
func (h *Hypervisor) wait(vcpu int, slot xen.IOReqSlot, wake, dead chan struct{}, noAnswer bool) (uint64, error) {
	t := time.NewTimer(h.IOTimeout)
	defer t.Stop()
	for {
		switch st := slot.State(); st {
		case xen.StateRespReady:
			v := slot.Data()
			slot.SetState(xen.StateNone)
			return v, nil
		case xen.StateReady, xen.StateInProcess:
		default:
			if !noAnswer {
				return ^uint64(0), fmt.Errorf("vcpu %d slot state %d: %w", vcpu, st, ErrBadState)
			}
		}
		select {
		case <-wake:
		case <-dead:
			if slot.State() == xen.StateRespReady { // answered, then stopped
				return slot.Data(), nil
			}
			return ^uint64(0), ErrServerGone
		case <-h.goneCh:
			return ^uint64(0), ErrClosed
		case <-t.C:
			return ^uint64(0), fmt.Errorf("vcpu %d after %v: %w", vcpu, h.IOTimeout, ErrTimeout)
		}
	}
}

// signalLocked notifies a Xen-side port: the bound local port pends.
func (h *Hypervisor) signalLocked(remote xen.Port) {
	if b, ok := h.bound[remote]; ok {
		b.h.deliver(b.local)
	}
}

// notifyFromDM is the device model's notify on a local port bound to
// remote: the vCPU waiting on that port wakes.
func (h *Hypervisor) notifyFromDM(remote xen.Port) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.servers {
		for i, p := range s.vcpuPort {
			if p == remote {
				select {
				case s.wake[i] <- struct{}{}:
				default:
				}
			}
		}
	}
}

// Buffered plays hvm_buffered_io_send for the first enabled server: it
// appends entries to the ring, optionally overrides the pointers (a
// hostile Xen; nil keeps them), and notifies the buffered port.
func (h *Hypervisor) Buffered(entries []xen.BufIOReq, pointers *[2]uint32) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s *ioServer
	for _, o := range h.servers {
		if o.enabled {
			s = o
		}
	}
	if s == nil {
		return fmt.Errorf("xentest: buffered ioreq: no enabled server")
	}
	rd, wr := s.buf.ReadPointer(), s.buf.WritePointer()
	if wr-rd+uint32(len(entries)) > xen.BufSlots {
		return fmt.Errorf("xentest: buffered ring full")
	}
	for _, e := range entries {
		s.buf.SetEntry(wr, e)
		wr++
	}
	if pointers != nil {
		rd, wr = pointers[0], pointers[1]
	}
	s.buf.SetPointers(rd, wr)
	h.signalLocked(s.bufPort)
	return nil
}

// BufferedPointers returns the first enabled server's ring pointers.
func (h *Hypervisor) BufferedPointers() (read, write uint32, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.servers {
		if s.enabled {
			return s.buf.ReadPointer(), s.buf.WritePointer(), nil
		}
	}
	return 0, 0, fmt.Errorf("xentest: no enabled server")
}

// Signal notifies vCPU vcpu's port of the first enabled server without
// touching its slot (a spurious event).
func (h *Hypervisor) Signal(vcpu int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.servers {
		if s.enabled && vcpu < len(s.vcpuPort) {
			h.signalLocked(s.vcpuPort[vcpu])
			return
		}
	}
}

// --- interrupts ---

// IRQs returns the interrupts delivered so far, and whether the line is
// asserted now.
func (h *Hypervisor) IRQs() (count uint64, level bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.irqs, h.level
}

// Asserts returns how often the device model asserted the line.
func (h *Hypervisor) Asserts() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asserts
}

// EOI ends the interrupt: a level-triggered pin still high is delivered
// again.
func (h *Hypervisor) EOI() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.level {
		h.deliverLocked()
	}
}

// WaitIRQs waits until more than n interrupts were delivered and returns
// the count.
func (h *Hypervisor) WaitIRQs(n uint64, timeout time.Duration) (uint64, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		h.mu.Lock()
		c, ch := h.irqs, h.irqCh
		h.mu.Unlock()
		if c > n {
			return c, nil
		}
		select {
		case <-ch:
		case <-h.goneCh:
			return c, ErrClosed
		case <-t.C:
			return c, fmt.Errorf("wait irq after %v: %w", timeout, ErrTimeout)
		}
	}
}

// le is the byte order of everything Xen shares.
var le = binary.LittleEndian

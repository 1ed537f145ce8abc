package xentest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/xen"
)

const (
	chunkPages = 16 // allocation order is shuffled in runs of this many pages
	numBARs    = 7  // BAR0-5 and the CardBus CIS pointer, as QEMU probes
)

// PCIInfo is what the config space probe found.
type PCIInfo struct {
	VendorID, DeviceID, Class, SubsystemID uint16
	BARSize                                [numBARs]uint32
}

// Guest is the fake domain's view of the vGPU: its vCPUs make config
// space and BAR0 accesses through the ioreq server; its RAM is the fake's
// memfd. Accesses may run concurrently (each takes a free vCPU).
type Guest struct {
	h    *Hypervisor
	sbdf xen.SBDF
	info PCIInfo

	vcpus chan int // free vCPUs

	mu      sync.Mutex
	err     error // first transport error
	irqSeen uint64
	closed  bool

	allocMu sync.Mutex
	order   []uint64
	next    int
	bufs    [][]byte
}

var (
	_ driver.Registers = (*Guest)(nil)
	_ driver.Memory    = (*Guest)(nil)
)

// NewGuest probes the vGPU at f through h, as hvmloader does, places
// BAR0 at BAR0Addr and enables memory decoding and bus mastering. The
// ioreq server must already claim f (WaitServing).
func NewGuest(h *Hypervisor, f xen.SBDF) (*Guest, error) {
	g := &Guest{h: h, sbdf: f, vcpus: make(chan int, h.vcpus)}
	for i := range h.vcpus {
		g.vcpus <- i
	}
	if err := g.probe(); err != nil {
		return nil, fmt.Errorf("new guest: %w", err)
	}
	if err := g.program(); err != nil {
		return nil, fmt.Errorf("new guest: %w", err)
	}
	g.shufflePages()
	return g, nil
}

// Hypervisor returns the fake Xen the guest runs on.
func (g *Guest) Hypervisor() *Hypervisor { return g.h }

// Info returns what the probe found.
func (g *Guest) Info() PCIInfo { return g.info }

// IO issues one ioreq on a free vCPU (see Hypervisor.IO).
func (g *Guest) IO(req xen.IOReq, raw bool) (uint64, error) {
	v := <-g.vcpus
	defer func() { g.vcpus <- v }()
	return g.h.IO(v, req, raw)
}

func (g *Guest) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
	}
}

func (g *Guest) config(dir uint8, off uint32, size int, v uint32) (uint32, error) {
	req := xen.IOReq{Type: xen.TypePCIConfig, Addr: uint64(g.sbdf.Uint32())<<32 | uint64(off), Data: uint64(v), Size: uint32(size), Count: 1, Dir: dir}
	r, err := g.IO(req, false)
	if err != nil {
		g.fail(err)
		return 0xffffffff, fmt.Errorf("config %#x/%d: %w", off, size, err)
	}
	return uint32(r), nil
}

// ConfigRead reads size (1, 2 or 4) bytes of config space at off.
func (g *Guest) ConfigRead(off uint32, size int) (uint32, error) {
	return g.config(xen.IOReqRead, off, size, 0)
}

// ConfigWrite writes size bytes of config space at off.
func (g *Guest) ConfigWrite(off uint32, size int, v uint32) error {
	_, err := g.config(xen.IOReqWrite, off, size, v)
	return err
}

func (g *Guest) bar(dir uint8, off uint32, v uint32) uint32 {
	req := xen.IOReq{Type: xen.TypeCopy, Addr: BAR0Addr + uint64(off), Data: uint64(v), Size: 4, Count: 1, Dir: dir}
	r, err := g.IO(req, false)
	if err != nil {
		g.fail(err)
		return 0xffffffff
	}
	return uint32(r)
}

// Read32 reads the BAR0 register at off (an MMIO ioreq at BAR0Addr+off).
func (g *Guest) Read32(off uint32) uint32 { return g.bar(xen.IOReqRead, off, 0) }

// Write32 writes the BAR0 register at off.
func (g *Guest) Write32(off uint32, v uint32) { g.bar(xen.IOReqWrite, off, v) }

// Err returns the first transport error a register access met.
func (g *Guest) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func (g *Guest) probe() error {
	reads := []struct {
		off uint32
		dst *uint16
	}{
		{mmio.CfgVendorID, &g.info.VendorID},
		{mmio.CfgDeviceID, &g.info.DeviceID},
		{0x0a, &g.info.Class},
		{mmio.CfgSubsysID, &g.info.SubsystemID},
	}
	for _, r := range reads {
		v, err := g.ConfigRead(r.off, 2)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		*r.dst = uint16(v)
	}
	if g.info.VendorID != abi.VendorID || g.info.DeviceID != abi.DeviceID {
		return fmt.Errorf("probe: device %04x:%04x, want %04x:%04x", g.info.VendorID, g.info.DeviceID, abi.VendorID, abi.DeviceID)
	}
	for i := range numBARs {
		off := uint32(mmio.CfgBAR0 + 4*i)
		orig, err := g.ConfigRead(off, 4)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := g.ConfigWrite(off, 4, 0xffffffff); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		mask, err := g.ConfigRead(off, 4)
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		if err := g.ConfigWrite(off, 4, orig); err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		g.info.BARSize[i] = ^(mask & 0xfffffff0) + 1
	}
	if g.info.BARSize[0] != abi.BAR0Size {
		return fmt.Errorf("probe: BAR0 size %#x, want %#x", g.info.BARSize[0], abi.BAR0Size)
	}
	return nil
}

// program places BAR0 at BAR0Addr and enables memory space and bus
// mastering, as hvmloader does.
func (g *Guest) program() error {
	if err := g.ConfigWrite(mmio.CfgBAR0, 4, BAR0Addr); err != nil {
		return fmt.Errorf("program BAR0: %w", err)
	}
	cmd, err := g.ConfigRead(mmio.CfgCommand, 2)
	if err != nil {
		return fmt.Errorf("program command: %w", err)
	}
	if err := g.ConfigWrite(mmio.CfgCommand, 2, cmd|mmio.CmdMemorySpace|mmio.CmdBusMaster); err != nil {
		return fmt.Errorf("program command: %w", err)
	}
	return nil
}

// Reset resets the device the ABI's way (RingCtrlReset): Xen offers no
// config-space reset to a device model.
func (g *Guest) Reset() error {
	g.Write32(abi.RegRingCtrl, abi.RingCtrlReset)
	if err := g.Err(); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

// IRQCount returns how many interrupts were delivered since the last
// IRQCount or WaitIRQ, 0 if none (like reading mpqemutest's irqfd).
func (g *Guest) IRQCount() (uint64, error) {
	n, _ := g.h.IRQs()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, ErrClosed
	}
	d := n - g.irqSeen
	g.irqSeen = n
	return d, nil
}

// WaitIRQ waits up to timeout until an interrupt was delivered since the
// last IRQCount or WaitIRQ and returns how many were.
func (g *Guest) WaitIRQ(timeout time.Duration) (uint64, error) {
	g.mu.Lock()
	seen, closed := g.irqSeen, g.closed
	g.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	n, err := g.h.WaitIRQs(seen, timeout)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d := n - g.irqSeen
	g.irqSeen = n
	return d, nil
}

// Resample is the guest's EOI: a line still asserted is delivered again.
func (g *Guest) Resample() error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return ErrClosed
	}
	g.h.EOI()
	return nil
}

func (g *Guest) shufflePages() {
	var chunks []uint64
	for gpa := uint64(HighRAM); gpa < g.h.ramSize; gpa += chunkPages * pageSize {
		chunks = append(chunks, gpa)
	}
	rand.New(rand.NewPCG(0x78656e, g.h.ramSize)).Shuffle(len(chunks), func(i, j int) {
		chunks[i], chunks[j] = chunks[j], chunks[i]
	})
	for _, c := range chunks {
		for p := range uint64(chunkPages) {
			if gpa := c + p*pageSize; gpa < g.h.ramSize {
				g.order = append(g.order, gpa)
			}
		}
	}
}

// Alloc hands out n bytes (whole pages) of guest RAM above 1 MiB in a
// scattered order, as one contiguous local view.
func (g *Guest) Alloc(n int) (driver.DMA, error) {
	if n <= 0 {
		return driver.DMA{}, fmt.Errorf("alloc %d bytes: %w", n, abi.Errorf(abi.StatusInvalidArgument, "size must be positive"))
	}
	pages := (n + pageSize - 1) / pageSize
	g.allocMu.Lock()
	defer g.allocMu.Unlock()
	if g.order == nil {
		return driver.DMA{}, fmt.Errorf("alloc: %w", ErrClosed)
	}
	if pages > len(g.order)-g.next {
		return driver.DMA{}, fmt.Errorf("alloc %d pages: %w", pages, abi.Errorf(abi.StatusOutOfResources, "guest ram exhausted"))
	}
	gpas := append([]uint64(nil), g.order[g.next:g.next+pages]...)
	g.h.mu.Lock()
	fd := g.h.ramFD
	g.h.mu.Unlock()
	if fd < 0 {
		return driver.DMA{}, fmt.Errorf("alloc: %w", ErrClosed)
	}
	buf, err := mapScattered(fd, gpas, protRW)
	if err != nil {
		return driver.DMA{}, fmt.Errorf("alloc %d pages: %w", pages, err)
	}
	g.next += pages
	g.bufs = append(g.bufs, buf)
	return driver.DMA{Buf: buf, Pages: gpas}, nil
}

// ReadRAM copies guest RAM at gpa into p.
func (g *Guest) ReadRAM(gpa uint64, p []byte) error { return g.h.ReadRAM(gpa, p) }

// WriteRAM copies p into guest RAM at gpa.
func (g *Guest) WriteRAM(gpa uint64, p []byte) error { return g.h.WriteRAM(gpa, p) }

// Close destroys the domain (the device model sees it go), unmaps every
// buffer Alloc returned and the RAM. Idempotent.
func (g *Guest) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	g.h.Destroy()
	g.allocMu.Lock()
	var errs []error
	for _, b := range g.bufs {
		errs = append(errs, unmap(b))
	}
	g.bufs, g.order, g.next = nil, nil, 0
	g.allocMu.Unlock()
	errs = append(errs, g.h.Close())
	return errors.Join(errs...)
}

package xen

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"

	"github.com/vgpud/vgpud/abi"
)

const barSize = abi.BAR0Size

// handle serves one request and returns the slot's data: the value read,
// or the request's own data for a write. A request that breaks the
// protocol is answered with all ones and returns an error wrapping
// ErrProtocol.
func (s *Server) handle(req IOReq) (uint64, error) {
	switch req.Size {
	case 1, 2, 4, 8:
	default:
		return allOnes, protoErr("size %d in %v", req.Size, req)
	}
	if req.Dir == IOReqWrite && !req.DataIsPtr && req.Size < 8 {
		req.Data &= 1<<(8*req.Size) - 1 // as QEMU's handle_ioreq
	}
	switch req.Type {
	case TypeCopy:
		return s.mmio(req), nil
	case TypePCIConfig:
		return s.config(req)
	case TypeTimeOffset:
		return req.Data, nil // the RTC's business, not ours
	case TypeInvalidate:
		// vgpud keeps no map cache: guest pages are mapped per access.
		return req.Data, nil
	case TypePIO:
		return allOnes, protoErr("port I/O, which this server never claimed: %v", req)
	}
	return allOnes, protoErr("unknown type %d: %v", req.Type, req)
}

// config serves an IOREQ_TYPE_PCI_CONFIG request: addr is SBDF<<32 |
// register (Xen decodes 0xcf8/0xcfc and MMCONFIG for us).
func (s *Server) config(req IOReq) (uint64, error) {
	if sbdf := uint32(req.Addr >> 32); sbdf != s.cfg.SBDF.Uint32() {
		return allOnes, protoErr("config access for %#x, claimed %v: %v", sbdf, s.cfg.SBDF, req)
	}
	if req.Count != 1 || req.DataIsPtr {
		// rep ins/outs on 0xcfc: legal for a guest, useless for a
		// config header; QEMU would loop, we answer like a master abort.
		s.log.Debug("xen: rep config access refused", "req", req.String())
		return s.readOrData(req, allOnes), nil
	}
	reg := uint32(req.Addr)
	if req.Dir == IOReqRead {
		return uint64(s.dev.Config.Read(reg, int(req.Size))), nil
	}
	s.dev.Config.Write(reg, int(req.Size), uint32(req.Data))
	s.syncBAR()
	s.line.sync(s.dev.Regs.INTx())
	return req.Data, nil
}

func (s *Server) readOrData(req IOReq, v uint64) uint64 {
	if req.Dir == IOReqRead {
		return v
	}
	return req.Data
}

// syncBAR follows BAR0 and memory decoding: the MMIO range the server
// claims is BAR0 while decoding is on and BAR0 holds an address (QEMU's
// pci_bar_address rules: not 0, not the all-ones sizing pattern).
func (s *Server) syncBAR() {
	base32, on := s.dev.Config.BAR0()
	base := uint64(base32)
	want := on && base != 0 && base+barSize-1 < 0xffffffff
	if want == s.barMapped && (!want || base == s.barBase) {
		return
	}
	dom, id := s.cfg.Domain, s.id
	if s.barMapped {
		if err := s.hv.UnmapIORange(dom, id, RangeMemory, s.barBase, s.barBase+barSize-1); err != nil {
			s.log.Warn("xen: release BAR0", "base", s.barBase, "err", err)
		}
		s.barMapped = false
	}
	if !want {
		return
	}
	if err := s.hv.MapIORange(dom, id, RangeMemory, base, base+barSize-1); err != nil {
		// Another server's range, most likely; the guest's accesses go
		// elsewhere until it moves BAR0 again.
		s.log.Error("xen: claim BAR0", "base", base, "err", err)
		return
	}
	s.barMapped, s.barBase = true, base
}

// mmio serves an IOREQ_TYPE_COPY request inside BAR0. Xen forwards only
// accesses inside a claimed range; one outside BAR0 here raced a BAR0
// move (or memory decoding went off) and is answered like a master
// abort. Repetitions follow QEMU's cpu_ioreq_move: without data_is_ptr a
// read repeats and keeps the last value, a write repeats the value; with
// it, data is the guest-physical address of count items in guest RAM.
func (s *Server) mmio(req IOReq) uint64 {
	base32, on := s.dev.Config.BAR0()
	base := uint64(base32)
	count := uint64(req.Count)
	if count == 0 {
		count = 1
	}
	size := uint64(req.Size)
	span := count * size // < 2^35: no overflow
	lo, hi := req.Addr, req.Addr+span
	if req.DF {
		lo, hi = req.Addr-(span-size), req.Addr+size
	}
	if !on || !s.barMapped || base != s.barBase || span > barSize || lo > req.Addr || hi < lo || lo < base || hi > base+barSize {
		s.log.Debug("xen: MMIO outside BAR0", "req", req.String(), "bar0", base, "decode", on)
		return s.readOrData(req, allOnes)
	}
	off := func(i uint64) uint64 {
		if req.DF {
			return req.Addr - base - i*size
		}
		return req.Addr - base + i*size
	}
	regs := s.dev.Regs
	if !req.DataIsPtr {
		if req.Dir == IOReqRead {
			var v uint64
			for i := range count {
				v = regs.ReadBAR(off(i), int(size))
			}
			return v
		}
		for i := range count {
			regs.WriteBAR(off(i), int(size), req.Data)
		}
		s.line.sync(regs.INTx())
		return req.Data
	}
	// data_is_ptr: the other side of a rep movs lies in guest RAM.
	glo := req.Data
	if req.DF {
		glo = req.Data - (span - size)
	}
	if glo > req.Data || glo+span < glo {
		s.log.Warn("xen: rep MMIO with a buffer that wraps", "req", req.String())
		return req.Data
	}
	m, first, err := s.mapGuest(glo, span, req.Dir == IOReqRead)
	if err != nil {
		s.log.Warn("xen: rep MMIO buffer not in guest RAM; ignored", "req", req.String(), "err", err)
		return req.Data
	}
	defer m.Unmap()
	buf := m.Bytes()[first : first+span]
	item := func(i uint64) []byte {
		if req.DF {
			return buf[span-size-i*size : span-i*size]
		}
		return buf[i*size : (i+1)*size]
	}
	var tmp [8]byte
	for i := range count {
		if req.Dir == IOReqRead {
			binary.LittleEndian.PutUint64(tmp[:], regs.ReadBAR(off(i), int(size)))
			copy(item(i), tmp[:size])
		} else {
			tmp = [8]byte{}
			copy(tmp[:size], item(i))
			regs.WriteBAR(off(i), int(size), binary.LittleEndian.Uint64(tmp[:]))
		}
	}
	if req.Dir == IOReqWrite {
		s.line.sync(regs.INTx())
	}
	return req.Data
}

// mapGuest maps the guest pages holding [gpa, gpa+n) and returns the
// mapping and gpa's offset in it.
func (s *Server) mapGuest(gpa, n uint64, write bool) (Mapping, uint64, error) {
	first := gpa / PageSize
	last := (gpa + n - 1) / PageSize
	gfns := make([]uint64, 0, last-first+1)
	for g := first; g <= last; g++ {
		gfns = append(gfns, g)
	}
	m, err := s.hv.MapGuest(s.cfg.Domain, gfns, write)
	if err != nil {
		return nil, 0, err
	}
	if uint64(len(m.Bytes())) < uint64(len(gfns))*PageSize {
		m.Unmap()
		return nil, 0, fmt.Errorf("mapping of %d bytes for %d pages", len(m.Bytes()), len(gfns))
	}
	return m, gpa % PageSize, nil
}

// intxLine is the device's INTA# on Xen: a level the device model drives
// with XEN_DMOP_set_pci_intx_level. Unlike KVM's irqfd the line stays
// asserted until the device model deasserts it, so after everything that
// may lower the device's level (a register write, a config write, a
// reset) the Server calls sync, which mirrors mmio.INTx.Level.
//
// Lock order: mu is a leaf; RaiseIRQ is called holding mmio.INTx's lock,
// so sync reads the level without holding mu and uses seq to notice a
// raise that came in between.
type intxLine struct {
	hv   Hypervisor
	dom  DomID
	sbdf SBDF
	log  *slog.Logger

	mu       sync.Mutex
	asserted bool
	seq      uint64 // RaiseIRQ calls
}

// RaiseIRQ asserts the line (mmio.IRQSink).
func (l *intxLine) RaiseIRQ() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	if err := l.hv.SetPCIINTxLevel(l.dom, l.sbdf, 0, true); err != nil {
		return fmt.Errorf("xen: assert intx: %w", err)
	}
	l.asserted = true
	return nil
}

// levelSource is mmio.INTx's Level.
type levelSource interface{ Level() bool }

// sync deasserts the line if the device's level fell since it was raised.
func (l *intxLine) sync(x levelSource) {
	l.mu.Lock()
	seq, asserted := l.seq, l.asserted
	l.mu.Unlock()
	if !asserted || x.Level() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seq != seq || !l.asserted {
		return // raised again meanwhile
	}
	if err := l.hv.SetPCIINTxLevel(l.dom, l.sbdf, 0, false); err != nil {
		l.log.Warn("xen: deassert intx", "err", err)
		return
	}
	l.asserted = false
}

// deassert lowers the line if it is up (the session ends).
func (l *intxLine) deassert() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.asserted {
		return nil
	}
	l.asserted = false
	if err := l.hv.SetPCIINTxLevel(l.dom, l.sbdf, 0, false); err != nil {
		return fmt.Errorf("xen: deassert intx: %w", err)
	}
	return nil
}

package vfiouser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/irqfd"
	"github.com/vgpud/vgpud/internal/scmrights"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mmio"
)

// ErrNoIRQ is returned by RaiseIRQ before the client set an INTx eventfd.
var ErrNoIRQ = errors.New("vfio-user: no INTx eventfd")

// serverCaps is the capability JSON of this server's VERSION reply.
var serverCaps = func() []byte {
	b, _ := json.Marshal(map[string]any{"capabilities": map[string]any{
		"max_msg_fds": MaxFDs, "max_data_xfer_size": MaxDataXfer, "max_dma_maps": MaxDMAMaps, "pgsizes": PageSize,
	}})
	return append(b, 0)
}()

// dmaWindow is one DMA_MAP the client made.
type dmaWindow struct {
	addr, size, offset uint64
	flags              uint32
	fd                 int // -1: not mappable, not given to the device
}

// check says why w cannot join the windows in: EINVAL for flags or a
// geometry DMA_MAP refuses, ENOSPC for one window too many, EEXIST for
// an overlap; 0 when it can.
func (w dmaWindow) check(in []dmaWindow) unix.Errno {
	switch {
	case w.flags&^(DMAFlagRead|DMAFlagWrite) != 0:
		return unix.EINVAL
	case w.size == 0, w.addr%PageSize != 0, w.size%PageSize != 0, w.offset%PageSize != 0, w.addr+w.size < w.addr, w.offset+w.size < w.offset:
		return unix.EINVAL
	case len(in) >= MaxDMAMaps:
		return unix.ENOSPC
	}
	for _, o := range in {
		if w.addr < o.addr+o.size && o.addr < w.addr+w.size {
			return unix.EEXIST
		}
	}
	return 0
}

// Session serves one vfio-user connection for one vGPU instance.
//
// Serve's goroutine alone reads the connection and owns the DMA windows.
// irqMu guards the interrupt fds and the mask; it is a leaf (the device's
// INTx calls RaiseIRQ holding its own lock), and RaiseIRQ never writes the
// trigger eventfd itself: its irqfd.Trigger's goroutine does. The watcher goroutines (kick,
// unmask) call into the register file holding no Session lock; they are
// stopped before their fds are closed.
type Session struct {
	conn *net.UnixConn
	dev  transport.Device
	log  *slog.Logger
	wire *Wire
	out  [RegionAccessSize + 8]byte // the reply payload of a register access

	serving   atomic.Bool
	pause     *transport.Pauser // an upgrade in place
	closed    atomic.Bool
	closeOnce sync.Once

	// Owned by Serve's goroutine.
	versioned bool
	dma       []dmaWindow

	irqMu    sync.Mutex
	intx     *irqfd.Trigger // the INTx trigger eventfd; nil if none
	masked   bool           // INTx masked (automasked after each trigger until UNMASK)
	unmaskFD int            // eventfd the client signals to unmask (KVM's resample); -1
	unmaskW  *irqfd.Watcher
	kickFD   int // the ioeventfd behind abi.RegRingKick; -1 until asked for
	kickW    *irqfd.Watcher
	kickDev  bool // the device's backend reads kickFD itself (mmio.Device.TakeKicks)
	errFD    int  // the ERR index's eventfd (QEMU's error notifier), never signalled; -1
}

var (
	_ transport.Session = (*Session)(nil)
	_ mmio.IRQSink      = (*Session)(nil)
)

// NewSession returns a Session serving dev on conn; it owns conn. It
// connects dev's config space to the interrupt line.
func NewSession(conn *net.UnixConn, dev transport.Device) *Session {
	log := dev.Log
	if log == nil {
		log = slog.Default()
	}
	dev.Config.SetINTx(dev.Regs.INTx())
	return &Session{conn: conn, dev: dev, log: log, wire: NewWire(conn), pause: transport.NewPauser(conn), unmaskFD: -1, kickFD: -1, errFD: -1}
}

// Serve handles messages until the client hangs up (nil), ctx ends
// (ctx.Err()), Close is called (transport.ErrClosed), the connection
// fails or the client breaks the framing (an error wrapping ErrProtocol,
// logged). A bad request inside a well-formed message gets an error reply
// and serving goes on. On return the connection and every fd the Session
// holds are closed and the DMA windows are unmapped from the device (the
// device state stays, as the specification asks of a client's
// disconnection).
func (s *Session) Serve(ctx context.Context) (err error) {
	if !s.serving.CompareAndSwap(false, true) {
		return errors.New("vfio-user: Serve called twice")
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		s.conn.Close() // unblocks the read
	})
	defer func() {
		if !stop() {
			<-done
		}
		if errors.Is(err, transport.ErrPaused) {
			s.parked()
			return
		}
		s.Close()
		// A SET_IRQS or IO_FDS request that was being handled while Close
		// ran may have installed an fd or a watcher after Close released
		// them: nothing is handled any more, so release again.
		s.releaseIRQ()
		s.releaseDMA()
	}()
	for {
		s.pause.Next()
		err := s.serveOne()
		if err == nil {
			continue
		}
		if s.pause.Paused(ctx, &s.closed, err) {
			return transport.ErrPaused
		}
		return transport.ServeEnd(ctx, &s.closed, err, ErrProtocol, s.log, "vfio-user")
	}
}

// Close ends the session: the connection, the interrupt and kick fds,
// the DMA windows. Idempotent; safe to call concurrently with Serve.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.irqMu.Lock()
		s.closed.Store(true) // under irqMu: no fd is installed after this
		s.irqMu.Unlock()
		s.conn.Close()
		s.releaseIRQ()
	})
	return nil
}

// releaseIRQ detaches the session from the interrupt line, stops the
// watchers and closes the interrupt and kick fds. Idempotent.
func (s *Session) releaseIRQ() {
	s.dev.Regs.INTx().ClearSink(s)
	s.irqMu.Lock()
	kw, uw, intx, kickDev := s.kickW, s.unmaskW, s.intx, s.kickDev
	fds := []int{s.unmaskFD, s.kickFD, s.errFD}
	s.kickW, s.unmaskW, s.intx, s.kickDev = nil, nil, nil, false
	s.unmaskFD, s.kickFD, s.errFD = -1, -1, -1
	s.irqMu.Unlock()
	intx.Close()
	if kickDev {
		_ = s.dev.Regs.TakeKicks(-1)
	}
	// The watchers call into the register file holding no Session lock;
	// they are stopped before the fds they poll are closed.
	kw.Stop()
	uw.Stop()
	scmrights.Close(slices.DeleteFunc(fds, func(fd int) bool { return fd < 0 }))
}

// releaseDMA closes the windows' fds and unmaps them from the device.
// Only Serve's goroutine calls it, after the loop.
func (s *Session) releaseDMA() {
	had := false
	for _, w := range s.dma {
		if w.fd >= 0 {
			unix.Close(w.fd)
			had = true
		}
	}
	s.dma = nil
	if had && s.dev.Memory != nil {
		if err := s.dev.Memory.Update(nil); err != nil {
			s.log.Warn("vfio-user: unmap guest memory", "err", err)
		}
	}
}

// serveOne reads and handles one message.
func (s *Session) serveOne() error {
	m, err := s.wire.Read()
	if err != nil {
		return err
	}
	if m.Type() != TypeCommand {
		scmrights.Close(m.FDs)
		return protoErr("%v: a reply from the client, which was asked nothing", m.Cmd)
	}
	if !s.versioned && m.Cmd != CmdVersion {
		scmrights.Close(m.FDs)
		return protoErr("%v before VERSION", m.Cmd)
	}
	errno, err := s.handle(m)
	if err != nil {
		return err
	}
	if errno != 0 {
		s.log.Debug("vfio-user: request refused", "cmd", m.Cmd, "errno", errno)
		if m.Flags&FlagNoReply != 0 {
			return nil
		}
		return s.wire.Write(Header{ID: m.ID, Cmd: m.Cmd, Flags: TypeReply | FlagError, Error: uint32(errno)}, nil)
	}
	return nil
}

// reply sends a successful reply unless the command asked for none.
func (s *Session) reply(m Msg, fds []int, payload ...[]byte) error {
	if m.Flags&FlagNoReply != 0 {
		return nil
	}
	return s.wire.Write(Header{ID: m.ID, Cmd: m.Cmd, Flags: TypeReply}, fds, payload...)
}

// handle serves one command. It returns a nonzero errno for a request to
// refuse with an error reply (its fds closed), or an error that ends the
// session.
func (s *Session) handle(m Msg) (unix.Errno, error) {
	if m.Cmd != CmdDMAMap && m.Cmd != CmdDeviceSetIRQs && len(m.FDs) > 0 {
		scmrights.Close(m.FDs)
		return unix.EINVAL, nil // fds where none belong
	}
	if err := CheckArgsz(m.Cmd, m.Payload); err != nil {
		s.log.Debug("vfio-user: argsz refused", "err", err)
		scmrights.Close(m.FDs)
		return unix.EINVAL, nil
	}
	switch m.Cmd {
	case CmdVersion:
		return s.version(m)
	case CmdDMAMap:
		return s.dmaMap(m)
	case CmdDMAUnmap:
		return s.dmaUnmap(m)
	case CmdDeviceGetInfo:
		in, err := UnmarshalInfo(m.Cmd, m.Payload)
		if err != nil {
			return unix.EINVAL, nil
		}
		if in.Argsz < InfoSize {
			return unix.EINVAL, nil
		}
		return 0, s.reply(m, nil, Info{Argsz: InfoSize, Flags: DeviceFlagReset | DeviceFlagPCI, Index: NumRegions, Count: NumIRQs}.Marshal())
	case CmdDeviceGetRegion:
		return s.regionInfo(m)
	case CmdDeviceGetRegionIO:
		return s.regionIOFDs(m)
	case CmdDeviceGetIRQInfo:
		return s.irqInfo(m)
	case CmdDeviceSetIRQs:
		return s.setIRQs(m)
	case CmdRegionRead:
		return s.regionRead(m)
	case CmdRegionWrite:
		return s.regionWrite(m)
	case CmdDeviceReset:
		if len(m.Payload) != 0 {
			return unix.EINVAL, nil
		}
		s.dev.Regs.Reset()
		s.dev.Config.Reset()
		return 0, s.reply(m, nil)
	}
	// DMA_READ/WRITE go the other way; REGION_WRITE_MULTI, DEVICE_FEATURE
	// and migration were not negotiated; anything else is unknown.
	return unix.ENOSYS, nil
}

// version answers VERSION: the client's major version must be ours; the
// reply carries our minor version (never above the client's) and our
// capabilities.
func (s *Session) version(m Msg) (unix.Errno, error) {
	if s.versioned {
		return 0, protoErr("a second VERSION")
	}
	v, err := UnmarshalVersion(m.Payload)
	if err != nil {
		return 0, err
	}
	if v.Major != VersionMajor {
		return 0, protoErr("client speaks version %d.%d, this server %d.%d", v.Major, v.Minor, VersionMajor, VersionMinor)
	}
	if err := CheckCaps(v.Caps); err != nil {
		return 0, err
	}
	s.versioned = true
	return 0, s.reply(m, nil, Version{Major: VersionMajor, Minor: min(v.Minor, VersionMinor), Caps: serverCaps}.Marshal())
}

// dmaMap records a DMA window. A window with an fd, readable and
// writable, joins the device's guest-RAM map (the whole map goes to the
// worker again, which also decides how many windows it takes); one
// without (the client did not share it) or read-only is recorded, its fd
// closed, and never touched: the device's DMA there fails with
// StatusBadAddress (DMA_READ/DMA_WRITE messages are not used).
func (s *Session) dmaMap(m Msg) (unix.Errno, error) {
	d, err := UnmarshalDMAMap(m.Payload)
	refuse := func(e unix.Errno) (unix.Errno, error) {
		scmrights.Close(m.FDs)
		return e, nil
	}
	if err != nil || len(m.FDs) > 1 {
		return refuse(unix.EINVAL)
	}
	w := dmaWindow{addr: d.Addr, size: d.Size, offset: d.Offset, flags: d.Flags, fd: -1}
	if e := w.check(s.dma); e != 0 {
		return refuse(e)
	}
	if len(m.FDs) == 1 {
		if w.flags == DMAFlagRead|DMAFlagWrite {
			w.fd = m.FDs[0]
		} else {
			// Read-only (ROM, PAM shadows being set up) or write-only:
			// the device never sees it, so the fd is not kept.
			unix.Close(m.FDs[0])
		}
	}
	s.dma = append(s.dma, w)
	if w.fd >= 0 {
		if err := s.updateMemory(); err != nil {
			s.log.Warn("vfio-user: DMA_MAP refused by the guest-memory map", "addr", d.Addr, "size", d.Size, "err", err)
			s.dma = s.dma[:len(s.dma)-1]
			unix.Close(w.fd)
			if uerr := s.updateMemory(); uerr != nil {
				s.log.Error("vfio-user: restore the guest-memory map", "err", uerr)
			}
			return unix.EINVAL, nil
		}
	}
	return 0, s.reply(m, nil)
}

// dmaUnmap removes the window the request names exactly and answers with
// the request's entry.
func (s *Session) dmaUnmap(m Msg) (unix.Errno, error) {
	d, err := UnmarshalDMAUnmap(m.Payload)
	if err != nil || d.Flags&^DMAUnmapFlagAll != 0 { // no dirty-page bitmap: migration is not offered
		return unix.EINVAL, nil
	}
	if d.Flags&DMAUnmapFlagAll != 0 {
		if d.Addr != 0 || d.Size != 0 {
			return unix.EINVAL, nil
		}
		return s.unmapWhere(m, func(dmaWindow) bool { return true })
	}
	for _, w := range s.dma {
		if w.addr == d.Addr && w.size == d.Size {
			return s.unmapWhere(m, func(o dmaWindow) bool { return o == w })
		}
	}
	return unix.EINVAL, nil // the specification: it must match a mapping exactly
}

// unmapWhere removes the windows gone reports, gives the device the map
// without them and only then closes their fds and answers with the
// request's entry: no reference to them is left when the client reads
// the reply.
func (s *Session) unmapWhere(m Msg, gone func(dmaWindow) bool) (unix.Errno, error) {
	old := s.dma
	var removed []dmaWindow
	s.dma = nil
	for _, w := range old {
		if gone(w) {
			removed = append(removed, w)
		} else {
			s.dma = append(s.dma, w)
		}
	}
	if slices.ContainsFunc(removed, func(w dmaWindow) bool { return w.fd >= 0 }) {
		if err := s.updateMemory(); err != nil {
			// The device keeps the old map: so do the windows.
			s.dma = old
			s.log.Error("vfio-user: DMA_UNMAP: update the guest-memory map", "err", err)
			return unix.EIO, nil
		}
	}
	for _, w := range removed {
		if w.fd >= 0 {
			unix.Close(w.fd)
		}
	}
	return 0, s.reply(m, nil, m.Payload)
}

// updateMemory hands the device the fd-backed, read-write windows as its
// whole guest-RAM map (duplicates of the fds: Update owns them).
func (s *Session) updateMemory() error {
	if s.dev.Memory == nil {
		return nil
	}
	var regions []guestmem.Region
	for _, w := range s.dma {
		if w.fd < 0 {
			continue
		}
		fd, err := unix.FcntlInt(uintptr(w.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, r := range regions {
				unix.Close(r.FD)
			}
			return fmt.Errorf("dup DMA fd: %w", err)
		}
		regions = append(regions, guestmem.Region{GPA: w.addr, Size: w.size, Offset: w.offset, FD: fd})
	}
	return s.dev.Memory.Update(regions)
}

// regionSize is the size of each PCI region: BAR0 and config space.
func regionSize(index uint32) uint64 {
	switch index {
	case RegionBAR0:
		return abi.BAR0Size
	case RegionConfig:
		return mmio.ConfigSize
	}
	return 0
}

func (s *Session) regionInfo(m Msg) (unix.Errno, error) {
	r, err := UnmarshalRegionInfo(m.Payload)
	if err != nil || r.Index >= NumRegions || r.Argsz < RegionInfoSize {
		return unix.EINVAL, nil
	}
	out := RegionInfo{Argsz: RegionInfoSize, Index: r.Index, Size: regionSize(r.Index)}
	if out.Size > 0 {
		out.Flags = RegionFlagRead | RegionFlagWrite
	}
	return 0, s.reply(m, nil, out.Marshal())
}

// regionIOFDs offers, for BAR0, one ioeventfd at abi.RegRingKick: a
// store there need not reach vgpud through the client at all.
func (s *Session) regionIOFDs(m Msg) (unix.Errno, error) {
	r, err := UnmarshalRegionIOFDs(m.Payload)
	if err != nil || len(r.Subs) != 0 || r.Flags != 0 || r.Index >= NumRegions {
		return unix.EINVAL, nil
	}
	if r.Index != RegionBAR0 {
		return 0, s.reply(m, nil, RegionIOFDs{Argsz: RegionIOFDsSize, Index: r.Index}.Marshal())
	}
	full := RegionIOFDs{Argsz: RegionIOFDsSize + IOFDSize, Index: r.Index, Count: 1,
		Subs: []IOFD{{Offset: abi.RegRingKick, Size: 4, FDIndex: 0, Type: IOFDTypeIoeventfd}}}
	if r.Argsz < full.Argsz {
		// Too small for the array: say how much is needed.
		return 0, s.reply(m, nil, RegionIOFDs{Argsz: full.Argsz, Index: r.Index, Count: 1}.Marshal())
	}
	fd, err := s.kickFd()
	if err != nil {
		s.log.Error("vfio-user: kick ioeventfd", "err", err)
		return unix.EIO, nil
	}
	return 0, s.reply(m, []int{fd}, full.Marshal())
}

// kickFd returns the kick ioeventfd, making it at the first call. Each
// signal is a write of abi.RegRingKick: the device's backend reads it
// where it can (a worker process: the kick never passes through this
// process), else a watcher here writes the register.
func (s *Session) kickFd() (int, error) {
	s.irqMu.Lock()
	defer s.irqMu.Unlock()
	if s.kickFD >= 0 {
		return s.kickFD, nil
	}
	if s.closed.Load() {
		return -1, transport.ErrClosed
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, err
	}
	if err := s.readKicksLocked(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	s.kickFD = fd
	return fd, nil
}

// readKicksLocked routes the signals of fd, the kick ioeventfd, to the
// device's backend where it reads them itself, else to a watcher here
// that writes the register. irqMu is held.
func (s *Session) readKicksLocked(fd int) error {
	if err := s.dev.Regs.TakeKicks(fd); err == nil {
		s.kickDev = true
		return nil
	} else if !errors.Is(err, errors.ErrUnsupported) {
		s.log.Warn("vfio-user: the device does not read its kick ioeventfd: kicks go through the register file", "err", err)
	}
	w, err := irqfd.Watch(fd, s.kickWrite, s.log)
	if err != nil {
		return err
	}
	s.kickW = w
	return nil
}

// kickWrite applies one kick as the register write it stands for.
func (s *Session) kickWrite() { s.dev.Regs.WriteBAR(abi.RegRingKick, 4, 1) }

func (s *Session) irqInfo(m Msg) (unix.Errno, error) {
	in, err := UnmarshalInfo(m.Cmd, m.Payload)
	if err != nil || in.Index >= NumIRQs || in.Argsz < InfoSize {
		return unix.EINVAL, nil
	}
	out := Info{Argsz: InfoSize, Index: in.Index}
	switch in.Index {
	case IRQIntx:
		out.Flags, out.Count = IRQInfoEventfd|IRQInfoMaskable|IRQInfoAutomasked, 1
	case IRQErr:
		// One error interrupt, as a PCIe device under kernel VFIO has:
		// QEMU's vfio-pci then registers its error notifier instead of
		// warning "Could not enable error recovery for the device". vgpud
		// never signals it: device faults reach the guest in RegError
		// (docs/ABI.md), and a signal would stop the whole VM.
		out.Flags, out.Count = IRQInfoEventfd, 1
	}
	// MSI, MSI-X, REQ: none (the config space has no MSI capability).
	return 0, s.reply(m, nil, out.Marshal())
}

// setIRQs applies DEVICE_SET_IRQS. INTx is the one interrupt vgpud
// raises; ERR takes an eventfd it keeps and never signals; the other
// indices accept only "disable all" (count 0, DATA_NONE).
func (s *Session) setIRQs(m Msg) (unix.Errno, error) {
	set, err := UnmarshalIRQSet(m.Payload)
	refuse := func() (unix.Errno, error) {
		scmrights.Close(m.FDs)
		return unix.EINVAL, nil
	}
	if err != nil || set.Index >= NumIRQs {
		return refuse()
	}
	data, action := set.Flags&irqSetDataMask, set.Flags&irqSetActionMask
	if set.Flags&^(irqSetDataMask|irqSetActionMask) != 0 || data&(data-1) != 0 || action&(action-1) != 0 || data == 0 || action == 0 {
		return refuse()
	}
	if (data != IRQSetDataEventfd && len(m.FDs) > 0) || (data == IRQSetDataBool) != (len(set.Data) > 0) {
		return refuse()
	}
	if data == IRQSetDataBool && uint32(len(set.Data)) != set.Count {
		return refuse()
	}
	if set.Count == 0 {
		if set.Start != 0 || data != IRQSetDataNone || action != IRQSetActionTrigger {
			return refuse()
		}
		switch set.Index {
		case IRQIntx:
			s.setTrigger(nil)
			s.setUnmaskFD(-1)
		case IRQErr:
			s.setErrFD(-1)
		}
		return 0, s.reply(m, nil)
	}
	if set.Index == IRQErr && set.Start == 0 && set.Count == 1 && action == IRQSetActionTrigger && data == IRQSetDataEventfd && len(m.FDs) <= 1 {
		// QEMU's error notifier: an eventfd, or none to de-assign it.
		fd := -1
		if len(m.FDs) == 1 {
			fd = m.FDs[0]
			if err := irqfd.Prepare(fd); err != nil {
				unix.Close(fd)
				s.log.Error("vfio-user: SET_IRQS: ERR eventfd refused", "err", err)
				return unix.EINVAL, nil
			}
		}
		s.setErrFD(fd)
		return 0, s.reply(m, nil)
	}
	if set.Index != IRQIntx || set.Start != 0 || set.Count != 1 {
		return refuse()
	}
	if data == IRQSetDataEventfd && len(m.FDs) > 1 {
		return refuse()
	}
	if data == IRQSetDataBool && set.Data[0] == 0 {
		return 0, s.reply(m, nil) // the one interrupt is not selected
	}
	switch {
	case action == IRQSetActionTrigger && data == IRQSetDataEventfd:
		var trig *irqfd.Trigger
		if len(m.FDs) == 1 {
			if trig, err = irqfd.New(m.FDs[0], s.log); err != nil {
				s.log.Error("vfio-user: SET_IRQS: INTx trigger refused", "err", err)
				return unix.EINVAL, nil
			}
		}
		s.setTrigger(trig)
	case action == IRQSetActionTrigger:
		s.signal() // the client raises the interrupt itself
	case action == IRQSetActionUnmask && data == IRQSetDataEventfd:
		fd := -1
		if len(m.FDs) == 1 {
			fd = m.FDs[0]
		}
		if fd >= 0 {
			if err := irqfd.Prepare(fd); err != nil {
				unix.Close(fd)
				s.log.Error("vfio-user: SET_IRQS: INTx unmask fd refused", "err", err)
				return unix.EINVAL, nil
			}
		}
		if err := s.setUnmaskFD(fd); err != nil {
			s.log.Error("vfio-user: unmask eventfd", "err", err)
			return unix.EIO, nil
		}
	case action == IRQSetActionUnmask:
		s.unmask()
	case action == IRQSetActionMask && data != IRQSetDataEventfd:
		s.irqMu.Lock()
		s.masked = true
		s.irqMu.Unlock()
	default: // an eventfd signalled on mask: not offered
		return refuse()
	}
	return 0, s.reply(m, nil)
}

// setTrigger replaces the INTx eventfd's trigger (nil: none) and
// attaches the session to the line, asserting it at once if it is high.
// Enabling INTx (no eventfd before) starts unmasked; replacing the
// eventfd keeps the mask, as VFIO's does (QEMU masks, swaps in KVM's
// irqfd, unmasks).
func (s *Session) setTrigger(trig *irqfd.Trigger) {
	s.irqMu.Lock()
	if s.closed.Load() {
		s.irqMu.Unlock()
		trig.Close()
		return
	}
	old := s.intx
	if old == nil {
		s.masked = false
	}
	s.intx = trig
	s.irqMu.Unlock()
	old.Close()
	if trig != nil {
		s.dev.Regs.INTx().SetSink(s)
	} else {
		s.dev.Regs.INTx().ClearSink(s)
	}
}

// setErrFD replaces the ERR index's eventfd (-1: none) and closes the
// one it held.
func (s *Session) setErrFD(fd int) {
	s.irqMu.Lock()
	if s.closed.Load() {
		s.irqMu.Unlock()
		if fd >= 0 {
			unix.Close(fd)
		}
		return
	}
	old := s.errFD
	s.errFD = fd
	s.irqMu.Unlock()
	if old >= 0 {
		unix.Close(old)
	}
}

// setUnmaskFD replaces the eventfd whose signal unmasks INTx (KVM's
// resample eventfd: the guest's EOI).
func (s *Session) setUnmaskFD(fd int) error {
	var w *irqfd.Watcher
	if fd >= 0 {
		var err error
		if w, err = irqfd.Watch(fd, s.unmask, s.log); err != nil {
			unix.Close(fd)
			return err
		}
	}
	s.irqMu.Lock()
	if s.closed.Load() {
		s.irqMu.Unlock()
		if w != nil {
			w.Stop()
			unix.Close(fd)
		}
		return nil
	}
	oldFD, oldW := s.unmaskFD, s.unmaskW
	s.unmaskFD, s.unmaskW = fd, w
	s.irqMu.Unlock()
	oldW.Stop()
	if oldFD >= 0 {
		unix.Close(oldFD)
	}
	return nil
}

// unmask ends the automask: a line still high is asserted again.
func (s *Session) unmask() {
	s.irqMu.Lock()
	s.masked = false
	s.irqMu.Unlock()
	s.dev.Regs.INTx().Resample()
}

// RaiseIRQ asserts INTx: it signals the trigger eventfd unless the
// interrupt is masked, and masks it (VFIO's INTx is automasked) until the
// client unmasks it.
func (s *Session) RaiseIRQ() error {
	s.irqMu.Lock()
	defer s.irqMu.Unlock()
	if s.intx == nil {
		return ErrNoIRQ
	}
	if s.masked {
		return nil
	}
	s.masked = true
	s.intx.Signal() // written by the trigger's goroutine, never blocking
	return nil
}

func (s *Session) signal() {
	s.irqMu.Lock()
	defer s.irqMu.Unlock()
	if s.intx != nil {
		s.intx.Signal()
	}
}

// access checks a region access and returns how to serve it.
func accessOK(r RegionAccess) bool {
	size := regionSize(r.Region)
	if size == 0 || r.Count == 0 || r.Count > MaxDataXfer || r.Offset >= size || uint64(r.Count) > size-r.Offset {
		return false
	}
	switch r.Region {
	case RegionBAR0:
		return r.Count == 1 || r.Count == 2 || r.Count == 4 || r.Count == 8
	default: // config space: one access of 1, 2 or 4 bytes, or aligned dwords
		return r.Count == 1 || r.Count == 2 || r.Count == 4 || (r.Count%4 == 0 && r.Offset%4 == 0)
	}
}

func (s *Session) regionRead(m Msg) (unix.Errno, error) {
	r, err := UnmarshalRegionAccess(m.Cmd, m.Payload)
	if err != nil || len(r.Data) != 0 || !accessOK(r) {
		return unix.EINVAL, nil
	}
	r.Put(s.out[:])
	if r.Region == RegionBAR0 {
		v := s.dev.Regs.ReadBAR(r.Offset, int(r.Count))
		le.PutUint64(s.out[RegionAccessSize:], v)
		return 0, s.reply(m, nil, s.out[:RegionAccessSize+r.Count])
	}
	if r.Count <= 4 && r.Count != 3 {
		le.PutUint32(s.out[RegionAccessSize:], s.dev.Config.Read(uint32(r.Offset), int(r.Count)))
		return 0, s.reply(m, nil, s.out[:RegionAccessSize+r.Count])
	}
	data := make([]byte, r.Count) // a bulk config read: rare (once at start)
	for i := uint32(0); i < r.Count; i += 4 {
		le.PutUint32(data[i:], s.dev.Config.Read(uint32(r.Offset)+i, 4))
	}
	return 0, s.reply(m, nil, s.out[:RegionAccessSize], data)
}

func (s *Session) regionWrite(m Msg) (unix.Errno, error) {
	r, err := UnmarshalRegionAccess(m.Cmd, m.Payload)
	if err != nil || uint32(len(r.Data)) != r.Count || !accessOK(r) {
		return unix.EINVAL, nil
	}
	var buf [8]byte
	if r.Region == RegionBAR0 {
		copy(buf[:], r.Data)
		s.dev.Regs.WriteBAR(r.Offset, int(r.Count), le.Uint64(buf[:]))
	} else {
		for i := uint32(0); i < r.Count; i += 4 {
			n := min(r.Count-i, 4)
			clear(buf[:])
			copy(buf[:], r.Data[i:i+n])
			s.dev.Config.Write(uint32(r.Offset)+i, int(n), le.Uint32(buf[:]))
		}
	}
	r.Data = nil
	r.Put(s.out[:])
	return 0, s.reply(m, nil, s.out[:RegionAccessSize])
}

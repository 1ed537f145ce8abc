package xen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/mdev/transport"
)

// ErrClosed is returned by Serve after Close.
var ErrClosed = transport.ErrClosed

// DefaultLiveness is how often an idle Server asks Xen whether its domain
// still exists (Xen sends no event when a domain dies).
const DefaultLiveness = time.Second

// Config says which domain a Server serves and where the vGPU appears.
type Config struct {
	// Domain is the HVM guest's domain id.
	Domain DomID
	// SBDF is the PCI function the vGPU claims in the guest. It must be
	// free in the domain's QEMU (no device there) and on bus 0 for its
	// INTx to be routed (hvmloader's _PRT covers bus 0).
	SBDF SBDF
	// VCPUs is the number of vCPU slots to serve; 0 asks Xen
	// (XEN_DMOP_nr_vcpus).
	VCPUs int
	// Restrict restricts the Hypervisor handle and the event channel
	// handle to Domain before anything else: for a handle per server.
	Restrict bool
	// Liveness is how often an idle Server checks that the domain still
	// exists; 0 means DefaultLiveness.
	Liveness time.Duration
	// RAM is the guest's memory in bytes (xl.cfg maxmem=, else memory=),
	// which dom0 cannot read in general: it sets the guest-physical
	// window the device may touch (RAMWindow). 0: unknown, and under real
	// Xen the device gets no guest RAM (every command touching guest
	// memory completes with StatusBadAddress).
	RAM uint64
}

// Server is one vGPU served to one Xen HVM domain as an ioreq server. It
// is a transport.Session: Serve sets the ioreq server up, serves until the
// domain goes away, and tears it down.
//
// Serve's goroutine alone touches the ioreq pages, the event channel
// handle and the claimed ranges. Close and a context's end only signal
// the stop eventfd. The INTx sink (intxLine) has its own lock, a leaf.
type Server struct {
	hv   Hypervisor
	cfg  Config
	dev  transport.Device
	log  *slog.Logger
	line *intxLine

	serving atomic.Bool
	closed  atomic.Bool
	ready   chan struct{} // closed once set up (Serving)
	// waitMu guards waiting: the event channel handle as Go's poller
	// watches it while Serve's loop runs, nil otherwise. Close and a
	// context's end wake the loop by moving its read deadline.
	waitMu  sync.Mutex
	waiting *os.File

	// Owned by Serve's goroutine.
	id         ServerID
	created    bool
	ramPassed  bool // guest RAM handed to the device (dev.Memory)
	pages      IOReqPages
	sync       IOReqPage
	buf        BufPage
	ev         Events
	vcpuRemote []Port
	vcpuLocal  []Port
	bufLocal   Port
	bound      []Port
	byLocal    map[Port]int // local port -> vCPU, bufIndex for the buffered ring
	pciMapped  bool
	barMapped  bool
	barBase    uint64
}

const bufIndex = -1

var (
	_ transport.Session = (*Server)(nil)
	// allOnes answers a read that no device decodes.
	allOnes = ^uint64(0)
)

// NewServer returns a Server for dev in cfg.Domain, speaking to Xen
// through hv. It connects dev's config space to its interrupt line.
func NewServer(hv Hypervisor, cfg Config, dev transport.Device) *Server {
	log := dev.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = DefaultLiveness
	}
	log = log.With("xen_domain", cfg.Domain, "sbdf", cfg.SBDF.String())
	s := &Server{hv: hv, cfg: cfg, dev: dev, log: log, ready: make(chan struct{})}
	s.line = &intxLine{hv: hv, dom: cfg.Domain, sbdf: cfg.SBDF, log: log}
	dev.Config.SetINTx(dev.Regs.INTx())
	return s
}

// protoErr is a protocol violation.
func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// Serve creates the ioreq server, claims the PCI function, serves ioreqs
// until the domain goes away (nil), ctx ends (ctx.Err()), Close is called
// (ErrClosed), Xen breaks the protocol (an error wrapping ErrProtocol,
// logged) or a hypercall fails; then it releases everything it claimed.
// Serve may be called once.
func (s *Server) Serve(ctx context.Context) (err error) {
	if !s.serving.CompareAndSwap(false, true) {
		return errors.New("xen: Serve called twice")
	}
	if s.closed.Load() {
		return ErrClosed
	}
	stop := context.AfterFunc(ctx, s.wake)
	defer stop()
	defer s.teardown()
	if err := s.setup(); err != nil {
		if errors.Is(err, ErrNoDomain) {
			return fmt.Errorf("xen: setup: %w", err)
		}
		return fmt.Errorf("xen: setup domain %d: %w", s.cfg.Domain, err)
	}
	s.log.Info("xen: ioreq server serving", "id", s.id, "vcpus", len(s.vcpuLocal))
	close(s.ready)
	err = s.loop(ctx)
	switch {
	case err == nil:
		s.log.Info("xen: domain gone")
	case errors.Is(err, ErrProtocol):
		s.log.Error("xen: stopping ioreq server", "err", err)
	}
	return err
}

// Serving is closed once Serve has set the ioreq server up and claimed
// the PCI function: the guest can reach the vGPU. An operator's attach
// waits for it or for Serve to return.
func (s *Server) Serving() <-chan struct{} { return s.ready }

// Close ends the session; Serve returns ErrClosed. Idempotent.
func (s *Server) Close() error {
	s.closed.Store(true)
	s.wake()
	return nil
}

// wake makes a waiting loop look at s.closed and its context again.
func (s *Server) wake() {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	if s.waiting != nil {
		s.waiting.SetReadDeadline(time.Unix(1, 0))
	}
}

// pollable returns the event channel handle's fd as a file Go's poller
// watches (a duplicate: the handle keeps its own), so the loop waits
// without holding an OS thread in poll(2): a blocked thread loses its P
// and every wake-up costs a handoff (bench/datapath measures both).
func pollable(fd int) (*os.File, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xen: dup event channel fd: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil { // shared with the handle's fd, which is non-blocking already
		unix.Close(dup)
		return nil, fmt.Errorf("xen: event channel fd: %w", err)
	}
	return os.NewFile(uintptr(dup), "evtchn"), nil
}

// waitReadable waits until f is readable (possibly spuriously: Go's
// poller is edge-triggered and remembers an edge the loop has already
// served) or its read deadline passes.
//
// Before waiting it asks the kernel whether f is readable now: the
// runtime forgets an edge that came before the wait began (it resets the
// poll state first), so an event that arrived between the loop's last
// look at the pending ports and this wait — or before the loop started —
// would otherwise be seen only when the deadline (Liveness) passed.
func waitReadable(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	first := true
	err = rc.Read(func(fd uintptr) bool {
		if first { // the runtime calls once before waiting
			first = false
			return readable(int(fd))
		}
		return true
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

// readable reports whether fd is readable now, without waiting.
func readable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || (n > 0 && pfd[0].Revents != 0) // an error: let the loop look
	}
}

func (s *Server) setup() error {
	hv, dom := s.hv, s.cfg.Domain
	if s.cfg.Restrict {
		if err := hv.Restrict(dom); err != nil {
			return fmt.Errorf("restrict: %w", err)
		}
	}
	n := s.cfg.VCPUs
	if n == 0 {
		var err error
		if n, err = hv.NrVCPUs(dom); err != nil {
			return fmt.Errorf("vcpus: %w", err)
		}
	}
	if n < 1 || n > MaxVCPUs {
		return fmt.Errorf("%d vcpus: want 1..%d", n, MaxVCPUs)
	}
	id, err := hv.CreateIOReqServer(dom, BufIOReqAtomic)
	if err != nil {
		return fmt.Errorf("create ioreq server: %w", err)
	}
	s.id, s.created = id, true
	bufPort, err := hv.IOReqServerInfo(dom, id)
	if err != nil {
		return fmt.Errorf("ioreq server info: %w", err)
	}
	pages, err := hv.MapIOReqPages(dom, id)
	if err != nil {
		return fmt.Errorf("map ioreq pages: %w", err)
	}
	s.pages = pages
	if s.sync, err = NewIOReqPage(pages.Sync); err != nil {
		return err
	}
	if s.buf, err = NewBufPage(pages.Buffered); err != nil {
		return err
	}
	// As QEMU does: enable first, then read each vCPU's port from its
	// slot (Xen writes vp_eport when the server is enabled). Nothing
	// reaches the server before MapPCIDev below.
	if err := hv.SetIOReqServerState(dom, id, true); err != nil {
		return fmt.Errorf("enable ioreq server: %w", err)
	}
	if s.ev, err = hv.OpenEvents(); err != nil {
		return fmt.Errorf("open event channels: %w", err)
	}
	if s.cfg.Restrict {
		if err := s.ev.Restrict(dom); err != nil {
			return fmt.Errorf("restrict event channels: %w", err)
		}
	}
	s.byLocal = make(map[Port]int, n+1)
	for i := range n {
		remote := s.sync.Slot(i).VPEport()
		if remote == 0 {
			return fmt.Errorf("vcpu %d: no event channel in its ioreq slot: %w", i, ErrProtocol)
		}
		local, err := s.bind(remote)
		if err != nil {
			return fmt.Errorf("bind vcpu %d port %d: %w", i, remote, err)
		}
		s.vcpuRemote = append(s.vcpuRemote, remote)
		s.vcpuLocal = append(s.vcpuLocal, local)
		s.byLocal[local] = i
	}
	if s.bufLocal, err = s.bind(bufPort); err != nil {
		return fmt.Errorf("bind buffered ioreq port %d: %w", bufPort, err)
	}
	s.byLocal[s.bufLocal] = bufIndex
	if err := s.guestRAM(); err != nil {
		return err
	}
	s.dev.Regs.INTx().SetSink(s.line)
	if err := hv.MapPCIDev(dom, id, s.cfg.SBDF); err != nil {
		return fmt.Errorf("claim pci %v: %w", s.cfg.SBDF, err)
	}
	s.pciMapped = true
	s.syncBAR() // a BAR0 programmed by an earlier session
	return nil
}

func (s *Server) bind(remote Port) (Port, error) {
	local, err := s.ev.BindInterdomain(s.cfg.Domain, remote)
	if err != nil {
		return 0, err
	}
	if _, dup := s.byLocal[local]; dup || local == 0 {
		return 0, fmt.Errorf("local port %d bound twice: %w", local, ErrProtocol)
	}
	s.bound = append(s.bound, local)
	return local, nil
}

// guestRAM hands the guest's RAM to the device, where the hypervisor can.
func (s *Server) guestRAM() error {
	if s.dev.Memory == nil {
		return nil
	}
	regions, err := s.hv.GuestRAM(s.cfg.Domain, s.cfg.RAM)
	if errors.Is(err, ErrNoGuestRAMFDs) {
		s.log.Warn("xen: guest RAM not passed to the device (set the guest's RAM size); commands touching guest memory will fail", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("guest ram: %w", err)
	}
	if err := s.dev.Memory.Update(regions); err != nil {
		return fmt.Errorf("guest ram map: %w", err)
	}
	s.ramPassed = true
	return nil
}

// teardown releases, in reverse, whatever setup got. Errors are logged:
// after the domain died every call fails with ErrNoDomain.
func (s *Server) teardown() {
	hv, dom := s.hv, s.cfg.Domain
	note := func(what string, err error) {
		switch {
		case err == nil:
		case errors.Is(err, ErrNoDomain), errors.Is(err, unix.ENOENT):
			// The domain, or (dying) its ioreq servers, are gone.
			s.log.Debug("xen: teardown: domain gone", "step", what)
		default:
			s.log.Warn("xen: teardown", "step", what, "err", err)
		}
	}
	if s.ramPassed {
		// The device's mappings of the guest's frames go with the
		// session: a worker that outlives it would otherwise keep
		// mapcache buckets, and with them the dead domain, a zombie
		// in xl list ("(null)", 2 MiB) seen under Xen 4.20.
		note("unmap guest ram", s.dev.Memory.Update(nil))
		s.ramPassed = false
	}
	s.dev.Regs.INTx().ClearSink(s.line)
	note("deassert intx", s.line.deassert())
	if s.barMapped {
		note("unmap bar0", hv.UnmapIORange(dom, s.id, RangeMemory, s.barBase, s.barBase+barSize-1))
		s.barMapped = false
	}
	if s.pciMapped {
		note("unmap pci", hv.UnmapPCIDev(dom, s.id, s.cfg.SBDF))
		s.pciMapped = false
	}
	if s.created {
		note("disable ioreq server", hv.SetIOReqServerState(dom, s.id, false))
		note("destroy ioreq server", hv.DestroyIOReqServer(dom, s.id))
		s.created = false
	}
	if s.ev != nil {
		for _, p := range s.bound {
			note("unbind", s.ev.Unbind(p))
		}
		note("close event channels", s.ev.Close())
		s.ev, s.bound = nil, nil
	}
	if s.pages.Unmap != nil {
		note("unmap ioreq pages", s.pages.Unmap())
		s.pages = IOReqPages{}
	}
}

// loop waits on the event channels and serves until something ends it.
func (s *Server) loop(ctx context.Context) error {
	f, err := pollable(s.ev.Fd())
	if err != nil {
		return err
	}
	s.waitMu.Lock()
	s.waiting = f
	s.waitMu.Unlock()
	defer func() {
		s.waitMu.Lock()
		s.waiting = nil
		s.waitMu.Unlock()
		f.Close()
	}()
	for {
		// The deadline first, then the checks: a wake after the checks
		// moves the deadline back into the past, one before them is seen
		// by them.
		if err := f.SetReadDeadline(time.Now().Add(s.cfg.Liveness)); err != nil {
			return fmt.Errorf("xen: event channel deadline: %w", err)
		}
		if s.closed.Load() {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := waitReadable(f); err != nil {
			return fmt.Errorf("xen: wait for events: %w", err)
		}
		handled := 0
		for {
			p, ok, err := s.ev.Pending()
			if err != nil {
				return fmt.Errorf("xen: pending event: %w", err)
			}
			if !ok {
				break
			}
			handled++
			if err := s.port(p); err != nil {
				return err
			}
		}
		// Xen does not always notify the buffered port (QEMU polls the
		// ring on a timer too): drain it on every wake.
		if err := s.drainBuffered(); err != nil {
			return err
		}
		if handled == 0 && !s.closed.Load() && ctx.Err() == nil {
			// Quiet for a whole Liveness, or woken with nothing pending
			// (a dying domain's channels close): is the domain still there?
			gone, err := s.domainGone()
			if gone {
				return nil
			}
			if err != nil {
				s.log.Warn("xen: liveness check", "err", err)
			}
		}
	}
}

// domainGone is the liveness check. The domain is gone when nr_vcpus
// fails with ESRCH, and dying when this server's own ioreq server is
// gone (ENOENT from get_ioreq_server_info): Xen destroys a domain's ioreq
// servers when it kills it (domain_kill), but keeps the domain, whose
// dm_ops such as nr_vcpus still succeed, for as long as anyone holds its
// pages, this device model's guest RAM mappings included. So nr_vcpus
// alone never sees a guest that powered off while vgpud served it: the
// domain stays a zombie ("(null)", state "--psrd" in xl list) held by
// vgpud itself. Seen under Xen 4.20 (docs/xen.md, "Under real Xen").
func (s *Server) domainGone() (bool, error) {
	if _, err := s.hv.NrVCPUs(s.cfg.Domain); err != nil {
		return errors.Is(err, ErrNoDomain), err
	}
	if _, err := s.hv.IOReqServerInfo(s.cfg.Domain, s.id); err != nil {
		if errors.Is(err, ErrNoDomain) || errors.Is(err, unix.ENOENT) {
			s.log.Info("xen: ioreq server gone: the domain is dying")
			s.created = false // nothing left to disable or destroy
			return true, nil
		}
		return false, err
	}
	return false, nil
}

// port serves one pending local port.
func (s *Server) port(p Port) error {
	i, ok := s.byLocal[p]
	if !ok {
		return protoErr("event on port %d, which this server did not bind", p)
	}
	if err := s.ev.Unmask(p); err != nil {
		return fmt.Errorf("xen: unmask port %d: %w", p, err)
	}
	if i == bufIndex {
		return s.drainBuffered()
	}
	return s.vcpu(i)
}

// vcpu serves vCPU i's slot if Xen made it READY.
func (s *Server) vcpu(i int) error {
	slot := s.sync.Slot(i)
	switch st := slot.State(); st {
	case StateReady:
	case StateNone, StateInProcess, StateRespReady:
		// A stale or early notification; QEMU ignores them too.
		s.log.Debug("xen: event for a slot not ready", "vcpu", i, "state", st)
		return nil
	default:
		return protoErr("vcpu %d: slot state %d", i, st)
	}
	if !slot.SwapState(StateReady, StateInProcess) {
		return protoErr("vcpu %d: slot state changed under the device model", i)
	}
	req := slot.Load()
	var data uint64
	var herr error
	if req.VPEport != s.vcpuRemote[i] {
		data, herr = allOnes, protoErr("vcpu %d: slot names port %d, bound %d", i, req.VPEport, s.vcpuRemote[i])
	} else {
		data, herr = s.handle(req)
	}
	slot.SetData(data)
	if !slot.SwapState(StateInProcess, StateRespReady) {
		return errors.Join(herr, protoErr("vcpu %d: slot left INPROCESS while served", i))
	}
	if err := s.ev.Notify(s.vcpuLocal[i]); err != nil {
		return errors.Join(herr, fmt.Errorf("xen: notify vcpu %d: %w", i, err))
	}
	return herr
}

// drainBuffered serves the buffered ring (writes only) until it is empty.
func (s *Server) drainBuffered() error {
	for {
		rd := s.buf.ReadPointer()
		wr := s.buf.WritePointer()
		if rd != s.buf.ReadPointer() {
			continue // Xen rebased the pointers in between
		}
		if rd == wr {
			return nil
		}
		if wr-rd > BufSlots {
			return protoErr("buffered ring: read %d write %d (more than %d entries)", rd, wr, BufSlots)
		}
		e := s.buf.Entry(rd)
		req := IOReq{Type: e.Type, Addr: uint64(e.Addr), Data: uint64(e.Data), Size: 1 << e.Size, Count: 1, Dir: e.Dir, State: StateReady}
		n := uint32(1)
		if req.Size == 8 {
			if wr-rd < 2 {
				return protoErr("buffered ring: incomplete 8-byte write at %d", rd)
			}
			req.Data |= uint64(s.buf.Entry(rd+1).Data) << 32
			n = 2
		}
		if req.Dir != IOReqWrite {
			return protoErr("buffered ring: a read (%v)", req)
		}
		if _, err := s.handle(req); err != nil {
			return fmt.Errorf("buffered ring: %w", err)
		}
		s.buf.AdvanceRead(n)
	}
}

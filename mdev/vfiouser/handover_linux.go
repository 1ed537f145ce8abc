package vfiouser

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/irqfd"
	"github.com/vgpud/vgpud/internal/scmrights"
	"github.com/vgpud/vgpud/mdev/transport"
)

// Upgrade in place (docs/upgrade.md, docs/vfio-user.md "Upgrade in
// place"): a Session pauses between two messages, and a new vgpud adopts
// the connection with what the session had learnt from its client: the
// negotiated version, the DMA windows with their fds, the interrupt
// eventfds and INTx's mask. The client sees nothing but a pause: what it
// sends meanwhile waits in the socket, fds included, for the new process.

var _ transport.Pausable = (*Session)(nil)

// ErrState is wrapped by Adopt's errors for a handed-over session state
// that is malformed or inconsistent.
var ErrState = errors.New("vfio-user: bad session state")

// sessionState is a paused Session as Handover describes it for the new
// process (the handover state's "session", docs/vfio-user.md). Each fd
// field is an index into the handover's extra descriptors, -1 for none;
// each descriptor is named exactly once.
type sessionState struct {
	Versioned bool       `json:"versioned"`
	DMA       []dmaState `json:"dma"`
	INTx      int        `json:"intx"`        // the INTx trigger eventfd
	Masked    bool       `json:"intx_masked"` // INTx automasked, waiting for an unmask
	Unmask    int        `json:"unmask"`      // the eventfd whose signal unmasks INTx
	Err       int        `json:"err"`         // the ERR index's eventfd
	Kick      int        `json:"kick"`        // the kick ioeventfd
}

// dmaState is one DMA window.
type dmaState struct {
	Addr   uint64 `json:"addr"`
	Size   uint64 `json:"size"`
	Offset uint64 `json:"offset"`
	Flags  uint32 `json:"flags"`
	FD     int    `json:"fd"`
}

// Pause makes Serve return transport.ErrPaused before it reads the next
// message; the message waits in the socket for whoever serves next.
// Resume undoes it.
func (s *Session) Pause() { s.pause.Pause() }

// Resume clears a Pause: the eventfd watchers the pause stopped run
// again; call Serve again.
func (s *Session) Resume() {
	s.pause.Resume()
	s.irqMu.Lock()
	unmaskFD, kickFD := s.unmaskFD, -1
	if !s.kickDev {
		kickFD = s.kickFD
	}
	s.irqMu.Unlock()
	if unmaskFD >= 0 {
		if w, err := irqfd.Watch(unmaskFD, s.unmask, s.log); err != nil {
			s.log.Error("vfio-user: resume: watch the unmask eventfd", "err", err)
		} else {
			s.installWatcher(&s.unmaskW, w)
		}
	}
	if kickFD >= 0 {
		if w, err := irqfd.Watch(kickFD, s.kickWrite, s.log); err != nil {
			s.log.Error("vfio-user: resume: watch the kick eventfd", "err", err)
		} else {
			s.installWatcher(&s.kickW, w)
		}
	}
}

// installWatcher makes w the watcher at slot, unless the session closed
// meanwhile.
func (s *Session) installWatcher(slot **irqfd.Watcher, w *irqfd.Watcher) {
	s.irqMu.Lock()
	if s.closed.Load() || *slot != nil {
		s.irqMu.Unlock()
		w.Stop()
		return
	}
	*slot = w
	s.irqMu.Unlock()
}

// parked is Serve's end at a pause: the session keeps every fd, but no
// watcher of this process reads an eventfd the client signals (an unmask,
// a kick), which would otherwise be taken here and lost to the process
// that serves next.
func (s *Session) parked() {
	s.irqMu.Lock()
	kw, uw := s.kickW, s.unmaskW
	s.kickW, s.unmaskW = nil, nil
	s.irqMu.Unlock()
	kw.Stop()
	uw.Stop()
	s.serving.Store(false)
}

// Handover describes the paused session: the connection, and as Extra
// every fd the session holds (the DMA windows', the interrupts', the
// kick's), still the session's, with the state that names them.
func (s *Session) Handover() (transport.Handover, error) {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return transport.Handover{}, err
	}
	h := transport.Handover{Conn: -1}
	if err := rc.Control(func(fd uintptr) { h.Conn = int(fd) }); err != nil {
		return transport.Handover{}, err
	}
	index := func(fd int) int {
		if fd < 0 {
			return -1
		}
		h.Extra = append(h.Extra, fd)
		return len(h.Extra) - 1
	}
	st := sessionState{Versioned: s.versioned, DMA: []dmaState{}}
	for _, w := range s.dma {
		st.DMA = append(st.DMA, dmaState{Addr: w.addr, Size: w.size, Offset: w.offset, Flags: w.flags, FD: index(w.fd)})
	}
	s.irqMu.Lock()
	st.INTx, st.Masked = -1, s.masked
	if s.intx != nil {
		st.INTx = index(s.intx.FD())
	}
	st.Unmask, st.Err, st.Kick = index(s.unmaskFD), index(s.errFD), index(s.kickFD)
	s.irqMu.Unlock()
	if h.State, err = json.Marshal(st); err != nil {
		return transport.Handover{}, err
	}
	return h, nil
}

// parseState decodes and checks a handed-over session state that came
// with nExtra descriptors: as strictly as a client's messages (each DMA
// window as DMA_MAP checks it), and every descriptor named exactly once,
// so that each has one owner.
func parseState(b []byte, nExtra int) (sessionState, error) {
	var st sessionState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if len(bytes.TrimSpace(b)) == 0 || bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return st, fmt.Errorf("%w: none", ErrState)
	}
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("%w: %w", ErrState, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return st, fmt.Errorf("%w: trailing data", ErrState)
	}
	if nExtra < 0 || nExtra > MaxDMAMaps+4 {
		return st, fmt.Errorf("%w: %d descriptors", ErrState, nExtra)
	}
	named := make([]bool, nExtra)
	name := func(what string, i int) error {
		switch {
		case i == -1:
			return nil
		case i < 0 || i >= nExtra:
			return fmt.Errorf("%w: %s: descriptor %d of %d", ErrState, what, i, nExtra)
		case named[i]:
			return fmt.Errorf("%w: %s: descriptor %d named twice", ErrState, what, i)
		}
		named[i] = true
		return nil
	}
	var windows []dmaWindow
	for _, d := range st.DMA {
		w := dmaWindow{addr: d.Addr, size: d.Size, offset: d.Offset, flags: d.Flags}
		if e := w.check(windows); e != 0 {
			return st, fmt.Errorf("%w: DMA window %#x+%#x: %v", ErrState, d.Addr, d.Size, e)
		}
		if d.FD != -1 && d.Flags != DMAFlagRead|DMAFlagWrite {
			return st, fmt.Errorf("%w: DMA window %#x+%#x: an fd for a window the device never sees", ErrState, d.Addr, d.Size)
		}
		if err := name("DMA window", d.FD); err != nil {
			return st, err
		}
		windows = append(windows, w)
	}
	if !st.Versioned && (len(st.DMA) > 0 || st.INTx != -1 || st.Unmask != -1 || st.Err != -1 || st.Kick != -1) {
		return st, fmt.Errorf("%w: a session before VERSION holds nothing", ErrState)
	}
	for _, f := range []struct {
		what string
		i    int
	}{{"INTx", st.INTx}, {"unmask", st.Unmask}, {"ERR", st.Err}, {"kick", st.Kick}} {
		if err := name(f.what, f.i); err != nil {
			return st, err
		}
	}
	for i, ok := range named {
		if !ok {
			return st, fmt.Errorf("%w: descriptor %d named by nothing", ErrState, i)
		}
	}
	return st, nil
}

// Adopt returns a Session serving dev on a connection an earlier vgpud
// handed over, with the state its Handover described (its fds in extra).
// The guest-RAM map is not given to dev.Memory again: the device's came
// with the instance. On error everything given is closed: the client
// sees a hang-up.
func (Transport) Adopt(conn *net.UnixConn, extra []int, state json.RawMessage, dev transport.Device) (transport.Session, error) {
	st, err := parseState(state, len(extra))
	if err != nil {
		conn.Close()
		scmrights.Close(extra)
		return nil, fmt.Errorf("vfio-user: adopt: %w", err)
	}
	s := NewSession(conn, dev)
	if err := s.adopt(st, extra); err != nil {
		s.Close()
		s.releaseDMA()
		return nil, fmt.Errorf("vfio-user: adopt: %w", err)
	}
	return s, nil
}

// adopt installs st: the session owns every fd in extra from here,
// installed or closed, whatever the outcome.
func (s *Session) adopt(st sessionState, extra []int) error {
	fd := func(i int) int {
		if i < 0 {
			return -1
		}
		f := extra[i]
		extra[i] = -1 // taken
		return f
	}
	defer func() {
		for _, f := range extra {
			if f >= 0 {
				unix.Close(f)
			}
		}
	}()
	s.versioned = st.Versioned
	for _, d := range st.DMA {
		s.dma = append(s.dma, dmaWindow{addr: d.Addr, size: d.Size, offset: d.Offset, flags: d.Flags, fd: fd(d.FD)})
	}
	if st.INTx >= 0 {
		trig, err := irqfd.New(fd(st.INTx), s.log)
		if err != nil {
			return fmt.Errorf("INTx trigger: %w", err)
		}
		// The mask before the sink: a line still high with the
		// interrupt masked (not yet ended by the guest) is not raised
		// again.
		s.irqMu.Lock()
		s.intx, s.masked = trig, st.Masked
		s.irqMu.Unlock()
		s.dev.Regs.INTx().SetSink(s)
	}
	if st.Unmask >= 0 {
		f := fd(st.Unmask)
		if err := irqfd.Prepare(f); err != nil {
			unix.Close(f)
			return fmt.Errorf("unmask eventfd: %w", err)
		}
		if err := s.setUnmaskFD(f); err != nil {
			return fmt.Errorf("unmask eventfd: %w", err)
		}
	}
	if st.Err >= 0 {
		f := fd(st.Err)
		if err := irqfd.Prepare(f); err != nil {
			unix.Close(f)
			return fmt.Errorf("ERR eventfd: %w", err)
		}
		s.setErrFD(f)
	}
	if st.Kick >= 0 {
		if err := s.adoptKick(fd(st.Kick)); err != nil {
			return fmt.Errorf("kick eventfd: %w", err)
		}
	}
	return nil
}

// adoptKick makes fd, the kick ioeventfd the client was given, the
// session's, read where kickFd would have it read.
func (s *Session) adoptKick(fd int) error {
	if err := irqfd.Prepare(fd); err != nil {
		unix.Close(fd)
		return err
	}
	s.irqMu.Lock()
	defer s.irqMu.Unlock()
	if s.closed.Load() {
		unix.Close(fd)
		return transport.ErrClosed
	}
	if err := s.readKicksLocked(fd); err != nil {
		unix.Close(fd)
		return err
	}
	s.kickFD = fd
	return nil
}

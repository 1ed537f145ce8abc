package vfiouser_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mmio"
)

// pause pauses s's session and waits for its Serve to park.
func pause(t *testing.T, s *served) {
	t.Helper()
	s.sess.Pause()
	if err := <-s.done; !errors.Is(err, transport.ErrPaused) {
		t.Fatalf("Serve after Pause = %v, want ErrPaused", err)
	}
	s.done <- nil // for the cleanup's wait
}

// handOver does in one process what an upgrade in place does across
// two: it duplicates the paused session's descriptors (the handover
// table's copies), ends the old session as the old process's exit would,
// and adopts the copies in a new session on the same device, served
// until the test ends.
func handOver(t *testing.T, s *served) *vfiouser.Session {
	t.Helper()
	h, err := s.sess.Handover()
	if err != nil {
		t.Fatalf("Handover: %v", err)
	}
	dup := func(fd int) int {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	f := os.NewFile(uintptr(dup(h.Conn)), "conn")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var extra []int
	for _, fd := range h.Extra {
		extra = append(extra, dup(fd))
	}
	s.sess.Close()
	ns, err := vfiouser.Transport{}.Adopt(c.(*net.UnixConn), extra, h.State, transport.Device{Regs: s.regs, Config: s.cfg, Memory: s.mem})
	if err != nil {
		t.Fatalf("Adopt: %v\nstate %s", err, h.State)
	}
	done := make(chan error, 1)
	go func() { done <- ns.Serve(context.Background()) }()
	t.Cleanup(func() {
		ns.Close()
		<-done
	})
	return ns.(*vfiouser.Session)
}

// TestHandoverSession: a paused session handed to a new one (an upgrade
// in place) loses nothing its client set up or sent: a request sent
// during the pause is answered by the new session, which knows the DMA
// windows (it unmaps one, and the device's map follows), raises INTx on
// the client's eventfd with the mask the old one left, unmasks on the
// client's unmask eventfd, and takes kicks on the ioeventfd the old one
// handed out; nothing about it is negotiated again.
func TestHandoverSession(t *testing.T) {
	c, s := attach(t)
	c.Write32(abi.RegIntEnable, abi.IntCompletion)
	c.Write32(abi.RegTailShadowLo, 0x3000)
	s.regs.INTx().Signal(abi.IntCompletion)
	if n, err := c.WaitIRQ(30 * time.Second); err != nil || n != 1 {
		t.Fatalf("interrupt before the handover: %d, %v", n, err)
	}
	// Left masked (the guest has not ended the interrupt) across the
	// handover.
	pause(t, s)
	read := make(chan uint32)
	go func() { read <- c.Read32(abi.RegID) }() // waits in the socket
	ns := handOver(t, s)
	if got := <-read; got != abi.IDMagic {
		t.Fatalf("RegID read across the handover = %#x (%v)", got, c.Err())
	}
	s.regs.INTx().Signal(abi.IntCompletion) // still masked: nothing
	if n, _ := c.IRQCount(); n != 0 {
		t.Errorf("%d interrupts while masked across the handover", n)
	}
	if err := c.Resample(); err != nil { // the unmask eventfd, now the new session's
		t.Fatal(err)
	}
	if n, err := c.WaitIRQ(30 * time.Second); err != nil || n != 1 {
		t.Errorf("interrupt after the unmask, the line high: %d, %v", n, err)
	}
	if err := c.Kick(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-s.be.Kicked:
		if got != 0x3000 {
			t.Errorf("kick: shadow %#x, want 0x3000", got)
		}
	case <-time.After(30 * time.Second):
		t.Error("a kick on the handed-over ioeventfd never reached the device")
	}
	s.mem.mu.Lock()
	before := len(s.mem.updates)
	s.mem.mu.Unlock()
	if err := c.DMAUnmap(0, 0xa0000); err != nil {
		t.Fatalf("unmap of a window mapped before the handover: %v", err)
	}
	s.mem.mu.Lock()
	if len(s.mem.updates) != before+1 || s.mem.updates[before] != 1 {
		t.Errorf("guest-memory updates after the unmap %v (had %d), want one more with 1 region", s.mem.updates, before)
	}
	s.mem.mu.Unlock()
	if err := c.DMAUnmap(0, 0xa0000); !errors.Is(err, unix.EINVAL) {
		t.Errorf("second unmap of the window = %v, want EINVAL", err)
	}
	if v, err := c.ConfigRead(mmio.CfgVendorID, 2); err != nil || v != abi.VendorID {
		t.Errorf("vendor after the handover = %#x, %v", v, err)
	}
	_ = ns
}

// TestPauseNeverSplitsAMessage: a pause that comes while a message is
// half read finishes that message (answered by the session that began
// it), then parks before the next.
func TestPauseNeverSplitsAMessage(t *testing.T) {
	cl, dv := socketPair(t)
	s := serve(t, dv)
	payload := vfiouser.Version{Major: vfiouser.VersionMajor, Minor: vfiouser.VersionMinor, Caps: []byte("{}\x00")}.Marshal()
	msg := make([]byte, vfiouser.HeaderSize, vfiouser.HeaderSize+len(payload))
	vfiouser.Header{ID: 1, Cmd: vfiouser.CmdVersion, Size: uint32(len(msg) + len(payload))}.Put(msg)
	msg = append(msg, payload...)
	if _, err := cl.Write(msg[:10]); err != nil {
		t.Fatal(err)
	}
	waitConsumed(t, cl)
	s.sess.Pause()
	if _, err := cl.Write(msg[10:]); err != nil {
		t.Fatal(err)
	}
	m, err := vfiouser.NewWire(cl).Read()
	if err != nil {
		t.Fatalf("reply to the message the pause came into: %v", err)
	}
	if m.Cmd != vfiouser.CmdVersion || m.Flags&vfiouser.FlagError != 0 {
		t.Errorf("reply %+v, want VERSION's", m.Header)
	}
	if err := <-s.done; !errors.Is(err, transport.ErrPaused) {
		t.Errorf("Serve = %v, want ErrPaused after the message", err)
	}
	s.done <- nil
}

// waitConsumed waits until the peer of conn has read everything written
// to it (SIOCOUTQ: bytes still in the socket).
func waitConsumed(t *testing.T, conn *net.UnixConn) {
	t.Helper()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		var ierr error
		rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		if ierr != nil {
			t.Fatal(ierr)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes never read", n)
		}
		runtime.Gosched()
	}
}

// TestAdoptRefusesBadState: a session state that is malformed or does
// not match its descriptors is refused with ErrState, and the connection
// and every descriptor given are closed.
func TestAdoptRefusesBadState(t *testing.T) {
	rw := uint32(vfiouser.DMAFlagRead | vfiouser.DMAFlagWrite)
	ok := func() map[string]any {
		return map[string]any{"versioned": true, "dma": []map[string]any{}, "intx": -1, "intx_masked": false, "unmask": -1, "err": -1, "kick": -1}
	}
	win := func(addr, size uint64, flags uint32, fd int) map[string]any {
		return map[string]any{"addr": addr, "size": size, "offset": 0, "flags": flags, "fd": fd}
	}
	tests := []struct {
		name  string
		extra int
		state func() any
	}{
		{"null", 0, func() any { return nil }},
		{"not an object", 0, func() any { return []int{1} }},
		{"unknown field", 0, func() any { m := ok(); m["bar"] = 1; return m }},
		{"fd out of range", 1, func() any { m := ok(); m["intx"] = 1; return m }},
		{"fd named twice", 1, func() any { m := ok(); m["intx"], m["unmask"] = 0, 0; return m }},
		{"fd named by nothing", 1, func() any { return ok() }},
		{"negative fd", 1, func() any { m := ok(); m["err"] = -2; return m }},
		{"window overlap", 0, func() any {
			m := ok()
			m["dma"] = []map[string]any{win(0, 2<<20, rw, -1), win(1<<20, 4096, rw, -1)}
			return m
		}},
		{"window unaligned", 0, func() any { m := ok(); m["dma"] = []map[string]any{win(100, 4096, rw, -1)}; return m }},
		{"window wraps", 0, func() any { m := ok(); m["dma"] = []map[string]any{win(1<<63, 1<<63, rw, -1)}; return m }},
		{"fd of a read-only window", 1, func() any {
			m := ok()
			m["dma"] = []map[string]any{win(0, 4096, vfiouser.DMAFlagRead, 0)}
			return m
		}},
		{"fds before VERSION", 1, func() any { m := ok(); m["versioned"], m["intx"] = false, 0; return m }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.state())
			if err != nil {
				t.Fatal(err)
			}
			cl, dv := socketPair(t)
			extra := make([]int, tt.extra)
			for i := range extra {
				if extra[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
					t.Fatal(err)
				}
			}
			given := append([]int(nil), extra...)
			s := &served{be: &transporttest.FakeBackend{}, cfg: mmio.NewConfigSpace(), mem: &countingMap{}}
			s.regs = mmio.New(s.be)
			sess, err := vfiouser.Transport{}.Adopt(dv, extra, b, transport.Device{Regs: s.regs, Config: s.cfg, Memory: s.mem})
			if !errors.Is(err, vfiouser.ErrState) {
				if sess != nil {
					sess.Close()
				}
				t.Fatalf("Adopt(%s) = %v, want ErrState", b, err)
			}
			for _, fd := range given {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
					t.Errorf("descriptor %d still open after the refusal", fd)
					unix.Close(fd)
				}
			}
			var one [1]byte
			cl.SetReadDeadline(time.Now().Add(30 * time.Second))
			if n, err := cl.Read(one[:]); n != 0 || err == nil {
				t.Errorf("the client reads %d, %v after the refusal: want the hang-up", n, err)
			}
		})
	}
}

// TestPausedSessionResumes: an abandoned upgrade (or a rollback) resumes
// the paused session itself: the eventfd watchers the pause stopped run
// again (an unmask and a kick signalled during the pause are taken), and
// a request sent during the pause is answered.
func TestPausedSessionResumes(t *testing.T) {
	c, s := attach(t)
	c.Write32(abi.RegIntEnable, abi.IntCompletion)
	c.Write32(abi.RegTailShadowLo, 0x5000)
	s.regs.INTx().Signal(abi.IntCompletion)
	if n, err := c.WaitIRQ(30 * time.Second); err != nil || n != 1 {
		t.Fatalf("interrupt before the pause: %d, %v", n, err)
	}
	s.sess.Pause()
	if err := <-s.done; !errors.Is(err, transport.ErrPaused) {
		t.Fatalf("Serve after Pause = %v, want ErrPaused", err)
	}
	if err := c.Resample(); err != nil { // waits in the eventfd's counter
		t.Fatal(err)
	}
	if err := c.Kick(); err != nil {
		t.Fatal(err)
	}
	read := make(chan uint32)
	go func() { read <- c.Read32(abi.RegID) }()
	s.sess.Resume()
	go func() { s.done <- s.sess.Serve(context.Background()) }()
	if got := <-read; got != abi.IDMagic {
		t.Fatalf("RegID read during the pause = %#x (%v)", got, c.Err())
	}
	if n, err := c.WaitIRQ(30 * time.Second); err != nil || n != 1 {
		t.Errorf("interrupt after the unmask signalled during the pause, the line high: %d, %v", n, err)
	}
	select {
	case got := <-s.be.Kicked:
		if got != 0x5000 {
			t.Errorf("kick: shadow %#x, want 0x5000", got)
		}
	case <-time.After(30 * time.Second):
		t.Error("a kick signalled during the pause never reached the device")
	}
}

package agentchan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"
)

// frameReader is the connection's reader: it keeps the bytes of the frame
// being read, so that a pause between two reads of one frame loses none
// of it (they go to the next process with the connection).
type frameReader struct {
	r      io.Reader
	unread []byte // read before r: a frame begun, handed over or resumed
	since  []byte // read since the last mark
}

func (f *frameReader) Read(p []byte) (int, error) {
	if len(f.unread) > 0 {
		n := copy(p, f.unread)
		f.unread = f.unread[n:]
		f.since = append(f.since, p[:n]...)
		return n, nil
	}
	n, err := f.r.Read(p)
	f.since = append(f.since, p[:n]...)
	return n, err
}

// mark is a frame boundary.
func (f *frameReader) mark() { f.since = f.since[:0] }

// rewind makes the bytes of the frame begun readable again.
func (f *frameReader) rewind() {
	f.unread = append(slices.Clone(f.since), f.unread...)
	f.since = nil
}

// Pause stops the server between two frames for an upgrade in place
// (docs/upgrade.md): no more accepts, and the connection's reader and
// writer return, leaving the sockets open. A migration request waiting
// for the agent's answer refuses the pause.
func (s *Server) Pause(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.pending != nil {
		s.mu.Unlock()
		return errors.New("agentchan: a migration is waiting for the guest agent's answer")
	}
	s.paused = true
	s.resumed = make(chan struct{})
	c := s.cur
	s.mu.Unlock()
	past := time.Unix(1, 0)
	s.l.SetDeadline(past)
	if c == nil {
		return nil
	}
	c.pausing.Store(true)
	c.nc.SetReadDeadline(past)
	close(c.pause)
	done := make(chan struct{})
	go func() {
		c.loops.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("agentchan: pause: %w", ctx.Err())
	}
}

// Handed is what a paused server hands over: its listener, its
// connection (nil when QEMU is not connected), the bytes of a frame begun
// on it, and the guest's pending watch.
type Handed struct {
	Listener *net.UnixListener
	Conn     *net.UnixConn
	Unread   []byte
	Watch    uint64
}

// Handover describes the paused server; the sockets stay its own.
func (s *Server) Handover() Handed {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	h := Handed{Listener: s.l, Watch: s.watch.Load()}
	if c != nil {
		select {
		case <-c.done: // it ended: QEMU reconnects
		default:
			h.Conn = c.nc
			h.Unread = append(slices.Clone(c.in.since), c.in.unread...)
		}
	}
	return h
}

// Unpause undoes Pause (the handover was abandoned).
func (s *Server) Unpause() {
	s.mu.Lock()
	if !s.paused {
		s.mu.Unlock()
		return
	}
	s.paused = false
	close(s.resumed)
	c := s.cur
	s.mu.Unlock()
	s.l.SetDeadline(time.Time{})
	if c == nil {
		return
	}
	select {
	case <-c.done:
		return
	default:
	}
	c.pausing.Store(false)
	c.pause = make(chan struct{})
	c.nc.SetReadDeadline(time.Time{})
	c.in.rewind()
	c.run()
}

// adoptedConn is a connection handed over, served from Serve.
type adoptedConn struct {
	nc     *net.UnixConn
	unread []byte
}

// Adopt returns a Server on what an earlier vgpud handed over (Handed):
// its listener, and its connection, which Serve starts serving first (it
// greets the guest agent, which greets again). The socket file stays.
func Adopt(cfg Config, h Handed) (*Server, error) {
	if cfg.Path == "" || cfg.Done == nil || h.Listener == nil {
		return nil, errors.New("agentchan: adopt: path, Done and a listener are required")
	}
	if fi, err := os.Stat(cfg.Path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("agentchan: adopt: %s is not the socket handed over", cfg.Path)
	}
	s := newServer(cfg, h.Listener)
	s.watch.Store(h.Watch)
	if h.Conn != nil {
		s.adopted = &adoptedConn{nc: h.Conn, unread: h.Unread}
	}
	return s, nil
}

package transport

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// A Pausable session stops between two messages by setting its
// connection's read deadline in the past (Pause): the read of the next
// message's first bytes then fails and Serve returns ErrPaused, the
// message left in the socket for whoever serves next. A deadline that
// expires once a message has begun must not split it: the session's
// reads of the rest of a message go through FinishPaused (the header)
// and NoDeadline (the payload), which clear the deadline and read on;
// Serve sets it again before the next message.

// Pauser is a socket session's pause on its connection: Pause and Resume
// for transport.Pausable, Next before each message a Serve loop reads,
// Paused to tell the pause from a failure once a read failed.
type Pauser struct {
	conn    *net.UnixConn
	pausing atomic.Bool
}

// NewPauser returns the pause of a session on conn.
func NewPauser(conn *net.UnixConn) *Pauser { return &Pauser{conn: conn} }

// Pause makes the next message's read fail: a deadline in the past.
func (p *Pauser) Pause() {
	p.pausing.Store(true)
	p.conn.SetReadDeadline(time.Unix(1, 0))
}

// Resume clears a Pause.
func (p *Pauser) Resume() {
	p.pausing.Store(false)
	p.conn.SetReadDeadline(time.Time{})
}

// Next sets the deadline again before the next message: a message's reads
// (FinishPaused, NoDeadline) cleared it.
func (p *Pauser) Next() {
	if p.pausing.Load() {
		p.conn.SetReadDeadline(time.Unix(1, 0))
	}
}

// Paused reports whether err, a read's failure, is the pause's, not the
// session's end: a deadline while pausing, ctx live and the session not
// closed.
func (p *Pauser) Paused(ctx context.Context, closed *atomic.Bool, err error) bool {
	return p.pausing.Load() && errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil && !closed.Load()
}

// FinishPaused is a header reader's resume function
// (scmrights.ReadHeader): a pause between the bytes of one message's
// header clears the expired deadline of conn so that the read goes on.
func FinishPaused(conn *net.UnixConn) func(error) bool {
	return func(err error) bool {
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
		conn.SetReadDeadline(time.Time{})
		return true
	}
}

// NoDeadline reads the rest of a message from its connection whatever
// the connection's read deadline: a pause never splits a message.
type NoDeadline struct{ Conn *net.UnixConn }

func (r NoDeadline) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		r.Conn.SetReadDeadline(time.Time{})
		return r.Conn.Read(p)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	return n, err
}

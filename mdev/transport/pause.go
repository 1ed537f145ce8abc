package transport

import (
	"errors"
	"net"
	"os"
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

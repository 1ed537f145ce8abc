package wire

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/scmrights"
)

// maxMessage is the largest datagram a peer may send.
const maxMessage = HeaderSize + MaxPayload

// Conn sends and receives messages on one end of a SOCK_SEQPACKET socket
// pair. Send is safe for concurrent use; Recv has one caller at a time.
type Conn struct {
	c *net.UnixConn

	wmu sync.Mutex // serialises Send

	buf [maxMessage + 1]byte // one more, to see a datagram too long
	oob []byte
}

// NewConn returns a Conn on c, which must be a "unixpacket" connection.
func NewConn(c *net.UnixConn) *Conn {
	return &Conn{c: c, oob: make([]byte, unix.CmsgSpace(MaxFDs*4))}
}

// Pair returns a connected pair of SOCK_SEQPACKET sockets: a Conn for this
// process and the other end as an *os.File to hand to a child process (its
// descriptor is close-on-exec here; exec.Cmd.ExtraFiles passes it on).
func Pair() (*Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "worker-protocol")
	theirs := os.NewFile(uintptr(fds[1]), "worker-protocol-peer")
	c, err := FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, nil, err
	}
	return c, theirs, nil
}

// FileConn returns a Conn on the socket f (which the caller still closes).
func FileConn(f *os.File) (*Conn, error) {
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("worker protocol socket: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("worker protocol socket: %T is not a unix socket", fc)
	}
	return NewConn(uc), nil
}

// Send sends m as one datagram with request id id and fds, which must be
// as many as m's type carries. The fds stay the caller's.
func (c *Conn) Send(id uint32, m Msg, fds ...int) error {
	if len(fds) != m.fds() {
		return fmt.Errorf("send %v: %d fds, the message carries %d", m.Type(), len(fds), m.fds())
	}
	b := Marshal(id, m)
	if len(b) > maxMessage {
		return fmt.Errorf("send %v: %d bytes, over %d", m.Type(), len(b), maxMessage)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, _, err := c.c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("send %v: %w", m.Type(), err)
	}
	if n != len(b) {
		return fmt.Errorf("send %v: wrote %d of %d bytes", m.Type(), n, len(b))
	}
	return nil
}

// Recv receives one message. The caller owns the returned fds; on error
// every fd received with the datagram has been closed. A peer that hung
// up yields io.EOF; a datagram that breaks the protocol, an error
// wrapping ErrProtocol.
func (c *Conn) Recv() (Header, Msg, []int, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf[:], c.oob)
	var fds []int
	if oobn > 0 {
		var perr error
		fds, perr = scmrights.Parse(c.oob[:oobn])
		if perr != nil {
			scmrights.Close(fds)
			return Header{}, nil, nil, protoErr("%v", perr)
		}
	}
	fail := func(err error) (Header, Msg, []int, error) {
		scmrights.Close(fds)
		return Header{}, nil, nil, err
	}
	switch {
	case err != nil:
		return fail(fmt.Errorf("receive: %w", err))
	case n == 0 && oobn == 0:
		return fail(io.EOF) // an empty datagram is only what a hang-up reads as
	case flags&unix.MSG_CTRUNC != 0:
		return fail(protoErr("control data truncated: more than %d fds", MaxFDs))
	case flags&unix.MSG_TRUNC != 0 || n > maxMessage:
		return fail(protoErr("datagram over %d bytes", maxMessage))
	}
	h, m, err := Unmarshal(c.buf[:n], len(fds))
	if err != nil {
		return fail(err)
	}
	return h, m, fds, nil
}

// SetReadDeadline bounds Recv: a Recv that times out returns an error
// wrapping os.ErrDeadlineExceeded and has consumed nothing.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

// Raw returns the socket (to hand its descriptor over, docs/upgrade.md).
func (c *Conn) Raw() *net.UnixConn { return c.c }

// Close closes the connection; a Recv in progress returns an error.
func (c *Conn) Close() error { return c.c.Close() }

// IsProtocol reports whether err is a protocol violation.
func IsProtocol(err error) bool { return errors.Is(err, ErrProtocol) }

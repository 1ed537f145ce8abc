package mpqemu

import (
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/scmrights"
	"github.com/vgpud/vgpud/mdev/transport"
)

// oobSize is room for one SCM_RIGHTS message of MaxFDs fds. A peer that
// sends more makes the kernel set MSG_CTRUNC, which ReadMsg rejects.
var oobSize = unix.CmsgSpace(MaxFDs * 4)

// Wire reads and writes messages on one connection with reusable
// buffers: one recvmsg for the header and its fds, one read for the
// payload, one write per message. A Wire is not safe for concurrent use;
// serialise readers and writers (one of each may run concurrently).
type Wire struct {
	conn    *net.UnixConn
	hdr     [HeaderSize]byte
	payload [MaxPayload]byte
	oob     []byte
	out     []byte
}

// NewWire returns a Wire on conn.
func NewWire(conn *net.UnixConn) *Wire {
	return &Wire{conn: conn, oob: make([]byte, oobSize), out: make([]byte, 0, MaxMsgSize)}
}

// Read reads one message. Its Payload aliases the Wire's buffer and is
// valid until the next Read. The caller owns the returned fds; on error
// every received fd has been closed. A peer that hangs up between
// messages yields io.EOF; malformed input yields an error wrapping
// ErrProtocol.
func (w *Wire) Read() (Msg, error) {
	fds, err := scmrights.ReadHeader(w.conn, w.hdr[:], w.oob, MaxFDs, transport.FinishPaused(w.conn), protoErr)
	if err != nil {
		return Msg{}, err
	}
	fail := func(err error) (Msg, error) {
		scmrights.Close(fds)
		return Msg{}, err
	}
	c, size := parseHeader(w.hdr[:])
	if err := checkHeader(c, size); err != nil {
		return fail(err)
	}
	p := w.payload[:size]
	if _, err := io.ReadFull(transport.NoDeadline{Conn: w.conn}, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fail(fmt.Errorf("read %v payload: %w", c, err))
	}
	if len(fds) > MaxFDs || !fdCountOK(c, len(fds)) {
		return fail(protoErr("%v: %d fds", c, len(fds)))
	}
	return Msg{Cmd: c, Payload: p, FDs: fds}, nil
}

// Write sends one message with a single sendmsg (write when it has no
// fds). It does not validate m, so tests can send malformed messages;
// the fds are not closed.
func (w *Wire) Write(m Msg) error {
	w.out = m.Encode(w.out[:0])
	return w.send(m.FDs)
}

// WriteRet sends a RET reply carrying v.
func (w *Wire) WriteRet(v uint64) error {
	w.out = w.out[:HeaderSize+RetSize]
	putHeader(w.out, CmdRet, RetSize)
	le.PutUint64(w.out[HeaderSize:], v)
	return w.send(nil)
}

// WriteBar sends a BAR_READ or BAR_WRITE message.
func (w *Wire) WriteBar(c Cmd, m BarMsg) error {
	w.out = w.out[:HeaderSize+BarMsgSize]
	putHeader(w.out, c, BarMsgSize)
	m.put(w.out[HeaderSize:])
	return w.send(nil)
}

func (w *Wire) send(fds []int) error {
	if err := scmrights.Send(w.conn, w.out, fds); err != nil {
		return fmt.Errorf("write %v: %w", Cmd(int32(le.Uint32(w.out))), err)
	}
	return nil
}

// ReadMsg reads one message from conn; see Wire.Read. The payload is a
// fresh copy.
func ReadMsg(conn *net.UnixConn) (Msg, error) {
	m, err := NewWire(conn).Read()
	if err != nil {
		return Msg{}, err
	}
	m.Payload = append([]byte(nil), m.Payload...)
	return m, nil
}

// WriteMsg writes m to conn; see Wire.Write.
func WriteMsg(conn *net.UnixConn, m Msg) error {
	return NewWire(conn).Write(m)
}

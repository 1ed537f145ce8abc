package vfiouser

import (
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/scmrights"
	"github.com/vgpud/vgpud/mdev/transport"
)

// oobSize is room for one SCM_RIGHTS message of MaxFDs fds; a peer that
// sends more makes the kernel set MSG_CTRUNC, which Read refuses.
var oobSize = unix.CmsgSpace(MaxFDs * 4)

// Msg is one message: its header, its payload and the fds that came with
// it (owned by the receiver).
type Msg struct {
	Header
	Payload []byte
	FDs     []int
}

// Wire reads and writes messages on one connection with reusable
// buffers: a recvmsg for the header and its fds, a read for the payload,
// one sendmsg per message. A Wire is not safe for concurrent use;
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
	return &Wire{conn: conn, oob: make([]byte, oobSize), out: make([]byte, 0, HeaderSize+MaxPayload)}
}

// Read reads one message. Its Payload aliases the Wire's buffer and is
// valid until the next Read. On error every fd received has been closed.
// A peer that hangs up between messages yields io.EOF; malformed framing
// an error wrapping ErrProtocol.
func (w *Wire) Read() (Msg, error) {
	// A pause (Session.Pause) never splits a message: see transport.NoDeadline.
	fds, err := scmrights.ReadHeader(w.conn, w.hdr[:], w.oob, MaxFDs, transport.FinishPaused(w.conn), protoErr)
	if err != nil {
		return Msg{}, err
	}
	fail := func(err error) (Msg, error) {
		scmrights.Close(fds)
		return Msg{}, err
	}
	h := ParseHeader(w.hdr[:])
	if err := h.Check(); err != nil {
		return fail(err)
	}
	p := w.payload[:h.Size-HeaderSize]
	if _, err := io.ReadFull(transport.NoDeadline{Conn: w.conn}, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fail(fmt.Errorf("read %v payload: %w", h.Cmd, err))
	}
	if len(fds) > MaxFDs {
		return fail(protoErr("%v: %d fds", h.Cmd, len(fds)))
	}
	return Msg{Header: h, Payload: p, FDs: fds}, nil
}

// Write sends one message: h (its Size is set here) followed by the
// parts of the payload, with fds (not closed). It does not validate h,
// so tests can send malformed messages.
func (w *Wire) Write(h Header, fds []int, payload ...[]byte) error {
	w.out = w.out[:HeaderSize]
	for _, p := range payload {
		w.out = append(w.out, p...)
	}
	h.Size = uint32(len(w.out))
	h.Put(w.out)
	return w.send(h.Cmd, fds)
}

// WriteRaw sends b as is, with fds: for tests playing a hostile peer.
func (w *Wire) WriteRaw(b []byte, fds []int) error {
	w.out = append(w.out[:0], b...)
	return w.send(0, fds)
}

func (w *Wire) send(c Cmd, fds []int) error {
	if err := scmrights.Send(w.conn, w.out, fds); err != nil {
		return fmt.Errorf("write %v: %w", c, err)
	}
	return nil
}

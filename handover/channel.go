package handover

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Kind is a message on the handover channel.
type Kind byte

// The messages, in the order they are exchanged (docs/upgrade.md).
const (
	KindHello  Kind = 'H' // new -> old: Hello
	KindFDs    Kind = 'D' // old -> new: descriptors of the State that follows
	KindState  Kind = 'S' // old -> new: State, with the last descriptors
	KindReady  Kind = 'R' // new -> old: built, not serving
	KindFail   Kind = 'F' // new -> old: Failure; the old process resumes (protocol 2: also on probation)
	KindCommit Kind = 'C' // old -> new: serve (protocol 2: Commit, the probation begins); protocol 1: the old process exits
	KindAbort  Kind = 'A' // old -> new: exit; the old process resumes

	// Protocol 2, on probation (after the commit, docs/upgrade.md).
	KindHealthy  Kind = 'K' // new -> old: it serves and its own health check passed
	KindStopping Kind = 'X' // new -> old: it was asked to stop (SIGTERM): the probation ends, nothing rolls back
	KindRelease  Kind = 'E' // old -> new: the probation is over; the old process exits, the new one serves alone
)

// The exchange protocols (docs/upgrade.md). A process speaks every one
// from Protocol1 to Protocol; the old process picks the highest both
// speak (Negotiate) and names it in the Commit.
const (
	// Protocol1: Hello, State, Ready or Fail, Commit or Abort; the old
	// process exits at the commit.
	Protocol1 = 1
	// Protocol2 adds the probation: after the commit the old process
	// keeps what it handed over, paused, until the new one has served
	// for Commit.Probation and passed its health check (KindHealthy); if
	// the new process dies first, the old one serves again.
	Protocol2 = 2
	// Protocol is the highest this vgpud speaks.
	Protocol = Protocol2
)

// Hello is the new process's greeting.
type Hello struct {
	PID     int `json:"pid"`
	Version int `json:"version"` // the State version it reads
	// Protocols are the exchange protocols it speaks; none (a vgpud that
	// predates protocol 2): Protocol1 alone.
	Protocols []int `json:"protocols,omitempty"`
}

// Speaks is the Hello of this vgpud's protocols.
func Speaks() []int {
	out := make([]int, 0, Protocol)
	for p := Protocol1; p <= Protocol; p++ {
		out = append(out, p)
	}
	return out
}

// Negotiate is the protocol of an exchange with the new process that
// said h: the highest both speak; ErrChannel when there is none (a peer
// too new or too old: the upgrade is refused before anything pauses).
func Negotiate(h Hello) (int, error) {
	theirs := h.Protocols
	if len(theirs) == 0 {
		theirs = []int{Protocol1}
	}
	best := 0
	for _, p := range theirs {
		if p >= Protocol1 && p <= Protocol && p > best {
			best = p
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("%w: no common exchange protocol: the new vgpud speaks %v, this one %v", ErrChannel, theirs, Speaks())
	}
	return best, nil
}

// Commit is the body of KindCommit from protocol 2 on (a protocol 1
// commit has none).
type Commit struct {
	Protocol int `json:"protocol"`
	// Probation is how long the old process stands by after the commit
	// (at least; it also waits for KindHealthy); 0: it exits at once.
	Probation time.Duration `json:"probation_ns"`
}

// DecodeCommit reads a KindCommit body: none is protocol 1's commit.
// A protocol the new process did not offer (speaks: its Hello's) is an
// error: it cannot follow the old process.
func DecodeCommit(body []byte, speaks []int) (Commit, error) {
	if len(body) == 0 {
		return Commit{Protocol: Protocol1}, nil
	}
	var c Commit
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Commit{}, fmt.Errorf("%w: commit: %v", ErrChannel, err)
	}
	if c.Probation < 0 {
		return Commit{}, fmt.Errorf("%w: commit: probation %v", ErrChannel, c.Probation)
	}
	for _, p := range speaks {
		if p == c.Protocol {
			return c, nil
		}
	}
	return Commit{}, fmt.Errorf("%w: commit in protocol %d, this vgpud speaks %v", ErrChannel, c.Protocol, speaks)
}

// Failure says why the new process cannot take over.
type Failure struct {
	Error string `json:"error"`
}

// fdsPerMessage bounds the descriptors of one datagram (the kernel's
// SCM_MAX_FD is 253).
const fdsPerMessage = 200

// maxMessage bounds one datagram.
const maxMessage = 1 + MaxStateBytes

// ErrChannel wraps a broken exchange (a message out of order, malformed).
var ErrChannel = errors.New("handover channel")

// Channel is one end of the handover socket pair (SOCK_SEQPACKET).
type Channel struct {
	c   *net.UnixConn
	buf []byte
	oob []byte
}

// Pair returns the old process's end and the new process's end as a file
// to pass to it (close-on-exec here; exec.Cmd.ExtraFiles passes it on).
func Pair() (*Channel, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("handover: socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "handover")
	theirs := os.NewFile(uintptr(fds[1]), "handover-peer")
	c, err := FileChannel(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, nil, err
	}
	return c, theirs, nil
}

// FileChannel returns a Channel on the socket f (the caller still closes f).
func FileChannel(f *os.File) (*Channel, error) {
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("handover channel: %w", err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok {
		fc.Close()
		return nil, fmt.Errorf("handover channel: %T is not a unix socket", fc)
	}
	return &Channel{c: uc, oob: make([]byte, unix.CmsgSpace(fdsPerMessage*4))}, nil
}

// Close closes the channel.
func (c *Channel) Close() error { return c.c.Close() }

// SetDeadline bounds the exchange.
func (c *Channel) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// SendState sends st (Encode: its version set, its size checked) with
// its descriptors.
func (c *Channel) SendState(st State, fds []int) error {
	b, err := Encode(st)
	if err != nil {
		return err
	}
	return c.send(KindState, b, fds)
}

// Send sends a message of kind k with body (JSON; nil: none) and fds
// (which stay the caller's), in as many datagrams as the fds need.
func (c *Channel) Send(k Kind, body any, fds []int) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return fmt.Errorf("handover: send %c: %w", k, err)
		}
	}
	return c.send(k, b, fds)
}

// send sends body as a message of kind k, its fds in as many datagrams
// as they need.
func (c *Channel) send(k Kind, body []byte, fds []int) error {
	for len(fds) > fdsPerMessage {
		if err := c.sendOne(KindFDs, nil, fds[:fdsPerMessage]); err != nil {
			return err
		}
		fds = fds[fdsPerMessage:]
	}
	return c.sendOne(k, body, fds)
}

func (c *Channel) sendOne(k Kind, body []byte, fds []int) error {
	msg := append([]byte{byte(k)}, body...)
	if len(msg) > maxMessage {
		return fmt.Errorf("handover: send %c: %d bytes", k, len(msg))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return fmt.Errorf("handover: send %c: %w", k, err)
	}
	if n != len(msg) {
		return fmt.Errorf("handover: send %c: wrote %d of %d bytes", k, n, len(msg))
	}
	return nil
}

// Recv receives the next message other than KindFDs, with every
// descriptor that came since the last one (the caller owns them, also on
// error: they are closed then). A hang-up is io.EOF.
func (c *Channel) Recv() (Kind, []byte, []int, error) {
	if c.buf == nil {
		c.buf = make([]byte, maxMessage+1)
	}
	var fds []int
	fail := func(err error) (Kind, []byte, []int, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return 0, nil, nil, err
	}
	for {
		n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf, c.oob)
		if oobn > 0 {
			got, perr := rights(c.oob[:oobn])
			fds = append(fds, got...)
			if perr != nil {
				return fail(perr)
			}
		}
		switch {
		case err != nil:
			return fail(fmt.Errorf("handover: receive: %w", err))
		case n == 0 && oobn == 0:
			return fail(io.EOF)
		case flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 || n > maxMessage:
			return fail(fmt.Errorf("%w: truncated message", ErrChannel))
		case len(fds) > MaxFDs:
			return fail(fmt.Errorf("%w: over %d descriptors", ErrChannel, MaxFDs))
		}
		k := Kind(c.buf[0])
		if k == KindFDs {
			continue
		}
		return k, append([]byte(nil), c.buf[1:n]...), fds, nil
	}
}

func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control data: %v", ErrChannel, err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		fds = append(fds, got...)
		if err != nil {
			return fds, fmt.Errorf("%w: SCM_RIGHTS: %v", ErrChannel, err)
		}
	}
	return fds, nil
}

// Expect receives the next message and requires kind k (KindFail is
// turned into its error), decoding its body into v (nil: ignored). A
// message that carries descriptors it should not has them closed.
func (c *Channel) Expect(k Kind, v any) error {
	got, body, fds, err := c.Recv()
	if err != nil {
		return err
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	if got == KindFail && k != KindFail {
		var f Failure
		if json.Unmarshal(body, &f) != nil || f.Error == "" {
			f.Error = "no reason given"
		}
		return fmt.Errorf("the new vgpud failed: %s", f.Error)
	}
	if got != k {
		return fmt.Errorf("%w: got message %q, want %q", ErrChannel, got, k)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			return fmt.Errorf("%w: %c: %v", ErrChannel, k, err)
		}
	}
	return nil
}

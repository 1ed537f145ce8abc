package agentmsg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

var le = binary.LittleEndian

// Protocol versions (docs/agent-channel.md "Versioning"). Hello carries the
// range a peer speaks; both sides then use the highest common version.
const (
	Version    = 1
	MinVersion = 1
)

// Framing constants (docs/agent-channel.md "Frames").
const (
	Magic      = 0x4756 // "VG" little-endian
	HeaderSize = 8
	// MaxPayload bounds every payload; a header announcing more is
	// malformed and the stream cannot be resynchronised: drop it.
	MaxPayload = 4096
	// MaxIdentLen bounds Hello.Ident.
	MaxIdentLen = 64
)

// Errors callers tell apart.
var (
	// ErrMalformed: the bytes are not a valid frame; the connection should
	// be dropped (a byte stream cannot be resynchronised).
	ErrMalformed = errors.New("malformed agent message")
	// ErrVersion: the peers share no protocol version.
	ErrVersion = errors.New("no common agent protocol version")
)

// Type identifies a message (docs/agent-channel.md "Messages").
type Type uint16

// Message types. 0x0100-0x01ff are reserved for migration and 0x0200-0x02ff
// for reconfiguration messages of later versions; receivers skip them.
const (
	TypeHello      Type = 1 // both directions: versions and identity
	TypeWatch      Type = 2 // guest -> host: wake me when a command completes
	TypeCompleted  Type = 3 // host -> guest: commands completed so far
	TypeHints      Type = 4 // host -> guest: vCPU scheduling hints
	TypeGuestStats Type = 5 // guest -> host: the guest's /proc/stat
	TypePing       Type = 6 // both: liveness; answered with Pong
	TypePong       Type = 7

	TypeMigrationFirst Type = 0x0100
	TypeMigrationLast  Type = 0x01ff
	TypeReconfigFirst  Type = 0x0200
	TypeReconfigLast   Type = 0x02ff
)

var typeNames = map[Type]string{
	TypeHello: "hello", TypeWatch: "watch", TypeCompleted: "completed", TypeHints: "hints",
	TypeGuestStats: "guest-stats", TypePing: "ping", TypePong: "pong",
}

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	switch {
	case t >= TypeMigrationFirst && t <= TypeMigrationLast:
		return fmt.Sprintf("migration-%#x", uint16(t))
	case t >= TypeReconfigFirst && t <= TypeReconfigLast:
		return fmt.Sprintf("reconfig-%#x", uint16(t))
	}
	return fmt.Sprintf("type-%#x", uint16(t))
}

// Message is one decoded frame.
type Message interface {
	Type() Type
	// size is the payload length; put writes it into b[:size()].
	size() int
	put(b []byte)
}

// Hello opens a connection in each direction (docs/agent-channel.md
// "Hello").
//
//	off size field
//	0   2    min version spoken
//	2   2    max version spoken (or, from the host once chosen, the version in use)
//	4   4    feature bits, Feature*
//	8   2    ident length n (<= MaxIdentLen)
//	10  n    ident: the agent's name or the instance UUID, UTF-8
type Hello struct {
	MinVersion uint16
	MaxVersion uint16
	Features   uint32
	Ident      string
}

// Hello feature bits.
const (
	// FeatureWatch: the host answers Watch with Completed.
	FeatureWatch = 1 << 0
	// FeatureHints: the host sends Hints.
	FeatureHints = 1 << 1
	// FeatureStats: the guest sends GuestStats.
	FeatureStats = 1 << 2
)

// Watch asks the host to send Completed once command Index (the ring's
// free-running command index) has completed (docs/agent-channel.md
// "Watch and Completed"). A later Watch replaces an earlier one when its
// index is lower; the host keeps only the lowest index not yet reached.
//
//	off size field
//	0   4    index
type Watch struct{ Index uint32 }

// Completed tells the guest how many commands have completed since the
// ring was enabled: every command with index < Done is complete.
//
//	off size field
//	0   4    done
type Completed struct{ Done uint32 }

// Hints are the host's view of the guest's vCPU threads over the last
// period (docs/agent-channel.md "Hints"; the estimator is described there).
//
//	off size field
//	0   8    period_ns: length of the sampling window
//	8   8    mean_slice_ns: mean time a vCPU ran per scheduling (0: unknown)
//	16  4    wait_ppm: run-queue wait / (run + wait), parts per million
//	20  4    preempt_ppm: slices that ended in preemption, parts per million
//	24  4    vcpus: vCPU threads seen
//	28  4    reserved, 0
type Hints struct {
	PeriodNs    uint64
	MeanSliceNs uint64
	WaitPPM     uint32
	PreemptPPM  uint32
	VCPUs       uint32
	_           uint32
}

// GuestStats are the aggregate "cpu" line of the guest's /proc/stat, in
// USER_HZ ticks, plus the guest's uptime (docs/agent-channel.md
// "GuestStats").
//
//	off size field
//	0   8    uptime_ns
//	8   8*8  user, nice, system, idle, iowait, irq, softirq, steal
type GuestStats struct {
	UptimeNs                                              uint64
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Ping asks for a Pong with the same cookie.
//
//	off size field
//	0   8    cookie
type Ping struct{ Cookie uint64 }

// Pong answers a Ping.
type Pong struct{ Cookie uint64 }

// Unknown is a frame of a type this version does not know (including the
// reserved migration and reconfiguration ranges). Receivers skip it.
type Unknown struct {
	T       Type
	Payload []byte
}

func (*Hello) Type() Type      { return TypeHello }
func (*Watch) Type() Type      { return TypeWatch }
func (*Completed) Type() Type  { return TypeCompleted }
func (*Hints) Type() Type      { return TypeHints }
func (*GuestStats) Type() Type { return TypeGuestStats }
func (*Ping) Type() Type       { return TypePing }
func (*Pong) Type() Type       { return TypePong }
func (u *Unknown) Type() Type  { return u.T }

const (
	helloFixed     = 10
	watchSize      = 4
	completedSize  = 4
	hintsSize      = 32
	guestStatsSize = 72
	pingSize       = 8
)

func (m *Hello) size() int { return helloFixed + min(len(m.Ident), MaxIdentLen) }
func (m *Hello) put(b []byte) {
	id := m.Ident
	if len(id) > MaxIdentLen {
		id = id[:MaxIdentLen]
	}
	le.PutUint16(b[0:], m.MinVersion)
	le.PutUint16(b[2:], m.MaxVersion)
	le.PutUint32(b[4:], m.Features)
	le.PutUint16(b[8:], uint16(len(id)))
	copy(b[10:], id)
}

func (*Watch) size() int          { return watchSize }
func (m *Watch) put(b []byte)     { le.PutUint32(b, m.Index) }
func (*Completed) size() int      { return completedSize }
func (m *Completed) put(b []byte) { le.PutUint32(b, m.Done) }
func (*Hints) size() int          { return hintsSize }
func (m *Hints) put(b []byte) {
	le.PutUint64(b[0:], m.PeriodNs)
	le.PutUint64(b[8:], m.MeanSliceNs)
	le.PutUint32(b[16:], m.WaitPPM)
	le.PutUint32(b[20:], m.PreemptPPM)
	le.PutUint32(b[24:], m.VCPUs)
	le.PutUint32(b[28:], 0)
}
func (*GuestStats) size() int { return guestStatsSize }
func (m *GuestStats) put(b []byte) {
	for i, v := range []uint64{m.UptimeNs, m.User, m.Nice, m.System, m.Idle, m.IOWait, m.IRQ, m.SoftIRQ, m.Steal} {
		le.PutUint64(b[8*i:], v)
	}
}
func (*Ping) size() int         { return pingSize }
func (m *Ping) put(b []byte)    { le.PutUint64(b, m.Cookie) }
func (*Pong) size() int         { return pingSize }
func (m *Pong) put(b []byte)    { le.PutUint64(b, m.Cookie) }
func (u *Unknown) size() int    { return min(len(u.Payload), MaxPayload) }
func (u *Unknown) put(b []byte) { copy(b, u.Payload) }

// Append encodes m as one frame appended to b.
func Append(b []byte, m Message) []byte {
	n := m.size()
	start := len(b)
	b = append(b, make([]byte, HeaderSize+n)...)
	h := b[start:]
	le.PutUint16(h[0:], Magic)
	le.PutUint16(h[2:], uint16(m.Type()))
	le.PutUint32(h[4:], uint32(n))
	m.put(h[HeaderSize:])
	return b
}

// Marshal encodes m as one frame.
func Marshal(m Message) []byte { return Append(nil, m) }

// Header is a decoded frame header.
type Header struct {
	Type Type
	Len  uint32
}

// ParseHeader checks a frame header (at least HeaderSize bytes).
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("header: %d bytes: %w", len(b), ErrMalformed)
	}
	if m := le.Uint16(b[0:]); m != Magic {
		return Header{}, fmt.Errorf("header: magic %#04x: %w", m, ErrMalformed)
	}
	h := Header{Type: Type(le.Uint16(b[2:])), Len: le.Uint32(b[4:])}
	if h.Len > MaxPayload {
		return Header{}, fmt.Errorf("header: %v payload of %d bytes (max %d): %w", h.Type, h.Len, MaxPayload, ErrMalformed)
	}
	return h, nil
}

// Decode decodes one whole frame. It returns the message and the bytes it
// used; on error the message is nil.
func Decode(b []byte) (Message, int, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, 0, err
	}
	n := HeaderSize + int(h.Len)
	if len(b) < n {
		return nil, 0, fmt.Errorf("%v: %d of %d bytes: %w", h.Type, len(b), n, io.ErrUnexpectedEOF)
	}
	m, err := DecodePayload(h.Type, b[HeaderSize:n])
	if err != nil {
		return nil, 0, err
	}
	return m, n, nil
}

// DecodePayload decodes the payload p of a frame of type t.
func DecodePayload(t Type, p []byte) (Message, error) {
	if len(p) > MaxPayload {
		return nil, fmt.Errorf("%v: payload of %d bytes: %w", t, len(p), ErrMalformed)
	}
	exact := func(n int) error {
		if len(p) != n {
			return fmt.Errorf("%v: payload of %d bytes, want %d: %w", t, len(p), n, ErrMalformed)
		}
		return nil
	}
	switch t {
	case TypeHello:
		if len(p) < helloFixed {
			return nil, fmt.Errorf("hello: %d bytes: %w", len(p), ErrMalformed)
		}
		m := &Hello{MinVersion: le.Uint16(p[0:]), MaxVersion: le.Uint16(p[2:]), Features: le.Uint32(p[4:])}
		n := int(le.Uint16(p[8:]))
		if n > MaxIdentLen || len(p) != helloFixed+n {
			return nil, fmt.Errorf("hello: ident of %d bytes in a %d-byte payload: %w", n, len(p), ErrMalformed)
		}
		if m.MinVersion == 0 || m.MinVersion > m.MaxVersion {
			return nil, fmt.Errorf("hello: versions %d..%d: %w", m.MinVersion, m.MaxVersion, ErrMalformed)
		}
		m.Ident = strings.ToValidUTF8(string(p[10:]), "?")
		return m, nil
	case TypeWatch:
		if err := exact(watchSize); err != nil {
			return nil, err
		}
		return &Watch{Index: le.Uint32(p)}, nil
	case TypeCompleted:
		if err := exact(completedSize); err != nil {
			return nil, err
		}
		return &Completed{Done: le.Uint32(p)}, nil
	case TypeHints:
		if err := exact(hintsSize); err != nil {
			return nil, err
		}
		m := &Hints{PeriodNs: le.Uint64(p[0:]), MeanSliceNs: le.Uint64(p[8:]), WaitPPM: le.Uint32(p[16:]),
			PreemptPPM: le.Uint32(p[20:]), VCPUs: le.Uint32(p[24:])}
		if m.WaitPPM > 1_000_000 || m.PreemptPPM > 1_000_000 || le.Uint32(p[28:]) != 0 {
			return nil, fmt.Errorf("hints: wait %d ppm, preempt %d ppm, reserved %#x: %w", m.WaitPPM, m.PreemptPPM, le.Uint32(p[28:]), ErrMalformed)
		}
		return m, nil
	case TypeGuestStats:
		if err := exact(guestStatsSize); err != nil {
			return nil, err
		}
		var v [9]uint64
		for i := range v {
			v[i] = le.Uint64(p[8*i:])
		}
		return &GuestStats{UptimeNs: v[0], User: v[1], Nice: v[2], System: v[3], Idle: v[4], IOWait: v[5], IRQ: v[6], SoftIRQ: v[7], Steal: v[8]}, nil
	case TypePing, TypePong:
		if err := exact(pingSize); err != nil {
			return nil, err
		}
		if t == TypePing {
			return &Ping{Cookie: le.Uint64(p)}, nil
		}
		return &Pong{Cookie: le.Uint64(p)}, nil
	}
	var cp []byte
	if len(p) > 0 {
		cp = append(cp, p...)
	}
	return &Unknown{T: t, Payload: cp}, nil
}

// Negotiate picks the protocol version for a peer's Hello: the highest
// version both speak.
func Negotiate(peer *Hello) (uint16, error) {
	v := min(uint16(Version), peer.MaxVersion)
	if v < MinVersion || v < peer.MinVersion {
		return 0, fmt.Errorf("peer speaks %d..%d, we speak %d..%d: %w", peer.MinVersion, peer.MaxVersion, MinVersion, Version, ErrVersion)
	}
	return v, nil
}

// Reader reads frames from a byte stream.
type Reader struct {
	r   io.Reader
	buf [HeaderSize + MaxPayload]byte
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Read reads one frame. A malformed frame returns an error wrapping
// ErrMalformed: the stream cannot be resynchronised and should be closed.
func (r *Reader) Read() (Message, error) {
	if _, err := io.ReadFull(r.r, r.buf[:HeaderSize]); err != nil {
		return nil, err
	}
	h, err := ParseHeader(r.buf[:HeaderSize])
	if err != nil {
		return nil, err
	}
	p := r.buf[HeaderSize : HeaderSize+int(h.Len)]
	if _, err := io.ReadFull(r.r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %v payload: %w", h.Type, err)
	}
	return DecodePayload(h.Type, p)
}

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

// Message types. 0x0100-0x01ff are migration messages (those not defined
// here are reserved) and 0x0200-0x02ff are reserved for reconfiguration
// messages of later versions; receivers skip types they do not know.
const (
	TypeHello      Type = 1 // both directions: versions and identity
	TypeWatch      Type = 2 // guest -> host: wake me when a command completes
	TypeCompleted  Type = 3 // host -> guest: commands completed so far
	TypeHints      Type = 4 // host -> guest: vCPU scheduling hints
	TypeGuestStats Type = 5 // guest -> host: the guest's /proc/stat
	TypePing       Type = 6 // both: liveness; answered with Pong
	TypePong       Type = 7
	TypeStopping   Type = 8 // host -> guest: vgpud is stopping

	// Migration (docs/agent-channel.md "Migration").
	TypeQuiesce  Type = 0x0100 // host -> guest: drain and stop using the vGPU
	TypeQuiesced Type = 0x0101 // guest -> host: answer to Quiesce
	TypeResume   Type = 0x0102 // host -> guest: reopen the vGPU and continue
	TypeResumed  Type = 0x0103 // guest -> host: answer to Resume

	TypeMigrationFirst Type = 0x0100
	TypeMigrationLast  Type = 0x01ff
	TypeReconfigFirst  Type = 0x0200
	TypeReconfigLast   Type = 0x02ff
)

var typeNames = map[Type]string{
	TypeHello: "hello", TypeWatch: "watch", TypeCompleted: "completed", TypeHints: "hints",
	TypeGuestStats: "guest-stats", TypePing: "ping", TypePong: "pong", TypeStopping: "stopping",
	TypeQuiesce: "quiesce", TypeQuiesced: "quiesced", TypeResume: "resume", TypeResumed: "resumed",
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
	// FeatureMigration: from the guest, some program answers Quiesce and
	// Resume (a guest without it still answers them, with programs 0);
	// from the host, it may send them.
	FeatureMigration = 1 << 3
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

// Stopping tells the guest that vgpud is stopping (docs/agent-channel.md
// "Stopping"): it finishes the commands it has fetched for at most
// DrainMs, fetches no more, and then the device is gone until a vgpud on
// the same run directory re-plugs it without its state (Resume with
// ResumeLost). Nothing answers it.
//
//	off size field
//	0   4    drain_ms: how long vgpud lets fetched commands finish
//	4   4    reserved, 0
type Stopping struct {
	DrainMs uint32
	_       uint32
}

// Quiesce asks the guest to quiesce its vGPU users before the host takes
// the device's final state (docs/agent-channel.md "Migration"): every
// program drains its in-flight commands, stops touching the device (unmaps
// BAR0) and holds further calls until Resume. The guest answers Quiesced
// with the same cookie.
//
//	off size field
//	0   8    cookie
//	8   4    deadline_ms: how long the guest may take (0: the guest's default)
//	12  4    reserved, 0
type Quiesce struct {
	Cookie     uint64
	DeadlineMs uint32
	_          uint32
}

// MigrationStatus is the status of a Quiesced or Resumed answer.
type MigrationStatus uint32

// Migration statuses. A receiver treats a value it does not know as
// MigrationFailed.
const (
	MigrationOK      MigrationStatus = 0 // every program did it
	MigrationTimeout MigrationStatus = 1 // some program did not finish by the deadline
	MigrationFailed  MigrationStatus = 2 // some program failed
)

var migrationStatusNames = [...]string{"ok", "timeout", "failed"}

func (s MigrationStatus) String() string {
	if int(s) < len(migrationStatusNames) {
		return migrationStatusNames[s]
	}
	return fmt.Sprintf("migration-status-%d", uint32(s))
}

// Quiesced answers Quiesce.
//
//	off size field
//	0   8    cookie of the Quiesce
//	8   4    status, MigrationStatus
//	12  4    programs: how many programs quiesced
type Quiesced struct {
	Cookie   uint64
	Status   MigrationStatus
	Programs uint32
}

// Resume flags.
const (
	// ResumeReplugged: the vGPU was hot-unplugged and a new one (possibly
	// another device model) plugged at the same slot; without it the
	// migration was abandoned before the unplug and the same device is
	// still present. Programs reopen the device the same way in both cases.
	ResumeReplugged = 1 << 0
	// ResumeLost: the device's state did not survive (vgpud restarted, or
	// crashed with its workers): the device at the slot starts empty.
	// Programs must open it anew (a reset) and make their buffers and
	// programs again; handles they held mean nothing there. Sent with
	// ResumeReplugged, to programs that were not quiesced.
	ResumeLost = 1 << 1
)

// Resume tells the guest that the host has restored the vGPU's state (or
// abandoned the migration): every quiesced program waits for the device,
// maps BAR0 again, checks it and continues. The guest answers Resumed.
//
//	off size field
//	0   8    cookie
//	8   4    flags, Resume*
//	12  4    deadline_ms: how long the guest may take (0: the guest's default)
type Resume struct {
	Cookie     uint64
	Flags      uint32
	DeadlineMs uint32
}

// Resumed answers Resume.
//
//	off size field
//	0   8    cookie of the Resume
//	8   4    status, MigrationStatus
//	12  4    programs: how many programs resumed
type Resumed struct {
	Cookie   uint64
	Status   MigrationStatus
	Programs uint32
}

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
func (*Stopping) Type() Type   { return TypeStopping }
func (*Quiesce) Type() Type    { return TypeQuiesce }
func (*Quiesced) Type() Type   { return TypeQuiesced }
func (*Resume) Type() Type     { return TypeResume }
func (*Resumed) Type() Type    { return TypeResumed }
func (u *Unknown) Type() Type  { return u.T }

const (
	helloFixed     = 10
	watchSize      = 4
	completedSize  = 4
	hintsSize      = 32
	guestStatsSize = 72
	pingSize       = 8
	stoppingSize   = 8
	migrationSize  = 16 // Quiesce, Quiesced, Resume, Resumed
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
func (*Ping) size() int      { return pingSize }
func (m *Ping) put(b []byte) { le.PutUint64(b, m.Cookie) }
func (*Pong) size() int      { return pingSize }
func (m *Pong) put(b []byte) { le.PutUint64(b, m.Cookie) }
func (*Stopping) size() int  { return stoppingSize }
func (m *Stopping) put(b []byte) {
	le.PutUint32(b[0:], m.DrainMs)
	le.PutUint32(b[4:], 0)
}
func (*Quiesce) size() int      { return migrationSize }
func (m *Quiesce) put(b []byte) { putMigration(b, m.Cookie, m.DeadlineMs, 0) }
func (*Quiesced) size() int     { return migrationSize }
func (m *Quiesced) put(b []byte) {
	putMigration(b, m.Cookie, uint32(m.Status), m.Programs)
}
func (*Resume) size() int       { return migrationSize }
func (m *Resume) put(b []byte)  { putMigration(b, m.Cookie, m.Flags, m.DeadlineMs) }
func (*Resumed) size() int      { return migrationSize }
func (m *Resumed) put(b []byte) { putMigration(b, m.Cookie, uint32(m.Status), m.Programs) }
func (u *Unknown) size() int    { return min(len(u.Payload), MaxPayload) }
func (u *Unknown) put(b []byte) { copy(b, u.Payload) }

// putMigration writes the common layout of the migration messages: a u64
// cookie and two u32 words.
func putMigration(b []byte, cookie uint64, w0, w1 uint32) {
	le.PutUint64(b[0:], cookie)
	le.PutUint32(b[8:], w0)
	le.PutUint32(b[12:], w1)
}

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
	case TypeStopping:
		if err := exact(stoppingSize); err != nil {
			return nil, err
		}
		if r := le.Uint32(p[4:]); r != 0 {
			return nil, fmt.Errorf("stopping: reserved %#x: %w", r, ErrMalformed)
		}
		return &Stopping{DrainMs: le.Uint32(p[0:])}, nil
	case TypeQuiesce, TypeQuiesced, TypeResume, TypeResumed:
		if err := exact(migrationSize); err != nil {
			return nil, err
		}
		cookie, w0, w1 := le.Uint64(p[0:]), le.Uint32(p[8:]), le.Uint32(p[12:])
		switch t {
		case TypeQuiesce:
			if w1 != 0 {
				return nil, fmt.Errorf("quiesce: reserved %#x: %w", w1, ErrMalformed)
			}
			return &Quiesce{Cookie: cookie, DeadlineMs: w0}, nil
		case TypeQuiesced:
			return &Quiesced{Cookie: cookie, Status: MigrationStatus(w0), Programs: w1}, nil
		case TypeResume:
			return &Resume{Cookie: cookie, Flags: w0, DeadlineMs: w1}, nil
		default:
			return &Resumed{Cookie: cookie, Status: MigrationStatus(w0), Programs: w1}, nil
		}
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

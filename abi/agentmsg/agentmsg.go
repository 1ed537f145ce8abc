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

// Message types. 0x0100-0x01ff are migration messages and 0x0200-0x02ff
// reconfiguration messages (those of either range not defined here are
// reserved); receivers skip types they do not know.
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

	// Reconfiguration (docs/agent-channel.md "Reconfiguration").
	TypeResources    Type = 0x0200 // guest -> host: the programs' declared needs
	TypeCheckpoint   Type = 0x0201 // host -> guest: checkpoint and release the device
	TypeCheckpointed Type = 0x0202 // guest -> host: answer to Checkpoint
	TypeReconfigure  Type = 0x0203 // host -> guest: the limits in effect; continue
	TypeReconfigured Type = 0x0204 // guest -> host: answer to Reconfigure

	TypeMigrationFirst Type = 0x0100
	TypeMigrationLast  Type = 0x01ff
	TypeReconfigFirst  Type = 0x0200
	TypeReconfigLast   Type = 0x02ff
)

var typeNames = map[Type]string{
	TypeHello: "hello", TypeWatch: "watch", TypeCompleted: "completed", TypeHints: "hints",
	TypeGuestStats: "guest-stats", TypePing: "ping", TypePong: "pong", TypeStopping: "stopping",
	TypeQuiesce: "quiesce", TypeQuiesced: "quiesced", TypeResume: "resume", TypeResumed: "resumed",
	TypeResources: "resources", TypeCheckpoint: "checkpoint", TypeCheckpointed: "checkpointed",
	TypeReconfigure: "reconfigure", TypeReconfigured: "reconfigured",
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
	// FeatureReconfig: from the guest, some program registered for
	// reconfiguration (its needs are in Resources; a guest without it
	// still answers Checkpoint and Reconfigure, with programs 0); from the
	// host, it may send Checkpoint and Reconfigure.
	FeatureReconfig = 1 << 4
	// FeatureInPlace: from the guest, it understands Quiesce's flags
	// (QuiesceInPlace) and restores the vGPU's PCI configuration before
	// its programs resume; from the host, it may set QuiesceInPlace.
	FeatureInPlace = 1 << 5
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
// BAR0, unless Flags has QuiesceInPlace) and holds further calls until
// Resume. The guest answers Quiesced with the same cookie.
//
//	off size field
//	0   8    cookie
//	8   4    deadline_ms: how long the guest may take (0: the guest's default)
//	12  4    flags, Quiesce* (0 to a guest without FeatureInPlace)
type Quiesce struct {
	Cookie     uint64
	DeadlineMs uint32
	Flags      uint32
}

// Quiesce flags.
const (
	// QuiesceInPlace: the vGPU stays at its PCI slot, at the addresses the
	// guest kernel gave its BARs, through the migration (vfio-user in
	// place): programs may keep BAR0 mapped while they hold their calls.
	// The destination's VMM may come up with the device's PCI
	// configuration reset; the guest's agent writes it back before the
	// programs get Resume, and a program that still finds BAR0 dark
	// reopens the device as without the flag.
	QuiesceInPlace = 1 << 0

	quiesceFlags = QuiesceInPlace
)

// MigrationStatus is the status of a Quiesced or Resumed answer.
type MigrationStatus uint32

// Migration statuses. A receiver treats a value it does not know as
// MigrationFailed.
const (
	MigrationOK      MigrationStatus = 0 // every program did it
	MigrationTimeout MigrationStatus = 1 // some program did not finish by the deadline
	MigrationFailed  MigrationStatus = 2 // some program failed
	// ReconfigRefused answers a Checkpoint only: a program's declared
	// minimum does not fit the new limits.
	ReconfigRefused MigrationStatus = 3
)

var migrationStatusNames = [...]string{"ok", "timeout", "failed", "refused"}

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

// Reconfiguration limits (docs/agent-channel.md "Reconfiguration").
const (
	// MaxDeclarations bounds Resources.Decls.
	MaxDeclarations = 32
	// NameLen is the size of the name fields: a program's, a device's, a
	// profile's. A name is printable ASCII (0x20-0x7e), NUL-padded; it
	// fills the field or ends at its first NUL, and only NULs follow.
	NameLen = 32
)

// Declaration is what one guest program needs of the device (the
// Resources entry). A preferred amount of 0 means "the minimum"; Decode
// returns it as the minimum.
type Declaration struct {
	PID     uint32 // the program's process in the guest
	MinCUs  uint32 // compute units it cannot run with fewer of
	PrefCUs uint32 // compute units it would use
	MinMem  uint64 // device memory bytes it cannot run with less of
	PrefMem uint64 // device memory bytes it would use
	Name    string // the program's name, at most NameLen bytes
}

// Resources is the whole current set of the guest programs'
// declarations (docs/agent-channel.md "Reconfiguration"), sent by the
// guest after each of its Hellos and whenever the set changes. It
// replaces the previous set; an empty one says no program registered.
// Marshal writes at most MaxDeclarations entries; names are written as
// by Limits.
//
//	off    size field
//	0      4    n: entries (<= MaxDeclarations)
//	4      4    reserved, 0
//	8+64i  4    pid
//	12+64i 4    min_cus
//	16+64i 4    pref_cus (0: min_cus)
//	20+64i 4    reserved, 0
//	24+64i 8    min_mem_bytes
//	32+64i 8    pref_mem_bytes (0: min_mem_bytes)
//	40+64i 32   name, NUL-padded printable ASCII
type Resources struct {
	Decls []Declaration
}

// Limits are what a vGPU instance has: its device memory quota, its
// compute units, and the names of its physical device and profile. Marshal
// writes at most NameLen bytes of each name and turns bytes that are not
// printable ASCII into '?', so what it writes always decodes.
//
//	off size field
//	0   8    mem_bytes
//	8   4    compute_units
//	12  4    reserved, 0
//	16  32   device name, NUL-padded printable ASCII
//	48  32   profile name, NUL-padded printable ASCII
type Limits struct {
	MemBytes     uint64
	ComputeUnits uint32
	Device       string
	Profile      string
}

// Checkpoint asks the guest's programs, before the host moves the vGPU to
// another device or profile whose limits are To, to save what they need to
// continue in their own memory and then release their device state
// (buffers, programs). The guest answers Checkpointed with the same
// cookie; it is told the outcome with Reconfigure.
//
//	off size field
//	0   8    cookie
//	8   4    deadline_ms: how long the guest may take (0: the guest's default)
//	12  4    reserved, 0
//	16  80   the limits after the reallocation, Limits
type Checkpoint struct {
	Cookie     uint64
	DeadlineMs uint32
	To         Limits
}

// Checkpointed answers Checkpoint. Its status is a MigrationStatus, and
// may be ReconfigRefused.
//
//	off size field
//	0   8    cookie of the Checkpoint
//	8   4    status, MigrationStatus
//	12  4    programs: how many programs checkpointed
type Checkpointed struct {
	Cookie   uint64
	Status   MigrationStatus
	Programs uint32
}

// Reconfigure flags.
const (
	// ReconfigureAborted: the reallocation did not happen; the limits are
	// the old ones.
	ReconfigureAborted = 1 << 0
)

// Reconfigure tells the guest's programs the limits now in effect so
// that they adapt and continue (recreate their device state). The guest
// answers Reconfigured.
//
//	off size field
//	0   8    cookie
//	8   4    flags, Reconfigure*
//	12  4    deadline_ms: how long the guest may take (0: the guest's default)
//	16  80   the limits in effect, Limits
type Reconfigure struct {
	Cookie     uint64
	Flags      uint32
	DeadlineMs uint32
	Now        Limits
}

// Reconfigured answers Reconfigure.
//
//	off size field
//	0   8    cookie of the Reconfigure
//	8   4    status, MigrationStatus
//	12  4    programs: how many programs continued
type Reconfigured struct {
	Cookie   uint64
	Status   MigrationStatus
	Programs uint32
}

// Unknown is a frame of a type this version does not know (including the
// reserved parts of the migration and reconfiguration ranges). Receivers
// skip it.
type Unknown struct {
	T       Type
	Payload []byte
}

func (*Hello) Type() Type        { return TypeHello }
func (*Watch) Type() Type        { return TypeWatch }
func (*Completed) Type() Type    { return TypeCompleted }
func (*Hints) Type() Type        { return TypeHints }
func (*GuestStats) Type() Type   { return TypeGuestStats }
func (*Ping) Type() Type         { return TypePing }
func (*Pong) Type() Type         { return TypePong }
func (*Stopping) Type() Type     { return TypeStopping }
func (*Quiesce) Type() Type      { return TypeQuiesce }
func (*Quiesced) Type() Type     { return TypeQuiesced }
func (*Resume) Type() Type       { return TypeResume }
func (*Resumed) Type() Type      { return TypeResumed }
func (*Resources) Type() Type    { return TypeResources }
func (*Checkpoint) Type() Type   { return TypeCheckpoint }
func (*Checkpointed) Type() Type { return TypeCheckpointed }
func (*Reconfigure) Type() Type  { return TypeReconfigure }
func (*Reconfigured) Type() Type { return TypeReconfigured }
func (u *Unknown) Type() Type    { return u.T }

const (
	helloFixed     = 10
	watchSize      = 4
	completedSize  = 4
	hintsSize      = 32
	guestStatsSize = 72
	pingSize       = 8
	stoppingSize   = 8
	migrationSize  = 16 // Quiesce, Quiesced, Resume, Resumed, Checkpointed, Reconfigured
	resourcesFixed = 8
	declSize       = 64
	limitsSize     = 16 + 2*NameLen
	reconfigSize   = 16 + limitsSize // Checkpoint, Reconfigure
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
func (m *Quiesce) put(b []byte) { putMigration(b, m.Cookie, m.DeadlineMs, m.Flags) }
func (*Quiesced) size() int     { return migrationSize }
func (m *Quiesced) put(b []byte) {
	putMigration(b, m.Cookie, uint32(m.Status), m.Programs)
}
func (*Resume) size() int       { return migrationSize }
func (m *Resume) put(b []byte)  { putMigration(b, m.Cookie, m.Flags, m.DeadlineMs) }
func (*Resumed) size() int      { return migrationSize }
func (m *Resumed) put(b []byte) { putMigration(b, m.Cookie, uint32(m.Status), m.Programs) }
func (m *Resources) size() int {
	return resourcesFixed + declSize*min(len(m.Decls), MaxDeclarations)
}
func (m *Resources) put(b []byte) {
	ds := m.Decls[:min(len(m.Decls), MaxDeclarations)]
	le.PutUint32(b[0:], uint32(len(ds)))
	le.PutUint32(b[4:], 0)
	for i, d := range ds {
		e := b[resourcesFixed+declSize*i:]
		le.PutUint32(e[0:], d.PID)
		le.PutUint32(e[4:], d.MinCUs)
		le.PutUint32(e[8:], d.PrefCUs)
		le.PutUint32(e[12:], 0)
		le.PutUint64(e[16:], d.MinMem)
		le.PutUint64(e[24:], d.PrefMem)
		putName(e[32:32+NameLen], d.Name)
	}
}
func (*Checkpoint) size() int { return reconfigSize }
func (m *Checkpoint) put(b []byte) {
	putMigration(b, m.Cookie, m.DeadlineMs, 0)
	m.To.put(b[16:])
}
func (*Checkpointed) size() int      { return migrationSize }
func (m *Checkpointed) put(b []byte) { putMigration(b, m.Cookie, uint32(m.Status), m.Programs) }
func (*Reconfigure) size() int       { return reconfigSize }
func (m *Reconfigure) put(b []byte) {
	putMigration(b, m.Cookie, m.Flags, m.DeadlineMs)
	m.Now.put(b[16:])
}
func (*Reconfigured) size() int      { return migrationSize }
func (m *Reconfigured) put(b []byte) { putMigration(b, m.Cookie, uint32(m.Status), m.Programs) }
func (u *Unknown) size() int         { return min(len(u.Payload), MaxPayload) }
func (u *Unknown) put(b []byte)      { copy(b, u.Payload) }

// putMigration writes the common layout of the migration messages: a u64
// cookie and two u32 words.
func putMigration(b []byte, cookie uint64, w0, w1 uint32) {
	le.PutUint64(b[0:], cookie)
	le.PutUint32(b[8:], w0)
	le.PutUint32(b[12:], w1)
}

// put writes l's layout into b[:limitsSize].
func (l *Limits) put(b []byte) {
	le.PutUint64(b[0:], l.MemBytes)
	le.PutUint32(b[8:], l.ComputeUnits)
	le.PutUint32(b[12:], 0)
	putName(b[16:16+NameLen], l.Device)
	putName(b[16+NameLen:16+2*NameLen], l.Profile)
}

// putName writes at most len(b) bytes of s into b, NUL-padded, with every
// byte that is not printable ASCII written as '?'.
func putName(b []byte, s string) {
	for i := range b {
		c := byte(0)
		if i < len(s) {
			c = s[i]
			if c < 0x20 || c > 0x7e {
				c = '?'
			}
		}
		b[i] = c
	}
}

// name decodes a NUL-padded printable ASCII name field.
func name(b []byte) (string, bool) {
	n := len(b)
	for i, c := range b {
		if c == 0 {
			n = i
			break
		}
		if c < 0x20 || c > 0x7e {
			return "", false
		}
	}
	for _, c := range b[n:] {
		if c != 0 {
			return "", false
		}
	}
	return string(b[:n]), true
}

// decodeLimits decodes a Limits layout (limitsSize bytes).
func decodeLimits(t Type, p []byte) (Limits, error) {
	l := Limits{MemBytes: le.Uint64(p[0:]), ComputeUnits: le.Uint32(p[8:])}
	if r := le.Uint32(p[12:]); r != 0 {
		return Limits{}, fmt.Errorf("%v: limits reserved %#x: %w", t, r, ErrMalformed)
	}
	var ok1, ok2 bool
	l.Device, ok1 = name(p[16 : 16+NameLen])
	l.Profile, ok2 = name(p[16+NameLen : 16+2*NameLen])
	if !ok1 || !ok2 {
		return Limits{}, fmt.Errorf("%v: device or profile name is not NUL-padded printable ASCII: %w", t, ErrMalformed)
	}
	return l, nil
}

// decodeResources decodes a Resources payload.
func decodeResources(p []byte) (*Resources, error) {
	if len(p) < resourcesFixed {
		return nil, fmt.Errorf("resources: %d bytes: %w", len(p), ErrMalformed)
	}
	n, r := le.Uint32(p[0:]), le.Uint32(p[4:])
	if n > MaxDeclarations || r != 0 || len(p) != resourcesFixed+declSize*int(n) {
		return nil, fmt.Errorf("resources: %d entries (max %d), reserved %#x, in a %d-byte payload: %w",
			n, MaxDeclarations, r, len(p), ErrMalformed)
	}
	m := &Resources{}
	if n > 0 {
		m.Decls = make([]Declaration, n)
	}
	for i := range m.Decls {
		e := p[resourcesFixed+declSize*i:]
		d := Declaration{PID: le.Uint32(e[0:]), MinCUs: le.Uint32(e[4:]), PrefCUs: le.Uint32(e[8:]),
			MinMem: le.Uint64(e[16:]), PrefMem: le.Uint64(e[24:])}
		if r := le.Uint32(e[12:]); r != 0 {
			return nil, fmt.Errorf("resources: entry %d: reserved %#x: %w", i, r, ErrMalformed)
		}
		if d.PrefCUs == 0 {
			d.PrefCUs = d.MinCUs
		}
		if d.PrefMem == 0 {
			d.PrefMem = d.MinMem
		}
		if d.MinCUs > d.PrefCUs || d.MinMem > d.PrefMem {
			return nil, fmt.Errorf("resources: entry %d: minimum above preferred (compute units %d > %d or memory %d > %d): %w",
				i, d.MinCUs, d.PrefCUs, d.MinMem, d.PrefMem, ErrMalformed)
		}
		var ok bool
		if d.Name, ok = name(e[32 : 32+NameLen]); !ok {
			return nil, fmt.Errorf("resources: entry %d: name is not NUL-padded printable ASCII: %w", i, ErrMalformed)
		}
		m.Decls[i] = d
	}
	return m, nil
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
			if w1&^quiesceFlags != 0 {
				return nil, fmt.Errorf("quiesce: unknown flags %#x: %w", w1, ErrMalformed)
			}
			return &Quiesce{Cookie: cookie, DeadlineMs: w0, Flags: w1}, nil
		case TypeQuiesced:
			return &Quiesced{Cookie: cookie, Status: MigrationStatus(w0), Programs: w1}, nil
		case TypeResume:
			return &Resume{Cookie: cookie, Flags: w0, DeadlineMs: w1}, nil
		default:
			return &Resumed{Cookie: cookie, Status: MigrationStatus(w0), Programs: w1}, nil
		}
	case TypeResources:
		// Not "return decodeResources(p)": a nil *Resources returned as a
		// Message is a non-nil interface, so a caller would see a message
		// beside the error.
		m, err := decodeResources(p)
		if err != nil {
			return nil, err
		}
		return m, nil
	case TypeCheckpointed, TypeReconfigured:
		if err := exact(migrationSize); err != nil {
			return nil, err
		}
		cookie, st, n := le.Uint64(p[0:]), MigrationStatus(le.Uint32(p[8:])), le.Uint32(p[12:])
		if t == TypeCheckpointed {
			return &Checkpointed{Cookie: cookie, Status: st, Programs: n}, nil
		}
		return &Reconfigured{Cookie: cookie, Status: st, Programs: n}, nil
	case TypeCheckpoint, TypeReconfigure:
		if err := exact(reconfigSize); err != nil {
			return nil, err
		}
		cookie, w0, w1 := le.Uint64(p[0:]), le.Uint32(p[8:]), le.Uint32(p[12:])
		l, err := decodeLimits(t, p[16:])
		if err != nil {
			return nil, err
		}
		if t == TypeCheckpoint {
			if w1 != 0 {
				return nil, fmt.Errorf("checkpoint: reserved %#x: %w", w1, ErrMalformed)
			}
			return &Checkpoint{Cookie: cookie, DeadlineMs: w0, To: l}, nil
		}
		return &Reconfigure{Cookie: cookie, Flags: w0, DeadlineMs: w1, Now: l}, nil
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

package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/internal/codec"
)

// Version is the protocol version Hello carries; a worker refuses any other.
const Version = 1

// HeaderSize is the size of every message's header.
const HeaderSize = 16

// MaxPayload bounds a message's payload; MaxFDs bounds the descriptors
// one message carries: a Memory message carries one per guest-RAM window,
// and a vfio-user client may map as many windows as its VERSION reply
// allows (max_dma_maps, 64).
const (
	MaxPayload = 4096
	MaxFDs     = 64
)

// Limits of the fields that carry names.
const (
	MaxDomainName  = 128
	MaxInstanceID  = 64
	MaxProfileName = 64
	MaxDeviceName  = 256
	MaxRegions     = MaxFDs
)

// ErrProtocol is wrapped by every error about a message that breaks the
// protocol: the receiver ends the connection (docs/worker.md).
var ErrProtocol = errors.New("worker protocol violation")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// Type identifies a message.
type Type uint16

// The messages (docs/worker.md "Messages"). Requests expect a Reply with
// their ID; TurnRelease, Unreserve, TurnTaken and Notice are one-way.
const (
	TypeReply       Type = 1  // either way: the answer to a request
	TypeHello       Type = 2  // main -> worker
	TypeAdd         Type = 3  // main -> worker, 3 fds
	TypeRemove      Type = 4  // main -> worker
	TypeMemory      Type = 5  // main -> worker, one fd per region
	TypeEnable      Type = 6  // main -> worker
	TypeDisable     Type = 7  // main -> worker
	TypeReset       Type = 8  // main -> worker
	TypeQuota       Type = 9  // main -> worker
	TypeReuse       Type = 10 // main -> worker
	TypeBudget      Type = 11 // main -> worker
	TypeStats       Type = 12 // main -> worker
	TypeTurn        Type = 13 // worker -> main
	TypeTurnRelease Type = 14 // worker -> main, one-way
	TypeExtract     Type = 15 // main -> worker, 1 fd (a pipe's write end)
	TypeInject      Type = 16 // main -> worker, 1 fd (a pipe's read end)
	TypeFreeze      Type = 17 // main -> worker
	TypeThaw        Type = 18 // main -> worker
	TypeParent      Type = 19 // main -> worker
	TypeForeign     Type = 20 // main -> worker, 1 fd (a privcmd fd)
	TypeReserve     Type = 21 // worker -> main
	TypeUnreserve   Type = 22 // worker -> main, one-way
	TypeArena       Type = 23 // worker -> main; the Reply carries 1 fd
	TypeTurnTaken   Type = 24 // worker -> main, one-way
	TypeGuestLog    Type = 25 // main -> worker; only to a worker with FeatureGuestLog
	TypeKicks       Type = 26 // main -> worker, 1 fd; only to a worker with FeatureKicks
	TypeStopKicks   Type = 27 // main -> worker; only to a worker with FeatureKicks
	numTypes             = 28
)

var typeNames = [numTypes]string{
	TypeReply: "reply", TypeHello: "hello", TypeAdd: "add", TypeRemove: "remove", TypeMemory: "memory",
	TypeEnable: "enable", TypeDisable: "disable", TypeReset: "reset", TypeQuota: "quota", TypeReuse: "reuse",
	TypeBudget: "budget", TypeStats: "stats", TypeTurn: "turn", TypeTurnRelease: "turn-release",
	TypeExtract: "extract", TypeInject: "inject", TypeFreeze: "freeze", TypeThaw: "thaw", TypeParent: "parent",
	TypeForeign: "foreign", TypeReserve: "reserve", TypeUnreserve: "unreserve", TypeArena: "arena",
	TypeTurnTaken: "turn-taken", TypeGuestLog: "guest-log", TypeKicks: "kicks", TypeStopKicks: "stop-kicks",
}

func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint16(t))
}

// Header starts every message.
//
//	off size field
//	0   2    type
//	2   2    flags (0)
//	4   4    id: a request's id, echoed by its Reply; 0 for one-way messages
//	8   4    payload length
//	12  4    reserved (0)
type Header struct {
	Type Type
	ID   uint32
	Len  uint32
}

// Msg is one message's payload.
type Msg interface {
	Type() Type
	encode(e *encoder)
	decode(d *decoder)
	// fds is the number of descriptors the message carries.
	fds() int
}

// Marshal encodes m with request id id.
func Marshal(id uint32, m Msg) []byte {
	e := encoder{codec.Writer{B: make([]byte, HeaderSize, 64)}}
	m.encode(&e)
	b := e.B
	binary.LittleEndian.PutUint16(b[0:], uint16(m.Type()))
	binary.LittleEndian.PutUint32(b[4:], id)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-HeaderSize))
	return b
}

// Unmarshal decodes one message carrying nfds descriptors. It never
// panics; every error wraps ErrProtocol.
func Unmarshal(b []byte, nfds int) (Header, Msg, error) {
	if len(b) < HeaderSize {
		return Header{}, nil, protoErr("message of %d bytes, header is %d", len(b), HeaderSize)
	}
	h := Header{
		Type: Type(binary.LittleEndian.Uint16(b[0:])),
		ID:   binary.LittleEndian.Uint32(b[4:]),
		Len:  binary.LittleEndian.Uint32(b[8:]),
	}
	if flags, res := binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[12:]); flags != 0 || res != 0 {
		return h, nil, protoErr("%v: reserved header bits %#x %#x", h.Type, flags, res)
	}
	if int64(h.Len) != int64(len(b)-HeaderSize) || h.Len > MaxPayload {
		return h, nil, protoErr("%v: payload length %d in a message of %d bytes (max %d)", h.Type, h.Len, len(b), MaxPayload)
	}
	m := newMsg(h.Type)
	if m == nil {
		return h, nil, protoErr("unknown message type %d", uint16(h.Type))
	}
	d := newDecoder(b[HeaderSize:])
	m.decode(&d)
	if d.Err() != nil {
		return h, nil, fmt.Errorf("%v: %w", h.Type, d.Err())
	}
	if d.Len() != 0 {
		return h, nil, protoErr("%v: %d trailing bytes", h.Type, d.Len())
	}
	if want := m.fds(); nfds != want {
		return h, nil, protoErr("%v carries %d fds, want %d", h.Type, nfds, want)
	}
	return h, m, nil
}

func newMsg(t Type) Msg {
	switch t {
	case TypeReply:
		return &Reply{}
	case TypeHello:
		return &Hello{}
	case TypeAdd:
		return &Add{}
	case TypeRemove:
		return &Remove{}
	case TypeMemory:
		return &Memory{}
	case TypeEnable:
		return &Enable{}
	case TypeDisable:
		return &Disable{}
	case TypeReset:
		return &Reset{}
	case TypeQuota:
		return &Quota{}
	case TypeReuse:
		return &Reuse{}
	case TypeBudget:
		return &Budget{}
	case TypeStats:
		return &Stats{}
	case TypeTurn:
		return &Turn{}
	case TypeTurnRelease:
		return &TurnRelease{}
	case TypeExtract:
		return &Extract{}
	case TypeInject:
		return &Inject{}
	case TypeFreeze:
		return &Freeze{}
	case TypeThaw:
		return &Thaw{}
	case TypeGuestLog:
		return &GuestLog{}
	case TypeKicks:
		return &Kicks{}
	case TypeStopKicks:
		return &StopKicks{}
	case TypeParent:
		return &Parent{}
	case TypeForeign:
		return &Foreign{}
	case TypeReserve:
		return &Reserve{}
	case TypeUnreserve:
		return &Unreserve{}
	case TypeArena:
		return &Arena{}
	case TypeTurnTaken:
		return &TurnTaken{}
	}
	return nil
}

// Reply answers a request. Status is an abi.Status (0: done); Body is the
// request type's answer (HelloReply, StatsReply, TurnGrant), empty for the
// others and on failure; Msg says why a request failed. File: the Reply
// carries one fd (an Arena's memory file); it travels after the fields of
// the first layout and only when set, so every other Reply is what a
// worker started by an older vgpud (kept across an upgrade in place)
// decodes.
type Reply struct {
	Status uint32
	Msg    string // at most 512 bytes
	Body   []byte // at most 1024 bytes; decoded by the requester
	File   bool
}

func (*Reply) Type() Type { return TypeReply }
func (r *Reply) fds() int {
	if r.File {
		return 1
	}
	return 0
}
func (r *Reply) encode(e *encoder) {
	e.U32(r.Status)
	e.str(r.Msg, 512)
	e.bytes(r.Body, 1024)
	if r.File {
		e.bool(true)
	}
}
func (r *Reply) decode(d *decoder) {
	r.Status = d.U32()
	r.Msg = d.str(512)
	r.Body = d.bytes(1024)
	if d.Len() > 0 {
		if r.File = d.bool(); !r.File {
			d.Fail("reply: file flag present but false")
		}
	}
}

// Hello configures a new worker: its trust domain and physical device.
type Hello struct {
	Version     uint32
	Device      uint32 // index in gpu.Devices
	Domain      string // the trust (reuse) domain's name
	Shared      bool   // an operator-named domain (SHA-256 digests)
	ReuseBudget int64  // bytes of shadow results
	CacheBytes  int64  // cap of the domain's compiler cache directory
}

func (*Hello) Type() Type { return TypeHello }
func (*Hello) fds() int   { return 0 }
func (h *Hello) encode(e *encoder) {
	e.U32(h.Version)
	e.U32(h.Device)
	e.str(h.Domain, MaxDomainName)
	e.bool(h.Shared)
	e.i64(h.ReuseBudget)
	e.i64(h.CacheBytes)
}
func (h *Hello) decode(d *decoder) {
	h.Version = d.U32()
	h.Device = d.U32()
	h.Domain = d.str(MaxDomainName)
	h.Shared = d.bool()
	h.ReuseBudget = d.nonNeg()
	h.CacheBytes = d.nonNeg()
}

// HelloReply is the Body of Hello's Reply: the device the worker opened,
// and what the worker's release understands (Features, appended after
// the first layout: a worker of an earlier release, adopted in an
// upgrade in place, has none, and reads as 0).
type HelloReply struct {
	Name          string
	ComputeUnits  uint32
	MaxWorkGroup  uint64
	MaxAllocBytes uint64
	Features      uint32
}

// Worker features (HelloReply.Features).
const (
	// FeatureGuestLog: the worker takes GuestLog, writes GuestPages
	// records in a final Extract while its log is on, and holds the
	// GuestPages an Inject brings until the next Thaw.
	FeatureGuestLog uint32 = 1 << 0
	// FeatureImages: the worker's instances take abi 1.8's image and
	// sampler arguments and device-info version 2 (abi.FeatureImages),
	// which the main process announces to the guest only then.
	FeatureImages uint32 = 1 << 1
	// FeatureIL: the worker's instances take abi 1.9's program-build
	// with FlagIL and device-info version 3 (abi.FeatureIL), which the
	// main process announces to the guest only then.
	FeatureIL uint32 = 1 << 2
	// FeatureImageBuffers: the worker's instances take abi 1.10's images
	// made from buffers and device-info version 4
	// (abi.FeatureImageBuffers), which the main process announces to
	// the guest only then.
	FeatureImageBuffers uint32 = 1 << 3
	// FeatureKicks: the worker takes Kicks and StopKicks, reading a
	// transport's kick eventfd itself.
	FeatureKicks uint32 = 1 << 4
	// Features is what this release's workers understand.
	Features = FeatureGuestLog | FeatureImages | FeatureIL | FeatureImageBuffers | FeatureKicks
)

// EncodeBody and DecodeHelloReply carry a HelloReply in a Reply's Body.
func (h *HelloReply) EncodeBody() []byte {
	e := encoder{}
	e.str(h.Name, MaxDeviceName)
	e.U32(h.ComputeUnits)
	e.U64(h.MaxWorkGroup)
	e.U64(h.MaxAllocBytes)
	if h.Features != 0 {
		e.U32(h.Features)
	}
	return e.B
}

// DecodeHelloReply decodes a HelloReply body.
func DecodeHelloReply(b []byte) (HelloReply, error) {
	var h HelloReply
	d := newDecoder(b)
	h.Name = d.str(MaxDeviceName)
	h.ComputeUnits = d.U32()
	h.MaxWorkGroup = d.U64()
	h.MaxAllocBytes = d.U64()
	if d.Len() > 0 {
		h.Features = d.U32()
	}
	return h, d.done("hello reply")
}

// Limits are an instance's quotas in the worker.
type Limits struct {
	MemBytes     uint64 // device memory quota
	ProgramBytes uint64 // bytes of programs (source, options and built binaries) the instance may hold
	ComputeUnits uint32
	Profile      string
}

func (l *Limits) encode(e *encoder) {
	e.U64(l.MemBytes)
	e.U64(l.ProgramBytes)
	e.U32(l.ComputeUnits)
	e.str(l.Profile, MaxProfileName)
}

func (l *Limits) decode(d *decoder) {
	l.MemBytes = d.U64()
	l.ProgramBytes = d.U64()
	l.ComputeUnits = d.U32()
	l.Profile = d.str(MaxProfileName)
}

// Add places an instance in the worker, in slot Slot. It carries three
// fds: the instance page (a memfd of at least one page, docs/worker.md
// "Instance page"), the doorbell eventfd (main signals it after
// publishing a tail) and the notify eventfd (the worker signals it after
// every completion; the counter coalesces notices).
//
// Contexts is how many device contexts (ABI 1.5) the instance offers
// besides its default one, at most abi.MaxContexts. It travels after the
// fields of the first layout and only when nonzero, so an Add without
// contexts is what a worker started by an older vgpud (kept across an
// upgrade in place) understands.
type Add struct {
	Slot     uint32
	ID       string
	Reuse    bool // result reuse on for the instance
	Limits   Limits
	Contexts uint32
}

// maxContexts is abi.MaxContexts (wire imports nothing of vgpud's ABI).
const maxContexts = 64

func (*Add) Type() Type { return TypeAdd }
func (*Add) fds() int   { return 3 }
func (a *Add) encode(e *encoder) {
	e.U32(a.Slot)
	e.str(a.ID, MaxInstanceID)
	e.bool(a.Reuse)
	a.Limits.encode(e)
	if a.Contexts != 0 {
		e.U32(a.Contexts)
	}
}
func (a *Add) decode(d *decoder) {
	a.Slot = d.U32()
	a.ID = d.str(MaxInstanceID)
	a.Reuse = d.bool()
	a.Limits.decode(d)
	if d.Len() > 0 {
		if a.Contexts = d.U32(); a.Contexts == 0 || a.Contexts > maxContexts {
			d.Fail("add: %d contexts (1..%d when present)", a.Contexts, maxContexts)
		}
	}
}

// Remove closes the instance in Slot and frees its device state. With
// IfEmpty it does so only when the instance holds no buffer or program
// (else the Reply says StatusBusy and nothing changes).
type Remove struct {
	Slot    uint32
	IfEmpty bool
}

func (*Remove) Type() Type { return TypeRemove }
func (*Remove) fds() int   { return 0 }
func (r *Remove) encode(e *encoder) {
	e.U32(r.Slot)
	e.bool(r.IfEmpty)
}
func (r *Remove) decode(d *decoder) {
	r.Slot = d.U32()
	r.IfEmpty = d.bool()
}

// Region is one range of guest RAM: [GPA, GPA+Size) is bytes [Offset,
// Offset+Size) of the message's fd at the same index.
type Region struct {
	GPA, Size, Offset uint64
}

// Memory replaces the instance's guest-RAM map; it carries one fd per
// region, in order.
type Memory struct {
	Slot    uint32
	Regions []Region
}

func (*Memory) Type() Type { return TypeMemory }
func (m *Memory) fds() int { return len(m.Regions) }
func (m *Memory) encode(e *encoder) {
	e.U32(m.Slot)
	e.U32(uint32(len(m.Regions)))
	for _, r := range m.Regions {
		e.U64(r.GPA)
		e.U64(r.Size)
		e.U64(r.Offset)
	}
}
func (m *Memory) decode(d *decoder) {
	m.Slot = d.U32()
	n := d.U32()
	if n > MaxRegions {
		d.Fail("%d regions, max %d", n, MaxRegions)
		return
	}
	m.Regions = make([]Region, n)
	for i := range m.Regions {
		m.Regions[i] = Region{GPA: d.U64(), Size: d.U64(), Offset: d.U64()}
	}
}

// Enable programs and enables the instance's ring.
type Enable struct {
	Slot            uint32
	Base, ComplBase uint64
	Slots           uint32
}

func (*Enable) Type() Type { return TypeEnable }
func (*Enable) fds() int   { return 0 }
func (m *Enable) encode(e *encoder) {
	e.U32(m.Slot)
	e.U64(m.Base)
	e.U64(m.ComplBase)
	e.U32(m.Slots)
}
func (m *Enable) decode(d *decoder) {
	m.Slot = d.U32()
	m.Base = d.U64()
	m.ComplBase = d.U64()
	m.Slots = d.U32()
}

// Disable stops the instance's ring (fetched commands still complete).
type Disable struct{ Slot uint32 }

func (*Disable) Type() Type          { return TypeDisable }
func (*Disable) fds() int            { return 0 }
func (m *Disable) encode(e *encoder) { e.U32(m.Slot) }
func (m *Disable) decode(d *decoder) { m.Slot = d.U32() }

// Reset resets the instance: ring stopped, every buffer and program freed.
type Reset struct{ Slot uint32 }

func (*Reset) Type() Type          { return TypeReset }
func (*Reset) fds() int            { return 0 }
func (m *Reset) encode(e *encoder) { e.U32(m.Slot) }
func (m *Reset) decode(d *decoder) { m.Slot = d.U32() }

// Quota changes the instance's limits at run time (StatusBusy when it
// already holds more than the new quota).
type Quota struct {
	Slot   uint32
	Limits Limits
}

func (*Quota) Type() Type { return TypeQuota }
func (*Quota) fds() int   { return 0 }
func (m *Quota) encode(e *encoder) {
	e.U32(m.Slot)
	m.Limits.encode(e)
}
func (m *Quota) decode(d *decoder) {
	m.Slot = d.U32()
	m.Limits.decode(d)
}

// Reuse turns result reuse on or off for the instance (in its domain).
type Reuse struct {
	Slot uint32
	On   bool
}

func (*Reuse) Type() Type { return TypeReuse }
func (*Reuse) fds() int   { return 0 }
func (m *Reuse) encode(e *encoder) {
	e.U32(m.Slot)
	e.bool(m.On)
}
func (m *Reuse) decode(d *decoder) {
	m.Slot = d.U32()
	m.On = d.bool()
}

// Budget sets the domain's reuse byte budget.
type Budget struct{ Bytes int64 }

func (*Budget) Type() Type          { return TypeBudget }
func (*Budget) fds() int            { return 0 }
func (m *Budget) encode(e *encoder) { e.i64(m.Bytes) }
func (m *Budget) decode(d *decoder) { m.Bytes = d.nonNeg() }

// Stats asks for the domain's reuse table counters (StatsReply).
type Stats struct{}

func (*Stats) Type() Type      { return TypeStats }
func (*Stats) fds() int        { return 0 }
func (*Stats) encode(*encoder) {}
func (*Stats) decode(*decoder) {}

// StatsReply is the Body of Stats' Reply: the domain's reuse table.
type StatsReply struct {
	Entries, Bytes, Budget                     int64
	Hits, Misses, Skipped, Recorded, Evictions uint64
	BytesSaved, DeviceNanos                    uint64
	Instances                                  uint32
}

// EncodeBody encodes a StatsReply as a Reply's Body.
func (s *StatsReply) EncodeBody() []byte {
	e := encoder{}
	e.i64(s.Entries)
	e.i64(s.Bytes)
	e.i64(s.Budget)
	for _, v := range []uint64{s.Hits, s.Misses, s.Skipped, s.Recorded, s.Evictions, s.BytesSaved, s.DeviceNanos} {
		e.U64(v)
	}
	e.U32(s.Instances)
	return e.B
}

// DecodeStatsReply decodes a StatsReply body.
func DecodeStatsReply(b []byte) (StatsReply, error) {
	var s StatsReply
	d := newDecoder(b)
	s.Entries, s.Bytes, s.Budget = d.nonNeg(), d.nonNeg(), d.nonNeg()
	for _, p := range []*uint64{&s.Hits, &s.Misses, &s.Skipped, &s.Recorded, &s.Evictions, &s.BytesSaved, &s.DeviceNanos} {
		*p = d.U64()
	}
	s.Instances = d.U32()
	return s, d.done("stats reply")
}

// TurnKind is what a Turn asks for.
type TurnKind uint32

const (
	// TurnDevice: a device turn from the device's scheduler.
	TurnDevice TurnKind = 0
	// TurnCompile: a build is starting; the main process watches its
	// time (granted at once).
	TurnCompile TurnKind = 1
)

// Turn asks the main process for a turn for the instance in Slot; the
// Reply's Body is a TurnGrant. The worker then sends TurnRelease with the
// same Turn number when the turn ends.
type Turn struct {
	Turn uint32 // the worker's number for this turn, unique among its turns in progress
	Slot uint32
	Kind TurnKind
	Cost time.Duration // expected device time; 0: unknown
}

func (*Turn) Type() Type { return TypeTurn }
func (*Turn) fds() int   { return 0 }
func (m *Turn) encode(e *encoder) {
	e.U32(m.Turn)
	e.U32(m.Slot)
	e.U32(uint32(m.Kind))
	e.i64(int64(m.Cost))
}
func (m *Turn) decode(d *decoder) {
	m.Turn = d.U32()
	m.Slot = d.U32()
	m.Kind = TurnKind(d.U32())
	if m.Kind > TurnCompile {
		d.Fail("turn kind %d", m.Kind)
	}
	m.Cost = time.Duration(d.nonNeg())
}

// TurnGrant is the Body of a Turn's Reply: the turn's slice budget.
type TurnGrant struct {
	SliceBudget time.Duration
}

// EncodeBody encodes a TurnGrant as a Reply's Body.
func (g *TurnGrant) EncodeBody() []byte {
	e := encoder{}
	e.i64(int64(g.SliceBudget))
	return e.B
}

// DecodeTurnGrant decodes a TurnGrant body.
func DecodeTurnGrant(b []byte) (TurnGrant, error) {
	d := newDecoder(b)
	g := TurnGrant{SliceBudget: time.Duration(d.nonNeg())}
	return g, d.done("turn grant")
}

// TurnRelease ends a turn: the device time the worker measured during it
// and the launch slices to count.
type TurnRelease struct {
	Turn   uint32
	Device time.Duration
	Slices uint32
}

func (*TurnRelease) Type() Type { return TypeTurnRelease }
func (*TurnRelease) fds() int   { return 0 }
func (m *TurnRelease) encode(e *encoder) {
	e.U32(m.Turn)
	e.i64(int64(m.Device))
	e.U32(m.Slices)
}
func (m *TurnRelease) decode(d *decoder) {
	m.Turn = d.U32()
	m.Device = time.Duration(d.nonNeg())
	m.Slices = d.U32()
}

// TurnTaken tells the main process that the instance in Slot took the
// free turn its scheduler parked in the instance page under number Offer
// (aggregator.Shared.TakeTurn), rather than asking for one: the turn is
// in progress as if granted, under the worker's number Turn, and ends
// with TurnRelease as any other.
type TurnTaken struct {
	Turn  uint32 // the worker's number for this turn, unique among its turns in progress
	Slot  uint32
	Offer uint64
}

func (*TurnTaken) Type() Type { return TypeTurnTaken }
func (*TurnTaken) fds() int   { return 0 }
func (m *TurnTaken) encode(e *encoder) {
	e.U32(m.Turn)
	e.U32(m.Slot)
	e.U64(m.Offer)
}
func (m *TurnTaken) decode(d *decoder) {
	m.Turn = d.U32()
	m.Slot = d.U32()
	m.Offer = d.U64()
}

// Extract asks for one live-migration round of the instance in Slot
// (docs/migration.md): the worker writes the round's records (migration
// stream records, no Header or End) to the message's fd, a pipe, and
// closes it; the Reply's Body is an ExtractReply. With Final the ring is
// frozen first and its state is the round's last record.
type Extract struct {
	Slot  uint32
	Final bool
}

func (*Extract) Type() Type { return TypeExtract }
func (*Extract) fds() int   { return 1 }
func (m *Extract) encode(e *encoder) {
	e.U32(m.Slot)
	e.bool(m.Final)
}
func (m *Extract) decode(d *decoder) {
	m.Slot = d.U32()
	m.Final = d.bool()
}

// ExtractReply is the Body of Extract's Reply: what the round sent.
type ExtractReply struct {
	Programs, ProgramsFreed uint32
	Buffers, BuffersFreed   uint32
	Redirty                 uint32 // buffers written while being sent: sent again next round
	BufferBytes             uint64 // bytes of buffer content
	// GuestBytes: bytes of guest RAM in GuestPages records (a final
	// round with the guest log on); appended only when not 0.
	GuestBytes uint64
}

// EncodeBody encodes an ExtractReply as a Reply's Body.
func (r *ExtractReply) EncodeBody() []byte {
	e := encoder{}
	for _, v := range []uint32{r.Programs, r.ProgramsFreed, r.Buffers, r.BuffersFreed, r.Redirty} {
		e.U32(v)
	}
	e.U64(r.BufferBytes)
	if r.GuestBytes != 0 {
		e.U64(r.GuestBytes)
	}
	return e.B
}

// DecodeExtractReply decodes an ExtractReply body.
func DecodeExtractReply(b []byte) (ExtractReply, error) {
	var r ExtractReply
	d := newDecoder(b)
	for _, p := range []*uint32{&r.Programs, &r.ProgramsFreed, &r.Buffers, &r.BuffersFreed, &r.Redirty} {
		*p = d.U32()
	}
	r.BufferBytes = d.U64()
	if d.Len() > 0 {
		r.GuestBytes = d.U64()
	}
	return r, d.done("extract reply")
}

// GuestLog turns the write log of the instance's guest RAM on (a fresh
// one) or off (docs/migration.md "The vGPU runs while QEMU copies the
// VM"): while it is on, a final Extract ends with GuestPages records of
// every page the worker wrote since, read at that moment, and turns it
// off. Sent only to a worker whose HelloReply has FeatureGuestLog.
type GuestLog struct {
	Slot uint32
	On   bool
}

func (*GuestLog) Type() Type { return TypeGuestLog }
func (*GuestLog) fds() int   { return 0 }
func (m *GuestLog) encode(e *encoder) {
	e.U32(m.Slot)
	e.bool(m.On)
}
func (m *GuestLog) decode(d *decoder) {
	m.Slot = d.U32()
	m.On = d.bool()
}

// Kicks makes the message's fd, an eventfd that a transport signals for
// each write of abi.RegRingKick (vfio-user's ioeventfd), the kick
// eventfd the worker reads for the instance in Slot, in place of the
// last one: each signal is a kick whose tail shadow is the instance
// page's KickShadow (docs/worker.md "Kicks straight to the worker").
// Sent only to a worker whose HelloReply has FeatureKicks.
type Kicks struct{ Slot uint32 }

func (*Kicks) Type() Type          { return TypeKicks }
func (*Kicks) fds() int            { return 1 }
func (m *Kicks) encode(e *encoder) { e.U32(m.Slot) }
func (m *Kicks) decode(d *decoder) { m.Slot = d.U32() }

// StopKicks makes the worker stop reading the instance's kick eventfd
// and close its copy; the Reply comes after the last kick it read was
// applied, so the main process may take the next ones itself. Stopping
// an instance that reads none is no error.
type StopKicks struct{ Slot uint32 }

func (*StopKicks) Type() Type          { return TypeStopKicks }
func (*StopKicks) fds() int            { return 0 }
func (m *StopKicks) encode(e *encoder) { e.U32(m.Slot) }
func (m *StopKicks) decode(d *decoder) { m.Slot = d.U32() }

// Inject applies migration stream records (no Header or End) read from
// the message's fd, a pipe, until its end, to the instance in Slot, which
// must be frozen. The Reply comes once all are applied or one failed.
type Inject struct{ Slot uint32 }

func (*Inject) Type() Type          { return TypeInject }
func (*Inject) fds() int            { return 1 }
func (m *Inject) encode(e *encoder) { e.U32(m.Slot) }
func (m *Inject) decode(d *decoder) { m.Slot = d.U32() }

// Freeze stops the instance's ring from fetching (doorbells are still
// taken); the Reply comes once the command in progress has completed.
type Freeze struct{ Slot uint32 }

func (*Freeze) Type() Type          { return TypeFreeze }
func (*Freeze) fds() int            { return 0 }
func (m *Freeze) encode(e *encoder) { e.U32(m.Slot) }
func (m *Freeze) decode(d *decoder) { m.Slot = d.U32() }

// Parent says whether the worker dies with the process that started it
// (its parent-death signal). An upgrade in place (docs/upgrade.md) hands
// the worker to a new main process: the old one disarms the signal
// (Arm false) before it exits, and arms it again (Arm true) when the
// handover is abandoned. Either way the worker still exits when its
// protocol socket closes in every main process.
type Parent struct{ Arm bool }

func (*Parent) Type() Type          { return TypeParent }
func (*Parent) fds() int            { return 0 }
func (m *Parent) encode(e *encoder) { e.bool(m.Arm) }
func (m *Parent) decode(d *decoder) { m.Arm = d.bool() }

// Thaw lets a frozen ring fetch again. With Forget the worker also forgets
// what earlier Extract rounds sent (a migration ended or was abandoned).
type Thaw struct {
	Slot   uint32
	Forget bool
}

func (*Thaw) Type() Type { return TypeThaw }
func (*Thaw) fds() int   { return 0 }
func (m *Thaw) encode(e *encoder) {
	e.U32(m.Slot)
	e.bool(m.Forget)
}
func (m *Thaw) decode(d *decoder) {
	m.Slot = d.U32()
	m.Forget = d.bool()
}

// MaxDomID is the largest Xen domain id (domid_t) Foreign carries.
const MaxDomID = 0xffff

// ForeignRegion is one window of a Xen domain's guest-physical space:
// [GPA, GPA+Size), page-aligned.
type ForeignRegion struct {
	GPA, Size uint64
}

// Foreign replaces the instance's guest-RAM map with Xen foreign memory:
// the windows of domain Domain the device may touch, mapped on demand
// through the message's one fd, a /dev/xen/privcmd fd the main process
// restricted to Domain (docs/xen.md "Guest RAM"). It is a type of its
// own, so that Memory's encoding stays as old workers know it; an old
// worker refuses it as an unknown type.
type Foreign struct {
	Slot    uint32
	Domain  uint32 // at most MaxDomID
	Regions []ForeignRegion
}

func (*Foreign) Type() Type { return TypeForeign }
func (*Foreign) fds() int   { return 1 }
func (m *Foreign) encode(e *encoder) {
	e.U32(m.Slot)
	e.U32(m.Domain)
	e.U32(uint32(len(m.Regions)))
	for _, r := range m.Regions {
		e.U64(r.GPA)
		e.U64(r.Size)
	}
}
func (m *Foreign) decode(d *decoder) {
	m.Slot = d.U32()
	m.Domain = d.U32()
	if m.Domain > MaxDomID {
		d.Fail("domain %d, max %d", m.Domain, MaxDomID)
		return
	}
	n := d.U32()
	if n == 0 || n > MaxRegions {
		d.Fail("%d foreign regions, want 1 to %d", n, MaxRegions)
		return
	}
	m.Regions = make([]ForeignRegion, n)
	for i := range m.Regions {
		m.Regions[i] = ForeignRegion{GPA: d.U64(), Size: d.U64()}
	}
}

// Reserve asks the main process for Bytes of the physical device's memory
// for the instance in Slot, before the worker allocates a buffer of that
// size (docs/overcommit.md). The Reply's status is OK with a ReserveReply
// body (granted, or: the instance is about to be moved, defer the
// command), or StatusOutOfResources when the device cannot hold it.
type Reserve struct {
	Slot  uint32
	Bytes uint64
}

func (*Reserve) Type() Type { return TypeReserve }
func (*Reserve) fds() int   { return 0 }
func (m *Reserve) encode(e *encoder) {
	e.U32(m.Slot)
	e.U64(m.Bytes)
}
func (m *Reserve) decode(d *decoder) {
	m.Slot = d.U32()
	m.Bytes = d.U64()
	if m.Bytes == 0 {
		d.Fail("reserve of 0 bytes")
	}
}

// ReserveReply is the Body of a Reserve's OK Reply.
type ReserveReply struct {
	// Relocate: nothing was reserved; the main process is moving the
	// instance (to another device, or out to host memory until room
	// appears). The worker must not complete the command that asked: it
	// leaves it in the ring, unfetched, and freezes the ring, so that the
	// command runs again where the instance lands.
	Relocate bool
}

// EncodeBody encodes a ReserveReply as a Reply's Body.
func (r *ReserveReply) EncodeBody() []byte {
	e := encoder{}
	e.bool(r.Relocate)
	return e.B
}

// DecodeReserveReply decodes a ReserveReply body.
func DecodeReserveReply(b []byte) (ReserveReply, error) {
	d := newDecoder(b)
	r := ReserveReply{Relocate: d.bool()}
	return r, d.done("reserve reply")
}

// Arena asks the main process for the memory a device context's executor
// shares with the worker (docs/executor-protocol.md "Shared buffer
// memory"): the worker may not make shared memory itself. Context is the
// context's id (1..abi.MaxContexts) in the instance in Slot, Bytes what
// its buffers may hold, at most the instance's memory quota. The OK
// Reply carries a sealed memory file of at least Bytes (Reply.File); any
// other status, none, and the context's buffers stay its executor's own.
type Arena struct {
	Slot    uint32
	Context uint32
	Bytes   uint64
}

func (*Arena) Type() Type { return TypeArena }
func (*Arena) fds() int   { return 0 }
func (m *Arena) encode(e *encoder) {
	e.U32(m.Slot)
	e.U32(m.Context)
	e.U64(m.Bytes)
}
func (m *Arena) decode(d *decoder) {
	m.Slot = d.U32()
	m.Context = d.U32()
	m.Bytes = d.U64()
	switch {
	case m.Context == 0 || m.Context > maxContexts:
		d.Fail("arena for context %d (1..%d)", m.Context, maxContexts)
	case m.Bytes == 0:
		d.Fail("arena of 0 bytes")
	}
}

// Unreserve gives back Bytes of the device's memory the instance in Slot
// no longer holds (a buffer freed, or an allocation that failed after its
// Reserve).
type Unreserve struct {
	Slot  uint32
	Bytes uint64
}

func (*Unreserve) Type() Type { return TypeUnreserve }
func (*Unreserve) fds() int   { return 0 }
func (m *Unreserve) encode(e *encoder) {
	e.U32(m.Slot)
	e.U64(m.Bytes)
}
func (m *Unreserve) decode(d *decoder) {
	m.Slot = d.U32()
	m.Bytes = d.U64()
}

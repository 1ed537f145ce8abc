package stream

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/vgpud/vgpud/internal/codec"
)

// Payload sizes: fixed ones exactly, variable ones without their bytes.
const (
	headerSize      = 16
	instanceFixed   = 4*2 + 8*3 + 4*2
	roundSize       = 8
	programFixed    = 16
	handleSize      = 4
	bufferSize      = 16
	bufferDataFixed = 20
	ringSize        = 48
	contextSize     = 48
	endSize         = 16
)

// Header opens every stream (docs/migration.md "Header"). A Writer writes
// it itself; a Reader returns it first.
//
//	off size field
//	0   8    magic, Magic ("VGPUMIG\x00")
//	8   2    major version (Major)
//	10  2    minor version
//	12  4    reserved, 0
//
// The magic and the major version stay at these offsets in every major
// version, so that a reader can always tell ErrVersion from ErrCorrupt.
type Header struct {
	Major, Minor uint16
}

// Instance describes the instance the stream carries (docs/migration.md
// "Instance"). Strings are a u16 length n and n bytes of UTF-8.
//
//	off size field
//	0   2+a  id (1..MaxInstanceID bytes)
//	..  2+b  profile (0..MaxProfileName bytes)
//	..  2+c  domain: the reuse/trust domain (0..MaxDomainName bytes)
//	..  2+d  device: the source physical device's name (0..MaxDeviceName bytes)
//	s   8    mem_bytes (nonzero), s = 8+a+b+c+d
//	s+8 8    program_bytes
//	s+16 8   max_alloc
//	s+24 4   compute_units
//	s+28 4   reserved, 0
type Instance struct {
	ID           string
	Profile      string
	Domain       string
	Device       string
	MemBytes     uint64
	ProgramBytes uint64
	MaxAlloc     uint64
	ComputeUnits uint32
}

// Round starts a round of copying (docs/migration.md "Round").
//
//	off size field
//	0   4    round number
//	4   4    flags: bit 0 Final (the stop-and-copy round); others 0
type Round struct {
	Number uint32
	Final  bool
}

// Program is a program's source and build options (docs/migration.md
// "Program").
//
//	off    size field
//	0      4    handle (nonzero)
//	4      2    flags, opaque to the stream
//	6      2    reserved, 0
//	8      4    src_len s (1..MaxSource)
//	12     4    opts_len o (0..MaxOptions)
//	16     s    source
//	16+s   o    build options
type Program struct {
	Handle  uint32
	Flags   uint16
	Source  []byte
	Options []byte // nil when empty
}

// ProgramFree drops a program sent earlier.
//
//	off size field
//	0   4    handle (nonzero)
type ProgramFree struct {
	Handle uint32
}

// Buffer creates a buffer (docs/migration.md "Buffer"); its contents
// follow in BufferData records.
//
//	off size field
//	0   4    handle (nonzero)
//	4   4    flags, opaque to the stream
//	8   8    size (1..MaxBufferSize)
type Buffer struct {
	Handle uint32
	Flags  uint32
	Size   uint64
}

// BufferData is bytes [Offset, Offset+len(Data)) of a buffer
// (docs/migration.md "BufferData"). On the wire the data travels in one
// of three encodings the Writer chooses; a Reader returns it decoded.
//
//	off size field
//	0   4    handle (nonzero)
//	4   1    encoding: EncodingRaw, EncodingZero, EncodingZstd
//	5   3    reserved, 0
//	8   8    offset; offset + raw_len <= MaxBufferSize
//	16  4    raw_len (1..MaxChunk)
//	20  n    data: Raw: raw_len bytes; Zero: none; Zstd: one zstd frame
//	         whose header declares content size raw_len
type BufferData struct {
	Handle uint32
	Offset uint64
	Data   []byte
}

// BufferFree drops a buffer sent earlier.
//
//	off size field
//	0   4    handle (nonzero)
type BufferFree struct {
	Handle uint32
}

// Ring is the state of the instance's command ring (docs/migration.md
// "Ring"). The stream carries the values without judging them: the
// consumer validates them against the device ABI.
//
//	off size field
//	0   4    flags: bit 0 Enabled; others 0
//	4   4    slots
//	8   8    base: GPA of the command ring
//	16  8    compl_base: GPA of the completion records
//	24  4    head
//	28  4    tail
//	32  4    completed
//	36  4    err_status
//	40  4    err_count
//	44  4    reserved, 0
type Ring struct {
	Enabled   bool
	Slots     uint32
	Base      uint64
	ComplBase uint64
	Head      uint32
	Tail      uint32
	Completed uint32
	ErrStatus uint32
	ErrCount  uint32
}

// MaxContexts bounds a Context record's id (the device contexts an
// instance may have besides its default ring, abi.MaxContexts).
const MaxContexts = 64

// Context (1.1) switches the records that follow to device context ID
// of the instance (ABI 1.5), until the next Context record; ID 0 switches
// back to the default ring (docs/migration.md "Context"). With Destroyed
// the context no longer exists at the source: the reader ends it, and no
// record of it follows. The stream carries the ring's geometry without
// judging it; the consumer validates it as a context-create.
//
//	off size field
//	0   4    id, 0..MaxContexts
//	4   4    flags: bit 0 Destroyed; others 0
//	8   4    slots
//	12  4    reserved, 0
//	16  8    ring: GPA of the context's command ring
//	24  8    compl: GPA of its completion records
//	32  8    shadow: GPA of its tail shadow word
//	40  8    mem_limit: its memory limit (0: the instance's quota)
type Context struct {
	ID        uint32
	Destroyed bool
	Slots     uint32
	Ring      uint64
	Compl     uint64
	Shadow    uint64
	MemLimit  uint64
}

// GuestPages (1.2) carries guest RAM the device wrote while QEMU copied
// the VM (docs/migration.md "The vGPU runs while QEMU copies the VM"):
// Data is the content of the whole pages from guest-physical GPA on, as
// the source read them with the VM stopped. Only a final round carries
// it; the destination writes the pages into its guest RAM after QEMU has
// loaded the VM and before the VM runs. The flag FlagSkippable is clear:
// a reader of 1.1 refuses it rather than lose guest RAM.
//
//	off size field
//	0   8    gpa, page-aligned
//	8   4    pages: len(data) / 4096, 1..MaxChunk/4096
//	12  4    reserved, 0
//	16  ...  data
type GuestPages struct {
	GPA  uint64
	Data []byte
}

// GuestPageSize is the unit of a GuestPages record.
const GuestPageSize = 4096

// End closes every stream (docs/migration.md "End"). A Writer writes it
// in Close; a Reader checks its totals against what it read, returns it
// last and then io.EOF.
//
//	off size field
//	0   8    records before End, Header and skipped records included
//	8   8    payload bytes before End: the sum of their payload lengths
type End struct {
	Records      uint64
	PayloadBytes uint64
}

// Encoding is how a BufferData record's data travels.
type Encoding uint8

const (
	// EncodingRaw: the raw_len bytes themselves.
	EncodingRaw Encoding = 0
	// EncodingZero: nothing; the chunk is raw_len zero bytes.
	EncodingZero Encoding = 1
	// EncodingZstd: a zstd frame that decompresses to the raw_len bytes.
	EncodingZstd Encoding = 2
)

func (e Encoding) String() string {
	switch e {
	case EncodingRaw:
		return "raw"
	case EncodingZero:
		return "zero"
	case EncodingZstd:
		return "zstd"
	}
	return fmt.Sprintf("encoding(%d)", uint8(e))
}

func (*Header) Type() Type      { return TypeHeader }
func (*Instance) Type() Type    { return TypeInstance }
func (*Round) Type() Type       { return TypeRound }
func (*Program) Type() Type     { return TypeProgram }
func (*ProgramFree) Type() Type { return TypeProgramFree }
func (*Buffer) Type() Type      { return TypeBuffer }
func (*BufferData) Type() Type  { return TypeBufferData }
func (*BufferFree) Type() Type  { return TypeBufferFree }
func (*Ring) Type() Type        { return TypeRing }
func (*End) Type() Type         { return TypeEnd }
func (*Context) Type() Type     { return TypeContext }
func (*GuestPages) Type() Type  { return TypeGuestPages }

// Field checks, shared by Writer and Reader.

func (h *Header) check() error {
	if h.Major != Major {
		return fmt.Errorf("major version %d, want %d: %w", h.Major, Major, ErrVersion)
	}
	return nil
}

func checkString(what, s string, min, max int) error {
	if len(s) < min || len(s) > max {
		return fmt.Errorf("%s of %d bytes, want %d..%d", what, len(s), min, max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not UTF-8", what)
	}
	return nil
}

func (m *Instance) check() error {
	if err := checkString("id", m.ID, 1, MaxInstanceID); err != nil {
		return err
	}
	if err := checkString("profile", m.Profile, 0, MaxProfileName); err != nil {
		return err
	}
	if err := checkString("domain", m.Domain, 0, MaxDomainName); err != nil {
		return err
	}
	if err := checkString("device", m.Device, 0, MaxDeviceName); err != nil {
		return err
	}
	if m.MemBytes == 0 {
		return errors.New("mem_bytes 0")
	}
	return nil
}

func (*Round) check() error { return nil }

func checkHandle(h uint32) error {
	if h == 0 {
		return errors.New("handle 0")
	}
	return nil
}

func (m *Program) check() error {
	switch {
	case m.Handle == 0:
		return checkHandle(m.Handle)
	case len(m.Source) == 0 || len(m.Source) > MaxSource:
		return fmt.Errorf("source of %d bytes, want 1..%d", len(m.Source), MaxSource)
	case len(m.Options) > MaxOptions:
		return fmt.Errorf("options of %d bytes, max %d", len(m.Options), MaxOptions)
	}
	return nil
}

func (m *ProgramFree) check() error { return checkHandle(m.Handle) }
func (m *BufferFree) check() error  { return checkHandle(m.Handle) }

func (m *Buffer) check() error {
	if m.Handle == 0 {
		return checkHandle(m.Handle)
	}
	if m.Size == 0 || m.Size > MaxBufferSize {
		return fmt.Errorf("size %d, want 1..%d", m.Size, uint64(MaxBufferSize))
	}
	return nil
}

// checkChunk checks a BufferData's fields given its raw length.
func checkChunk(handle uint32, offset uint64, rawLen int) error {
	if rawLen < 1 || rawLen > MaxChunk {
		return fmt.Errorf("raw_len %d, want 1..%d", rawLen, MaxChunk)
	}
	return checkRange(handle, offset, uint64(rawLen))
}

// checkRange checks that [offset, offset+n) can lie in buffer handle.
func checkRange(handle uint32, offset, n uint64) error {
	if handle == 0 {
		return checkHandle(handle)
	}
	if n > MaxBufferSize || offset > MaxBufferSize-n {
		return fmt.Errorf("offset %d + length %d beyond %d", offset, n, uint64(MaxBufferSize))
	}
	return nil
}

func (m *BufferData) check() error { return checkChunk(m.Handle, m.Offset, len(m.Data)) }

func (*Ring) check() error { return nil }

func (m *Context) check() error {
	switch {
	case m.ID > MaxContexts:
		return fmt.Errorf("context %d, max %d", m.ID, MaxContexts)
	case m.ID == 0 && (m.Destroyed || m.Slots != 0 || m.Ring != 0 || m.Compl != 0 || m.Shadow != 0 || m.MemLimit != 0):
		return errors.New("context 0 (the default ring) with fields set")
	}
	return nil
}
func (m *GuestPages) check() error {
	switch n := len(m.Data); {
	case m.GPA%GuestPageSize != 0:
		return fmt.Errorf("guest pages at %#x: not page-aligned", m.GPA)
	case n == 0 || n%GuestPageSize != 0 || n > MaxChunk:
		return fmt.Errorf("guest pages of %d bytes: want 1 to %d whole pages", n, MaxChunk/GuestPageSize)
	case m.GPA+uint64(n)-1 < m.GPA:
		return fmt.Errorf("guest pages at %#x+%#x wrap", m.GPA, n)
	}
	return nil
}

func (*End) check() error { return nil }

// Encoding.

func appendString(b []byte, s string) []byte {
	b = le.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func (h *Header) appendPayload(b []byte) []byte {
	b = append(b, Magic...)
	b = le.AppendUint16(b, h.Major)
	b = le.AppendUint16(b, h.Minor)
	return le.AppendUint32(b, 0)
}

func (m *Instance) appendPayload(b []byte) []byte {
	b = appendString(b, m.ID)
	b = appendString(b, m.Profile)
	b = appendString(b, m.Domain)
	b = appendString(b, m.Device)
	b = le.AppendUint64(b, m.MemBytes)
	b = le.AppendUint64(b, m.ProgramBytes)
	b = le.AppendUint64(b, m.MaxAlloc)
	b = le.AppendUint32(b, m.ComputeUnits)
	return le.AppendUint32(b, 0)
}

func (m *Round) appendPayload(b []byte) []byte {
	b = le.AppendUint32(b, m.Number)
	return le.AppendUint32(b, boolBit(m.Final))
}

func (m *Program) appendPayload(b []byte) []byte {
	b = le.AppendUint32(b, m.Handle)
	b = le.AppendUint16(b, m.Flags)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, uint32(len(m.Source)))
	b = le.AppendUint32(b, uint32(len(m.Options)))
	b = append(b, m.Source...)
	return append(b, m.Options...)
}

func (m *ProgramFree) appendPayload(b []byte) []byte { return le.AppendUint32(b, m.Handle) }
func (m *BufferFree) appendPayload(b []byte) []byte  { return le.AppendUint32(b, m.Handle) }

func (m *Buffer) appendPayload(b []byte) []byte {
	b = le.AppendUint32(b, m.Handle)
	b = le.AppendUint32(b, m.Flags)
	return le.AppendUint64(b, m.Size)
}

// appendChunkFixed appends BufferData's fixed fields.
func appendChunkFixed(b []byte, handle uint32, enc Encoding, offset uint64, rawLen int) []byte {
	b = le.AppendUint32(b, handle)
	b = append(b, byte(enc), 0, 0, 0)
	b = le.AppendUint64(b, offset)
	return le.AppendUint32(b, uint32(rawLen))
}

func (m *BufferData) appendPayload(b []byte) []byte {
	b = appendChunkFixed(b, m.Handle, EncodingRaw, m.Offset, len(m.Data))
	return append(b, m.Data...)
}

func (m *Ring) appendPayload(b []byte) []byte {
	b = le.AppendUint32(b, boolBit(m.Enabled))
	b = le.AppendUint32(b, m.Slots)
	b = le.AppendUint64(b, m.Base)
	b = le.AppendUint64(b, m.ComplBase)
	for _, v := range []uint32{m.Head, m.Tail, m.Completed, m.ErrStatus, m.ErrCount, 0} {
		b = le.AppendUint32(b, v)
	}
	return b
}

func (m *End) appendPayload(b []byte) []byte {
	b = le.AppendUint64(b, m.Records)
	return le.AppendUint64(b, m.PayloadBytes)
}

func boolBit(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

// Decoding.

// decoder reads a payload's fields (internal/codec: the first failure
// sticks and every later read returns zero, so a decode function reads
// straight through and checks once), with the stream's strings (a u16
// length) and reserved fields.
type decoder struct{ codec.Reader }

func newDecoder(p []byte) decoder { return decoder{codec.NewReader(p, nil)} }

// str reads a u16 length and that many bytes, refusing a length over max
// before it takes anything.
func (d *decoder) str(what string, max int) string {
	return string(d.Bounded(what, uint64(d.U16()), max))
}

// zero fails unless a reserved field read as v is 0.
func (d *decoder) zero(what string, v uint64) {
	if d.Err() == nil && v != 0 {
		d.Fail("%s %#x, want 0", what, v)
	}
}

// done reports the first error, or bytes left over.
func (d *decoder) done() error {
	if d.Err() == nil && d.Len() != 0 {
		d.Fail("%d trailing bytes", d.Len())
	}
	return d.Err()
}

// cloneOrNil copies b; nil when b is empty.
func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

func decodeHeader(p []byte) (*Header, error) {
	if len(p) < 12 || string(p[:8]) != Magic {
		return nil, fmt.Errorf("bad magic %q", p[:min(len(p), 8)])
	}
	h := &Header{Major: le.Uint16(p[8:]), Minor: le.Uint16(p[10:])}
	if err := h.check(); err != nil {
		return nil, err
	}
	if len(p) != headerSize {
		return nil, fmt.Errorf("payload of %d bytes, want %d", len(p), headerSize)
	}
	if res := le.Uint32(p[12:]); res != 0 {
		return nil, fmt.Errorf("reserved field %#x, want 0", res)
	}
	return h, nil
}

func decodeInstance(p []byte) (*Instance, error) {
	d := newDecoder(p)
	m := &Instance{
		ID:      d.str("id", MaxInstanceID),
		Profile: d.str("profile", MaxProfileName),
		Domain:  d.str("domain", MaxDomainName),
		Device:  d.str("device", MaxDeviceName),
	}
	m.MemBytes = d.U64()
	m.ProgramBytes = d.U64()
	m.MaxAlloc = d.U64()
	m.ComputeUnits = d.U32()
	d.zero("reserved field", uint64(d.U32()))
	if err := d.done(); err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

func decodeRound(p []byte) (*Round, error) {
	d := newDecoder(p)
	m := &Round{Number: d.U32()}
	flags := d.U32()
	d.zero("flags", uint64(flags&^1))
	m.Final = flags&1 != 0
	if err := d.done(); err != nil {
		return nil, err
	}
	return m, nil
}

func decodeProgram(p []byte) (*Program, error) {
	d := newDecoder(p)
	m := &Program{Handle: d.U32(), Flags: d.U16()}
	d.zero("reserved field", uint64(d.U16()))
	srcLen, optsLen := d.U32(), d.U32()
	if d.Err() == nil && (srcLen == 0 || srcLen > MaxSource) {
		d.Fail("src_len %d, want 1..%d", srcLen, MaxSource)
	}
	if d.Err() == nil && optsLen > MaxOptions {
		d.Fail("opts_len %d, max %d", optsLen, MaxOptions)
	}
	src := d.Take(int(srcLen))
	opts := d.Take(int(optsLen))
	if err := d.done(); err != nil {
		return nil, err
	}
	m.Source = bytes.Clone(src)
	m.Options = cloneOrNil(opts)
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

func decodeHandle(p []byte) (uint32, error) {
	d := newDecoder(p)
	h := d.U32()
	if err := d.done(); err != nil {
		return 0, err
	}
	return h, checkHandle(h)
}

func decodeBuffer(p []byte) (*Buffer, error) {
	d := newDecoder(p)
	m := &Buffer{Handle: d.U32(), Flags: d.U32(), Size: d.U64()}
	if err := d.done(); err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

// chunk is a BufferData record's fields before its data is decoded.
type chunk struct {
	handle uint32
	enc    Encoding
	offset uint64
	rawLen int
	data   []byte // as on the wire; aliases the payload
}

// parseChunk checks a BufferData payload's fields and the length of its
// data for the encoding; decompressing is the Reader's.
func parseChunk(p []byte) (chunk, error) {
	d := newDecoder(p)
	c := chunk{handle: d.U32(), enc: Encoding(d.U8())}
	r := d.Take(3)
	if d.Err() == nil {
		d.zero("reserved bytes", uint64(r[0])|uint64(r[1])<<8|uint64(r[2])<<16)
	}
	c.offset = d.U64()
	c.rawLen = int(d.U32())
	if d.Err() != nil {
		return c, d.Err()
	}
	c.data = d.Rest()
	if err := checkChunk(c.handle, c.offset, c.rawLen); err != nil {
		return c, err
	}
	switch c.enc {
	case EncodingRaw:
		if len(c.data) != c.rawLen {
			return c, fmt.Errorf("raw data of %d bytes, raw_len %d", len(c.data), c.rawLen)
		}
	case EncodingZero:
		if len(c.data) != 0 {
			return c, fmt.Errorf("zero chunk with %d bytes of data", len(c.data))
		}
	case EncodingZstd:
		if len(c.data) == 0 {
			return c, errors.New("zstd chunk with no frame")
		}
	default:
		return c, fmt.Errorf("encoding %d", uint8(c.enc))
	}
	return c, nil
}

func decodeRing(p []byte) (*Ring, error) {
	d := newDecoder(p)
	flags := d.U32()
	d.zero("flags", uint64(flags&^1))
	m := &Ring{
		Enabled:   flags&1 != 0,
		Slots:     d.U32(),
		Base:      d.U64(),
		ComplBase: d.U64(),
		Head:      d.U32(),
		Tail:      d.U32(),
		Completed: d.U32(),
		ErrStatus: d.U32(),
		ErrCount:  d.U32(),
	}
	d.zero("reserved field", uint64(d.U32()))
	if err := d.done(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Context) appendPayload(b []byte) []byte {
	b = le.AppendUint32(b, m.ID)
	b = le.AppendUint32(b, boolBit(m.Destroyed))
	b = le.AppendUint32(b, m.Slots)
	b = le.AppendUint32(b, 0)
	for _, v := range []uint64{m.Ring, m.Compl, m.Shadow, m.MemLimit} {
		b = le.AppendUint64(b, v)
	}
	return b
}

func decodeContext(p []byte) (*Context, error) {
	d := newDecoder(p)
	m := &Context{ID: d.U32()}
	flags := d.U32()
	d.zero("flags", uint64(flags&^1))
	m.Destroyed = flags&1 != 0
	m.Slots = d.U32()
	d.zero("reserved field", uint64(d.U32()))
	m.Ring, m.Compl, m.Shadow, m.MemLimit = d.U64(), d.U64(), d.U64(), d.U64()
	if err := d.done(); err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

// guestPagesFixed is GuestPages' payload before its data.
const guestPagesFixed = 16

func (m *GuestPages) appendPayload(b []byte) []byte {
	b = le.AppendUint64(b, m.GPA)
	b = le.AppendUint32(b, uint32(len(m.Data)/GuestPageSize))
	b = le.AppendUint32(b, 0)
	return append(b, m.Data...)
}

func decodeGuestPages(p []byte) (*GuestPages, error) {
	d := newDecoder(p[:min(len(p), guestPagesFixed)])
	m := &GuestPages{GPA: d.U64()}
	pages := d.U32()
	d.zero("reserved field", uint64(d.U32()))
	if err := d.done(); err != nil {
		return nil, err
	}
	data := p[guestPagesFixed:]
	if uint64(len(data)) != uint64(pages)*GuestPageSize {
		return nil, fmt.Errorf("%d pages in %d bytes", pages, len(data))
	}
	m.Data = bytes.Clone(data)
	if err := m.check(); err != nil {
		return nil, err
	}
	return m, nil
}

func decodeEnd(p []byte) (*End, error) {
	d := newDecoder(p)
	m := &End{Records: d.U64(), PayloadBytes: d.U64()}
	if err := d.done(); err != nil {
		return nil, err
	}
	return m, nil
}

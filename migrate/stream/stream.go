package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

var le = binary.LittleEndian

// castagnoli is the CRC-32C table every record's checksum uses.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Version of the format this package writes (docs/migration.md
// "Versioning"). A Reader refuses any other Major and accepts any Minor.
const (
	Major = 1
	Minor = 2
)

// Magic opens the Header record's payload.
const Magic = "VGPUMIG\x00"

// Framing limits (docs/migration.md "Framing").
const (
	// HeaderSize is the size of every record's header.
	HeaderSize = 16
	// MaxChunk bounds the raw bytes of one BufferData record.
	MaxChunk = 4 << 20
	// MaxPayload bounds every record's payload: a chunk and room for
	// its fixed fields or a zstd frame's overhead.
	MaxPayload = MaxChunk + 4096
)

// Field limits (docs/migration.md "Limits").
const (
	MaxInstanceID  = 64
	MaxProfileName = 64
	MaxDomainName  = 128
	MaxDeviceName  = 256
	// MaxSource bounds a program's source bytes, MaxOptions its build
	// options.
	MaxSource  = 1 << 20
	MaxOptions = 4096
	// MaxBufferSize bounds a buffer's size; no BufferData reaches past it.
	MaxBufferSize = 1 << 40
)

// FlagSkippable in a record header's flags marks a record that a reader
// which does not know its type skips instead of failing. The other bits
// are reserved and must be 0.
const FlagSkippable = 1 << 0

// Errors callers tell apart. Every error of a Reader about the bytes it
// read wraps exactly one of ErrVersion, ErrCorrupt and ErrTruncated;
// errors of the underlying io.Reader or io.Writer are returned as they
// are, wrapped with the record's number.
var (
	// ErrVersion: the stream's major version is not Major.
	ErrVersion = errors.New("unsupported migration stream version")
	// ErrCorrupt: a checksum mismatch, a field out of range, an unknown
	// record type that is not skippable, records out of order or End's
	// totals not matching what was read.
	ErrCorrupt = errors.New("corrupt migration stream")
	// ErrTruncated: the stream ended before End. Such errors also wrap
	// io.ErrUnexpectedEOF.
	ErrTruncated = errors.New("truncated migration stream")
	// ErrInvalid: a Writer was given a record with a field out of range,
	// or one it writes itself (Header, End). Nothing was written.
	ErrInvalid = errors.New("invalid migration record")
	// ErrClosed: a Writer was used after Close.
	ErrClosed = errors.New("migration stream writer closed")
)

// Type identifies a record.
type Type uint16

// The record types (docs/migration.md "Records"). No type's low byte is
// 0x7b ('{'): on the daemons' channel a source's abort line may stand
// where a record starts (migrate's destination peeks for it).
const (
	TypeHeader      Type = 1
	TypeInstance    Type = 2
	TypeRound       Type = 3
	TypeProgram     Type = 4
	TypeProgramFree Type = 5
	TypeBuffer      Type = 6
	TypeBufferData  Type = 7
	TypeBufferFree  Type = 8
	TypeRing        Type = 9
	TypeEnd         Type = 10
	TypeContext     Type = 11 // 1.1
	TypeGuestPages  Type = 12 // 1.2
	numTypes             = 13
)

var typeNames = [numTypes]string{
	TypeHeader: "header", TypeInstance: "instance", TypeRound: "round", TypeProgram: "program",
	TypeProgramFree: "program-free", TypeBuffer: "buffer", TypeBufferData: "buffer-data",
	TypeBufferFree: "buffer-free", TypeRing: "ring", TypeEnd: "end", TypeContext: "context",
	TypeGuestPages: "guest-pages",
}

func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint16(t))
}

// known reports whether this version of the format defines t.
func (t Type) known() bool { return int(t) < len(typeNames) && typeNames[t] != "" }

// maxPayload bounds the payload of a record of type t, so that a reader
// refuses a lying length before it reads (or allocates) anything.
func (t Type) maxPayload() int {
	switch t {
	case TypeHeader:
		// A Header of another major may be longer than 1.x's; read
		// enough of it to report ErrVersion rather than ErrCorrupt.
		return 4096
	case TypeInstance:
		return instanceFixed + MaxInstanceID + MaxProfileName + MaxDomainName + MaxDeviceName
	case TypeRound:
		return roundSize
	case TypeProgram:
		return programFixed + MaxSource + MaxOptions
	case TypeProgramFree, TypeBufferFree:
		return handleSize
	case TypeBuffer:
		return bufferSize
	case TypeRing:
		return ringSize
	case TypeContext:
		return contextSize
	case TypeGuestPages:
		return guestPagesFixed + MaxChunk
	case TypeEnd:
		return endSize
	}
	return MaxPayload
}

// Record is one record of a stream: *Header, *Instance, *Round, *Program,
// *ProgramFree, *Buffer, *BufferData, *BufferFree, *Ring, *Context,
// *GuestPages or *End.
type Record interface {
	Type() Type
	// check reports the first field out of range; the Writer and the
	// Reader share it, so a Writer never writes what a Reader refuses.
	check() error
	// appendPayload appends the payload (BufferData: Raw encoding).
	appendPayload(b []byte) []byte
}

// recordHeader starts every record.
//
//	off size field
//	0   2    type
//	2   2    flags: FlagSkippable; other bits 0
//	4   4    payload length (<= MaxPayload)
//	8   4    CRC-32C (Castagnoli) of the payload
//	12  4    reserved, 0
type recordHeader struct {
	Type  Type
	Flags uint16
	Len   uint32
	CRC   uint32
}

func (h recordHeader) put(b []byte) {
	le.PutUint16(b[0:], uint16(h.Type))
	le.PutUint16(b[2:], h.Flags)
	le.PutUint32(b[4:], h.Len)
	le.PutUint32(b[8:], h.CRC)
	le.PutUint32(b[12:], 0)
}

// parseRecordHeader checks a record header's framing: the reserved
// field and flag bits, and the length against MaxPayload and the type's
// own bound.
func parseRecordHeader(b []byte) (recordHeader, error) {
	h := recordHeader{
		Type:  Type(le.Uint16(b[0:])),
		Flags: le.Uint16(b[2:]),
		Len:   le.Uint32(b[4:]),
		CRC:   le.Uint32(b[8:]),
	}
	if res := le.Uint32(b[12:]); res != 0 {
		return h, fmt.Errorf("record header reserved field %#x", res)
	}
	if h.Flags&^FlagSkippable != 0 {
		return h, fmt.Errorf("record header flags %#x", h.Flags)
	}
	if h.Len > MaxPayload {
		return h, fmt.Errorf("payload of %d bytes, max %d", h.Len, MaxPayload)
	}
	if m := h.Type.maxPayload(); int64(h.Len) > int64(m) {
		return h, fmt.Errorf("payload of %d bytes, max %d for the type", h.Len, m)
	}
	return h, nil
}

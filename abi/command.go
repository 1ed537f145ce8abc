package abi

import (
	"encoding/binary"
	"fmt"
)

var le = binary.LittleEndian

// Opcode names a command (docs/ABI.md "Commands").
type Opcode uint16

// Opcodes. Values are part of the ABI: never renumber.
const (
	OpNop            Opcode = 0
	OpBufferCreate   Opcode = 1
	OpBufferFree     Opcode = 2
	OpCopyToDev      Opcode = 3
	OpCopyFromDev    Opcode = 4
	OpProgramBuild   Opcode = 5
	OpProgramFree    Opcode = 6
	OpLaunch         Opcode = 7
	OpFence          Opcode = 8
	OpProgramInfo    Opcode = 9  // ABI 1.4
	OpBufferCopy     Opcode = 10 // ABI 1.4
	OpBufferFill     Opcode = 11 // ABI 1.4
	OpDeviceInfo     Opcode = 12 // ABI 1.4
	OpContextCreate  Opcode = 13 // ABI 1.5
	OpContextDestroy Opcode = 14 // ABI 1.5
)

var opcodeNames = [...]string{
	OpNop:            "nop",
	OpBufferCreate:   "buffer-create",
	OpBufferFree:     "buffer-free",
	OpCopyToDev:      "copy-to-device",
	OpCopyFromDev:    "copy-from-device",
	OpProgramBuild:   "program-build",
	OpProgramFree:    "program-free",
	OpLaunch:         "launch",
	OpFence:          "fence",
	OpProgramInfo:    "program-info",
	OpBufferCopy:     "buffer-copy",
	OpBufferFill:     "buffer-fill",
	OpDeviceInfo:     "device-info",
	OpContextCreate:  "context-create",
	OpContextDestroy: "context-destroy",
}

// NumOpcodes is one more than the largest defined opcode.
const NumOpcodes = len(opcodeNames)

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("opcode(%d)", uint16(o))
}

// Valid reports whether o is a defined opcode.
func (o Opcode) Valid() bool { return int(o) < len(opcodeNames) }

// Command flags (docs/ABI.md "Command slot").
const (
	// FlagNondeterministic on OpLaunch or OpProgramBuild tells the device the
	// kernel's results must never be memoized or reused.
	FlagNondeterministic uint16 = 1 << 0
	// FlagsMask is the set of defined flag bits; others must be zero.
	FlagsMask = FlagNondeterministic
)

// Command is one 64-byte ring slot (docs/ABI.md "Command slot").
//
//	off  size  field
//	0    2     opcode
//	2    2     flags
//	4    4     reserved, must be 0
//	8    8     tag, echoed in the completion record
//	16   48    payload, opcode specific
type Command struct {
	Opcode  Opcode
	Flags   uint16
	_       uint32
	Tag     uint64
	Payload [48]byte
}

// Marshal writes c into b, which must be at least CommandSize bytes.
func (c *Command) Marshal(b []byte) {
	_ = b[CommandSize-1]
	le.PutUint16(b[0:], uint16(c.Opcode))
	le.PutUint16(b[2:], c.Flags)
	le.PutUint32(b[4:], 0)
	le.PutUint64(b[8:], c.Tag)
	copy(b[16:CommandSize], c.Payload[:])
}

// UnmarshalCommand decodes a ring slot. It checks only the framing (length,
// reserved field); opcode and payload are checked by the payload decoders.
func UnmarshalCommand(b []byte) (Command, error) {
	var c Command
	if len(b) < CommandSize {
		return c, fmt.Errorf("command: %d bytes, want %d: %w", len(b), CommandSize, ErrMalformed)
	}
	c.Opcode = Opcode(le.Uint16(b[0:]))
	c.Flags = le.Uint16(b[2:])
	c.Tag = le.Uint64(b[8:]) // read before any check: a failed command still echoes its tag
	copy(c.Payload[:], b[16:CommandSize])
	if r := le.Uint32(b[4:]); r != 0 {
		return c, fmt.Errorf("command: reserved field %#x: %w", r, ErrMalformed)
	}
	if c.Flags&^FlagsMask != 0 {
		return c, fmt.Errorf("command: undefined flags %#x: %w", c.Flags, ErrMalformed)
	}
	return c, nil
}

// Payload is implemented by every command payload type.
type Payload interface {
	Op() Opcode
	marshal(p *[48]byte)
	unmarshal(p *[48]byte) error
}

// NewCommand builds a ring slot from a payload.
func NewCommand(p Payload, flags uint16, tag uint64) Command {
	c := Command{Opcode: p.Op(), Flags: flags, Tag: tag}
	p.marshal(&c.Payload)
	return c
}

// DecodePayload decodes c's payload into the type its opcode names.
func DecodePayload(c *Command) (Payload, error) {
	var p Payload
	switch c.Opcode {
	case OpNop:
		p = &Nop{}
	case OpBufferCreate:
		p = &BufferCreate{}
	case OpBufferFree:
		p = &BufferFree{}
	case OpCopyToDev:
		p = &Copy{ToDevice: true}
	case OpCopyFromDev:
		p = &Copy{}
	case OpProgramBuild:
		p = &ProgramBuild{}
	case OpProgramFree:
		p = &ProgramFree{}
	case OpLaunch:
		p = &Launch{}
	case OpFence:
		p = &Fence{}
	case OpProgramInfo:
		p = &ProgramInfoQuery{}
	case OpBufferCopy:
		p = &BufferCopy{}
	case OpBufferFill:
		p = &BufferFill{}
	case OpDeviceInfo:
		p = &DeviceInfoQuery{}
	case OpContextCreate:
		p = &ContextCreate{}
	case OpContextDestroy:
		p = &ContextDestroy{}
	default:
		return nil, Errorf(StatusInvalidOpcode, "opcode %d", uint16(c.Opcode))
	}
	if err := p.unmarshal(&c.Payload); err != nil {
		return nil, fmt.Errorf("decode %v: %w", c.Opcode, err)
	}
	return p, nil
}

// DecodeAs decodes c's payload as a P, the payload type of the opcode a
// handler serves: an opcode whose payload is not a P is refused with
// StatusInvalidOpcode, never taken for one.
func DecodeAs[P Payload](c *Command) (P, error) {
	var zero P
	p, err := DecodePayload(c)
	if err != nil {
		return zero, err
	}
	v, ok := p.(P)
	if !ok {
		return zero, Errorf(StatusInvalidOpcode, "opcode %v does not carry a %T", c.Opcode, zero)
	}
	return v, nil
}

func zeroFrom(p *[48]byte, off int) error {
	for i := off; i < len(p); i++ {
		if p[i] != 0 {
			return fmt.Errorf("reserved payload byte %d is %#x: %w", i, p[i], ErrMalformed)
		}
	}
	return nil
}

// Nop completes with StatusOK and does nothing (docs/ABI.md "nop").
type Nop struct{}

func (*Nop) Op() Opcode                  { return OpNop }
func (*Nop) marshal(*[48]byte)           {}
func (*Nop) unmarshal(p *[48]byte) error { return zeroFrom(p, 0) }

// Buffer flags (docs/ABI.md "buffer-create").
const (
	BufferReadOnly  uint32 = 1 << 0 // kernels only read it
	BufferWriteOnly uint32 = 1 << 1 // kernels only write it
	BufferFlagsMask        = BufferReadOnly | BufferWriteOnly
)

// BufferCreate allocates device memory under a guest-chosen handle
// (docs/ABI.md "buffer-create").
//
//	off size field
//	0   4    handle (nonzero, unused in this instance)
//	4   4    flags, Buffer*
//	8   8    size in bytes (nonzero)
type BufferCreate struct {
	Handle uint32
	Flags  uint32
	Size   uint64
}

func (*BufferCreate) Op() Opcode { return OpBufferCreate }
func (b *BufferCreate) marshal(p *[48]byte) {
	le.PutUint32(p[0:], b.Handle)
	le.PutUint32(p[4:], b.Flags)
	le.PutUint64(p[8:], b.Size)
}
func (b *BufferCreate) unmarshal(p *[48]byte) error {
	b.Handle = le.Uint32(p[0:])
	b.Flags = le.Uint32(p[4:])
	b.Size = le.Uint64(p[8:])
	switch {
	case b.Handle == 0:
		return fmt.Errorf("handle 0: %w", ErrMalformed)
	case b.Flags&^BufferFlagsMask != 0 || b.Flags == BufferFlagsMask:
		return fmt.Errorf("flags %#x: %w", b.Flags, ErrMalformed)
	case b.Size == 0:
		return fmt.Errorf("size 0: %w", ErrMalformed)
	}
	return zeroFrom(p, 16)
}

// BufferFree releases a buffer (docs/ABI.md "buffer-free").
//
//	off size field
//	0   4    handle
type BufferFree struct{ Handle uint32 }

func (*BufferFree) Op() Opcode            { return OpBufferFree }
func (b *BufferFree) marshal(p *[48]byte) { le.PutUint32(p[0:], b.Handle) }
func (b *BufferFree) unmarshal(p *[48]byte) error {
	b.Handle = le.Uint32(p[0:])
	if b.Handle == 0 {
		return fmt.Errorf("handle 0: %w", ErrMalformed)
	}
	return zeroFrom(p, 4)
}

// Copy moves bytes between guest RAM, described by a scatter-gather list,
// and a buffer (docs/ABI.md "copy-to-device, copy-from-device").
//
//	off size field
//	0   4    handle
//	4   4    sg_count: entries in the first scatter-gather table
//	8   8    offset in the buffer
//	16  8    length in bytes (nonzero; the data entries must add up to it)
//	24  8    sg_gpa: guest-physical address of the first table (16-byte aligned)
type Copy struct {
	ToDevice bool // OpCopyToDev when true, else OpCopyFromDev
	Handle   uint32
	SGCount  uint32
	Offset   uint64
	Length   uint64
	SGAddr   uint64
}

func (c *Copy) Op() Opcode {
	if c.ToDevice {
		return OpCopyToDev
	}
	return OpCopyFromDev
}
func (c *Copy) marshal(p *[48]byte) {
	le.PutUint32(p[0:], c.Handle)
	le.PutUint32(p[4:], c.SGCount)
	le.PutUint64(p[8:], c.Offset)
	le.PutUint64(p[16:], c.Length)
	le.PutUint64(p[24:], c.SGAddr)
}
func (c *Copy) unmarshal(p *[48]byte) error {
	c.Handle = le.Uint32(p[0:])
	c.SGCount = le.Uint32(p[4:])
	c.Offset = le.Uint64(p[8:])
	c.Length = le.Uint64(p[16:])
	c.SGAddr = le.Uint64(p[24:])
	switch {
	case c.Handle == 0:
		return fmt.Errorf("handle 0: %w", ErrMalformed)
	case c.Length == 0:
		return fmt.Errorf("length 0: %w", ErrMalformed)
	case c.Offset+c.Length < c.Offset:
		return fmt.Errorf("offset %d + length %d overflows: %w", c.Offset, c.Length, ErrMalformed)
	case c.SGCount == 0 || c.SGCount > PageSize/SGEntrySize:
		return fmt.Errorf("sg_count %d: %w", c.SGCount, ErrMalformed)
	case c.SGAddr%SGEntrySize != 0:
		return fmt.Errorf("sg_gpa %#x misaligned: %w", c.SGAddr, ErrMalformed)
	}
	return zeroFrom(p, 32)
}

// ProgramBuild compiles OpenCL C source under a guest-chosen program handle
// (docs/ABI.md "program-build").
//
//	off size field
//	0   4    program handle (nonzero, unused)
//	4   4    src_sg_count
//	8   8    src_len (1..MaxSourceLen)
//	16  8    src_sg_gpa
//	24  8    opts_gpa (contiguous; 0 when opts_len is 0)
//	32  4    opts_len (0..MaxOptionsLen)
//	36  4    log_len: room for the build log at log_gpa (0..MaxBuildLogLen)
//	40  8    log_gpa (contiguous; 0 when log_len is 0)
type ProgramBuild struct {
	Handle    uint32
	SrcCount  uint32
	SrcLen    uint64
	SrcSGAddr uint64
	OptsAddr  uint64
	OptsLen   uint32
	LogLen    uint32
	LogAddr   uint64
}

func (*ProgramBuild) Op() Opcode { return OpProgramBuild }
func (b *ProgramBuild) marshal(p *[48]byte) {
	le.PutUint32(p[0:], b.Handle)
	le.PutUint32(p[4:], b.SrcCount)
	le.PutUint64(p[8:], b.SrcLen)
	le.PutUint64(p[16:], b.SrcSGAddr)
	le.PutUint64(p[24:], b.OptsAddr)
	le.PutUint32(p[32:], b.OptsLen)
	le.PutUint32(p[36:], b.LogLen)
	le.PutUint64(p[40:], b.LogAddr)
}
func (b *ProgramBuild) unmarshal(p *[48]byte) error {
	b.Handle = le.Uint32(p[0:])
	b.SrcCount = le.Uint32(p[4:])
	b.SrcLen = le.Uint64(p[8:])
	b.SrcSGAddr = le.Uint64(p[16:])
	b.OptsAddr = le.Uint64(p[24:])
	b.OptsLen = le.Uint32(p[32:])
	b.LogLen = le.Uint32(p[36:])
	b.LogAddr = le.Uint64(p[40:])
	switch {
	case b.Handle == 0:
		return fmt.Errorf("handle 0: %w", ErrMalformed)
	case b.SrcLen == 0 || b.SrcLen > MaxSourceLen:
		return fmt.Errorf("source length %d: %w", b.SrcLen, ErrMalformed)
	case b.SrcCount == 0 || b.SrcCount > PageSize/SGEntrySize:
		return fmt.Errorf("source sg_count %d: %w", b.SrcCount, ErrMalformed)
	case b.SrcSGAddr%SGEntrySize != 0:
		return fmt.Errorf("source sg_gpa %#x misaligned: %w", b.SrcSGAddr, ErrMalformed)
	case b.OptsLen > MaxOptionsLen:
		return fmt.Errorf("options length %d: %w", b.OptsLen, ErrMalformed)
	case b.LogLen > MaxBuildLogLen:
		return fmt.Errorf("log length %d: %w", b.LogLen, ErrMalformed)
	}
	return nil
}

// ProgramFree releases a program and its kernels (docs/ABI.md "program-free").
//
//	off size field
//	0   4    program handle
type ProgramFree struct{ Handle uint32 }

func (*ProgramFree) Op() Opcode            { return OpProgramFree }
func (b *ProgramFree) marshal(p *[48]byte) { le.PutUint32(p[0:], b.Handle) }
func (b *ProgramFree) unmarshal(p *[48]byte) error {
	b.Handle = le.Uint32(p[0:])
	if b.Handle == 0 {
		return fmt.Errorf("handle 0: %w", ErrMalformed)
	}
	return zeroFrom(p, 4)
}

// Launch runs a kernel described by a launch descriptor in guest RAM
// (docs/ABI.md "launch").
//
//	off size field
//	0   4    program handle
//	4   4    desc_len (LaunchHeaderSize..MaxLaunchDescLen)
//	8   8    desc_gpa (contiguous, 8-byte aligned)
type Launch struct {
	Program  uint32
	DescLen  uint32
	DescAddr uint64
}

func (*Launch) Op() Opcode { return OpLaunch }
func (l *Launch) marshal(p *[48]byte) {
	le.PutUint32(p[0:], l.Program)
	le.PutUint32(p[4:], l.DescLen)
	le.PutUint64(p[8:], l.DescAddr)
}
func (l *Launch) unmarshal(p *[48]byte) error {
	l.Program = le.Uint32(p[0:])
	l.DescLen = le.Uint32(p[4:])
	l.DescAddr = le.Uint64(p[8:])
	switch {
	case l.Program == 0:
		return fmt.Errorf("program 0: %w", ErrMalformed)
	case l.DescLen < LaunchHeaderSize || l.DescLen > MaxLaunchDescLen:
		return fmt.Errorf("descriptor length %d: %w", l.DescLen, ErrMalformed)
	case l.DescAddr%8 != 0:
		return fmt.Errorf("descriptor address %#x misaligned: %w", l.DescAddr, ErrMalformed)
	}
	return zeroFrom(p, 16)
}

// Fence stores a 64-bit value at a guest-physical address once every earlier
// command of the ring has completed (docs/ABI.md "fence").
//
//	off size field
//	0   8    gpa (8-byte aligned)
//	8   8    value
type Fence struct {
	Addr  uint64
	Value uint64
}

func (*Fence) Op() Opcode { return OpFence }
func (f *Fence) marshal(p *[48]byte) {
	le.PutUint64(p[0:], f.Addr)
	le.PutUint64(p[8:], f.Value)
}
func (f *Fence) unmarshal(p *[48]byte) error {
	f.Addr = le.Uint64(p[0:])
	f.Value = le.Uint64(p[8:])
	if f.Addr%8 != 0 {
		return fmt.Errorf("fence address %#x misaligned: %w", f.Addr, ErrMalformed)
	}
	return zeroFrom(p, 16)
}

// ProgramInfoQuery asks for the program-information blob (ProgramInfo) of a
// program, written into guest RAM through a scatter-gather list when it
// fits (docs/ABI.md "program-info", ABI 1.4).
//
//	off size field
//	0   4    program handle
//	4   4    sg_count: entries in the first scatter-gather table (1..256)
//	8   8    length: room in bytes (nonzero; the data entries must add up to it)
//	16  8    sg_gpa: guest-physical address of the first table (16-byte aligned)
type ProgramInfoQuery struct {
	Handle  uint32
	SGCount uint32
	Length  uint64
	SGAddr  uint64
}

func (*ProgramInfoQuery) Op() Opcode { return OpProgramInfo }
func (q *ProgramInfoQuery) marshal(p *[48]byte) {
	le.PutUint32(p[0:], q.Handle)
	le.PutUint32(p[4:], q.SGCount)
	le.PutUint64(p[8:], q.Length)
	le.PutUint64(p[16:], q.SGAddr)
}
func (q *ProgramInfoQuery) unmarshal(p *[48]byte) error {
	q.Handle = le.Uint32(p[0:])
	q.SGCount = le.Uint32(p[4:])
	q.Length = le.Uint64(p[8:])
	q.SGAddr = le.Uint64(p[16:])
	switch {
	case q.Handle == 0:
		return fmt.Errorf("program 0: %w", ErrMalformed)
	case q.SGCount == 0 || q.SGCount > PageSize/SGEntrySize:
		return fmt.Errorf("sg_count %d: %w", q.SGCount, ErrMalformed)
	case q.Length == 0:
		return fmt.Errorf("length 0: %w", ErrMalformed)
	case q.SGAddr%SGEntrySize != 0:
		return fmt.Errorf("sg_gpa %#x misaligned: %w", q.SGAddr, ErrMalformed)
	}
	return zeroFrom(p, 24)
}

// BufferCopy copies bytes from one buffer to another, or within one buffer
// between ranges that do not overlap (docs/ABI.md "buffer-copy", ABI 1.4).
//
//	off size field
//	0   4    src: source buffer handle
//	4   4    dst: destination buffer handle (may equal src)
//	8   8    src_offset
//	16  8    dst_offset
//	24  8    length in bytes (nonzero; neither offset + length overflows)
type BufferCopy struct {
	Src       uint32
	Dst       uint32
	SrcOffset uint64
	DstOffset uint64
	Length    uint64
}

func (*BufferCopy) Op() Opcode { return OpBufferCopy }
func (c *BufferCopy) marshal(p *[48]byte) {
	le.PutUint32(p[0:], c.Src)
	le.PutUint32(p[4:], c.Dst)
	le.PutUint64(p[8:], c.SrcOffset)
	le.PutUint64(p[16:], c.DstOffset)
	le.PutUint64(p[24:], c.Length)
}
func (c *BufferCopy) unmarshal(p *[48]byte) error {
	c.Src = le.Uint32(p[0:])
	c.Dst = le.Uint32(p[4:])
	c.SrcOffset = le.Uint64(p[8:])
	c.DstOffset = le.Uint64(p[16:])
	c.Length = le.Uint64(p[24:])
	switch {
	case c.Src == 0 || c.Dst == 0:
		return fmt.Errorf("buffer 0 (src %d, dst %d): %w", c.Src, c.Dst, ErrMalformed)
	case c.Length == 0:
		return fmt.Errorf("length 0: %w", ErrMalformed)
	case c.SrcOffset+c.Length < c.SrcOffset:
		return fmt.Errorf("src_offset %d + length %d overflows: %w", c.SrcOffset, c.Length, ErrMalformed)
	case c.DstOffset+c.Length < c.DstOffset:
		return fmt.Errorf("dst_offset %d + length %d overflows: %w", c.DstOffset, c.Length, ErrMalformed)
	case c.Overlaps():
		return fmt.Errorf("copy within buffer %d: %d+%d and %d+%d overlap: %w", c.Src, c.SrcOffset, c.Length, c.DstOffset, c.Length, ErrMalformed)
	}
	return zeroFrom(p, 32)
}

// Overlaps reports whether c copies within one buffer between overlapping
// ranges (which the device refuses). Both ranges must not overflow.
func (c *BufferCopy) Overlaps() bool {
	return c.Src == c.Dst && c.SrcOffset < c.DstOffset+c.Length && c.DstOffset < c.SrcOffset+c.Length
}

// BufferFill writes a pattern of 1, 2, 4, ... or MaxFillPattern bytes,
// read from guest RAM, repeatedly over a range of a buffer
// (docs/ABI.md "buffer-fill", ABI 1.4).
//
//	off size field
//	0   4    handle
//	4   4    pattern_len: a power of two, 1..MaxFillPattern
//	8   8    offset in the buffer (a multiple of pattern_len)
//	16  8    length in bytes (nonzero, a multiple of pattern_len; offset + length does not overflow)
//	24  8    pattern_gpa (contiguous; the pattern does not cross a PageSize page)
type BufferFill struct {
	Handle      uint32
	PatternLen  uint32
	Offset      uint64
	Length      uint64
	PatternAddr uint64
}

func (*BufferFill) Op() Opcode { return OpBufferFill }
func (f *BufferFill) marshal(p *[48]byte) {
	le.PutUint32(p[0:], f.Handle)
	le.PutUint32(p[4:], f.PatternLen)
	le.PutUint64(p[8:], f.Offset)
	le.PutUint64(p[16:], f.Length)
	le.PutUint64(p[24:], f.PatternAddr)
}
func (f *BufferFill) unmarshal(p *[48]byte) error {
	f.Handle = le.Uint32(p[0:])
	f.PatternLen = le.Uint32(p[4:])
	f.Offset = le.Uint64(p[8:])
	f.Length = le.Uint64(p[16:])
	f.PatternAddr = le.Uint64(p[24:])
	n := uint64(f.PatternLen)
	switch {
	case f.Handle == 0:
		return fmt.Errorf("handle 0: %w", ErrMalformed)
	case n == 0 || n > MaxFillPattern || n&(n-1) != 0:
		return fmt.Errorf("pattern_len %d: %w", n, ErrMalformed)
	case f.Length == 0:
		return fmt.Errorf("length 0: %w", ErrMalformed)
	case f.Offset%n != 0 || f.Length%n != 0:
		return fmt.Errorf("offset %d or length %d not a multiple of pattern_len %d: %w", f.Offset, f.Length, n, ErrMalformed)
	case f.Offset+f.Length < f.Offset:
		return fmt.Errorf("offset %d + length %d overflows: %w", f.Offset, f.Length, ErrMalformed)
	case f.PatternAddr%PageSize+n > PageSize:
		return fmt.Errorf("pattern at %#x+%d crosses a page: %w", f.PatternAddr, n, ErrMalformed)
	}
	return zeroFrom(p, 32)
}

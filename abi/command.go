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

// String is the opcode's name in docs/ABI.md, or opcode(N) for an
// undefined one.
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
	// FlagIL on OpProgramBuild (1.9, FeatureIL): the source is a SPIR-V
	// module of version 1.0 to 1.2, not OpenCL C (docs/ABI.md "SPIR-V").
	// It is refused on any other opcode.
	FlagIL uint16 = 1 << 1
	// FlagsMask is the set of defined flag bits; others must be zero.
	FlagsMask = FlagNondeterministic | FlagIL
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

// fields walks the slot's layout (the table above).
func (c *Command) fields(f fieldCodec) fieldCodec {
	return f.u16((*uint16)(&c.Opcode)).u16(&c.Flags).reserved32().u64(&c.Tag).raw(c.Payload[:])
}

// Marshal writes c into b, which must be at least CommandSize bytes.
func (c *Command) Marshal(b []byte) {
	_ = b[CommandSize-1]
	c.fields(encoder(b[:CommandSize]))
}

// UnmarshalCommand decodes a ring slot. It checks only the framing (length,
// reserved field); opcode and payload are checked by the payload decoders.
func UnmarshalCommand(b []byte) (Command, error) {
	var c Command
	if len(b) < CommandSize {
		return c, fmt.Errorf("command: %d bytes, want %d: %w", len(b), CommandSize, ErrMalformed)
	}
	// Every field is read before any check: a failed command still echoes its tag.
	f := c.fields(decoder(b[:CommandSize]))
	if r := f.rsv; r != 0 {
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
	// fields walks the payload's wire fields in order from offset 0: the
	// one definition of its layout, for both directions. The bytes after
	// the last field are reserved, 0.
	fields(f fieldCodec) fieldCodec
	// check reports the first decoded field out of range (wrapping
	// ErrMalformed); f is the finished decoding walk, for a payload that
	// checks a reserved word it passed.
	check(f fieldCodec) error
}

// NewCommand builds a ring slot from a payload.
func NewCommand(p Payload, flags uint16, tag uint64) Command {
	c := Command{Opcode: p.Op(), Flags: flags, Tag: tag}
	p.fields(encoder(c.Payload[:]))
	return c
}

// unmarshalPayload decodes b into p: its fields, then its checks, then
// the reserved bytes after its last field.
func unmarshalPayload(p Payload, b *[48]byte) error {
	f := p.fields(decoder(b[:]))
	if err := p.check(f); err != nil {
		return err
	}
	return zeroFrom(b, int(f.off))
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
	if err := unmarshalPayload(p, &c.Payload); err != nil {
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

// handleCheck reports a zero handle; what names it.
func handleCheck(what string, h uint32) error {
	if h == 0 {
		return fmt.Errorf("%s 0: %w", what, ErrMalformed)
	}
	return nil
}

// zeroFrom reports the first nonzero reserved byte of p from off on.
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

// Op is OpNop.
func (*Nop) Op() Opcode { return OpNop }

// fields walks nothing: every payload byte is reserved.
func (*Nop) fields(f fieldCodec) fieldCodec { return f }

// check has nothing to check.
func (*Nop) check(fieldCodec) error { return nil }

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

// Op is OpBufferCreate.
func (*BufferCreate) Op() Opcode { return OpBufferCreate }

// fields walks the layout above.
func (b *BufferCreate) fields(f fieldCodec) fieldCodec {
	return f.u32(&b.Handle).u32(&b.Flags).u64(&b.Size)
}

// check reports the first field out of range.
func (b *BufferCreate) check(fieldCodec) error {
	switch {
	case b.Handle == 0:
		return fmt.Errorf("handle 0: %w", ErrMalformed)
	case b.Flags&^BufferFlagsMask != 0 || b.Flags == BufferFlagsMask:
		return fmt.Errorf("flags %#x: %w", b.Flags, ErrMalformed)
	case b.Size == 0:
		return fmt.Errorf("size 0: %w", ErrMalformed)
	}
	return nil
}

// BufferFree releases a buffer (docs/ABI.md "buffer-free").
//
//	off size field
//	0   4    handle
type BufferFree struct{ Handle uint32 }

// Op is OpBufferFree.
func (*BufferFree) Op() Opcode { return OpBufferFree }

// fields walks the layout above.
func (b *BufferFree) fields(f fieldCodec) fieldCodec { return f.u32(&b.Handle) }

// check reports a zero handle.
func (b *BufferFree) check(fieldCodec) error { return handleCheck("handle", b.Handle) }

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

// Op is OpCopyToDev or OpCopyFromDev, as ToDevice says.
func (c *Copy) Op() Opcode {
	if c.ToDevice {
		return OpCopyToDev
	}
	return OpCopyFromDev
}

// fields walks the layout above (ToDevice is the opcode, not a field).
func (c *Copy) fields(f fieldCodec) fieldCodec {
	return f.u32(&c.Handle).u32(&c.SGCount).u64(&c.Offset).u64(&c.Length).u64(&c.SGAddr)
}

// check reports the first field out of range.
func (c *Copy) check(fieldCodec) error {
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
	return nil
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

// Op is OpProgramBuild.
func (*ProgramBuild) Op() Opcode { return OpProgramBuild }

// fields walks the layout above: all 48 bytes, none reserved.
func (b *ProgramBuild) fields(f fieldCodec) fieldCodec {
	return f.u32(&b.Handle).u32(&b.SrcCount).u64(&b.SrcLen).u64(&b.SrcSGAddr).
		u64(&b.OptsAddr).u32(&b.OptsLen).u32(&b.LogLen).u64(&b.LogAddr)
}

// check reports the first field out of range.
func (b *ProgramBuild) check(fieldCodec) error {
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

// Op is OpProgramFree.
func (*ProgramFree) Op() Opcode { return OpProgramFree }

// fields walks the layout above.
func (b *ProgramFree) fields(f fieldCodec) fieldCodec { return f.u32(&b.Handle) }

// check reports a zero handle.
func (b *ProgramFree) check(fieldCodec) error { return handleCheck("handle", b.Handle) }

// Launch runs a kernel described by a launch descriptor in guest RAM
// (docs/ABI.md "launch").
//
//	off size field
//	0   4    program handle
//	4   4    desc_len (LaunchHeaderSize..MaxLaunchDescLen)
//	8   8    desc_gpa (contiguous, 8-byte aligned)
//	16  4    printf buffer handle (1.7, FeaturePrintf); 0: none
type Launch struct {
	Program  uint32
	DescLen  uint32
	DescAddr uint64
	Printf   uint32
}

// Op is OpLaunch.
func (*Launch) Op() Opcode { return OpLaunch }

// fields walks the layout above.
func (l *Launch) fields(f fieldCodec) fieldCodec {
	return f.u32(&l.Program).u32(&l.DescLen).u64(&l.DescAddr).u32(&l.Printf)
}

// check reports the first field out of range.
func (l *Launch) check(fieldCodec) error {
	switch {
	case l.Program == 0:
		return fmt.Errorf("program 0: %w", ErrMalformed)
	case l.DescLen < LaunchHeaderSize || l.DescLen > MaxLaunchDescLen:
		return fmt.Errorf("descriptor length %d: %w", l.DescLen, ErrMalformed)
	case l.DescAddr%8 != 0:
		return fmt.Errorf("descriptor address %#x misaligned: %w", l.DescAddr, ErrMalformed)
	}
	return nil
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

// Op is OpFence.
func (*Fence) Op() Opcode { return OpFence }

// fields walks the layout above.
func (f *Fence) fields(c fieldCodec) fieldCodec { return c.u64(&f.Addr).u64(&f.Value) }

// check reports a misaligned address.
func (f *Fence) check(fieldCodec) error {
	if f.Addr%8 != 0 {
		return fmt.Errorf("fence address %#x misaligned: %w", f.Addr, ErrMalformed)
	}
	return nil
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

// Op is OpProgramInfo.
func (*ProgramInfoQuery) Op() Opcode { return OpProgramInfo }

// fields walks the layout above.
func (q *ProgramInfoQuery) fields(f fieldCodec) fieldCodec {
	return f.u32(&q.Handle).u32(&q.SGCount).u64(&q.Length).u64(&q.SGAddr)
}

// check reports the first field out of range.
func (q *ProgramInfoQuery) check(fieldCodec) error {
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
	return nil
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

// Op is OpBufferCopy.
func (*BufferCopy) Op() Opcode { return OpBufferCopy }

// fields walks the layout above.
func (c *BufferCopy) fields(f fieldCodec) fieldCodec {
	return f.u32(&c.Src).u32(&c.Dst).u64(&c.SrcOffset).u64(&c.DstOffset).u64(&c.Length)
}

// check reports the first field out of range.
func (c *BufferCopy) check(fieldCodec) error {
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
	return nil
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

// Op is OpBufferFill.
func (*BufferFill) Op() Opcode { return OpBufferFill }

// fields walks the layout above.
func (f *BufferFill) fields(c fieldCodec) fieldCodec {
	return c.u32(&f.Handle).u32(&f.PatternLen).u64(&f.Offset).u64(&f.Length).u64(&f.PatternAddr)
}

// check reports the first field out of range.
func (f *BufferFill) check(fieldCodec) error {
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
	return nil
}

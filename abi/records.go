package abi

import (
	"bytes"
	"cmp"
	"fmt"
)

// Completion is the 32-byte record the device writes for each command, at
// compl_base + (index mod slots) * ComplSize (docs/ABI.md "Completion records").
//
//	off size field
//	0   8    seq: command index + 1; stored last, atomically
//	8   8    tag, copied from the command
//	16  4    status
//	20  2    opcode
//	22  2    reserved, 0
//	24  8    detail: launch = device time in ns; build failure = log bytes
//	         written; copies = bytes moved; otherwise 0
type Completion struct {
	Seq    uint64
	Tag    uint64
	Status Status
	Opcode Opcode
	_      uint16
	Detail uint64
}

// ComplSeqOffset is the offset of Seq, the word written last.
const ComplSeqOffset = 0

// SeqOf is the Seq the device writes for the command at ring index idx.
// Ring indices are free-running 32-bit counters, so a driver that counts
// commands in 64 bits must compare against SeqOf(count), not count+1: the
// two differ after 2^32 commands.
func SeqOf(idx uint64) uint64 { return uint64(uint32(idx)) + 1 }

// Marshal writes r into b (at least ComplSize bytes).
func (r *Completion) Marshal(b []byte) {
	_ = b[ComplSize-1]
	le.PutUint64(b[0:], r.Seq)
	le.PutUint64(b[8:], r.Tag)
	le.PutUint32(b[16:], uint32(r.Status))
	le.PutUint16(b[20:], uint16(r.Opcode))
	le.PutUint16(b[22:], 0)
	le.PutUint64(b[24:], r.Detail)
}

// UnmarshalCompletion decodes a completion record.
func UnmarshalCompletion(b []byte) (Completion, error) {
	var r Completion
	if len(b) < ComplSize {
		return r, fmt.Errorf("completion: %d bytes: %w", len(b), ErrMalformed)
	}
	r.Seq = le.Uint64(b[0:])
	r.Tag = le.Uint64(b[8:])
	r.Status = Status(le.Uint32(b[16:]))
	r.Opcode = Opcode(le.Uint16(b[20:]))
	r.Detail = le.Uint64(b[24:])
	return r, nil
}

// SGEntrySize is the size of one scatter-gather entry.
const SGEntrySize = 16

// SG entry flags.
const (
	// SGChain marks an entry that points at the next table instead of data:
	// Addr is the next table's address and Len its entry count.
	SGChain     uint32 = 1 << 0
	SGFlagsMask        = SGChain
)

// SGEntry is one scatter-gather table entry (docs/ABI.md "Scatter-gather lists").
//
//	off size field
//	0   8    gpa of data (or of the next table, with SGChain)
//	8   4    len: data bytes (or entries in the next table, with SGChain)
//	12  4    flags, SG*
//
// A table holds at most PageSize/SGEntrySize entries and must not cross a
// page boundary, so guests need no contiguous memory beyond one page.
type SGEntry struct {
	Addr  uint64
	Len   uint32
	Flags uint32
}

// Marshal writes e into b (at least SGEntrySize bytes).
func (e *SGEntry) Marshal(b []byte) {
	_ = b[SGEntrySize-1]
	le.PutUint64(b[0:], e.Addr)
	le.PutUint32(b[8:], e.Len)
	le.PutUint32(b[12:], e.Flags)
}

// UnmarshalSGEntry decodes one entry.
func UnmarshalSGEntry(b []byte) (SGEntry, error) {
	var e SGEntry
	if len(b) < SGEntrySize {
		return e, fmt.Errorf("sg entry: %d bytes: %w", len(b), ErrMalformed)
	}
	e.Addr = le.Uint64(b[0:])
	e.Len = le.Uint32(b[8:])
	e.Flags = le.Uint32(b[12:])
	switch {
	case e.Flags&^SGFlagsMask != 0:
		return e, fmt.Errorf("sg entry flags %#x: %w", e.Flags, ErrMalformed)
	case e.Len == 0:
		return e, fmt.Errorf("sg entry of length 0: %w", ErrMalformed)
	case e.Flags&SGChain != 0 && (e.Len > PageSize/SGEntrySize || e.Addr%SGEntrySize != 0):
		return e, fmt.Errorf("sg chain to %d entries at %#x: %w", e.Len, e.Addr, ErrMalformed)
	case e.Addr+uint64(e.Len) < e.Addr:
		return e, fmt.Errorf("sg entry %#x+%d overflows: %w", e.Addr, e.Len, ErrMalformed)
	}
	return e, nil
}

// PrintfHeader is the start of a launch's printf buffer (docs/ABI.md
// "Printf output", 1.7): the device writes it, and Length bytes of
// output after it, when the launch completes.
//
//	off size field
//	0   8    length: bytes of output at offset PrintfHeaderSize
//	8   4    dropped: bytes printed that did not fit (at most 2^32-1)
//	12  4    flags: PrintfCaptured
type PrintfHeader struct {
	Length  uint64
	Dropped uint32
	Flags   uint32
}

// PrintfHeaderSize is the size of PrintfHeader: the smallest printf
// buffer.
const PrintfHeaderSize = 16

// PrintfCaptured in PrintfHeader.Flags: the device captured what the
// kernel printed. Without it the device cannot (its kernels run where
// their output does not reach it) and Length is 0.
const PrintfCaptured uint32 = 1 << 0

// Marshal writes h into b (at least PrintfHeaderSize bytes).
func (h *PrintfHeader) Marshal(b []byte) {
	_ = b[PrintfHeaderSize-1]
	le.PutUint64(b[0:], h.Length)
	le.PutUint32(b[8:], h.Dropped)
	le.PutUint32(b[12:], h.Flags)
}

// UnmarshalPrintfHeader decodes a printf buffer's header read back from a
// buffer of size bytes: the length must fit the buffer after the header,
// and no undefined flag be set (a guest trusts the device no further).
func UnmarshalPrintfHeader(b []byte, size uint64) (PrintfHeader, error) {
	var h PrintfHeader
	if len(b) < PrintfHeaderSize || size < PrintfHeaderSize {
		return h, fmt.Errorf("printf header: %d bytes of a %d-byte buffer: %w", len(b), size, ErrMalformed)
	}
	h.Length = le.Uint64(b[0:])
	h.Dropped = le.Uint32(b[8:])
	h.Flags = le.Uint32(b[12:])
	switch {
	case h.Flags&^PrintfCaptured != 0:
		return h, fmt.Errorf("printf header: flags %#x: %w", h.Flags, ErrMalformed)
	case h.Length > size-PrintfHeaderSize:
		return h, fmt.Errorf("printf header: %d bytes of output in a %d-byte buffer: %w", h.Length, size, ErrMalformed)
	case h.Flags&PrintfCaptured == 0 && (h.Length != 0 || h.Dropped != 0):
		return h, fmt.Errorf("printf header: output without capture: %w", ErrMalformed)
	}
	return h, nil
}

// Launch argument kinds (docs/ABI.md "Launch descriptor").
const (
	ArgBuffer uint32 = 0 // value = buffer handle
	ArgScalar uint32 = 1 // size bytes; value holds them when size <= 8, else value = offset in the descriptor
	ArgLocal  uint32 = 2 // size = bytes of __local memory; value 0
	// ArgImage (1.8): size = ImageDescSize; value = offset in the
	// descriptor of the image descriptor (8-byte aligned).
	ArgImage uint32 = 3
	// ArgSampler (1.8): size 0; value = the sampler (SamplerDesc).
	ArgSampler uint32 = 4
)

// LaunchHeaderSize and ArgDescSize are the fixed parts of a launch descriptor.
const (
	LaunchHeaderSize = 144
	ArgDescSize      = 16
)

// LaunchDesc is the launch descriptor the Launch command points at
// (docs/ABI.md "Launch descriptor").
//
//	off  size  field
//	0    4     work_dim (1..3)
//	4    4     num_args (0..MaxKernelArgs)
//	8    24    global_offset[3]
//	32   24    global_size[3]  (nonzero in used dimensions)
//	56   24    local_size[3]   (all 0: the device chooses)
//	80   64    kernel name, NUL padded, [A-Za-z_][A-Za-z0-9_]*
//	144  16*n  arguments {u32 kind, u32 size, u64 value}
//	...        scalar data referenced by offset
type LaunchDesc struct {
	WorkDim      uint32
	GlobalOffset [3]uint64
	GlobalSize   [3]uint64
	LocalSize    [3]uint64
	Kernel       string
	Args         []KernelArg
}

// KernelArg is one decoded launch argument.
type KernelArg struct {
	Kind    uint32
	Handle  uint32 // ArgBuffer; ArgImage: Image.Buffer
	Bytes   []byte // ArgScalar
	Local   uint32 // ArgLocal
	Image   ImageDesc
	Sampler SamplerDesc
}

// BufferHandle returns the buffer an argument names: an ArgBuffer's, or
// the buffer holding an ArgImage's pixels.
func (a *KernelArg) BufferHandle() (uint32, bool) {
	switch a.Kind {
	case ArgBuffer:
		return a.Handle, true
	case ArgImage:
		return a.Image.Buffer, true
	}
	return 0, false
}

// Marshal encodes d, placing scalars larger than 8 bytes after the argument
// table. It fails if d cannot be represented.
func (d *LaunchDesc) Marshal() ([]byte, error) {
	if len(d.Args) > MaxKernelArgs {
		return nil, fmt.Errorf("launch: %d arguments: %w", len(d.Args), ErrMalformed)
	}
	if len(d.Kernel) == 0 || len(d.Kernel) >= KernelNameLen {
		return nil, fmt.Errorf("launch: kernel name %q: %w", d.Kernel, ErrMalformed)
	}
	n := LaunchHeaderSize + ArgDescSize*len(d.Args)
	b := make([]byte, n, n+64)
	le.PutUint32(b[0:], d.WorkDim)
	le.PutUint32(b[4:], uint32(len(d.Args)))
	for i := 0; i < 3; i++ {
		le.PutUint64(b[8+8*i:], d.GlobalOffset[i])
		le.PutUint64(b[32+8*i:], d.GlobalSize[i])
		le.PutUint64(b[56+8*i:], d.LocalSize[i])
	}
	copy(b[80:80+KernelNameLen], d.Kernel)
	for i, a := range d.Args {
		o := LaunchHeaderSize + ArgDescSize*i
		le.PutUint32(b[o:], a.Kind)
		switch a.Kind {
		case ArgBuffer:
			le.PutUint64(b[o+8:], uint64(a.Handle))
		case ArgScalar:
			if len(a.Bytes) == 0 || len(a.Bytes) > MaxScalarSize {
				return nil, fmt.Errorf("launch: scalar %d of %d bytes: %w", i, len(a.Bytes), ErrMalformed)
			}
			le.PutUint32(b[o+4:], uint32(len(a.Bytes)))
			if len(a.Bytes) <= 8 {
				var v [8]byte
				copy(v[:], a.Bytes)
				copy(b[o+8:], v[:])
			} else {
				for len(b)%8 != 0 {
					b = append(b, 0)
				}
				le.PutUint64(b[o+8:], uint64(len(b)))
				b = append(b, a.Bytes...)
			}
		case ArgLocal:
			le.PutUint32(b[o+4:], a.Local)
		case ArgImage:
			le.PutUint32(b[o+4:], ImageDescSize)
			for len(b)%8 != 0 {
				b = append(b, 0)
			}
			le.PutUint64(b[o+8:], uint64(len(b)))
			b = append(b, make([]byte, ImageDescSize)...)
			a.Image.Marshal(b[len(b)-ImageDescSize:])
		case ArgSampler:
			le.PutUint64(b[o+8:], a.Sampler.Value())
		default:
			return nil, fmt.Errorf("launch: argument %d kind %d: %w", i, a.Kind, ErrMalformed)
		}
	}
	if len(b) > MaxLaunchDescLen {
		return nil, fmt.Errorf("launch: descriptor of %d bytes: %w", len(b), ErrMalformed)
	}
	return b, nil
}

// UnmarshalLaunchDesc decodes and validates a launch descriptor read from
// guest memory. Scalar bytes are copied out of b.
func UnmarshalLaunchDesc(b []byte) (LaunchDesc, error) {
	var d LaunchDesc
	if len(b) < LaunchHeaderSize || len(b) > MaxLaunchDescLen {
		return d, fmt.Errorf("launch descriptor: %d bytes: %w", len(b), ErrMalformed)
	}
	d.WorkDim = le.Uint32(b[0:])
	nargs := le.Uint32(b[4:])
	if d.WorkDim < 1 || d.WorkDim > 3 {
		return d, fmt.Errorf("launch descriptor: work_dim %d: %w", d.WorkDim, ErrMalformed)
	}
	if nargs > MaxKernelArgs || LaunchHeaderSize+ArgDescSize*int(nargs) > len(b) {
		return d, fmt.Errorf("launch descriptor: %d arguments in %d bytes: %w", nargs, len(b), ErrMalformed)
	}
	anyLocal := false
	for i := 0; i < 3; i++ {
		d.GlobalOffset[i] = le.Uint64(b[8+8*i:])
		d.GlobalSize[i] = le.Uint64(b[32+8*i:])
		d.LocalSize[i] = le.Uint64(b[56+8*i:])
		if d.LocalSize[i] != 0 {
			anyLocal = true
		}
	}
	for i := 0; i < 3; i++ {
		used := uint32(i) < d.WorkDim
		switch {
		case used && d.GlobalSize[i] == 0:
			return d, fmt.Errorf("launch descriptor: global size %d is 0: %w", i, ErrMalformed)
		case !used && (d.GlobalSize[i] != 0 || d.GlobalOffset[i] != 0 || d.LocalSize[i] != 0):
			return d, fmt.Errorf("launch descriptor: dimension %d beyond work_dim set: %w", i, ErrMalformed)
		case used && anyLocal && (d.LocalSize[i] == 0 || d.GlobalSize[i]%d.LocalSize[i] != 0):
			return d, fmt.Errorf("launch descriptor: local size %d does not divide global size %d: %w",
				d.LocalSize[i], d.GlobalSize[i], ErrMalformed)
		case d.GlobalOffset[i]+d.GlobalSize[i] < d.GlobalOffset[i]:
			return d, fmt.Errorf("launch descriptor: range %d overflows: %w", i, ErrMalformed)
		}
	}
	name := b[80 : 80+KernelNameLen]
	if n := bytes.IndexByte(name, 0); n >= 0 {
		if !allZero(name[n:]) {
			return d, fmt.Errorf("launch descriptor: kernel name not NUL padded: %w", ErrMalformed)
		}
		name = name[:n]
	} else {
		return d, fmt.Errorf("launch descriptor: kernel name not terminated: %w", ErrMalformed)
	}
	if !validIdent(name) {
		return d, fmt.Errorf("launch descriptor: kernel name %q: %w", name, ErrMalformed)
	}
	d.Kernel = string(name)
	d.Args = make([]KernelArg, nargs)
	for i := range d.Args {
		o := LaunchHeaderSize + ArgDescSize*i
		kind, size, val := le.Uint32(b[o:]), le.Uint32(b[o+4:]), le.Uint64(b[o+8:])
		a := KernelArg{Kind: kind}
		switch kind {
		case ArgBuffer:
			if size != 0 || val == 0 || val > 0xffffffff {
				return d, fmt.Errorf("launch descriptor: argument %d: buffer handle %#x size %d: %w", i, val, size, ErrMalformed)
			}
			a.Handle = uint32(val)
		case ArgScalar:
			if size == 0 || size > MaxScalarSize {
				return d, fmt.Errorf("launch descriptor: argument %d: scalar of %d bytes: %w", i, size, ErrMalformed)
			}
			if size <= 8 {
				var v [8]byte
				le.PutUint64(v[:], val)
				if !allZero(v[size:]) {
					return d, fmt.Errorf("launch descriptor: argument %d: scalar padding not zero: %w", i, ErrMalformed)
				}
				a.Bytes = append([]byte(nil), v[:size]...)
			} else {
				if val < uint64(LaunchHeaderSize+ArgDescSize*int(nargs)) || val > uint64(len(b)) || uint64(len(b))-val < uint64(size) {
					return d, fmt.Errorf("launch descriptor: argument %d: scalar at %d+%d outside %d bytes: %w", i, val, size, len(b), ErrMalformed)
				}
				a.Bytes = append([]byte(nil), b[val:val+uint64(size)]...)
			}
		case ArgLocal:
			if size == 0 || val != 0 {
				return d, fmt.Errorf("launch descriptor: argument %d: local size %d value %d: %w", i, size, val, ErrMalformed)
			}
			a.Local = size
		case ArgImage:
			if size != ImageDescSize || val%8 != 0 || val < uint64(LaunchHeaderSize+ArgDescSize*int(nargs)) ||
				val > uint64(len(b)) || uint64(len(b))-val < ImageDescSize {
				return d, fmt.Errorf("launch descriptor: argument %d: image descriptor of %d bytes at %d in %d: %w", i, size, val, len(b), ErrMalformed)
			}
			im, err := UnmarshalImageDesc(b[val : val+ImageDescSize])
			if err != nil {
				return d, fmt.Errorf("launch descriptor: argument %d: %w", i, err)
			}
			a.Image, a.Handle = im, im.Buffer
		case ArgSampler:
			s, err := UnpackSampler(val)
			if err != nil || size != 0 {
				return d, fmt.Errorf("launch descriptor: argument %d: sampler of size %d: %w", i, size, cmp.Or(err, ErrMalformed))
			}
			a.Sampler = s
		default:
			return d, fmt.Errorf("launch descriptor: argument %d: kind %d: %w", i, kind, ErrMalformed)
		}
		d.Args[i] = a
	}
	return d, nil
}

// allZero reports whether every byte of b is 0.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// validIdent reports whether s is a C identifier.
func validIdent(s []byte) bool {
	if len(s) == 0 {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

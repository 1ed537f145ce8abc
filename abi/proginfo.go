package abi

import (
	"bytes"
	"fmt"
)

// Sizes of the program-information blob's records (docs/ABI.md
// "Program-information blob", ABI 1.4).
const (
	ProgramInfoHeaderSize = 16
	KernelInfoSize        = 128
	ArgInfoSize           = 144
	// ArgInfoNameLen is the size of an argument record's type_name and name
	// fields: at most ArgInfoNameLen-1 bytes and a NUL.
	ArgInfoNameLen = 64
)

// Argument qualifiers in an argument record: the OpenCL values of
// CL_KERNEL_ARG_ADDRESS_*, CL_KERNEL_ARG_ACCESS_* and CL_KERNEL_ARG_TYPE_*
// (docs/ABI.md "Program-information blob"). The device passes on what the
// physical device reports; these are the values OpenCL 1.2..3.0 define.
const (
	ArgAddressGlobal   uint32 = 0x119B
	ArgAddressLocal    uint32 = 0x119C
	ArgAddressConstant uint32 = 0x119D
	ArgAddressPrivate  uint32 = 0x119E

	ArgAccessReadOnly  uint32 = 0x11A0
	ArgAccessWriteOnly uint32 = 0x11A1
	ArgAccessReadWrite uint32 = 0x11A2
	ArgAccessNone      uint32 = 0x11A3

	ArgTypeNone     uint32 = 0
	ArgTypeConst    uint32 = 1 << 0
	ArgTypeRestrict uint32 = 1 << 1
	ArgTypeVolatile uint32 = 1 << 2
	ArgTypePipe     uint32 = 1 << 3
)

// ProgramInfoHeader starts the program-information blob (docs/ABI.md
// "Program-information blob").
//
//	off size field
//	0   4    kernel_count
//	4   4    reserved, 0
//	8   8    total_len: bytes of the whole blob, this header included
type ProgramInfoHeader struct {
	KernelCount uint32
	_           uint32
	TotalLen    uint64
}

// Marshal writes h into b (at least ProgramInfoHeaderSize bytes).
func (h *ProgramInfoHeader) Marshal(b []byte) {
	_ = b[ProgramInfoHeaderSize-1]
	le.PutUint32(b[0:], h.KernelCount)
	le.PutUint32(b[4:], 0)
	le.PutUint64(b[8:], h.TotalLen)
}

// KernelInfoRecord is one kernel's record in the program-information blob
// (docs/ABI.md "Program-information blob"); NumArgs argument records
// (ArgInfoRecord) follow it.
//
//	off size field
//	0   64   name, NUL padded (KernelNameLen, at most 63 bytes)
//	64  4    num_args
//	68  4    reserved, 0
//	72  8    work_group_size (CL_KERNEL_WORK_GROUP_SIZE)
//	80  8    preferred_multiple (CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE)
//	88  8    local_mem_size (CL_KERNEL_LOCAL_MEM_SIZE)
//	96  8    private_mem_size (CL_KERNEL_PRIVATE_MEM_SIZE)
//	104 24   compile_work_group_size[3] (CL_KERNEL_COMPILE_WORK_GROUP_SIZE)
type KernelInfoRecord struct {
	Name                 [KernelNameLen]byte
	NumArgs              uint32
	_                    uint32
	WorkGroupSize        uint64
	PreferredMultiple    uint64
	LocalMemSize         uint64
	PrivateMemSize       uint64
	CompileWorkGroupSize [3]uint64
}

// Marshal writes r into b (at least KernelInfoSize bytes).
func (r *KernelInfoRecord) Marshal(b []byte) {
	_ = b[KernelInfoSize-1]
	copy(b[0:KernelNameLen], r.Name[:])
	le.PutUint32(b[64:], r.NumArgs)
	le.PutUint32(b[68:], 0)
	le.PutUint64(b[72:], r.WorkGroupSize)
	le.PutUint64(b[80:], r.PreferredMultiple)
	le.PutUint64(b[88:], r.LocalMemSize)
	le.PutUint64(b[96:], r.PrivateMemSize)
	for i, v := range r.CompileWorkGroupSize {
		le.PutUint64(b[104+8*i:], v)
	}
}

// ArgInfoRecord is one kernel argument's record in the program-information
// blob (docs/ABI.md "Program-information blob").
//
//	off size field
//	0   4    address_qualifier, ArgAddress*
//	4   4    access_qualifier, ArgAccess*
//	8   4    type_qualifier, ArgType* bits
//	12  4    reserved, 0
//	16  64   type_name, NUL padded (at most 63 bytes)
//	80  64   name, NUL padded (at most 63 bytes)
type ArgInfoRecord struct {
	AddressQualifier uint32
	AccessQualifier  uint32
	TypeQualifier    uint32
	_                uint32
	TypeName         [ArgInfoNameLen]byte
	Name             [ArgInfoNameLen]byte
}

// Marshal writes r into b (at least ArgInfoSize bytes).
func (r *ArgInfoRecord) Marshal(b []byte) {
	_ = b[ArgInfoSize-1]
	le.PutUint32(b[0:], r.AddressQualifier)
	le.PutUint32(b[4:], r.AccessQualifier)
	le.PutUint32(b[8:], r.TypeQualifier)
	le.PutUint32(b[12:], 0)
	copy(b[16:16+ArgInfoNameLen], r.TypeName[:])
	copy(b[80:80+ArgInfoNameLen], r.Name[:])
}

// ProgramInfo is the decoded program-information blob the program-info
// command writes (docs/ABI.md "Program-information blob"): the kernels of a
// program, sorted by name, each with its arguments in parameter order.
type ProgramInfo struct {
	Kernels []KernelInfo
}

// KernelInfo describes one kernel of a program.
type KernelInfo struct {
	Name                 string // [A-Za-z_][A-Za-z0-9_]*, at most KernelNameLen-1 bytes
	WorkGroupSize        uint64
	PreferredMultiple    uint64
	LocalMemSize         uint64
	PrivateMemSize       uint64
	CompileWorkGroupSize [3]uint64
	Args                 []KernelArgInfo
}

// KernelArgInfo describes one kernel parameter.
type KernelArgInfo struct {
	AddressQualifier uint32
	AccessQualifier  uint32
	TypeQualifier    uint32
	TypeName         string // at most ArgInfoNameLen-1 bytes, no NUL
	Name             string // at most ArgInfoNameLen-1 bytes, no NUL
}

// Size is the encoded size of p in bytes: the blob's total_len.
func (p *ProgramInfo) Size() uint64 {
	n := uint64(ProgramInfoHeaderSize)
	for _, k := range p.Kernels {
		n += KernelInfoSize + ArgInfoSize*uint64(len(k.Args))
	}
	return n
}

// Marshal encodes p. It fails if p cannot be represented: a kernel name that
// is not an identifier of at most KernelNameLen-1 bytes, kernels not in
// strictly increasing name order, or an argument string longer than
// ArgInfoNameLen-1 bytes or holding a NUL.
func (p *ProgramInfo) Marshal() ([]byte, error) {
	if uint64(len(p.Kernels)) > 0xffffffff {
		return nil, fmt.Errorf("program info: %d kernels: %w", len(p.Kernels), ErrMalformed)
	}
	b := make([]byte, p.Size())
	h := ProgramInfoHeader{KernelCount: uint32(len(p.Kernels)), TotalLen: uint64(len(b))}
	h.Marshal(b)
	o := ProgramInfoHeaderSize
	for i, k := range p.Kernels {
		if len(k.Name) >= KernelNameLen || !validIdent([]byte(k.Name)) {
			return nil, fmt.Errorf("program info: kernel name %q: %w", k.Name, ErrMalformed)
		}
		if i > 0 && p.Kernels[i-1].Name >= k.Name {
			return nil, fmt.Errorf("program info: kernel %q after %q: %w", k.Name, p.Kernels[i-1].Name, ErrMalformed)
		}
		r := KernelInfoRecord{NumArgs: uint32(len(k.Args)), WorkGroupSize: k.WorkGroupSize, PreferredMultiple: k.PreferredMultiple,
			LocalMemSize: k.LocalMemSize, PrivateMemSize: k.PrivateMemSize, CompileWorkGroupSize: k.CompileWorkGroupSize}
		copy(r.Name[:], k.Name)
		r.Marshal(b[o:])
		o += KernelInfoSize
		for j, a := range k.Args {
			if !infoString(a.TypeName) || !infoString(a.Name) {
				return nil, fmt.Errorf("program info: kernel %s argument %d: type %q name %q: %w", k.Name, j, a.TypeName, a.Name, ErrMalformed)
			}
			ar := ArgInfoRecord{AddressQualifier: a.AddressQualifier, AccessQualifier: a.AccessQualifier, TypeQualifier: a.TypeQualifier}
			copy(ar.TypeName[:], a.TypeName)
			copy(ar.Name[:], a.Name)
			ar.Marshal(b[o:])
			o += ArgInfoSize
		}
	}
	return b, nil
}

// infoString reports whether s fits an argument record's string field:
// shorter than ArgInfoNameLen, with no NUL.
func infoString(s string) bool {
	return len(s) < ArgInfoNameLen && !bytes.Contains([]byte(s), []byte{0})
}

// TruncInfoString makes s fit an argument record's string field: cut at
// its first NUL and to ArgInfoNameLen-1 bytes, as the device reports
// longer names.
func TruncInfoString(s string) string {
	if i := bytes.IndexByte([]byte(s), 0); i >= 0 {
		s = s[:i]
	}
	return s[:min(len(s), ArgInfoNameLen-1)]
}

// UnmarshalProgramInfo decodes and validates a program-information blob.
// b may be longer than the blob (the room the guest gave); only the
// header's total_len bytes are read, and they must be exactly the header
// and its records.
func UnmarshalProgramInfo(b []byte) (ProgramInfo, error) {
	var p ProgramInfo
	if len(b) < ProgramInfoHeaderSize {
		return p, fmt.Errorf("program info: %d bytes: %w", len(b), ErrMalformed)
	}
	count, total := le.Uint32(b[0:]), le.Uint64(b[8:])
	switch {
	case le.Uint32(b[4:]) != 0:
		return p, fmt.Errorf("program info: reserved header word %#x: %w", le.Uint32(b[4:]), ErrMalformed)
	case total < ProgramInfoHeaderSize || total > uint64(len(b)):
		return p, fmt.Errorf("program info: total_len %d with %d bytes: %w", total, len(b), ErrMalformed)
	case uint64(count) > (total-ProgramInfoHeaderSize)/KernelInfoSize:
		return p, fmt.Errorf("program info: %d kernels in %d bytes: %w", count, total, ErrMalformed)
	}
	b = b[:total]
	o := uint64(ProgramInfoHeaderSize)
	if count > 0 {
		p.Kernels = make([]KernelInfo, count)
	}
	for i := range p.Kernels {
		if total-o < KernelInfoSize {
			return ProgramInfo{}, fmt.Errorf("program info: kernel %d at %d beyond total_len %d: %w", i, o, total, ErrMalformed)
		}
		r := b[o : o+KernelInfoSize]
		name, ok := cString(r[0:KernelNameLen])
		if !ok || !validIdent([]byte(name)) {
			return ProgramInfo{}, fmt.Errorf("program info: kernel %d name %q: %w", i, r[0:KernelNameLen], ErrMalformed)
		}
		if i > 0 && p.Kernels[i-1].Name >= name {
			return ProgramInfo{}, fmt.Errorf("program info: kernel %q after %q: %w", name, p.Kernels[i-1].Name, ErrMalformed)
		}
		if v := le.Uint32(r[68:]); v != 0 {
			return ProgramInfo{}, fmt.Errorf("program info: kernel %s reserved word %#x: %w", name, v, ErrMalformed)
		}
		nargs := uint64(le.Uint32(r[64:]))
		o += KernelInfoSize
		if nargs > (total-o)/ArgInfoSize {
			return ProgramInfo{}, fmt.Errorf("program info: kernel %s with %d arguments beyond total_len %d: %w", name, nargs, total, ErrMalformed)
		}
		k := KernelInfo{Name: name, WorkGroupSize: le.Uint64(r[72:]), PreferredMultiple: le.Uint64(r[80:]),
			LocalMemSize: le.Uint64(r[88:]), PrivateMemSize: le.Uint64(r[96:])}
		for j := range k.CompileWorkGroupSize {
			k.CompileWorkGroupSize[j] = le.Uint64(r[104+8*j:])
		}
		if nargs > 0 {
			k.Args = make([]KernelArgInfo, nargs)
		}
		for j := range k.Args {
			a := b[o : o+ArgInfoSize]
			o += ArgInfoSize
			typ, ok1 := cString(a[16 : 16+ArgInfoNameLen])
			an, ok2 := cString(a[80 : 80+ArgInfoNameLen])
			if !ok1 || !ok2 || le.Uint32(a[12:]) != 0 {
				return ProgramInfo{}, fmt.Errorf("program info: kernel %s argument %d: bad strings or reserved word: %w", name, j, ErrMalformed)
			}
			k.Args[j] = KernelArgInfo{AddressQualifier: le.Uint32(a[0:]), AccessQualifier: le.Uint32(a[4:]),
				TypeQualifier: le.Uint32(a[8:]), TypeName: typ, Name: an}
		}
		p.Kernels[i] = k
	}
	if o != total {
		return ProgramInfo{}, fmt.Errorf("program info: records end at %d, total_len %d: %w", o, total, ErrMalformed)
	}
	return p, nil
}

// cString decodes a NUL-terminated, NUL-padded string field.
func cString(f []byte) (string, bool) {
	n := bytes.IndexByte(f, 0)
	if n < 0 || !allZero(f[n:]) {
		return "", false
	}
	return string(f[:n]), true
}

package gpu

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// SPIR-V modules (clCreateProgramWithIL, cl_khr_il_program). A module a
// guest hands in is untrusted: CheckIL reads it once, word by word, before
// any compiler sees it, and the kernels' parameters it finds are what a
// launch's arguments are checked against (an implementation need not give
// argument information for a module: rusticl gives no type names), so a
// scalar can never be taken for a cl_mem however the module is built.

// The SPIR-V versions BuildIL takes, as the module header writes them
// (0x00MMmm00): 1.0 to 1.2, what PoCL 6 and rusticl both accept, so that
// a module built on one device model rebuilds on the other after a
// migration. A device with Caps.IL accepts all three.
const (
	MinILVersion = 0x00010000
	MaxILVersion = 0x00010200
)

// MaxILLen bounds a module's size, as abi.MaxSourceLen bounds source.
const MaxILLen = 4 << 20

// MaxILBound bounds a module's id bound (header word 3): the ids the
// module may define. A module of MaxSourceLen bytes defines fewer.
const MaxILBound = 1 << 22

// ILVersions are the versions of SPIR-V a device with Caps.IL builds, as
// CL_DEVICE_IL_VERSION spells them.
var ILVersions = []string{"SPIR-V_1.0", "SPIR-V_1.1", "SPIR-V_1.2"}

// SPIR-V words this file reads (the SPIR-V specification, section 3).
const (
	spvMagic = 0x07230203

	spvOpName             = 5
	spvOpExtension        = 10
	spvOpExtInstImport    = 11
	spvOpMemoryModel      = 14
	spvOpEntryPoint       = 15
	spvOpCapability       = 17
	spvOpTypeVoid         = 19
	spvOpTypeBool         = 20
	spvOpTypeInt          = 21
	spvOpTypeFloat        = 22
	spvOpTypeVector       = 23
	spvOpTypeImage        = 25
	spvOpTypeSampler      = 26
	spvOpTypeSampledImage = 27
	spvOpTypeArray        = 28
	spvOpTypeStruct       = 30
	spvOpTypeOpaque       = 31
	spvOpTypePointer      = 32
	spvOpTypeFunction     = 33
	spvOpTypeEvent        = 34
	spvOpTypeDeviceEvent  = 35
	spvOpTypeReserveID    = 36
	spvOpTypeQueue        = 37
	spvOpTypePipe         = 38
	spvOpFunction         = 54

	spvCapKernel   = 6
	spvCapAsmINTEL = 5606

	spvModelKernel = 6

	spvStorageUniformConstant = 0
	spvStorageWorkgroup       = 4
	spvStorageCrossWorkgroup  = 5
	spvStorageFunction        = 7

	spvDim1D     = 0
	spvDim2D     = 1
	spvDim3D     = 2
	spvDimBuffer = 5

	spvAccessReadOnly  = 0
	spvAccessWriteOnly = 1
)

// ILParam is one kernel parameter as a module declares it.
type ILParam struct {
	Kind ILKind
	// Type names the parameter's type as OpenCL C would ("float*",
	// "__local uchar4*", "image2d_t"), for messages.
	Type string
	// Access is an image's qualifier: ILReadOnly, ILWriteOnly or
	// ILReadWrite (also where the module leaves it out); ILReadWrite for
	// other kinds.
	Access ILAccess
}

// ILKind is what a parameter is set from.
type ILKind uint8

// The kinds of ILParam.
const (
	ILScalar      ILKind = iota + 1 // bytes by value: scalars, vectors, structs
	ILBuffer                        // a __global or __constant pointer: a buffer
	ILLocal                         // a __local pointer: a size
	ILImage                         // a 1D, 2D or 3D image, arrayed or not
	ILSampler                       // sampler_t
	ILUnsupported                   // pipes, events, queues, other image dimensions
	ILImageBuffer                   // an image made from a buffer (Dim Buffer)
)

// ILAccess is an image parameter's access qualifier.
type ILAccess uint8

// The access qualifiers of an image parameter.
const (
	ILReadWrite ILAccess = iota
	ILReadOnly
	ILWriteOnly
)

// ILModule is what CheckIL learnt of a module: its version and its
// kernels' parameters, by kernel name.
type ILModule struct {
	Version uint32
	Kernels map[string][]ILParam
}

// spvType is one type declaration: its opcode and operands.
type spvType struct {
	op   uint32
	args []uint32
}

// CheckIL reads module as a SPIR-V module and returns its kernels'
// parameters, or an error for which errors.Is(err, ErrSourceRejected):
// a length not a multiple of four or past maxLen, a header other than
// little-endian SPIR-V 1.0-1.2 with a bound of at most MaxILBound and
// schema 0, an instruction whose word count is zero or runs past the end,
// an id at or past the bound, a module without the Kernel capability,
// inline assembly (SPV_INTEL_inline_assembly), an entry point whose name
// is not UTF-8 or whose function is not declared, a kernel declared
// twice, or a kernel parameter of a type the module does not declare.
func CheckIL(module []byte, maxLen int) (*ILModule, error) {
	if len(module) > maxLen {
		return nil, rejected("SPIR-V module of %d bytes, more than %d", len(module), maxLen)
	}
	if len(module) < 20 || len(module)%4 != 0 {
		return nil, rejected("SPIR-V module of %d bytes: not a header and whole words", len(module))
	}
	w := make([]uint32, len(module)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(module[4*i:])
	}
	switch {
	case w[0] == 0x03022307:
		return nil, rejected("SPIR-V module is big-endian; only little-endian modules are taken")
	case w[0] != spvMagic:
		return nil, rejected("not a SPIR-V module: magic %#08x", w[0])
	case w[1] < MinILVersion || w[1] > MaxILVersion || w[1]&0xff0000ff != 0:
		return nil, rejected("SPIR-V version %#08x: only 1.0 to 1.2 are taken", w[1])
	case w[3] == 0 || w[3] > MaxILBound:
		return nil, rejected("SPIR-V id bound %d: not 1..%d", w[3], MaxILBound)
	case w[4] != 0:
		return nil, rejected("SPIR-V schema %d: must be 0", w[4])
	}
	p := ilParser{bound: w[3], types: make(map[uint32]spvType), funcs: make(map[uint32]uint32)}
	if err := p.walk(w[5:]); err != nil {
		return nil, err
	}
	return p.module(w[1])
}

// ilParser collects what CheckIL needs from a module's instructions.
type ilParser struct {
	bound   uint32
	kernel  bool               // OpCapability Kernel seen
	types   map[uint32]spvType // by result id
	funcs   map[uint32]uint32  // function id -> its OpTypeFunction id
	entries []spvEntry
}

// spvEntry is one OpEntryPoint of the Kernel execution model.
type spvEntry struct {
	fn   uint32
	name string
}

// walk reads the instruction stream, word index i counting from the
// first instruction (offset 5 in the module) for messages.
func (p *ilParser) walk(w []uint32) error {
	for i := 0; i < len(w); {
		n, op := int(w[i]>>16), w[i]&0xffff
		if n == 0 || n > len(w)-i {
			return rejected("SPIR-V instruction at word %d: word count %d with %d words left", i+5, n, len(w)-i)
		}
		if err := p.instruction(op, w[i+1:i+n]); err != nil {
			return fmt.Errorf("SPIR-V instruction %d at word %d: %w", op, i+5, err)
		}
		i += n
	}
	if !p.kernel {
		return rejected("SPIR-V module without the Kernel capability: not an OpenCL module")
	}
	return nil
}

// instruction takes in one instruction's operands.
func (p *ilParser) instruction(op uint32, a []uint32) error {
	switch op {
	case spvOpCapability:
		if len(a) != 1 {
			return rejected("capability with %d operands", len(a))
		}
		switch a[0] {
		case spvCapKernel:
			p.kernel = true
		case spvCapAsmINTEL:
			return rejected("inline assembly (capability AsmINTEL)")
		}
	case spvOpExtension:
		if _, err := spvString(a); err != nil {
			return err
		}
	case spvOpEntryPoint:
		if len(a) < 3 {
			return rejected("entry point with %d operands", len(a))
		}
		if a[0] != spvModelKernel {
			return nil // not a kernel (a Shader module fails for want of the Kernel capability)
		}
		name, err := spvString(a[2:])
		if err != nil {
			return err
		}
		if err := p.id(a[1]); err != nil {
			return err
		}
		p.entries = append(p.entries, spvEntry{fn: a[1], name: name})
	case spvOpFunction:
		if len(a) != 4 {
			return rejected("function with %d operands", len(a))
		}
		if err := p.id(a[1]); err != nil {
			return err
		}
		p.funcs[a[1]] = a[3]
	case spvOpTypeVoid, spvOpTypeBool, spvOpTypeInt, spvOpTypeFloat, spvOpTypeVector, spvOpTypeImage,
		spvOpTypeSampler, spvOpTypeSampledImage, spvOpTypeArray, spvOpTypeStruct, spvOpTypeOpaque,
		spvOpTypePointer, spvOpTypeFunction, spvOpTypeEvent, spvOpTypeDeviceEvent, spvOpTypeReserveID,
		spvOpTypeQueue, spvOpTypePipe:
		if len(a) < 1 {
			return rejected("type without a result id")
		}
		if err := p.id(a[0]); err != nil {
			return err
		}
		if _, dup := p.types[a[0]]; dup {
			return rejected("type id %d declared twice", a[0])
		}
		p.types[a[0]] = spvType{op: op, args: a[1:]}
	}
	return nil
}

// id checks that v is an id the module may define.
func (p *ilParser) id(v uint32) error {
	if v == 0 || v >= p.bound {
		return rejected("id %d outside 1..%d", v, p.bound-1)
	}
	return nil
}

// spvString decodes a literal string: UTF-8 ended by a NUL within a.
func spvString(a []uint32) (string, error) {
	b := make([]byte, 0, 4*len(a))
	for _, v := range a {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	for i, c := range b {
		if c == 0 {
			if !utf8.Valid(b[:i]) {
				return "", rejected("string is not UTF-8")
			}
			return string(b[:i]), nil
		}
	}
	return "", rejected("string without its NUL")
}

// module resolves each kernel's parameters from its function type.
func (p *ilParser) module(version uint32) (*ILModule, error) {
	m := &ILModule{Version: version, Kernels: make(map[string][]ILParam, len(p.entries))}
	for _, e := range p.entries {
		if _, dup := m.Kernels[e.name]; dup {
			return nil, rejected("kernel %q declared twice", e.name)
		}
		ft, ok := p.funcs[e.fn]
		if !ok {
			return nil, rejected("kernel %q: function %d not declared", e.name, e.fn)
		}
		t, ok := p.types[ft]
		if !ok || t.op != spvOpTypeFunction || len(t.args) < 1 {
			return nil, rejected("kernel %q: function type %d not declared", e.name, ft)
		}
		params := make([]ILParam, 0, len(t.args)-1)
		for i, pt := range t.args[1:] {
			prm, err := p.param(pt)
			if err != nil {
				return nil, rejected("kernel %q parameter %d: %v", e.name, i, err)
			}
			params = append(params, prm)
		}
		m.Kernels[e.name] = params
	}
	return m, nil
}

// param describes a parameter of type id t.
func (p *ilParser) param(t uint32) (ILParam, error) {
	ty, ok := p.types[t]
	if !ok {
		return ILParam{}, fmt.Errorf("type %d not declared", t)
	}
	prm := ILParam{Kind: ILScalar, Type: p.typeName(t, 0)}
	switch ty.op {
	case spvOpTypePointer:
		if len(ty.args) != 2 {
			return ILParam{}, fmt.Errorf("pointer type %d with %d operands", t, len(ty.args))
		}
		switch ty.args[0] {
		case spvStorageCrossWorkgroup, spvStorageUniformConstant:
			prm.Kind = ILBuffer
		case spvStorageWorkgroup:
			prm.Kind = ILLocal
		case spvStorageFunction:
			prm.Kind = ILScalar // a struct passed by value (ByVal)
		default:
			prm.Kind = ILUnsupported
		}
	case spvOpTypeImage:
		if len(ty.args) < 7 {
			return ILParam{}, fmt.Errorf("image type %d with %d operands", t, len(ty.args))
		}
		switch ty.args[1] {
		case spvDim1D, spvDim2D, spvDim3D:
			prm.Kind = ILImage
		case spvDimBuffer:
			prm.Kind = ILImageBuffer
		default:
			prm.Kind = ILUnsupported // cubes, rectangles, subpass data
		}
		if len(ty.args) > 7 {
			switch ty.args[7] {
			case spvAccessReadOnly:
				prm.Access = ILReadOnly
			case spvAccessWriteOnly:
				prm.Access = ILWriteOnly
			}
		}
	case spvOpTypeSampler:
		prm.Kind = ILSampler
	case spvOpTypeInt, spvOpTypeFloat, spvOpTypeVector, spvOpTypeStruct, spvOpTypeBool:
	default:
		prm.Kind = ILUnsupported
	}
	return prm, nil
}

// typeName spells type id t as OpenCL C would, for messages; depth bounds
// the recursion through pointers, vectors and arrays.
func (p *ilParser) typeName(t uint32, depth int) string {
	ty, ok := p.types[t]
	if !ok || depth > 8 {
		return "?"
	}
	arg := func(i int) uint32 {
		if i < len(ty.args) {
			return ty.args[i]
		}
		return 0
	}
	switch ty.op {
	case spvOpTypeVoid:
		return "void"
	case spvOpTypeBool:
		return "bool"
	case spvOpTypeInt:
		if n, ok := map[uint32]string{8: "char", 16: "short", 32: "int", 64: "long"}[arg(0)]; ok {
			return n
		}
		return fmt.Sprintf("int%d_t", arg(0))
	case spvOpTypeFloat:
		if n, ok := map[uint32]string{16: "half", 32: "float", 64: "double"}[arg(0)]; ok {
			return n
		}
		return fmt.Sprintf("float%d_t", arg(0))
	case spvOpTypeVector:
		return fmt.Sprintf("%s%d", p.typeName(arg(0), depth+1), arg(1))
	case spvOpTypePointer:
		prefix := map[uint32]string{spvStorageWorkgroup: "__local ", spvStorageUniformConstant: "__constant "}[arg(0)]
		return prefix + p.typeName(arg(1), depth+1) + "*"
	case spvOpTypeImage:
		name := map[uint32]string{spvDim1D: "image1d", spvDim2D: "image2d", spvDim3D: "image3d", spvDimBuffer: "image1d_buffer"}[arg(1)]
		if name == "" {
			name = "image"
		}
		if arg(3) != 0 {
			name += "_array"
		}
		return name + "_t"
	case spvOpTypeSampler:
		return "sampler_t"
	case spvOpTypeStruct:
		return "struct"
	case spvOpTypeEvent:
		return "event_t"
	case spvOpTypeDeviceEvent:
		return "clk_event_t"
	case spvOpTypeQueue:
		return "queue_t"
	case spvOpTypePipe:
		return "pipe"
	case spvOpTypeReserveID:
		return "reserve_id_t"
	}
	return "?"
}

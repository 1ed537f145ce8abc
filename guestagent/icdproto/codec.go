package icdproto

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/vgpud/vgpud/abi"
)

// opInfo is what the codec knows of one operation.
type opInfo struct {
	name string
	// reply: the request is answered (by a message of op|ReplyBit).
	reply bool
	// body returns a new, zero body of the op's type (a pointer).
	body func() any
	// is reports whether a value is a body of the op's type.
	is func(any) bool
}

// opOf describes an operation whose body is a *T.
func opOf[T any](name string, reply bool) opInfo {
	return opInfo{name, reply, func() any { return new(T) }, func(v any) bool { _, ok := v.(*T); return ok }}
}

var ops = map[Op]opInfo{
	OpHello:        opOf[Hello]("hello", true),
	OpAttach:       opOf[Attach]("attach", true),
	OpDeviceInfo:   opOf[DeviceInfo]("device-info", true),
	OpQueue:        opOf[Queue]("queue", true),
	OpBufferCreate: opOf[BufferCreate]("buffer-create", false),
	OpBufferFree:   opOf[BufferFree]("buffer-free", false),
	OpWrite:        opOf[Transfer]("write", false),
	OpRead:         opOf[Transfer]("read", false),
	OpCopy:         opOf[Copy]("copy", false),
	OpFill:         opOf[Fill]("fill", false),
	OpBuild:        opOf[Build]("build", true),
	OpProgramFree:  opOf[ProgramFree]("program-free", false),
	OpProgramInfo:  opOf[ProgramInfo]("program-info", true),
	OpLaunch:       opOf[Launch]("launch", false),
	OpFlush:        opOf[Flush]("flush", false),
	OpWait:         opOf[Wait]("wait", true),
	OpPoll:         opOf[Wait]("poll", true),
	OpMarker:       opOf[Marker]("marker", false),
	OpKick:         opOf[Kick]("kick", false),
	OpDrain:        opOf[Drain]("drain", true),
	OpError:        opOf[Error]("error", false),

	OpHello | ReplyBit:       opOf[HelloReply]("hello-reply", false),
	OpAttach | ReplyBit:      opOf[AttachReply]("attach-reply", false),
	OpQueue | ReplyBit:       opOf[QueueReply]("queue-reply", false),
	OpDrain | ReplyBit:       opOf[Drain]("drain-reply", false),
	OpDeviceInfo | ReplyBit:  opOf[DeviceInfoReply]("device-info-reply", false),
	OpBuild | ReplyBit:       opOf[BuildReply]("build-reply", false),
	OpProgramInfo | ReplyBit: opOf[ProgramInfoReply]("program-info-reply", false),
	OpWait | ReplyBit:        opOf[WaitReply]("wait-reply", false),
	OpPoll | ReplyBit:        opOf[WaitReply]("poll-reply", false),
}

// Ops returns every operation, requests and replies, in no order.
func Ops() []Op {
	out := make([]Op, 0, len(ops))
	for op := range ops {
		out = append(out, op)
	}
	return out
}

// String is the operation's name, or op(0xN) for an unknown op.
func (op Op) String() string {
	if in, ok := ops[op]; ok {
		return in.name
	}
	return fmt.Sprintf("op(%#x)", uint16(op))
}

// Known reports whether op is an operation of the protocol.
func (op Op) Known() bool { _, ok := ops[op]; return ok }

// Replied reports whether a request of op is answered.
func (op Op) Replied() bool { return ops[op].reply }

// IsReply reports whether op is a reply's.
func (op Op) IsReply() bool { return op&ReplyBit != 0 && op != OpError }

// NewBody returns a zero body of op's type (a pointer), or nil for an
// unknown op.
func NewBody(op Op) any {
	in, ok := ops[op]
	if !ok {
		return nil
	}
	return in.body()
}

// Append encodes a message of op with request id and body (a pointer to
// op's body type, as NewBody returns) and appends it to b. Counts that the
// tail determines (HelloReply's device count, Wait's count, Launch's
// NumArgs) are set from the tail. The body is validated as Unmarshal
// would; a body that Unmarshal would refuse is not encoded.
func Append(b []byte, op Op, id uint64, body any) ([]byte, error) {
	in, ok := ops[op]
	if !ok {
		return nil, Errorf(ErrUnknownOp, "encode op %#x", uint16(op))
	}
	if !in.is(body) {
		return nil, Errorf(ErrMalformed, "encode %v: body is %T, want %T", op, body, in.body())
	}
	if l, ok := body.(*Launch); ok {
		l.NumArgs = uint32(len(l.Args))
	}
	if err := validate(body); err != nil {
		return nil, fmt.Errorf("encode %v: %w", op, err)
	}
	start := len(b)
	c := encoder(b)
	(&Header{Op: op, ID: id}).fields(c) // Len is set below
	_ = walkBody(c, body)               // encoding returns no error: validate has checked the body
	b = c.w.Bytes()
	n := len(b) - start
	if n > MaxMessage {
		return nil, Errorf(ErrLimit, "encode %v: %d bytes, more than %d", op, n, MaxMessage)
	}
	le.PutUint32(b[start+4:], uint32(n))
	return b, nil
}

// Marshal is Append to a new slice.
func Marshal(op Op, id uint64, body any) ([]byte, error) { return Append(nil, op, id, body) }

// AppendFixed appends the little-endian encoding of a fixed-size wire
// structure (a pointer to one of this package's fixed types) as is,
// reserved fields included and without validation: abi/cabi uses it to
// find each field's offset.
func AppendFixed(b []byte, v any) []byte {
	f, ok := v.(fixed)
	if _, tail := v.(variable); !ok || tail {
		panic(fmt.Sprintf("icdproto: %T is not a fixed-size type", v)) // a programming error
	}
	c := encoder(b)
	f.fields(c)
	return c.w.Bytes()
}

// UnmarshalHeader decodes the header of message b and checks it against
// the datagram: its length must be len(b), between HeaderSize and
// MaxMessage, its flags 0 and its op known.
func UnmarshalHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, Errorf(ErrMalformed, "message of %d bytes, shorter than a header", len(b))
	}
	h.fields(decoder(b[:HeaderSize]))
	switch {
	case len(b) > MaxMessage:
		return h, Errorf(ErrMalformed, "message of %d bytes, more than %d", len(b), MaxMessage)
	case int(h.Len) != len(b):
		return h, Errorf(ErrMalformed, "header says %d bytes, message has %d", h.Len, len(b))
	case h.Flags != 0:
		return h, Errorf(ErrReserved, "header flags %#x", h.Flags)
	case !h.Op.Known():
		return h, Errorf(ErrUnknownOp, "op %#x", uint16(h.Op))
	}
	return h, nil
}

// Unmarshal decodes and validates message b: its header and its body (a
// pointer to the op's body type). It never panics; on error the body is
// nil (the header is returned when it could be decoded, so that an error
// reply can echo its id).
func Unmarshal(b []byte) (Header, any, error) {
	h, err := UnmarshalHeader(b)
	if err != nil {
		return h, nil, err
	}
	body := NewBody(h.Op)
	if err := decodeBody(b[HeaderSize:], body); err != nil {
		return h, nil, fmt.Errorf("%v: %w", h.Op, err)
	}
	if err := validate(body); err != nil {
		return h, nil, fmt.Errorf("%v: %w", h.Op, err)
	}
	return h, body, nil
}

// decodeBody decodes p, a body without its header, into body.
func decodeBody(p []byte, body any) error { return walkBody(decoder(p), body) }

// walkBody passes body (a pointer to a body type) through c: a body with
// a variable tail by its walk, a fixed one by its fields, which must then
// fill the body exactly.
func walkBody(c *fieldCodec, body any) error {
	switch v := body.(type) {
	case variable: // first: Launch has LaunchHead's fields too
		return v.walk(c)
	case fixed:
		return v.fields(c).fits(false)
	}
	panic(fmt.Sprintf("icdproto: %T is not a body type", body)) // a programming error
}

// walk passes the head and the device records.
func (v *HelloReply) walk(c *fieldCodec) error {
	hd := HelloReplyHead{Version: v.Version, DeviceCount: uint32(len(v.Devices))}
	if err := hd.fields(c).fits(true); err != nil {
		return err
	}
	if c.dec {
		if hd.DeviceCount > MaxDevices {
			return Errorf(ErrLimit, "%d devices", hd.DeviceCount)
		}
		if err := c.want(DeviceRecordSize * int(hd.DeviceCount)); err != nil {
			return err
		}
		v.Version = hd.Version
		v.Devices = make([]DeviceRecord, hd.DeviceCount)
	}
	for i := range v.Devices {
		v.Devices[i].fields(c)
	}
	return nil
}

// walk passes the head and the blob.
func (v *DeviceInfoReply) walk(c *fieldCodec) error {
	hd := DeviceInfoReplyHead{Status: v.Status, InfoLen: uint64(len(v.Info))}
	if err := hd.fields(c).fits(true); err != nil {
		return err
	}
	if c.dec {
		if hd.Reserved != 0 {
			return Errorf(ErrReserved, "device-info reply reserved %#x", hd.Reserved)
		}
		if hd.InfoLen > MaxDeviceInfo {
			return Errorf(ErrLimit, "device info of %d bytes, more than %d", hd.InfoLen, MaxDeviceInfo)
		}
		if err := c.want(int(hd.InfoLen)); err != nil {
			return err
		}
		v.Status = hd.Status
	}
	c.tail(&v.Info)
	return nil
}

// walk passes the head and the event ids.
func (v *Wait) walk(c *fieldCodec) error {
	hd := WaitHead{Count: uint32(len(v.Events))}
	if err := hd.fields(c).fits(true); err != nil {
		return err
	}
	if c.dec {
		if hd.Reserved != 0 {
			return Errorf(ErrReserved, "wait reserved %#x", hd.Reserved)
		}
		if hd.Count > MaxWaitEvents {
			return Errorf(ErrLimit, "%d events, more than %d", hd.Count, MaxWaitEvents)
		}
		if err := c.want(8 * int(hd.Count)); err != nil {
			return err
		}
		v.Events = make([]uint64, hd.Count)
	}
	c.u64s(v.Events)
	return nil
}

// walk passes the head and the event records.
func (v *WaitReply) walk(c *fieldCodec) error {
	hd := WaitReplyHead{Count: uint32(len(v.Events)), Pending: v.Pending}
	if err := hd.fields(c).fits(true); err != nil {
		return err
	}
	if c.dec {
		if hd.Count > MaxWaitEvents {
			return Errorf(ErrLimit, "%d event records, more than %d", hd.Count, MaxWaitEvents)
		}
		if err := c.want(EventRecordSize * int(hd.Count)); err != nil {
			return err
		}
		v.Pending = hd.Pending
		v.Events = make([]EventRecord, hd.Count)
	}
	for i := range v.Events {
		v.Events[i].fields(c)
	}
	return nil
}

// walk passes the head, the argument entries and the scalar area.
func (v *Launch) walk(c *fieldCodec) error {
	if err := v.LaunchHead.fields(c).fits(true); err != nil {
		return err
	}
	if c.dec {
		if v.NumArgs > abi.MaxKernelArgs+1 { // the printf buffer's entry (LaunchPrintf) may follow the kernel's
			return Errorf(ErrLimit, "%d arguments, more than %d", v.NumArgs, abi.MaxKernelArgs)
		}
		if end := LaunchHeadSize + LaunchArgSize*int(v.NumArgs); c.size < end {
			return badLen(c.size, end)
		}
		v.Args = make([]LaunchArg, v.NumArgs)
	}
	for i := range v.Args {
		v.Args[i].fields(c)
	}
	c.tail(&v.Scalars)
	return nil
}

// walk passes the head and the message.
func (v *Error) walk(c *fieldCodec) error {
	hd := ErrorHead{Code: v.Code}
	if err := hd.fields(c).fits(true); err != nil {
		return err
	}
	if !c.dec {
		c.w.Str(v.Message)
		return nil
	}
	if hd.Reserved != 0 {
		return Errorf(ErrReserved, "error reserved %#x", hd.Reserved)
	}
	v.Code, v.Message = hd.Code, string(c.r.Rest())
	return nil
}

// reserved reports a nonzero reserved field; what names it.
func reserved(what string, v uint64) error {
	if v != 0 {
		return Errorf(ErrReserved, "%s %#x", what, v)
	}
	return nil
}

// nonzero reports a field that must not be 0; what names it.
func nonzero(what string, v uint64) error {
	if v == 0 {
		return Errorf(ErrMalformed, "%s is 0", what)
	}
	return nil
}

// span checks that off+n does not overflow.
func span(what string, off, n uint64) error {
	if off+n < off {
		return Errorf(ErrRange, "%s %d+%d overflows", what, off, n)
	}
	return nil
}

// firstErr returns the first non-nil error of errs.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// validate checks what can be checked of a body without state.
func validate(body any) error {
	switch v := body.(type) {
	case *Hello:
		return reserved("hello reserved", uint64(v.Reserved))
	case *HelloReply:
		if len(v.Devices) > MaxDevices {
			return Errorf(ErrLimit, "%d devices", len(v.Devices))
		}
		for _, d := range v.Devices {
			if err := reserved("device record reserved", uint64(d.Reserved)); err != nil {
				return err
			}
		}
	case *Attach:
		return firstErr(reserved("attach reserved", uint64(v.Reserved)), nonzero("arena", uint64(v.Arena)),
			nonzero("arena size", v.Size))
	case *AttachReply:
		return reserved("attach reply reserved", uint64(v.Reserved))
	case *Queue:
		return firstErr(reserved("queue flags", uint64(v.Flags)), reserved("queue reserved", uint64(v.Reserved)),
			nonzero("queue size", v.Size))
	case *QueueReply:
		return reserved("queue reply reserved", uint64(v.Reserved))
	case *DeviceInfo:
		return reserved("device-info reserved", uint64(v.Reserved))
	case *DeviceInfoReply:
		if len(v.Info) > MaxDeviceInfo {
			return Errorf(ErrLimit, "device info of %d bytes, more than %d", len(v.Info), MaxDeviceInfo)
		}
		if v.Status != 0 && len(v.Info) != 0 {
			return Errorf(ErrMalformed, "device info of %d bytes with status %d", len(v.Info), v.Status)
		}
	case *BufferCreate:
		if err := firstErr(reserved("buffer-create reserved", uint64(v.Reserved)),
			nonzero("buffer", uint64(v.Buffer)), nonzero("size", v.Size)); err != nil {
			return err
		}
		if v.Flags&^abi.BufferFlagsMask != 0 {
			return Errorf(ErrReserved, "buffer flags %#x", v.Flags)
		}
		if v.Flags == abi.BufferFlagsMask {
			return Errorf(ErrMalformed, "buffer both read-only and write-only")
		}
	case *BufferFree:
		return firstErr(reserved("buffer-free reserved", uint64(v.Reserved)), nonzero("buffer", uint64(v.Buffer)))
	case *Transfer:
		return firstErr(nonzero("buffer", uint64(v.Buffer)), nonzero("arena", uint64(v.Arena)),
			nonzero("length", v.Length), span("buffer range", v.Offset, v.Length),
			span("arena range", v.ArenaOffset, v.Length))
	case *Copy:
		return firstErr(nonzero("source buffer", uint64(v.Src)), nonzero("destination buffer", uint64(v.Dst)),
			nonzero("length", v.Length), span("source range", v.SrcOffset, v.Length),
			span("destination range", v.DstOffset, v.Length))
	case *Fill:
		if err := firstErr(nonzero("buffer", uint64(v.Buffer)), nonzero("length", v.Length),
			span("buffer range", v.Offset, v.Length)); err != nil {
			return err
		}
		n := v.PatternLen
		if n == 0 || n > MaxPattern || n&(n-1) != 0 {
			return Errorf(ErrMalformed, "pattern of %d bytes (want a power of two up to %d)", n, MaxPattern)
		}
		if v.Length%uint64(n) != 0 || v.Offset%uint64(n) != 0 {
			return Errorf(ErrMalformed, "fill of %d bytes at %d: not multiples of the pattern's %d", v.Length, v.Offset, n)
		}
		for _, c := range v.Pattern[n:] {
			if c != 0 {
				return Errorf(ErrReserved, "pattern bytes past pattern_len %d", n)
			}
		}
	case *Build:
		if err := firstErr(nonzero("program", uint64(v.Program)), nonzero("arena", uint64(v.Arena)),
			span("source range", v.SrcOffset, uint64(v.SrcLen)), span("options range", v.OptsOffset, uint64(v.OptsLen)),
			span("output range", v.OutOffset, v.OutCap)); err != nil {
			return err
		}
		if v.Flags&^uint32(abi.FlagsMask) != 0 {
			return Errorf(ErrReserved, "build flags %#x", v.Flags)
		}
		if v.SrcLen == 0 || v.SrcLen > abi.MaxSourceLen || v.OptsLen > abi.MaxOptionsLen {
			return Errorf(ErrLimit, "source of %d bytes, options of %d (limits %d, %d)", v.SrcLen, v.OptsLen, abi.MaxSourceLen, abi.MaxOptionsLen)
		}
	case *BuildReply:
		return reserved("build reply reserved", uint64(v.Reserved))
	case *ProgramFree:
		return firstErr(reserved("program-free reserved", uint64(v.Reserved)), nonzero("program", uint64(v.Program)))
	case *ProgramInfo:
		return firstErr(nonzero("program", uint64(v.Program)), nonzero("arena", uint64(v.Arena)),
			span("output range", v.OutOffset, v.OutCap))
	case *ProgramInfoReply:
		return reserved("program-info reply reserved", uint64(v.Reserved))
	case *Launch:
		return validateLaunch(v)
	case *Wait:
		if len(v.Events) > MaxWaitEvents {
			return Errorf(ErrLimit, "%d events, more than %d", len(v.Events), MaxWaitEvents)
		}
		for _, e := range v.Events {
			if e == 0 {
				return Errorf(ErrMalformed, "event 0")
			}
		}
	case *WaitReply:
		if len(v.Events) > MaxWaitEvents {
			return Errorf(ErrLimit, "%d event records, more than %d", len(v.Events), MaxWaitEvents)
		}
		for _, e := range v.Events {
			if err := reserved("event record reserved", uint64(e.Reserved)); err != nil {
				return err
			}
		}
	case *Error:
		if !utf8.ValidString(v.Message) {
			return Errorf(ErrMalformed, "error message not UTF-8")
		}
	}
	return nil
}

// validateLaunch checks a launch: its head, kernel name and argument
// entries against the scalar area.
func validateLaunch(v *Launch) error {
	if err := nonzero("program", uint64(v.Program)); err != nil {
		return err
	}
	if v.Flags&^(uint32(abi.FlagNondeterministic)|LaunchPrintf) != 0 {
		return Errorf(ErrReserved, "launch flags %#x", v.Flags)
	}
	if v.Flags&LaunchPrintf != 0 {
		// The printf buffer's entry comes last, after the kernel's.
		if len(v.Args) == 0 || v.Args[len(v.Args)-1].Kind != abi.ArgBuffer {
			return Errorf(ErrMalformed, "launch with a printf buffer but no buffer entry last")
		}
		if len(v.Args)-1 > abi.MaxKernelArgs || int(v.NumArgs) != len(v.Args) {
			return Errorf(ErrMalformed, "num_args %d with %d entries (at most %d and the printf buffer)", v.NumArgs, len(v.Args), abi.MaxKernelArgs)
		}
	} else if int(v.NumArgs) != len(v.Args) || len(v.Args) > abi.MaxKernelArgs {
		return Errorf(ErrMalformed, "num_args %d with %d entries (at most %d)", v.NumArgs, len(v.Args), abi.MaxKernelArgs)
	}
	if v.WorkDim < 1 || v.WorkDim > 3 {
		return Errorf(ErrMalformed, "work_dim %d", v.WorkDim)
	}
	for i := 0; i < 3; i++ {
		used := uint32(i) < v.WorkDim
		switch {
		case used && v.GlobalSize[i] == 0:
			return Errorf(ErrMalformed, "global size %d is 0", i)
		case !used && (v.GlobalSize[i] != 0 || v.GlobalOffset[i] != 0 || v.LocalSize[i] != 0):
			return Errorf(ErrMalformed, "dimension %d beyond work_dim set", i)
		}
	}
	name := v.Kernel[:]
	n := bytes.IndexByte(name, 0)
	if n < 0 {
		return Errorf(ErrMalformed, "kernel name not NUL terminated")
	}
	for _, c := range name[n:] {
		if c != 0 {
			return Errorf(ErrMalformed, "kernel name not NUL padded")
		}
	}
	if !validIdent(name[:n]) {
		return Errorf(ErrMalformed, "kernel name %q", name[:n])
	}
	for i, a := range v.Args {
		switch a.Kind {
		case abi.ArgBuffer:
			if a.Size != 0 || a.Value == 0 || a.Value > 0xFFFFFFFF {
				return Errorf(ErrMalformed, "argument %d: buffer id %#x size %d", i, a.Value, a.Size)
			}
		case abi.ArgScalar:
			if a.Size == 0 || a.Size > abi.MaxScalarSize {
				return Errorf(ErrMalformed, "argument %d: scalar of %d bytes", i, a.Size)
			}
			if a.Size <= 8 {
				if a.Size < 8 && a.Value>>(8*a.Size) != 0 {
					return Errorf(ErrReserved, "argument %d: scalar padding not zero", i)
				}
			} else if a.Value > uint64(len(v.Scalars)) || uint64(len(v.Scalars))-a.Value < uint64(a.Size) {
				return Errorf(ErrRange, "argument %d: scalar at %d+%d outside the %d-byte scalar area", i, a.Value, a.Size, len(v.Scalars))
			}
		case abi.ArgLocal:
			if a.Size == 0 || a.Value != 0 {
				return Errorf(ErrMalformed, "argument %d: local of %d bytes, value %d", i, a.Size, a.Value)
			}
		case abi.ArgImage:
			if _, err := v.Image(a); err != nil {
				return Errorf(ErrMalformed, "argument %d: %v", i, err)
			}
		case abi.ArgSampler:
			if _, err := abi.UnpackSampler(a.Value); err != nil || a.Size != 0 {
				return Errorf(ErrMalformed, "argument %d: sampler %#x of size %d", i, a.Value, a.Size)
			}
		default:
			return Errorf(ErrMalformed, "argument %d: kind %d", i, a.Kind)
		}
	}
	return nil
}

// validIdent reports whether b is a C identifier.
func validIdent(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for i, c := range b {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

// KernelName returns the launch's kernel name (up to the first NUL).
func (h *LaunchHead) KernelName() string {
	n := bytes.IndexByte(h.Kernel[:], 0)
	if n < 0 {
		n = len(h.Kernel)
	}
	return string(h.Kernel[:n])
}

// SetKernel sets the kernel name; it is truncated to fit with its NUL.
func (h *LaunchHead) SetKernel(name string) {
	h.Kernel = [abi.KernelNameLen]byte{}
	copy(h.Kernel[:abi.KernelNameLen-1], name)
}

// KernelArgs returns the launch's argument entries of the kernel, and the
// printf buffer's id (0: none) of a validated launch.
func (l *Launch) KernelArgs() ([]LaunchArg, uint32) {
	if l.Flags&LaunchPrintf == 0 || len(l.Args) == 0 {
		return l.Args, 0
	}
	n := len(l.Args) - 1
	return l.Args[:n], uint32(l.Args[n].Value)
}

// Image decodes image argument a (kind abi.ArgImage): its descriptor in
// the scalar area, whose buffer is the client's buffer id.
func (l *Launch) Image(a LaunchArg) (abi.ImageDesc, error) {
	if a.Size != abi.ImageDescSize || a.Value > uint64(len(l.Scalars)) || uint64(len(l.Scalars))-a.Value < abi.ImageDescSize {
		return abi.ImageDesc{}, fmt.Errorf("image descriptor of %d bytes at %d outside the %d-byte scalar area", a.Size, a.Value, len(l.Scalars))
	}
	return abi.UnmarshalImageDesc(l.Scalars[a.Value : a.Value+abi.ImageDescSize])
}

// ScalarBytes returns the bytes of scalar argument a (kind abi.ArgScalar)
// of a validated launch.
func (l *Launch) ScalarBytes(a LaunchArg) []byte {
	if a.Size <= 8 {
		var v [8]byte
		le.PutUint64(v[:], a.Value)
		return v[:a.Size]
	}
	return l.Scalars[a.Value : a.Value+uint64(a.Size)]
}

// String names a record's device (up to the first NUL).
func cstr(b []byte) string {
	if n := bytes.IndexByte(b, 0); n >= 0 {
		b = b[:n]
	}
	return string(b)
}

// ProfileName returns the record's profile name.
func (d *DeviceRecord) ProfileName() string { return cstr(d.Profile[:]) }

// DeviceName returns the record's device name.
func (d *DeviceRecord) DeviceName() string { return cstr(d.Name[:]) }

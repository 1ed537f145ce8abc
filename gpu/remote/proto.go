package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/internal/codec"
)

// The executor protocol (docs/executor-protocol.md). Every integer is
// little-endian. A request frame is
//
//	u32 length (of what follows) | u32 seq | u8 op | body
//
// and its reply
//
//	u32 length | u32 seq (the request's) | u8 status | body
//
// where status 0 is success and any other value an error kind (errKind),
// whose body is u16 message length | message | u32 log length | log.

// MaxFrame bounds a frame's length field: a larger one breaks the
// protocol. Write and Read move at most Chunk bytes per frame.
const (
	MaxFrame = 16 << 20
	Chunk    = 4 << 20
	// maxArgs bounds a launch's argument count (OpenCL's
	// CL_DEVICE_MAX_PARAMETER_SIZE allows at most a few hundred).
	maxArgs = 1024
	// maxNames bounds a program's kernel count in a reply.
	maxNames = 1 << 16
)

// Op is a request's operation.
type Op uint8

// The operations. A body lists its fields in order; q, b, p and k are u32
// handles of a queue, buffer, program and kernel, given out by the server
// (never 0, never reused in a connection); s16 and s32 are strings with a
// u16 or u32 length before them.
const (
	OpInfo        Op = 1  // -> JSON gpu.Info (the rest of the body)
	OpNewQueue    Op = 2  // -> q
	OpCloseQueue  Op = 3  // q -> u8 let go (1: the runtime let go of its arena buffers' memory)
	OpAlloc       Op = 4  // q, u64 size -> b
	OpWrite       Op = 5  // q, b, u64 off, data (the rest) ->
	OpRead        Op = 6  // q, b, u64 off, u32 n -> data (exactly n bytes)
	OpCopy        Op = 7  // q, src b, dst b, u64 srcOff, u64 dstOff, u64 n ->
	OpFill        Op = 8  // q, b, u64 off, u64 n, u8 len, pattern ->
	OpBuild       Op = 9  // q, s32 source, s32 options -> p, s32 log
	OpKernel      Op = 10 // q, p, s16 name -> k, u32 args
	OpKernelNames Op = 11 // q, p -> u32 count, count x s16
	OpProgramInfo Op = 12 // q, p -> JSON []gpu.KernelInfo (the rest)
	OpLaunch      Op = 13 // q, k, NDRange, u16 count, count x arg -> u64 ns
	OpRelease     Op = 14 // q, u8 what (1 buffer, 2 program, 3 kernel), handle -> u8 let go (as OpCloseQueue's)
	OpClose       Op = 15 // -> (the server closes the device and ends)
	// OpLaunches is a batch of launches (gpu.Pipeliner): q, u16 count,
	// count x (OpLaunch's body after q) -> count x result, in order: u8
	// 0 and u64 ns, or u8 error kind and s16 message.
	OpLaunches Op = 16
	// OpAllocAt makes a buffer on the arena (ServeArena), at a page
	// aligned offset: q, u64 off, u64 size -> b.
	OpAllocAt Op = 17
	// OpLaunchPrinting is a launch that returns what the kernel printed
	// (gpu.Printer; ServeOptions.Output): q, u32 max, then OpLaunch's
	// body after q -> u64 ns, u64 dropped, data (the rest, at most max
	// bytes).
	OpLaunchPrinting Op = 18
	// OpBuildIL builds a program from a SPIR-V module (gpu.ILBuilder):
	// q, s32 module, s32 options -> p, s32 log, as OpBuild.
	OpBuildIL Op = 19
)

// MaxPrintout bounds the output one OpLaunchPrinting reply carries.
const MaxPrintout = 4 << 20

// MaxBatch bounds the launches of one OpLaunches frame.
const MaxBatch = 1024

// NDRange: u8 dims, 3 x u64 offset, 3 x u64 global, 3 x u64 local. An
// argument: u8 kind, then for argBuffer a buffer handle, for argScalar an
// s16 of bytes, for argLocal a u64 size, for argImage a buffer handle and
// the image (u32 type, order, data type, u64 width, height, depth, array
// size), for argSampler u8 normalized (0 or 1), u32 addressing, u32
// filter.
const (
	argBuffer  = 1
	argScalar  = 2
	argLocal   = 3
	argImage   = 4
	argSampler = 5
)

// What a Release names.
const (
	relBuffer  = 1
	relProgram = 2
	relKernel  = 3
)

// errKind is a reply's error status: which of package gpu's sentinels the
// error is. kindProtocol: the server could not decode the request.
type errKind uint8

const (
	kindOther errKind = iota + 1
	kindBuildFailed
	kindSourceRejected
	kindNoKernel
	kindOutOfMemory
	kindInvalidLaunch
	kindInvalidArgument
	kindOutOfRange
	kindDevice
	kindContextLost
	kindClosed
	kindForeign
	kindNoDevice
	kindNoPlatform
	kindProtocol
	kindUnsupported
	kindLast = kindUnsupported
)

// kinds maps sentinels to kinds, the more specific first.
var kinds = []struct {
	err  error
	kind errKind
}{
	{gpu.ErrSourceRejected, kindSourceRejected},
	{gpu.ErrBuildFailed, kindBuildFailed},
	{gpu.ErrNoKernel, kindNoKernel},
	{gpu.ErrOutOfMemory, kindOutOfMemory},
	{gpu.ErrInvalidLaunch, kindInvalidLaunch},
	{gpu.ErrOutOfRange, kindOutOfRange},
	{gpu.ErrInvalidArgument, kindInvalidArgument},
	{gpu.ErrContextLost, kindContextLost},
	{gpu.ErrDevice, kindDevice},
	{gpu.ErrClosed, kindClosed},
	{gpu.ErrForeign, kindForeign},
	{gpu.ErrNoDevice, kindNoDevice},
	{gpu.ErrNoPlatform, kindNoPlatform},
	{ErrProtocol, kindProtocol},
	{gpu.ErrUnsupported, kindUnsupported},
}

func kindOf(err error) errKind {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return kindOther
}

// sentinel is the error a kind stands for; kindOther is a device error
// (the executor failed in a way the caller could not have prevented).
func (k errKind) sentinel() error {
	for _, e := range kinds {
		if e.kind == k {
			return e.err
		}
	}
	return gpu.ErrDevice
}

// ErrProtocol: a frame or body that does not follow the protocol.
var ErrProtocol = errors.New("executor protocol violation")

// ErrUnanswered is the cause of a device lost because the executor left
// a request unanswered past its Watchdog bound.
var ErrUnanswered = errors.New("executor unanswered")

// Error is an error the executor answered: its message, and the sentinel
// of its kind for errors.Is.
type Error struct {
	Msg  string
	kind errKind
}

func (e *Error) Error() string { return "executor: " + e.Msg }
func (e *Error) Unwrap() error { return e.kind.sentinel() }

// frame is one decoded frame: a request (code is its Op) or a reply (code
// is its status).
type frame struct {
	seq  uint32
	code uint8
	body []byte
}

// readFrame reads one frame; a length over MaxFrame or under the header's
// is ErrProtocol.
func readFrame(r io.Reader) (frame, error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.LittleEndian.Uint32(h[0:])
	if n < 5 || n > MaxFrame {
		return frame{}, fmt.Errorf("%w: frame length %d", ErrProtocol, n)
	}
	f := frame{seq: binary.LittleEndian.Uint32(h[4:]), code: h[8], body: getBody(int(n - 5))}
	if _, err := io.ReadFull(r, f.body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return f, nil
}

// Large bodies (a write's request, a read's reply) come from a pool: a
// fresh one each time was zeroed by the runtime and collected later, two
// passes over its bytes more than the copy itself (issue 42). getBody
// returns a body of n bytes; putBody gives one back once nothing refers
// to it any more (a body never given back is collected as before).
const (
	minPooledBody = 64 << 10
	pooledBodyCap = Chunk + 64 // a write's request: handles and offset, and Chunk bytes
)

var bodies sync.Pool // of []byte of capacity pooledBodyCap

func getBody(n int) []byte {
	if n < minPooledBody || n > pooledBodyCap {
		return make([]byte, n)
	}
	if b, ok := bodies.Get().([]byte); ok {
		return b[:n]
	}
	return make([]byte, n, pooledBodyCap)
}

func putBody(b []byte) {
	if cap(b) == pooledBodyCap && len(b) >= minPooledBody {
		bodies.Put(b[:pooledBodyCap])
	}
}

// appendFrameHeader appends the header of a frame whose body is n bytes.
func appendFrameHeader(dst []byte, seq uint32, code uint8, n int) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(5+n))
	dst = binary.LittleEndian.AppendUint32(dst, seq)
	return append(dst, code)
}

// appendFrame appends a frame with body to dst.
func appendFrame(dst []byte, seq uint32, code uint8, body []byte) []byte {
	return append(appendFrameHeader(dst, seq, code, len(body)), body...)
}

// enc builds a body (internal/codec), with the executor protocol's
// strings (a u16 or u32 length) and ranges.
type enc struct{ codec.Writer }

// s16 and s32 append a string with its length; the caller keeps it within
// the length's range (checkString).
func (e *enc) s16(s string) { e.U16(uint16(len(s))); e.Str(s) }
func (e *enc) s32(s string) { e.U32(uint32(len(s))); e.Str(s) }

func (e *enc) ndrange(r gpu.NDRange) {
	e.U8(uint8(r.Dims))
	for _, a := range [][3]uint64{r.Offset, r.Global, r.Local} {
		for _, v := range a {
			e.U64(v)
		}
	}
}

// dec reads a body (internal/codec): the first short read sets the error,
// an ErrProtocol, and every later read returns zero.
type dec struct{ codec.Reader }

func newDec(body []byte) dec {
	return dec{codec.NewReader(body, func(msg string) error { return fmt.Errorf("%w: %s", ErrProtocol, msg) })}
}

func (d *dec) s16() string { return string(d.Take(int(d.U16()))) }

func (d *dec) s32() string { return string(d.Bounded("string", uint64(d.U32()), MaxFrame)) }

// done is the decode's error, or one if bytes are left over.
func (d *dec) done() error { return d.Done("body") }

func (d *dec) ndrange() gpu.NDRange {
	r := gpu.NDRange{Dims: int(d.U8())}
	for _, a := range []*[3]uint64{&r.Offset, &r.Global, &r.Local} {
		for i := range a {
			a[i] = d.U64()
		}
	}
	return r
}

// errorBody is the body of an error reply.
func errorBody(err error, log string) []byte {
	var e enc
	e.s16(message(err))
	e.s32(log)
	return e.B
}

// decodeError decodes an error reply of kind k: the error and the log.
func decodeError(k errKind, body []byte) (error, string) {
	d := newDec(body)
	msg, log := d.s16(), d.s32()
	if err := d.done(); err != nil {
		return err, ""
	}
	if k > kindLast {
		k = kindOther
	}
	return &Error{Msg: msg, kind: k}, log
}

// checkString refuses a string too long for its length field or a frame.
func checkString(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s of %d bytes (at most %d): %w", what, len(s), max, gpu.ErrInvalidArgument)
	}
	return nil
}

// message is err's text, cut to fit an s16.
func message(err error) string {
	msg := err.Error()
	if len(msg) > math.MaxUint16 {
		msg = msg[:math.MaxUint16]
	}
	return msg
}

// appendResults encodes an OpLaunches reply.
func appendResults(e *enc, res []gpu.LaunchResult) {
	for _, r := range res {
		if r.Err != nil {
			e.U8(uint8(kindOf(r.Err)))
			e.s16(message(r.Err))
			continue
		}
		e.U8(0)
		e.U64(uint64(max(r.Device, 0)))
	}
}

// decodeResults decodes an OpLaunches reply of n results; a body that
// is not exactly that is ErrProtocol.
func decodeResults(body []byte, n int) ([]gpu.LaunchResult, error) {
	d := newDec(body)
	res := make([]gpu.LaunchResult, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		switch k := errKind(d.U8()); {
		case k == 0:
			ns := d.U64()
			if ns > math.MaxInt64 {
				d.Fail("kernel time %d ns", ns)
			}
			res[i].Device = time.Duration(ns)
		case k > kindLast:
			d.Fail("result %d of an unknown kind %d", i, k)
		default:
			res[i].Err = &Error{Msg: d.s16(), kind: k}
		}
	}
	if err := d.done(); err != nil {
		return nil, err
	}
	return res, nil
}

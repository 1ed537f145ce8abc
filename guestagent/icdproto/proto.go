package icdproto

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/abi"
)

var le = binary.LittleEndian

// Version is the newest protocol version: a client's Hello carries it,
// and a daemon answers a Hello of any version from MinVersion to Version
// with the client's. Version 2 adds the submission queue (OpQueue,
// OpKick, OpDrain; queue.go); version 3 adds printf buffers on launches
// (LaunchPrintf); version 4 adds image and sampler arguments (abi 1.8,
// kinds abi.ArgImage and abi.ArgSampler) and answers DeviceInfo with the
// device's version-2 blob, with its image section, where it has one;
// version 5 adds SPIR-V modules (abi 1.9: Build with abi.FlagIL) and
// answers DeviceInfo with the device's version-3 blob, whose il word says
// whether the device takes them; version 6 adds images made from buffers
// (abi 1.10: image arguments of abi.ImageType1DBuffer) and answers
// DeviceInfo with the device's version-4 blob, whose image section ends
// in the buffer part. A client that meets an older daemon (an Error of
// ErrVersion) dials again and says the version before.
const (
	Version    = 6
	MinVersion = 1
)

// LaunchPrintf in LaunchHead.Flags (version 3): the launch's last
// argument entry is not the kernel's but its printf buffer (kind
// abi.ArgBuffer, the client's buffer id), into which the device writes
// what the kernel printed (docs/ABI.md "Printf output").
const LaunchPrintf uint32 = 1 << 16

// Transport (docs/icd-protocol.md "Transport").
const (
	// DefaultSocket is where vgpu-icdd listens unless told otherwise.
	DefaultSocket = "/run/vgpud/icd.sock"
	// SocketEnv names the environment variable that overrides
	// DefaultSocket in the client.
	SocketEnv = "VGPUD_ICD_SOCKET"
	// MaxMessage is the largest message, header included.
	MaxMessage = 64 << 10
)

// Sizes of the fixed wire structures.
const (
	HeaderSize       = 16
	DeviceRecordSize = 136
	EventRecordSize  = 40
	LaunchHeadSize   = 160
	LaunchArgSize    = 16
)

// Limits per connection (docs/icd-protocol.md "Operations").
const (
	MaxBuffers  = 65536 // live buffers
	MaxPrograms = 1024  // live programs
	MaxEvents   = 65536 // events not yet reported
	MaxArenas   = 16    // attached arenas
	// MaxWaitEvents is the most events one Wait or Poll names, and the
	// most event records one reply carries (40 bytes each, so a reply
	// stays under MaxMessage).
	MaxWaitEvents = 1024
	// MaxPattern is the longest Fill pattern.
	MaxPattern = 128
	// MaxDevices is the most devices a Hello reply lists.
	MaxDevices = 64
	// MaxDeviceInfo is the most blob bytes a DeviceInfo reply carries:
	// the abi device-information blob is at most one page.
	MaxDeviceInfo = abi.MaxDeviceInfoLen
)

// NotComplete is an event record's status while the event has not
// completed (only Poll, and a Wait that timed out, report it).
const NotComplete = 0xFFFFFFFF

// ReplyBit is set in a reply's op: the request's op | ReplyBit.
const ReplyBit = 0x8000

// Op is a message's operation.
type Op uint16

// Operations (docs/icd-protocol.md "Operations").
const (
	OpHello        Op = 1
	OpAttach       Op = 2
	OpDeviceInfo   Op = 3
	OpQueue        Op = 4 // version 2: attach the submission queue (queue.go)
	OpBufferCreate Op = 10
	OpBufferFree   Op = 11
	OpWrite        Op = 12
	OpRead         Op = 13
	OpCopy         Op = 14
	OpFill         Op = 15
	OpBuild        Op = 20
	OpProgramFree  Op = 21
	OpProgramInfo  Op = 22
	OpLaunch       Op = 30
	OpFlush        Op = 40
	OpWait         Op = 41
	OpPoll         Op = 42
	OpMarker       Op = 43
	OpKick         Op = 44 // version 2, socket only: the queue has entries and the daemon said it sleeps
	OpDrain        Op = 45 // version 2, socket only: answered once every earlier queue entry has run
	OpError        Op = 0x7F00
	// OpPad is not a message: in the submission queue, a header of op
	// OpPad fills the queue's data area from where it starts to its end
	// (queue.go).
	OpPad Op = 0x7F01
)

// ErrCode is the code of an Error message (and the status of a refused
// Attach).
type ErrCode uint32

// Error codes.
const (
	ErrMalformed ErrCode = 1  // bad length, bad field value, bad argument entry
	ErrUnknownOp ErrCode = 2  // no such operation
	ErrReserved  ErrCode = 3  // a reserved field or flag is set
	ErrRange     ErrCode = 4  // a range outside an arena or a buffer, or overflowing
	ErrUnknownID ErrCode = 5  // an id that names no live object of the connection
	ErrDuplicate ErrCode = 6  // an id already live in the connection
	ErrLimit     ErrCode = 7  // too many objects, events or devices
	ErrVersion   ErrCode = 8  // a protocol version the daemon does not speak, or no Hello first
	ErrArena     ErrCode = 9  // Attach: no fd, not a memfd sealed against shrinking, too small, not mappable
	ErrInternal  ErrCode = 10 // the daemon failed (not the client's fault)
	NumErrCodes          = 11
)

var errNames = [NumErrCodes]string{"", "malformed", "unknown-op", "reserved", "range", "unknown-id",
	"duplicate-id", "limit", "version", "arena", "internal"}

// String is the code's name, or error-code(N) for an unknown code.
func (c ErrCode) String() string {
	if c > 0 && int(c) < len(errNames) {
		return errNames[c]
	}
	return fmt.Sprintf("error-code(%d)", uint32(c))
}

// Error returns c as an error; errors.Is(err, c) matches it.
func (c ErrCode) Error() string { return "icd protocol: " + c.String() }

// Errorf returns an error that wraps code c with a message.
func Errorf(c ErrCode, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), c)
}

// CodeOf returns the ErrCode err wraps, or ErrInternal.
func CodeOf(err error) ErrCode {
	var c ErrCode
	if errors.As(err, &c) {
		return c
	}
	return ErrInternal
}

// Header starts every message (16 bytes).
type Header struct {
	Op    Op
	Flags uint16 // 0
	Len   uint32 // total message bytes, header included
	ID    uint64 // client-chosen request id, echoed in the reply
}

// --- fixed bodies ---

// Hello is the first request of a connection.
type Hello struct {
	Version  uint32
	Reserved uint32
}

// HelloReplyHead is the fixed part of Hello's reply; DeviceCount device
// records follow.
type HelloReplyHead struct {
	Version     uint32
	DeviceCount uint32
}

// DeviceRecord describes one vGPU in Hello's reply (136 bytes).
type DeviceRecord struct {
	Index        uint32
	AbiVersion   uint32
	Features     uint32
	ComputeUnits uint32
	MemSize      uint64
	MaxAlloc     uint64
	MaxWorkGroup uint32
	Reserved     uint32
	Profile      [abi.ProfileNameLen]byte // NUL padded
	Name         [abi.DeviceNameLen]byte  // NUL padded
}

// DeviceInfo asks for a device's abi device-information blob (reply).
type DeviceInfo struct {
	Device   uint32
	Reserved uint32
}

// DeviceInfoReplyHead is the fixed part of DeviceInfo's reply; InfoLen
// bytes of blob follow.
type DeviceInfoReplyHead struct {
	Status   uint32 // abi status; nonzero: no blob
	Reserved uint32
	InfoLen  uint64 // 0..MaxDeviceInfo; 0 unless Status is 0
}

// Attach passes an arena: a memfd, sealed against shrinking, in SCM_RIGHTS.
type Attach struct {
	Arena    uint32
	Reserved uint32
	Size     uint64
}

// AttachReply is Attach's reply: Status 0, or the ErrCode of a refusal.
type AttachReply struct {
	Status   uint32
	Reserved uint32
}

// Queue attaches the connection's submission queue (version 2): a memfd
// of Size bytes, sealed against shrinking, in SCM_RIGHTS, laid out as
// queue.go says.
type Queue struct {
	Flags    uint32 // 0
	Reserved uint32
	Size     uint64 // QueueHeaderSize + a power of two from MinQueueData to MaxQueueData
}

// QueueReply is Queue's reply: Status 0, or the ErrCode of a refusal (the
// connection stays open and the client sends over the socket).
type QueueReply struct {
	Status   uint32
	Reserved uint32
}

// BufferCreate creates a buffer on a device.
type BufferCreate struct {
	Device   uint32
	Buffer   uint32
	Size     uint64
	Flags    uint32 // abi.BufferReadOnly, abi.BufferWriteOnly
	Reserved uint32
	Event    uint64
}

// BufferFree frees a buffer.
type BufferFree struct {
	Buffer   uint32
	Reserved uint32
}

// Transfer is the body of Write (arena to buffer) and Read (buffer to
// arena).
type Transfer struct {
	Buffer      uint32
	Arena       uint32
	Offset      uint64 // in the buffer
	ArenaOffset uint64
	Length      uint64
	Event       uint64
}

// Copy copies between two buffers of one device.
type Copy struct {
	Src       uint32
	Dst       uint32
	SrcOffset uint64
	DstOffset uint64
	Length    uint64
	Event     uint64
}

// Fill repeats a pattern over a range of a buffer.
type Fill struct {
	Buffer     uint32
	PatternLen uint32 // 1..MaxPattern, a power of two
	Offset     uint64 // a multiple of PatternLen
	Length     uint64 // a multiple of PatternLen
	Event      uint64
	Pattern    [MaxPattern]byte // bytes past PatternLen are reserved
}

// Build compiles a program from source in an arena (reply).
type Build struct {
	Device     uint32
	Program    uint32
	Arena      uint32
	Flags      uint32 // abi.FlagNondeterministic; abi.FlagIL (version 5): the source is a SPIR-V module
	SrcOffset  uint64
	SrcLen     uint32 // 1..abi.MaxSourceLen
	OptsLen    uint32 // 0..abi.MaxOptionsLen
	OptsOffset uint64
	OutOffset  uint64
	OutCap     uint64
}

// BuildReply is Build's reply.
type BuildReply struct {
	Status   uint32 // abi status of the build
	Reserved uint32
	LogLen   uint64
	InfoLen  uint64
}

// ProgramFree frees a program.
type ProgramFree struct {
	Program  uint32
	Reserved uint32
}

// ProgramInfo asks for a program's abi program-information blob (reply).
type ProgramInfo struct {
	Program   uint32
	Arena     uint32
	OutOffset uint64
	OutCap    uint64
}

// ProgramInfoReply is ProgramInfo's reply.
type ProgramInfoReply struct {
	Status   uint32
	Reserved uint32
	InfoLen  uint64
}

// LaunchHead is the fixed part of Launch; NumArgs LaunchArg entries and the
// scalar area follow.
type LaunchHead struct {
	Program      uint32
	Flags        uint32 // abi.FlagNondeterministic, LaunchPrintf
	WorkDim      uint32
	NumArgs      uint32
	GlobalOffset [3]uint64
	GlobalSize   [3]uint64
	LocalSize    [3]uint64
	Kernel       [abi.KernelNameLen]byte // NUL padded
	Event        uint64
}

// LaunchArg is one argument entry, as abi's launch argument entry except
// that an abi.ArgBuffer's value is the client's buffer id, an
// abi.ArgScalar of more than 8 bytes gives the offset of its bytes in the
// scalar area, and an abi.ArgImage (version 4) gives the offset there of
// its abi.ImageDesc, whose buffer is the client's buffer id.
type LaunchArg struct {
	Kind  uint32
	Size  uint32
	Value uint64
}

// Marker asks for an event once every earlier request has completed.
type Marker struct {
	Event uint64
}

// WaitHead is the fixed part of Wait and Poll; Count event ids follow.
type WaitHead struct {
	Count    uint32
	Reserved uint32
}

// WaitReplyHead is the fixed part of Wait's and Poll's reply; Count event
// records follow.
type WaitReplyHead struct {
	Count uint32
	// Pending is, for a Wait or Poll of count 0, the number of completed
	// events not reported because the reply was full (ask again); 0
	// otherwise.
	Pending uint32
}

// EventRecord reports one event (40 bytes).
type EventRecord struct {
	Event    uint64
	Status   uint32 // abi status, or NotComplete
	Reserved uint32
	SubmitNs uint64 // CLOCK_MONOTONIC
	StartNs  uint64
	EndNs    uint64
}

// ErrorHead is the fixed part of Error; a UTF-8 message follows.
type ErrorHead struct {
	Code     ErrCode
	Reserved uint32
}

// Flush has an empty body.
type Flush struct{}

// Kick has an empty body (version 2, over the socket only).
type Kick struct{}

// Drain has an empty body (version 2, over the socket only); its reply
// is empty too.
type Drain struct{}

// --- bodies with a variable tail ---

// HelloReply is Hello's reply.
type HelloReply struct {
	Version uint32
	Devices []DeviceRecord
}

// DeviceInfoReply is DeviceInfo's reply: the abi device-information blob
// (abi.UnmarshalDeviceInfo decodes it) inline, or a status without one.
type DeviceInfoReply struct {
	Status uint32
	Info   []byte
}

// Wait is the body of Wait and Poll: the events asked about; none means
// every event of the connection.
type Wait struct {
	Events []uint64
}

// WaitReply is the reply of Wait and Poll.
type WaitReply struct {
	Pending uint32
	Events  []EventRecord
}

// Launch runs a kernel.
type Launch struct {
	LaunchHead
	Args    []LaunchArg
	Scalars []byte // the scalar area
}

// Error is the daemon's last message before it closes a connection.
type Error struct {
	Code    ErrCode
	Message string
}

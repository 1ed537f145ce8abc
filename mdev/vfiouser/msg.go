package vfiouser

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

var le = binary.LittleEndian

// ErrProtocol wraps every violation of the protocol by the peer: a
// malformed header, a size that does not fit its command, fds where none
// belong. The session ends (a bad request inside a well-formed message is
// answered with an error reply instead).
var ErrProtocol = errors.New("vfio-user protocol violation")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// Cmd is a vfio-user command (the specification's "Commands" table).
type Cmd uint16

const (
	CmdVersion           Cmd = 1
	CmdDMAMap            Cmd = 2
	CmdDMAUnmap          Cmd = 3
	CmdDeviceGetInfo     Cmd = 4
	CmdDeviceGetRegion   Cmd = 5
	CmdDeviceGetRegionIO Cmd = 6
	CmdDeviceGetIRQInfo  Cmd = 7
	CmdDeviceSetIRQs     Cmd = 8
	CmdRegionRead        Cmd = 9
	CmdRegionWrite       Cmd = 10
	CmdDMARead           Cmd = 11
	CmdDMAWrite          Cmd = 12
	CmdDeviceReset       Cmd = 13
	CmdRegionWriteMulti  Cmd = 15
	CmdDeviceFeature     Cmd = 16
	CmdMigDataRead       Cmd = 17
	CmdMigDataWrite      Cmd = 18
)

var cmdNames = map[Cmd]string{
	CmdVersion: "VERSION", CmdDMAMap: "DMA_MAP", CmdDMAUnmap: "DMA_UNMAP", CmdDeviceGetInfo: "DEVICE_GET_INFO",
	CmdDeviceGetRegion: "DEVICE_GET_REGION_INFO", CmdDeviceGetRegionIO: "DEVICE_GET_REGION_IO_FDS",
	CmdDeviceGetIRQInfo: "DEVICE_GET_IRQ_INFO", CmdDeviceSetIRQs: "DEVICE_SET_IRQS", CmdRegionRead: "REGION_READ",
	CmdRegionWrite: "REGION_WRITE", CmdDMARead: "DMA_READ", CmdDMAWrite: "DMA_WRITE", CmdDeviceReset: "DEVICE_RESET",
	CmdRegionWriteMulti: "REGION_WRITE_MULTI", CmdDeviceFeature: "DEVICE_FEATURE", CmdMigDataRead: "MIG_DATA_READ",
	CmdMigDataWrite: "MIG_DATA_WRITE",
}

func (c Cmd) String() string {
	if n, ok := cmdNames[c]; ok {
		return n
	}
	return fmt.Sprintf("CMD(%d)", uint16(c))
}

// Header flags.
const (
	FlagTypeMask = 0xf
	TypeCommand  = 0
	TypeReply    = 1
	FlagNoReply  = 1 << 4
	FlagError    = 1 << 5
)

// Sizes and limits.
const (
	HeaderSize = 16
	// MaxDataXfer is the largest count of a REGION_READ or REGION_WRITE
	// this server accepts (its max_data_xfer_size): a whole PCIe config
	// space, which QEMU reads at once.
	MaxDataXfer = 4096
	// MaxPayload bounds a message's payload; a header announcing more
	// ends the session.
	MaxPayload = 16 + MaxDataXfer
	// MaxFDs is the most fds one message may carry (max_msg_fds).
	MaxFDs = 8
	// MaxDMAMaps is the most DMA windows valid at once (max_dma_maps);
	// at most MaxFDs of them may be backed by fds.
	MaxDMAMaps = 64
	// PageSize is the only DMA page size (pgsizes).
	PageSize = 4096
)

// The protocol version this server speaks: QEMU's client proposes 0.0.
const (
	VersionMajor = 0
	VersionMinor = 0
)

// PCI region and IRQ indices (linux/vfio.h).
const (
	RegionBAR0   = 0
	RegionROM    = 6
	RegionConfig = 7
	RegionVGA    = 8
	NumRegions   = 9 // VFIO_PCI_NUM_REGIONS

	IRQIntx = 0
	IRQMSI  = 1
	IRQMSIX = 2
	IRQErr  = 3
	IRQReq  = 4
	NumIRQs = 5 // VFIO_PCI_NUM_IRQS
)

// Flags of the payloads (linux/vfio.h, the specification).
const (
	DeviceFlagReset = 1 << 0
	DeviceFlagPCI   = 1 << 1

	RegionFlagRead  = 1 << 0
	RegionFlagWrite = 1 << 1
	RegionFlagMmap  = 1 << 2
	RegionFlagCaps  = 1 << 3

	IRQInfoEventfd    = 1 << 0
	IRQInfoMaskable   = 1 << 1
	IRQInfoAutomasked = 1 << 2
	IRQInfoNoResize   = 1 << 3

	IRQSetDataNone      = 1 << 0
	IRQSetDataBool      = 1 << 1
	IRQSetDataEventfd   = 1 << 2
	IRQSetActionMask    = 1 << 3
	IRQSetActionUnmask  = 1 << 4
	IRQSetActionTrigger = 1 << 5
	irqSetDataMask      = IRQSetDataNone | IRQSetDataBool | IRQSetDataEventfd
	irqSetActionMask    = IRQSetActionMask | IRQSetActionUnmask | IRQSetActionTrigger

	DMAFlagRead  = 1 << 0
	DMAFlagWrite = 1 << 1

	// DMAUnmapFlagAll (VFIO_DMA_UNMAP_FLAG_ALL) unmaps every window;
	// address and size are 0. QEMU sends it when a section covering the
	// whole 64-bit space goes away (a vIOMMU's). The dirty-bitmap flag
	// (bit 0) is refused: migration is not offered.
	DMAUnmapFlagAll = 1 << 1

	IOFDTypeIoeventfd = 0
)

// Header is the 16-byte header of every message.
type Header struct {
	ID    uint16
	Cmd   Cmd
	Size  uint32 // the whole message, header included
	Flags uint32
	Error uint32 // errno, in an error reply
}

// Put encodes h into b[:HeaderSize].
func (h Header) Put(b []byte) {
	le.PutUint16(b[0:], h.ID)
	le.PutUint16(b[2:], uint16(h.Cmd))
	le.PutUint32(b[4:], h.Size)
	le.PutUint32(b[8:], h.Flags)
	le.PutUint32(b[12:], h.Error)
}

// ParseHeader decodes b[:HeaderSize].
func ParseHeader(b []byte) Header {
	return Header{ID: le.Uint16(b[0:]), Cmd: Cmd(le.Uint16(b[2:])), Size: le.Uint32(b[4:]), Flags: le.Uint32(b[8:]), Error: le.Uint32(b[12:])}
}

// Type is the message type in Flags.
func (h Header) Type() uint32 { return h.Flags & FlagTypeMask }

// Check validates a header's framing: type, size bounds.
func (h Header) Check() error {
	if t := h.Type(); t != TypeCommand && t != TypeReply {
		return protoErr("%v: message type %d", h.Cmd, t)
	}
	if h.Size < HeaderSize || h.Size-HeaderSize > MaxPayload {
		return protoErr("%v: message size %d (payload at most %d)", h.Cmd, h.Size, MaxPayload)
	}
	return nil
}

// Version is VFIO_USER_VERSION's payload, request and reply.
type Version struct {
	Major, Minor uint16
	Caps         []byte // UTF-8 JSON with a terminating NUL, or empty
}

func (v Version) Marshal() []byte {
	b := make([]byte, 4, 4+len(v.Caps))
	le.PutUint16(b[0:], v.Major)
	le.PutUint16(b[2:], v.Minor)
	return append(b, v.Caps...)
}

func UnmarshalVersion(b []byte) (Version, error) {
	if len(b) < 4 {
		return Version{}, protoErr("VERSION payload of %d bytes", len(b))
	}
	return Version{Major: le.Uint16(b[0:]), Minor: le.Uint16(b[2:]), Caps: b[4:]}, nil
}

// CheckCaps checks a VERSION message's version data (Version.Caps)
// against the specification: none at all (it is optional), or a UTF-8
// JSON text followed by its terminating NUL, the last byte of the
// message (no NUL inside, nothing after it). The JSON is an object;
// its "capabilities", if present, an object whose members the
// specification defines have their types: max_msg_fds,
// max_data_xfer_size, max_dma_maps and pgsizes non-negative integers,
// write_multiple a boolean, twin_socket an object (supported a boolean,
// fd_index a non-negative integer), and migration, which QEMU sends, an
// object (pgsize and max_bitmap_size non-negative integers). Members it
// does not define are allowed: a later minor version may add some, and
// a server ignores what it does not know. Every violation wraps
// ErrProtocol.
func CheckCaps(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	nul := bytes.IndexByte(b, 0)
	switch {
	case nul < 0:
		return protoErr("VERSION capabilities without their terminating NUL")
	case nul != len(b)-1:
		return protoErr("VERSION capabilities: %d bytes after the terminating NUL", len(b)-1-nul)
	}
	text := b[:nul]
	if !utf8.Valid(text) {
		return protoErr("VERSION capabilities are not UTF-8")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(text, &top); err != nil || top == nil {
		return protoErr("VERSION capabilities: not a JSON object (%v)", err)
	}
	raw, ok := top["capabilities"]
	if !ok {
		return nil
	}
	return checkObject("capabilities", raw, map[string]capKind{
		"max_msg_fds": capUint, "max_data_xfer_size": capUint, "max_dma_maps": capUint, "pgsizes": capUint,
		"write_multiple": capBool,
		"twin_socket":    capObject(map[string]capKind{"supported": capBool, "fd_index": capUint}),
		"migration":      capObject(map[string]capKind{"pgsize": capUint, "max_bitmap_size": capUint}),
	})
}

// capKind checks one capability's JSON value; name is its path.
type capKind func(name string, v json.RawMessage) error

func capUint(name string, v json.RawMessage) error {
	// A JSON number, not a string holding one (which json.Number takes).
	var x any
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	if err := d.Decode(&x); err != nil {
		return protoErr("VERSION capability %s: %s is not a number", name, v)
	}
	n, ok := x.(json.Number)
	if !ok {
		return protoErr("VERSION capability %s: %s is not a number", name, v)
	}
	if _, err := strconv.ParseUint(n.String(), 10, 64); err != nil {
		return protoErr("VERSION capability %s: %s is not a non-negative integer", name, v)
	}
	return nil
}

func capBool(name string, v json.RawMessage) error {
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		return protoErr("VERSION capability %s: %s is not a boolean", name, v)
	}
	return nil
}

func capObject(members map[string]capKind) capKind {
	return func(name string, v json.RawMessage) error { return checkObject(name, v, members) }
}

// checkObject checks that v is a JSON object and each of its members
// that members names has its kind.
func checkObject(name string, v json.RawMessage, members map[string]capKind) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
		return protoErr("VERSION capability %s: not an object", name)
	}
	for k, raw := range obj {
		if kind, ok := members[k]; ok {
			if err := kind(name+"."+k, raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// argsz is the first field of the requests that have one. Its meaning
// depends on the command (the specification's "Message sizes" and each
// command's section):
//
//   - DMA_MAP and DEVICE_SET_IRQS: the size of the request's own payload
//     (DEVICE_SET_IRQS's data included), which has no reply payload: it
//     must equal the payload's size.
//   - DMA_UNMAP, DEVICE_GET_INFO, DEVICE_GET_REGION_INFO,
//     DEVICE_GET_REGION_IO_FDS and DEVICE_GET_IRQ_INFO: the largest reply
//     payload the client takes, which must hold at least the fixed reply
//     structure; it may be larger than the request (QEMU asks for region
//     information with room for capabilities), and no reply is longer
//     than it (DEVICE_GET_REGION_IO_FDS answers a small one with the size
//     needed and no array).
//
// minArgsz is the least argsz of each of these commands: its fixed
// structure.
var minArgsz = map[Cmd]uint32{
	CmdDMAMap:            DMAMapSize,
	CmdDMAUnmap:          DMAUnmapSize,
	CmdDeviceGetInfo:     InfoSize,
	CmdDeviceGetRegion:   RegionInfoSize,
	CmdDeviceGetRegionIO: RegionIOFDsSize,
	CmdDeviceGetIRQInfo:  InfoSize,
	CmdDeviceSetIRQs:     IRQSetSize,
}

// CheckArgsz checks the argsz of a request of command c with payload
// against the specification (see minArgsz): nil for a command without
// argsz, else an error wrapping ErrProtocol (the session refuses the
// request with EINVAL).
func CheckArgsz(c Cmd, payload []byte) error {
	least, ok := minArgsz[c]
	if !ok {
		return nil
	}
	if len(payload) < 4 {
		return protoErr("%v: payload of %d bytes, no argsz", c, len(payload))
	}
	argsz := le.Uint32(payload)
	if argsz < least {
		return protoErr("%v: argsz %d, less than its %d-byte structure", c, argsz, least)
	}
	if (c == CmdDMAMap || c == CmdDeviceSetIRQs) && uint64(argsz) != uint64(len(payload)) {
		return protoErr("%v: argsz %d, the request's payload %d bytes", c, argsz, len(payload))
	}
	return nil
}

// DMAMap is VFIO_USER_DMA_MAP's request.
type DMAMap struct {
	Argsz, Flags       uint32
	Offset, Addr, Size uint64
}

const DMAMapSize = 32

func (m DMAMap) Marshal() []byte {
	b := make([]byte, DMAMapSize)
	le.PutUint32(b[0:], m.Argsz)
	le.PutUint32(b[4:], m.Flags)
	le.PutUint64(b[8:], m.Offset)
	le.PutUint64(b[16:], m.Addr)
	le.PutUint64(b[24:], m.Size)
	return b
}

func UnmarshalDMAMap(b []byte) (DMAMap, error) {
	if len(b) != DMAMapSize {
		return DMAMap{}, protoErr("DMA_MAP payload of %d bytes, want %d", len(b), DMAMapSize)
	}
	return DMAMap{Argsz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Offset: le.Uint64(b[8:]), Addr: le.Uint64(b[16:]), Size: le.Uint64(b[24:])}, nil
}

// DMAUnmap is VFIO_USER_DMA_UNMAP's request and reply.
type DMAUnmap struct {
	Argsz, Flags uint32
	Addr, Size   uint64
}

const DMAUnmapSize = 24

func (m DMAUnmap) Marshal() []byte {
	b := make([]byte, DMAUnmapSize)
	le.PutUint32(b[0:], m.Argsz)
	le.PutUint32(b[4:], m.Flags)
	le.PutUint64(b[8:], m.Addr)
	le.PutUint64(b[16:], m.Size)
	return b
}

func UnmarshalDMAUnmap(b []byte) (DMAUnmap, error) {
	if len(b) != DMAUnmapSize {
		return DMAUnmap{}, protoErr("DMA_UNMAP payload of %d bytes, want %d", len(b), DMAUnmapSize)
	}
	return DMAUnmap{Argsz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Addr: le.Uint64(b[8:]), Size: le.Uint64(b[16:])}, nil
}

// Info is the 16-byte shape shared by DEVICE_GET_INFO (Index =
// num_regions, Count = num_irqs) and DEVICE_GET_IRQ_INFO (index, count),
// requests and replies.
type Info struct {
	Argsz, Flags, Index, Count uint32
}

const InfoSize = 16

func (i Info) Marshal() []byte {
	b := make([]byte, InfoSize)
	i.put(b)
	return b
}

// put encodes i into b[:InfoSize].
func (i Info) put(b []byte) {
	le.PutUint32(b[0:], i.Argsz)
	le.PutUint32(b[4:], i.Flags)
	le.PutUint32(b[8:], i.Index)
	le.PutUint32(b[12:], i.Count)
}

// getInfo decodes b[:InfoSize].
func getInfo(b []byte) Info {
	return Info{Argsz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Index: le.Uint32(b[8:]), Count: le.Uint32(b[12:])}
}

func UnmarshalInfo(c Cmd, b []byte) (Info, error) {
	if len(b) != InfoSize {
		return Info{}, protoErr("%v payload of %d bytes, want %d", c, len(b), InfoSize)
	}
	return getInfo(b), nil
}

// RegionInfo is DEVICE_GET_REGION_INFO's request and reply (struct
// vfio_region_info).
type RegionInfo struct {
	Argsz, Flags, Index, CapOffset uint32
	Size, Offset                   uint64
}

const RegionInfoSize = 32

func (r RegionInfo) Marshal() []byte {
	b := make([]byte, RegionInfoSize)
	le.PutUint32(b[0:], r.Argsz)
	le.PutUint32(b[4:], r.Flags)
	le.PutUint32(b[8:], r.Index)
	le.PutUint32(b[12:], r.CapOffset)
	le.PutUint64(b[16:], r.Size)
	le.PutUint64(b[24:], r.Offset)
	return b
}

func UnmarshalRegionInfo(b []byte) (RegionInfo, error) {
	if len(b) != RegionInfoSize {
		return RegionInfo{}, protoErr("DEVICE_GET_REGION_INFO payload of %d bytes, want %d", len(b), RegionInfoSize)
	}
	return RegionInfo{Argsz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Index: le.Uint32(b[8:]), CapOffset: le.Uint32(b[12:]),
		Size: le.Uint64(b[16:]), Offset: le.Uint64(b[24:])}, nil
}

// IOFD is one sub-region of a DEVICE_GET_REGION_IO_FDS reply (ioeventfd
// form).
type IOFD struct {
	Offset, Size  uint64
	FDIndex, Type uint32
	Flags         uint32
	Datamatch     uint64
}

const IOFDSize = 40

// RegionIOFDs is DEVICE_GET_REGION_IO_FDS's request (no Subs) and reply.
// Its fixed part has Info's shape.
type RegionIOFDs struct {
	Argsz, Flags, Index, Count uint32
	Subs                       []IOFD
}

const RegionIOFDsSize = InfoSize

func (r RegionIOFDs) Marshal() []byte {
	b := make([]byte, RegionIOFDsSize+IOFDSize*len(r.Subs))
	Info{Argsz: r.Argsz, Flags: r.Flags, Index: r.Index, Count: r.Count}.put(b)
	for i, s := range r.Subs {
		p := b[RegionIOFDsSize+IOFDSize*i:]
		le.PutUint64(p[0:], s.Offset)
		le.PutUint64(p[8:], s.Size)
		le.PutUint32(p[16:], s.FDIndex)
		le.PutUint32(p[20:], s.Type)
		le.PutUint32(p[24:], s.Flags)
		le.PutUint64(p[32:], s.Datamatch)
	}
	return b
}

// UnmarshalRegionIOFDs decodes a request (no sub-regions) or a reply
// (Count sub-regions of IOFDSize bytes).
func UnmarshalRegionIOFDs(b []byte) (RegionIOFDs, error) {
	if len(b) < RegionIOFDsSize {
		return RegionIOFDs{}, protoErr("DEVICE_GET_REGION_IO_FDS payload of %d bytes", len(b))
	}
	i := getInfo(b)
	r := RegionIOFDs{Argsz: i.Argsz, Flags: i.Flags, Index: i.Index, Count: i.Count}
	rest := b[RegionIOFDsSize:]
	if len(rest) == 0 {
		return r, nil
	}
	if uint64(len(rest)) != uint64(r.Count)*IOFDSize {
		return RegionIOFDs{}, protoErr("DEVICE_GET_REGION_IO_FDS: %d sub-region bytes for count %d", len(rest), r.Count)
	}
	for i := range int(r.Count) {
		p := rest[IOFDSize*i:]
		r.Subs = append(r.Subs, IOFD{Offset: le.Uint64(p[0:]), Size: le.Uint64(p[8:]), FDIndex: le.Uint32(p[16:]),
			Type: le.Uint32(p[20:]), Flags: le.Uint32(p[24:]), Datamatch: le.Uint64(p[32:])})
	}
	return r, nil
}

// IRQSet is DEVICE_SET_IRQS's request (struct vfio_irq_set).
type IRQSet struct {
	Argsz, Flags, Index, Start, Count uint32
	Data                              []byte // DATA_BOOL: Count bytes
}

const IRQSetSize = 20

func (s IRQSet) Marshal() []byte {
	b := make([]byte, IRQSetSize, IRQSetSize+len(s.Data))
	le.PutUint32(b[0:], s.Argsz)
	le.PutUint32(b[4:], s.Flags)
	le.PutUint32(b[8:], s.Index)
	le.PutUint32(b[12:], s.Start)
	le.PutUint32(b[16:], s.Count)
	return append(b, s.Data...)
}

func UnmarshalIRQSet(b []byte) (IRQSet, error) {
	if len(b) < IRQSetSize {
		return IRQSet{}, protoErr("DEVICE_SET_IRQS payload of %d bytes", len(b))
	}
	return IRQSet{Argsz: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Index: le.Uint32(b[8:]), Start: le.Uint32(b[12:]),
		Count: le.Uint32(b[16:]), Data: b[IRQSetSize:]}, nil
}

// RegionAccess is REGION_READ's and REGION_WRITE's request and reply:
// Data is the bytes written (write request) or read (read reply).
type RegionAccess struct {
	Offset        uint64
	Region, Count uint32
	Data          []byte
}

const RegionAccessSize = 16

// Put encodes the fixed part into b[:RegionAccessSize] and appends
// nothing: callers place Data after it.
func (r RegionAccess) Put(b []byte) {
	le.PutUint64(b[0:], r.Offset)
	le.PutUint32(b[8:], r.Region)
	le.PutUint32(b[12:], r.Count)
}

func (r RegionAccess) Marshal() []byte {
	b := make([]byte, RegionAccessSize, RegionAccessSize+len(r.Data))
	r.Put(b)
	return append(b, r.Data...)
}

// UnmarshalRegionAccess decodes a request or reply; Data aliases b.
func UnmarshalRegionAccess(c Cmd, b []byte) (RegionAccess, error) {
	if len(b) < RegionAccessSize {
		return RegionAccess{}, protoErr("%v payload of %d bytes", c, len(b))
	}
	return RegionAccess{Offset: le.Uint64(b[0:]), Region: le.Uint32(b[8:]), Count: le.Uint32(b[12:]), Data: b[RegionAccessSize:]}, nil
}

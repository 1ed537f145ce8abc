package mpqemu

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Cmd is an mpqemu command code (QEMU's MPQemuCmd).
type Cmd int32

// Command codes. Values are QEMU's wire values.
const (
	CmdSyncSysmem  Cmd = 0 // guest RAM layout: SyncSysmemMsg + 1..8 fds; no reply
	CmdRet         Cmd = 1 // reply: u64
	CmdPCICfgWrite Cmd = 2 // ConfigMsg; reply 0
	CmdPCICfgRead  Cmd = 3 // ConfigMsg; reply the value
	CmdBarWrite    Cmd = 4 // BarMsg; reply 0
	CmdBarRead     Cmd = 5 // BarMsg; reply the value
	CmdSetIRQFD    Cmd = 6 // no payload, 2 fds (interrupt, resample); no reply
	CmdDeviceReset Cmd = 7 // no payload; reply 0
	numCmds        Cmd = 8
)

var cmdNames = [...]string{"SYNC_SYSMEM", "RET", "PCI_CFGWRITE", "PCI_CFGREAD", "BAR_WRITE", "BAR_READ", "SET_IRQFD", "DEVICE_RESET"}

func (c Cmd) String() string {
	if c >= 0 && c < numCmds {
		return cmdNames[c]
	}
	return fmt.Sprintf("cmd(%d)", int32(c))
}

// Wire sizes.
const (
	HeaderSize     = 16  // int32 cmd, 4 bytes padding, u64 size
	MaxPayload     = 192 // the largest payload, SyncSysmemMsg
	MaxFDs         = 8   // QEMU's REMOTE_MAX_FDS
	ConfigMsgSize  = 12
	BarMsgSize     = 24
	SyncSysmemSize = 3 * 8 * MaxFDs
	RetSize        = 8
	MaxMsgSize     = HeaderSize + MaxPayload
)

// Errors. Every decoding error wraps ErrProtocol.
var (
	ErrProtocol = errors.New("mpqemu protocol violation")
)

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrProtocol)
}

var le = binary.LittleEndian

// Msg is one protocol message: the command, its payload (exactly the size
// the header announces) and the fds that rode on it as SCM_RIGHTS.
type Msg struct {
	Cmd     Cmd
	Payload []byte
	FDs     []int
}

// payloadSize returns the payload sizes a command may carry.
func payloadSizeOK(c Cmd, size uint64) bool {
	switch c {
	case CmdSyncSysmem:
		return size == SyncSysmemSize
	case CmdRet:
		// QEMU's own remote answers DEVICE_RESET with an empty RET.
		return size == RetSize || size == 0
	case CmdPCICfgWrite, CmdPCICfgRead:
		return size == ConfigMsgSize
	case CmdBarWrite, CmdBarRead:
		return size == BarMsgSize
	case CmdSetIRQFD, CmdDeviceReset:
		return size == 0
	}
	return false
}

func fdCountOK(c Cmd, n int) bool {
	switch c {
	case CmdSyncSysmem:
		return n >= 1 && n <= MaxFDs
	case CmdSetIRQFD:
		return n == 2
	}
	return n == 0
}

// checkHeader validates a header before its payload is read.
func checkHeader(c Cmd, size uint64) error {
	if c < 0 || c >= numCmds {
		return protoErr("unknown command %d", int32(c))
	}
	if size > MaxPayload {
		return protoErr("%v: size %d exceeds %d", c, size, MaxPayload)
	}
	if !payloadSizeOK(c, size) {
		return protoErr("%v: bad size %d", c, size)
	}
	return nil
}

// Validate checks m as QEMU's mpqemu_msg_valid does, more strictly: the
// payload size must be the command's, and only SYNC_SYSMEM (1 to 8) and
// SET_IRQFD (exactly 2) may carry fds.
func (m *Msg) Validate() error {
	if err := checkHeader(m.Cmd, uint64(len(m.Payload))); err != nil {
		return err
	}
	if !fdCountOK(m.Cmd, len(m.FDs)) {
		return protoErr("%v: %d fds", m.Cmd, len(m.FDs))
	}
	return nil
}

func parseHeader(b []byte) (Cmd, uint64) {
	return Cmd(int32(le.Uint32(b[0:]))), le.Uint64(b[8:])
}

func putHeader(b []byte, c Cmd, size int) {
	le.PutUint32(b[0:], uint32(c))
	le.PutUint32(b[4:], 0)
	le.PutUint64(b[8:], uint64(size))
}

// Decode parses one whole message (header and payload, nothing more) that
// arrived with fds. It never panics; on error the result is nil. Decode
// does not close fds: that is the caller's job.
func Decode(b []byte, fds []int) (*Msg, error) {
	if len(b) < HeaderSize {
		return nil, protoErr("short header: %d bytes", len(b))
	}
	c, size := parseHeader(b)
	if err := checkHeader(c, size); err != nil {
		return nil, err
	}
	if uint64(len(b)-HeaderSize) != size {
		return nil, protoErr("%v: %d payload bytes, header says %d", c, len(b)-HeaderSize, size)
	}
	m := &Msg{Cmd: c, Payload: append([]byte(nil), b[HeaderSize:]...), FDs: append([]int(nil), fds...)}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Encode appends m's header and payload to b. It does not validate m.
func (m *Msg) Encode(b []byte) []byte {
	var h [HeaderSize]byte
	putHeader(h[:], m.Cmd, len(m.Payload))
	b = append(b, h[:]...)
	return append(b, m.Payload...)
}

// ConfigMsg is QEMU's PciConfDataMsg: a config space access of Len bytes
// at Addr; Val is the value written (0 for reads).
type ConfigMsg struct {
	Addr uint32
	Val  uint32
	Len  int32
}

// Marshal returns the 12-byte payload.
func (c ConfigMsg) Marshal() []byte {
	b := make([]byte, ConfigMsgSize)
	c.put(b)
	return b
}

func (c ConfigMsg) put(b []byte) {
	le.PutUint32(b[0:], c.Addr)
	le.PutUint32(b[4:], c.Val)
	le.PutUint32(b[8:], uint32(c.Len))
}

// UnmarshalConfigMsg decodes a config access payload.
func UnmarshalConfigMsg(b []byte) (ConfigMsg, error) {
	if len(b) != ConfigMsgSize {
		return ConfigMsg{}, protoErr("config message: %d bytes", len(b))
	}
	return ConfigMsg{Addr: le.Uint32(b[0:]), Val: le.Uint32(b[4:]), Len: int32(le.Uint32(b[8:]))}, nil
}

// BarMsg is QEMU's BarAccessMsg: an access of Size bytes at the
// guest-physical Addr (BAR base + offset). Memory is false for I/O space.
type BarMsg struct {
	Addr   uint64
	Val    uint64
	Size   uint32
	Memory bool
}

// Marshal returns the 24-byte payload.
func (m BarMsg) Marshal() []byte {
	b := make([]byte, BarMsgSize)
	m.put(b)
	return b
}

func (m BarMsg) put(b []byte) {
	le.PutUint64(b[0:], m.Addr)
	le.PutUint64(b[8:], m.Val)
	le.PutUint32(b[16:], m.Size)
	b[20] = 0
	if m.Memory {
		b[20] = 1
	}
	b[21], b[22], b[23] = 0, 0, 0
}

// UnmarshalBarMsg decodes a BAR access payload. Any non-zero memory byte
// means memory space, as in C.
func UnmarshalBarMsg(b []byte) (BarMsg, error) {
	if len(b) != BarMsgSize {
		return BarMsg{}, protoErr("bar message: %d bytes", len(b))
	}
	return BarMsg{Addr: le.Uint64(b[0:]), Val: le.Uint64(b[8:]), Size: le.Uint32(b[16:]), Memory: b[20] != 0}, nil
}

// SyncSysmemMsg is QEMU's SyncSysmemMsg: region i is guest-physical
// [GPAs[i], GPAs[i]+Sizes[i]) backed by the i-th fd of the message at
// Offsets[i]. Entries past the number of fds are unused.
type SyncSysmemMsg struct {
	GPAs    [MaxFDs]uint64
	Sizes   [MaxFDs]uint64
	Offsets [MaxFDs]uint64
}

// Marshal returns the 192-byte payload.
func (s *SyncSysmemMsg) Marshal() []byte {
	b := make([]byte, SyncSysmemSize)
	for i := range MaxFDs {
		le.PutUint64(b[8*i:], s.GPAs[i])
		le.PutUint64(b[64+8*i:], s.Sizes[i])
		le.PutUint64(b[128+8*i:], s.Offsets[i])
	}
	return b
}

// UnmarshalSyncSysmemMsg decodes a SYNC_SYSMEM payload.
func UnmarshalSyncSysmemMsg(b []byte) (*SyncSysmemMsg, error) {
	if len(b) != SyncSysmemSize {
		return nil, protoErr("sync sysmem message: %d bytes", len(b))
	}
	s := &SyncSysmemMsg{}
	for i := range MaxFDs {
		s.GPAs[i] = le.Uint64(b[8*i:])
		s.Sizes[i] = le.Uint64(b[64+8*i:])
		s.Offsets[i] = le.Uint64(b[128+8*i:])
	}
	return s, nil
}

// RetValue decodes a RET payload (empty means 0).
func RetValue(b []byte) (uint64, error) {
	switch len(b) {
	case 0:
		return 0, nil
	case RetSize:
		return le.Uint64(b), nil
	}
	return 0, protoErr("ret message: %d bytes", len(b))
}

// Ret returns the reply message carrying v.
func Ret(v uint64) Msg {
	b := make([]byte, RetSize)
	le.PutUint64(b, v)
	return Msg{Cmd: CmdRet, Payload: b}
}

package keeper

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The control protocol (docs/keeper.md): vgpud sends the keeper one
// SOCK_SEQPACKET datagram of MsgSize bytes per message, and the keeper
// sends nothing back.
//
//	byte 0     op: OpKeep (the datagram carries exactly one descriptor,
//	           SCM_RIGHTS) or OpDrop (none)
//	bytes 1-8  the connection's ID, little-endian, never 0
const MsgSize = 9

// Op is what a message asks.
type Op uint8

const (
	// OpKeep: hold the descriptor that comes with the message under ID.
	OpKeep Op = 1
	// OpDrop: close what is held under ID (nothing, if nothing is).
	OpDrop Op = 2
)

// ID names a kept connection. A daemon's IDs carry its PID in the high 32
// bits, so that two daemons of an upgrade in place never reuse one
// another's.
type ID uint64

// Msg is one control message.
type Msg struct {
	Op Op
	ID ID
}

// ErrMsg wraps every reason a control message is refused.
var ErrMsg = errors.New("keeper message")

// Encode returns m as it goes on the control socket.
func (m Msg) Encode() []byte {
	b := make([]byte, MsgSize)
	b[0] = byte(m.Op)
	binary.LittleEndian.PutUint64(b[1:], uint64(m.ID))
	return b
}

// Decode reads one control message; anything but MsgSize bytes, an
// unknown op or ID 0 is refused.
func Decode(b []byte) (Msg, error) {
	if len(b) != MsgSize {
		return Msg{}, fmt.Errorf("%w: %d bytes, want %d", ErrMsg, len(b), MsgSize)
	}
	m := Msg{Op: Op(b[0]), ID: ID(binary.LittleEndian.Uint64(b[1:]))}
	if m.Op != OpKeep && m.Op != OpDrop {
		return Msg{}, fmt.Errorf("%w: op %d", ErrMsg, m.Op)
	}
	if m.ID == 0 {
		return Msg{}, fmt.Errorf("%w: id 0", ErrMsg)
	}
	return m, nil
}

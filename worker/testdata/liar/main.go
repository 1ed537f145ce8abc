// Command liar is a worker process that breaks the worker protocol on
// purpose, for package worker's tests: vgpud's main process must treat a
// worker as untrusted. The misbehaviour is the part of the executable's
// name after "liar-" (the test links one name per mode). It answers Hello
// with the device name "liar-device" (or another, in mode wrong-device;
// "liar-device-N" for the device index N it was asked for, in mode
// honest-index) and Add with success, then misbehaves (mode honest-index:
// does not; mode stale-bell: refuses an Add whose doorbell eventfd has a
// count pending; mode blocking-bell: clears O_NONBLOCK on the doorbell
// eventfd it shares with the main process and fills its counter, so that
// a write to it blocks; mode blocking-notify: clears O_NONBLOCK on the
// notify eventfd and signals it once, so that the main process's next
// read of it blocks; mode blocking-both: both); it exits when its socket
// closes.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/worker/wire"
	"golang.org/x/sys/unix"
)

func main() {
	exe, err := os.Executable()
	if err != nil {
		os.Exit(2)
	}
	_, mode, _ := strings.Cut(filepath.Base(exe), "liar-")
	f := os.NewFile(3, "worker-protocol")
	conn, err := wire.FileConn(f)
	if err != nil {
		os.Exit(2)
	}
	for {
		h, m, fds, err := conn.Recv()
		if err != nil {
			os.Exit(0)
		}
		stale := false
		if _, ok := m.(*wire.Add); ok && mode == "stale-bell" && len(fds) >= 2 {
			// The doorbell eventfd must come with no count pending from a
			// worker before this one (read without blocking, whatever
			// the last worker left of its O_NONBLOCK).
			var b [8]byte
			n, _ := unix.Preadv2(fds[1], [][]byte{b[:]}, -1, unix.RWF_NOWAIT)
			stale = n == 8
		}
		if _, ok := m.(*wire.Add); ok && len(fds) >= 3 {
			switch mode {
			case "blocking-bell":
				block(fds[1], 0xfffffffffffffffe)
			case "blocking-notify":
				block(fds[2], 1)
			case "blocking-both":
				block(fds[1], 0xfffffffffffffffe)
				block(fds[2], 1)
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		if stale {
			_ = conn.Send(h.ID, &wire.Reply{Status: uint32(abi.StatusInternal)})
			continue
		}
		switch m := m.(type) {
		case *wire.Hello:
			name := "liar-device"
			switch mode {
			case "wrong-device":
				name = "another-device"
			case "honest-index":
				name = fmt.Sprintf("liar-device-%d", m.Device)
			}
			reply(conn, h.ID, (&wire.HelloReply{Name: name, ComputeUnits: 1, MaxWorkGroup: 1, MaxAllocBytes: 1 << 20}).EncodeBody())
		case *wire.Add:
			misbehave(conn, h.ID, mode)
		case *wire.Reply:
			// A turn granted: kept (hold-turn) or irrelevant.
		default:
			reply(conn, h.ID, nil)
		}
	}
}

// block makes the eventfd fd (its open file, shared with the main
// process) blocking and adds v to its counter.
func block(fd int, v uint64) {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
		os.Exit(4)
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	if _, err := unix.Write(fd, b[:]); err != nil {
		os.Exit(4)
	}
}

func reply(conn *wire.Conn, id uint32, body []byte) {
	_ = conn.Send(id, &wire.Reply{Body: body})
}

// misbehave answers (or not) the Add with request id id as mode says.
func misbehave(conn *wire.Conn, id uint32, mode string) {
	raw := func(b []byte, oob []byte) {
		_ = unix.Sendmsg(3, b, oob, nil, 0)
	}
	switch mode {
	case "reply-unknown-id":
		reply(conn, id+1000, nil)
	case "garbage":
		raw([]byte("this is not a message of the worker protocol"), nil)
	case "main-message":
		_ = conn.Send(0, &wire.Hello{Version: wire.Version, Domain: "x"})
	case "oversize":
		raw(make([]byte, wire.HeaderSize+wire.MaxPayload+100), nil)
	case "fds-on-reply":
		b := wire.Marshal(id, &wire.Reply{})
		raw(b, unix.UnixRights(0))
	case "release-ungranted":
		reply(conn, id, nil)
		_ = conn.Send(0, &wire.TurnRelease{Turn: 9})
	case "double-turn":
		reply(conn, id, nil)
		_ = conn.Send(1, &wire.Turn{Turn: 1, Slot: 1})
		_ = conn.Send(2, &wire.Turn{Turn: 1, Slot: 1})
	case "double-taken":
		// Claims a turn taken from an offer never parked (recorded, with
		// nothing to charge), then claims it again while in progress.
		reply(conn, id, nil)
		_ = conn.Send(0, &wire.TurnTaken{Turn: 1, Slot: 1, Offer: 77})
		_ = conn.Send(0, &wire.TurnTaken{Turn: 1, Slot: 1, Offer: 78})
	case "hold-turn":
		// Takes a device turn and never releases it: the watchdog's.
		reply(conn, id, nil)
		_ = conn.Send(1, &wire.Turn{Turn: 1, Slot: 1})
	case "crash":
		reply(conn, id, nil)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "honest-index", "stale-bell", "blocking-bell", "blocking-notify", "blocking-both":
		reply(conn, id, nil)
	default:
		os.Exit(3)
	}
}

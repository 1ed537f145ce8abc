package vfiouser

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/scmrights"
)

// The last word on a connection whose server is gone (the connection
// keeper's farewell, docs/keeper.md "Farewells").
//
// QEMU's client sends a request and waits for its reply for x-msg-timeout
// (5 s), in the thread that asked: a vCPU reading BAR0, holding QEMU's
// big lock. At an end of file it marks the device broken, but it wakes
// only a waiter whose reply it was reading (hw/vfio-user/proxy.c), and
// it goes on sending: a request the dead vgpud never read, or one sent
// after the end of file into a socket still open for reading, keeps its
// vCPU and QEMU's main loop (QMP with it) stopped for the whole timeout.
// After a crash that was most of the guest's outage: the restarted vgpud
// could not reach QEMU's monitor to re-plug the device for 4.8 s.
//
// RefuseWaiting shuts the connection for reading first, so that QEMU can
// send nothing more (its writes fail at once, EPIPE, and so does the
// access), then answers every request that came before with an error
// reply; the caller then shuts it for writing, and QEMU reads the
// replies and the end of file. Nothing is left waiting, whatever the
// timing: no request can come after the answers.

// FarewellErrno is the error an unanswered request gets (ENODEV: the
// device is gone). QEMU's client fails the access (a BAR read returns
// all ones) and goes on.
const FarewellErrno = unix.ENODEV

// RefuseWaiting shuts fd (a vfio-user connection whose server is gone)
// for reading and answers each request queued on it that expects a reply
// with an error reply (FarewellErrno), closing the descriptors the
// messages carried. Posted writes and replies get no answer, nor does a
// message the client had not finished sending (it cannot now: its write
// fails). It returns how many requests it answered. It stops at the
// first message Wire.Read refuses: what follows is not trusted to be
// messages.
//
// fd stays the caller's (it is read through a duplicate). It is the
// connection keeper's Farewell for vfio-user connections.
func RefuseWaiting(fd int) (answered int, err error) {
	if err := unix.Shutdown(fd, unix.SHUT_RD); err != nil {
		return 0, fmt.Errorf("farewell: shutdown: %w", err)
	}
	conn, err := dupConn(fd)
	if err != nil {
		return 0, fmt.Errorf("farewell: %w", err)
	}
	defer conn.Close()
	// A client that reads nothing is left to its end of file.
	conn.SetWriteDeadline(time.Now().Add(farewellWriteFor))
	w := NewWire(conn)
	for {
		m, err := w.Read()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return answered, nil // the queue's end, or a message never finished
		}
		if err != nil {
			return answered, fmt.Errorf("farewell: %w", err)
		}
		scmrights.Close(m.FDs)
		if m.Type() != TypeCommand || m.Flags&FlagNoReply != 0 {
			continue
		}
		if err := w.Write(Header{ID: m.ID, Cmd: m.Cmd, Flags: TypeReply | FlagError, Error: uint32(FarewellErrno)}, nil); err != nil {
			return answered, fmt.Errorf("farewell: %w", err)
		}
		answered++
	}
}

// farewellWriteFor bounds the wait for room for the replies.
const farewellWriteFor = time.Second

// dupConn is a connection on a duplicate of fd; fd stays the caller's.
func dupConn(fd int) (*net.UnixConn, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return scmrights.UnixConn(d, "vfio-user")
}

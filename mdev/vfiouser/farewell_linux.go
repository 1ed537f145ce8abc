package vfiouser

import (
	"errors"
	"fmt"
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
// first header that does not frame a message (Header.Check): what
// follows is not trusted to be messages.
//
// fd may be non-blocking (a duplicate of a Go connection's) or blocking.
// It is the connection keeper's Farewell for vfio-user connections.
func RefuseWaiting(fd int) (answered int, err error) {
	if err := unix.Shutdown(fd, unix.SHUT_RD); err != nil {
		return 0, fmt.Errorf("farewell: shutdown: %w", err)
	}
	var (
		in  []byte // bytes read and not yet a whole message
		out []byte // the error replies
		oob = make([]byte, unix.CmsgSpace(MaxFDs*4))
		buf = make([]byte, 64<<10)
	)
	for {
		n, oobn, _, _, rerr := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		if rerr == unix.EINTR {
			continue
		}
		if oobn > 0 {
			fds, _ := scmrights.Parse(oob[:oobn])
			scmrights.Close(fds)
		}
		// The queue's end: 0 bytes once it is empty (shut for reading),
		// EAGAIN where a kernel says so instead.
		if rerr == unix.EAGAIN || (rerr == nil && n == 0) {
			break
		}
		if rerr != nil {
			err = fmt.Errorf("farewell: read: %w", rerr)
			break
		}
		in = append(in, buf[:n]...)
		for len(in) >= HeaderSize {
			h := ParseHeader(in)
			if err = h.Check(); err != nil {
				err = fmt.Errorf("farewell: %w", err)
				break
			}
			if uint32(len(in)) < h.Size {
				break
			}
			in = in[h.Size:]
			if h.Type() == TypeCommand && h.Flags&FlagNoReply == 0 {
				out = appendErrorReply(out, h)
				answered++
			}
		}
		if err != nil {
			break
		}
	}
	if werr := writeAll(fd, out); werr != nil {
		return answered, errors.Join(err, fmt.Errorf("farewell: %w", werr))
	}
	return answered, err
}

// appendErrorReply appends the error reply to request h.
func appendErrorReply(b []byte, h Header) []byte {
	var r [HeaderSize]byte
	Header{ID: h.ID, Cmd: h.Cmd, Size: HeaderSize, Flags: TypeReply | FlagError, Error: uint32(FarewellErrno)}.Put(r[:])
	return append(b, r[:]...)
}

// farewellWriteFor bounds the wait for room for the replies: a client
// that reads nothing is left to its end of file.
const farewellWriteFor = time.Second

// writeAll writes b to fd, waiting for room at most farewellWriteFor. A
// client gone meanwhile is EPIPE, never a signal.
func writeAll(fd int, b []byte) error {
	deadline := time.Now().Add(farewellWriteFor)
	for len(b) > 0 {
		n, err := unix.SendmsgN(fd, b, nil, nil, unix.MSG_NOSIGNAL)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			left := time.Until(deadline)
			if left <= 0 {
				return fmt.Errorf("write: %d bytes of replies left: %w", len(b), unix.ETIMEDOUT)
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(pfd, int(left.Milliseconds())+1); err != nil && err != unix.EINTR {
				return fmt.Errorf("poll: %w", err)
			}
			continue
		case err != nil:
			return fmt.Errorf("write: %w", err)
		}
		b = b[n:]
	}
	return nil
}

package scmrights

import (
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// ReadHeader fills hdr from conn, one recvmsg at a time with oob as the
// room for control data, and returns the fds of every SCM_RIGHTS message
// that came with its bytes; the caller owns them. On error every fd
// received has been closed.
//
// A peer that hangs up before the first byte yields an error wrapping
// io.EOF; one that hangs up within hdr an error wrapping
// io.ErrUnexpectedEOF; control data that does not parse, or that the
// kernel truncated (more fds than oob has room for: maxFDs, named in the
// error), an error made by protoErr, the protocol's own for malformed
// input; any other failure of the socket an error "read header: …"
// wrapping it. resume, if not nil,
// is asked first about an error that comes once part of hdr has arrived:
// true goes on reading (a protocol whose pauses never split a header
// clears the expired deadline and says so).
func ReadHeader(conn *net.UnixConn, hdr, oob []byte, maxFDs int, resume func(error) bool, protoErr func(format string, args ...any) error) ([]int, error) {
	fds, err := readHeader(conn, hdr, oob, maxFDs, resume, protoErr)
	if err != nil {
		Close(fds)
		return nil, err
	}
	return fds, nil
}

func readHeader(conn *net.UnixConn, hdr, oob []byte, maxFDs int, resume func(error) bool, protoErr func(format string, args ...any) error) ([]int, error) {
	var fds []int
	n := 0
	for n < len(hdr) {
		k, oobn, flags, _, err := conn.ReadMsgUnix(hdr[n:], oob)
		if k < 0 {
			k = 0 // a failed read (a deadline among them) can say -1
		}
		if oobn > 0 {
			got, perr := Parse(oob[:oobn])
			fds = append(fds, got...)
			if perr != nil {
				return fds, protoErr("%v", perr)
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return fds, protoErr("control data truncated: more than %d fds", maxFDs)
		}
		n += k
		if err != nil && n > 0 && resume != nil && resume(err) {
			continue
		}
		if err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fds, fmt.Errorf("read header: %w", err)
		}
		if k == 0 {
			if n == 0 {
				return fds, io.EOF
			}
			return fds, fmt.Errorf("read header: %w", io.ErrUnexpectedEOF)
		}
	}
	return fds, nil
}

// Send writes b to conn with fds (none: a plain write) attached to its
// first byte, and the rest of b, if the kernel took only part of it, as
// plain data. The fds are not closed.
func Send(conn *net.UnixConn, b []byte, fds []int) error {
	var (
		n   int
		err error
	)
	if len(fds) > 0 {
		n, _, err = conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	} else {
		n, err = conn.Write(b)
	}
	if err == nil && n < len(b) {
		// The fds went with the first byte; the rest is plain data.
		_, err = conn.Write(b[n:])
	}
	return err
}

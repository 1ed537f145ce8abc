// Package scmrights receives file descriptors passed over Unix sockets
// (SCM_RIGHTS control messages) for the protocols that carry them: QEMU's
// multi-process protocol, vfio-user, the worker protocol, the connection
// keeper's control socket and the guest ICD protocol. It owns only the
// parsing of control data, the closing of what arrived and making a
// connection of a socket that arrived (UnixConn); each protocol
// decides which message may carry how many fds. It imports no other vgpud
// package, so guest programs may use it too.
package scmrights

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Parse returns the fds of every SCM_RIGHTS message in oob, the control
// data of one recvmsg. On error it also returns the fds received before
// the malformed part: the caller owns, and must close, whatever it gets.
func Parse(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control data: %v", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		fds = append(fds, got...)
		if err != nil {
			return fds, fmt.Errorf("SCM_RIGHTS: %v", err)
		}
	}
	return fds, nil
}

// Close closes every fd.
func Close(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

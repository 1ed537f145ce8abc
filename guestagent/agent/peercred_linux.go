package agent

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerPID returns the PID of the process that connected c (SO_PEERCRED),
// or 0 when it cannot tell.
func peerPID(c *net.UnixConn) uint32 {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || serr != nil || cred.Pid <= 0 {
		return 0
	}
	return uint32(cred.Pid)
}

package accept

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerPID returns the PID of the process that connected nc (SO_PEERCRED:
// the process that called connect, even if it passed the socket on).
func PeerPID(nc *net.UnixConn) (int, error) {
	raw, err := nc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peer pid: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peer pid: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("peer pid: %w", serr)
	}
	return int(cred.Pid), nil
}

// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)) with the standard library: one datagram of
// newline-separated VAR=VALUE assignments to the AF_UNIX datagram socket
// named by $NOTIFY_SOCKET, a path or, starting with '@', an abstract name.
//
// vgpud, run by a unit with Type=notify, sends READY=1 once its control
// socket serves, STOPPING=1 when it begins to stop, and, when it hands
// everything over to a new process in an upgrade in place (docs/upgrade.md),
// MAINPID=<new pid> followed by a barrier (BARRIER=1), so that the service
// manager follows the new process before the old one exits instead of
// taking that exit for the service's end.
package sdnotify

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvSocket is the environment variable that names the manager's socket.
const EnvSocket = "NOTIFY_SOCKET"

// Socket is the notification socket of this process's service manager,
// "" when it has none (not started by systemd, or not Type=notify).
func Socket() string { return os.Getenv(EnvSocket) }

// Notify sends state (for example "READY=1") to the service manager of
// this process. With no manager (Socket is "") it does nothing and returns
// nil: a daemon run by hand or by a test needs no manager.
func Notify(state string) error {
	return Send(Socket(), state)
}

// Send sends state to the notification socket at addr ("" does nothing).
func Send(addr, state string) error {
	return send(addr, state, nil)
}

// MainPID tells the manager that pid is the service's main process from
// now on (an upgrade in place: the new vgpud), and waits until the
// manager processed that (Barrier, bounded by timeout), so that the
// caller may exit at once without the manager taking its exit for the
// service's. With no manager it does nothing.
func MainPID(pid int, timeout time.Duration) error {
	addr := Socket()
	if addr == "" {
		return nil
	}
	if pid <= 0 {
		return fmt.Errorf("sdnotify: MAINPID=%d is not a process", pid)
	}
	if err := Send(addr, "MAINPID="+strconv.Itoa(pid)); err != nil {
		return err
	}
	return Barrier(addr, timeout)
}

// Barrier sends BARRIER=1 with the write end of a pipe to the socket at
// addr and waits until the manager closes it, which it does once it has
// processed every message sent before; at most timeout. "" does nothing.
func Barrier(addr string, timeout time.Duration) error {
	if addr == "" {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sdnotify: barrier pipe: %w", err)
	}
	defer r.Close()
	err = send(addr, "BARRIER=1", w)
	w.Close() // the manager's copy is the only one left
	if err != nil {
		return err
	}
	if err := r.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("sdnotify: barrier: %w", err)
	}
	var b [1]byte
	for {
		_, err := r.Read(b[:])
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("sdnotify: the service manager at %s did not answer the barrier within %v", addr, timeout)
		case err != nil: // EOF: the manager closed its end
			return nil
		}
	}
}

// send writes one datagram holding state, with fd passed along (SCM_RIGHTS)
// when not nil.
func send(addr, state string, fd *os.File) error {
	if addr == "" {
		return nil
	}
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return fmt.Errorf("sdnotify: %s=%q is neither a path nor an abstract name (@...)", EnvSocket, addr)
	}
	fdSock, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sdnotify: socket: %w", err)
	}
	defer syscall.Close(fdSock)
	var oob []byte
	if fd != nil {
		oob = syscall.UnixRights(int(fd.Fd()))
	}
	// SockaddrUnix turns a leading '@' into the abstract namespace's NUL.
	n, err := syscall.SendmsgN(fdSock, []byte(state), oob, &syscall.SockaddrUnix{Name: addr}, 0)
	if err != nil {
		return fmt.Errorf("sdnotify: send %q to %s: %w", state, addr, err)
	}
	if n != len(state) {
		return fmt.Errorf("sdnotify: send %q to %s: short write", state, addr)
	}
	return nil
}

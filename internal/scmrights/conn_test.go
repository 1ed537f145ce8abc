package scmrights

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnixConn: a socket becomes a connection that works, a file that is
// no socket is refused, and the descriptor given is closed either way.
func TestUnixConn(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := UnixConn(fds[0], "test")
	if err != nil {
		t.Fatalf("UnixConn(socket) = %v", err)
	}
	defer c.Close()
	defer unix.Close(fds[1])
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if n, err := unix.Read(fds[1], b); n != 1 || err != nil || b[0] != 'x' {
		t.Errorf("read through the peer: %d %v %q", n, err, b)
	}
	if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("the socket's fd is still open (%v): UnixConn must close it", err)
	}

	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := UnixConn(fd, "test"); err == nil {
		c.Close()
		t.Errorf("UnixConn(regular file) succeeded")
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("the file's fd is still open (%v): UnixConn must close it", err)
	}
}

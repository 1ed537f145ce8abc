// Package sockpairtest gives tests a connected Unix stream socket pair as
// two *net.UnixConn, closed at the test's end. It owns nothing else.
package sockpairtest

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// Stream returns the two ends of a Unix stream socket pair (close-on-exec),
// each closed when t ends.
func Stream(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

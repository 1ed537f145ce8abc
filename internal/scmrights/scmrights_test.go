package scmrights

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestParse: fds sent with a message arrive in order; garbage control
// data is an error; other control messages are skipped.
func TestParse(t *testing.T) {
	var sp [2]int
	var err error
	if sp, err = unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
		t.Fatal(err)
	}
	defer Close(sp[:])
	a, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
	b, _ := unix.Eventfd(0, unix.EFD_CLOEXEC)
	defer Close([]int{a, b})
	if err := unix.Sendmsg(sp[0], []byte{1}, unix.UnixRights(a, b), nil, 0); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(8))
	_, oobn, _, _, err := unix.Recvmsg(sp[1], buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	fds, err := Parse(oob[:oobn])
	if err != nil || len(fds) != 2 {
		t.Fatalf("Parse = %v, %v; want two fds", fds, err)
	}
	defer Close(fds)
	for _, fd := range fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			t.Errorf("fd %d not open: %v", fd, err)
		}
	}
	bad := unix.UnixRights(a)
	bad[0] = 0xff // a cmsg length past the buffer
	if _, err := Parse(bad); err == nil {
		t.Error("Parse of a truncated control message succeeded")
	}
	if fds, err := Parse(nil); err != nil || len(fds) != 0 {
		t.Errorf("Parse(nil) = %v, %v", fds, err)
	}
}

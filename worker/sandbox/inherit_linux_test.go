package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestCloseInheritedOnExec: descriptors without close-on-exec (as vgpud
// inherits them from whatever starts it) have it afterwards, by
// close_range and by the /proc/self/fd fallback; standard error keeps
// its flags.
func TestCloseInheritedOnExec(t *testing.T) {
	for _, c := range []struct {
		name string
		mark func() error
	}{
		{"close_range", CloseInheritedOnExec},
		{"proc-fallback", func() error { return closeOnExecEach(3) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var fds []int
			for range 3 {
				fd, err := unix.Dup(2) // dup(2): no close-on-exec
				if err != nil {
					t.Fatal(err)
				}
				fds = append(fds, fd)
			}
			// One far up, as a service manager may leave one.
			high, err := unix.FcntlInt(uintptr(fds[0]), unix.F_DUPFD, 200)
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, high)
			defer func() {
				for _, fd := range fds {
					unix.Close(fd)
				}
			}()
			stderrFlags, _ := unix.FcntlInt(2, unix.F_GETFD, 0)
			for _, fd := range fds {
				if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC != 0 {
					t.Fatalf("fd %d is close-on-exec before: the test proves nothing", fd)
				}
			}
			if err := c.mark(); err != nil {
				t.Fatal(err)
			}
			for _, fd := range fds {
				if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
					t.Errorf("fd %d: flags %#x (%v), want close-on-exec", fd, fl, err)
				}
			}
			if fl, _ := unix.FcntlInt(2, unix.F_GETFD, 0); fl != stderrFlags {
				t.Errorf("stderr flags %#x, were %#x", fl, stderrFlags)
			}
		})
	}
}

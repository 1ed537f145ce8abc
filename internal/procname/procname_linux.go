//go:build linux

package procname

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Set names the calling thread (the kernel cuts the name to 15 bytes); on
// a process's main thread that names the process (ps, pgrep -x). It is
// cosmetic, so a failure is ignored.
func Set(name string) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return
	}
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
}

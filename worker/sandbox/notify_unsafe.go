//go:build linux

package sandbox

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompListener installs the filter prog on the calling thread (and,
// with TSYNC, every thread) and returns the listener descriptor that
// SECCOMP_FILTER_FLAG_NEW_LISTENER makes (close-on-exec).
func seccompListener(prog []unix.SockFilter, flags uintptr) (int, error) {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

// seccompNotif is struct seccomp_notif (linux/seccomp.h), with its struct
// seccomp_data inline: 80 bytes.
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	NR    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

// seccompNotifResp is struct seccomp_notif_resp: 24 bytes.
type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// ioctlNotifIDValid is SECCOMP_IOCTL_NOTIF_ID_VALID, _IOW('!', 2, __u64),
// which x/sys/unix does not name.
const ioctlNotifIDValid = 0x40082102

// notifRecv receives the next notification on the listener fd.
func notifRecv(fd int, n *seccompNotif) error {
	*n = seccompNotif{} // the kernel wants it zeroed
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(n)))
	if e != 0 {
		return e
	}
	return nil
}

// notifSend answers a notification.
func notifSend(fd int, r *seccompNotifResp) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(r)))
	if e != 0 {
		return e
	}
	return nil
}

// notifValid reports whether notification id is still pending (its
// task has not died or been interrupted): what was read of the task's
// memory since it was received belongs to it.
func notifValid(fd int, id uint64) bool {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ioctlNotifIDValid, uintptr(unsafe.Pointer(&id)))
	return e == 0
}

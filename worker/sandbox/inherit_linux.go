package sandbox

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor above standard error
// close-on-exec, as vgpud does first thing at start (issue 40, item 5):
// a descriptor vgpud inherited without close-on-exec from whatever
// started it (a shell, a service manager, a wrapper) would otherwise pass
// on through every exec, into every worker and executor of every domain,
// outside the file view and Landlock, since both govern only what is
// opened. Workers and executors are given their descriptors by number
// (exec.Cmd.ExtraFiles, which clears the flag on the copies), and the
// descriptors vgpud itself is meant to inherit (an upgrade's handover
// channel, cmd/vgpud's EnvHandover) are opened by number and never passed
// on: none of them needs to survive an exec of vgpud's.
//
// It uses close_range(2) with CLOSE_RANGE_CLOEXEC (Linux 5.11), and
// where the kernel lacks that, sets the flag on each descriptor listed in
// /proc/self/fd.
func CloseInheritedOnExec() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	return closeOnExecEach(3)
}

// closeOnExecEach sets close-on-exec on every descriptor of this process
// from first up, as /proc/self/fd lists them (the descriptor that reads
// the directory is close-on-exec already).
func closeOnExecEach(first int) error {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", err)
	}
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd < first {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue // closed meanwhile
		}
		if flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

package guestmemtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ReadCounter reads and resets a non-blocking eventfd's counter: how
// often it was signalled since the last read (0: not at all). The test
// VMs' interrupt eventfds are read this way, as KVM consumes an irqfd.
func ReadCounter(fd int) (uint64, error) {
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return 0, nil
		}
		return 0, fmt.Errorf("read eventfd: %w", err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// WaitCounter calls count (a ReadCounter of fd under the caller's locks)
// until it returns nonzero, waiting in poll(2) for fd between the calls,
// and fails wrapping os.ErrDeadlineExceeded after timeout.
func WaitCounter(fd int, timeout time.Duration, count func() (uint64, error)) (uint64, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := count()
		if err != nil || n > 0 {
			return n, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return 0, fmt.Errorf("wait irq after %v: %w", timeout, os.ErrDeadlineExceeded)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("wait irq: %w", err)
		}
	}
}

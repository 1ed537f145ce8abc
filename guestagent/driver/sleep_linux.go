package driver

import (
	"time"

	"golang.org/x/sys/unix"
)

// preciseSleep sleeps for about d with nanosleep(2): a Go timer of under
// a millisecond wakes an otherwise idle process only a millisecond
// later (the netpoller's epoll timeout), longer than a ring slot takes to
// free.
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

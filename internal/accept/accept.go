// Package accept keeps vgpud's listeners (instance sockets, agent
// channels, the migration listener) accepting through errors that pass:
// out of file descriptors, kernel memory or buffers, a connection aborted
// before it was accepted. Like net/http's Server, it retries those with a
// backoff from 5 ms doubling to 1 s, and reports each one, so that one
// "too many open files" never stops a socket for good. It knows nothing of
// what is accepted. Limit bounds the connections a listener has open at
// once, closing those over it as soon as they are accepted; PeerPID says
// which process connected.
package accept

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// Backoff bounds.
const (
	MinDelay = 5 * time.Millisecond
	MaxDelay = time.Second
)

// Transient reports whether an accept error passes by itself.
func Transient(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Retry calls accept until it returns a connection or an error that is
// not Transient, waiting between tries with a backoff that ctx ends (then
// it returns the last error). Each transient error is given to onRetry
// (nil: none) with the delay before the next try.
func Retry[T any](ctx context.Context, accept func() (T, error), onRetry func(err error, delay time.Duration)) (T, error) {
	delay := time.Duration(0)
	for {
		c, err := accept()
		if err == nil || !Transient(err) {
			return c, err
		}
		delay = min(max(2*delay, MinDelay), MaxDelay)
		if onRetry != nil {
			onRetry(err, delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return c, err
		case <-t.C:
		}
	}
}

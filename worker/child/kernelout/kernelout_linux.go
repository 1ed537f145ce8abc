package kernelout

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// chunk is how much the drain reads at a time.
const chunk = 64 << 10

// Capture is a captured descriptor. Its methods are safe for concurrent
// use.
type Capture struct {
	r, stop  int // the pipe's read end (non-blocking); the stop pipe's read end
	stopW    int
	limit    int
	mu       sync.Mutex
	buf      []byte // captured since the last Take, at most limit bytes
	dropped  uint64 // bytes beyond limit since the last Take
	closed   bool
	finished chan struct{}
}

// Start replaces descriptor fd (1: standard output) with the write end of
// a pipe whose bytes the capture keeps, at most limit of them between two
// Takes. The descriptor's old file is closed in this process.
func Start(fd, limit int) (*Capture, error) {
	if limit <= 0 {
		return nil, errors.New("kernelout: the limit must be positive")
	}
	var p, s [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("kernelout: pipe: %w", err)
	}
	if err := unix.Pipe2(s[:], unix.O_CLOEXEC); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, fmt.Errorf("kernelout: pipe: %w", err)
	}
	closeAll := func() {
		for _, f := range []int{p[0], p[1], s[0], s[1]} {
			unix.Close(f)
		}
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		closeAll()
		return nil, fmt.Errorf("kernelout: %w", err)
	}
	// dup3 without O_CLOEXEC: what the runtime starts (PoCL's linker)
	// writes to the same pipe.
	if err := unix.Dup3(p[1], fd, 0); err != nil {
		closeAll()
		return nil, fmt.Errorf("kernelout: dup3 onto %d: %w", fd, err)
	}
	unix.Close(p[1])
	c := &Capture{r: p[0], stop: s[0], stopW: s[1], limit: limit, finished: make(chan struct{})}
	go c.drain()
	return c, nil
}

// drain reads the pipe whenever it has bytes, until Close.
func (c *Capture) drain() {
	defer close(c.finished)
	fds := []unix.PollFd{{Fd: int32(c.r), Events: unix.POLLIN}, {Fd: int32(c.stop), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		c.mu.Lock()
		err := c.readLocked()
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// readLocked moves everything in the pipe into the buffer. c.mu is held.
// The only error is the pipe's, which ends the drain: every write end is
// closed (POLLHUP), or the read end is broken.
func (c *Capture) readLocked() error {
	var tmp [chunk]byte
	for {
		n, err := unix.Read(c.r, tmp[:])
		if n > 0 {
			keep := min(n, c.limit-len(c.buf))
			c.buf = append(c.buf, tmp[:keep]...)
			c.dropped += uint64(n - keep)
		}
		switch {
		case errors.Is(err, unix.EAGAIN):
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return err
		case n == 0:
			return errors.New("kernelout: every write end is closed")
		}
	}
}

// Take returns what was written to the descriptor since the last Take (or
// Discard), at most n bytes of it, and how many bytes more were written
// and dropped (beyond n, or beyond the limit while nobody took them).
func (c *Capture) Take(n int) ([]byte, uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, os.ErrClosed
	}
	// What is still in the pipe was written before this call: read it
	// here, under the lock the drain appends under, so that nothing
	// written before Take is missed. An error means the drain ended too:
	// what was read is still returned.
	c.readLocked()
	n = min(max(n, 0), len(c.buf))
	out := append([]byte(nil), c.buf[:n]...)
	dropped := c.dropped + uint64(len(c.buf)-n)
	c.buf = c.buf[:0]
	c.dropped = 0
	return out, dropped, nil
}

// Discard drops what was written so far: a launch's output then starts
// empty.
func (c *Capture) Discard() error {
	_, _, err := c.Take(0)
	return err
}

// Close stops the drain and closes the pipe's read end: later writes to
// the descriptor fail with EPIPE (or SIGPIPE). The descriptor itself stays
// open.
func (c *Capture) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	unix.Write(c.stopW, []byte{1})
	<-c.finished
	unix.Close(c.r)
	unix.Close(c.stop)
	unix.Close(c.stopW)
	return nil
}

package remote

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/pollbudget"
)

// Poll-then-block on the executor socket (issue 42).
//
// A request and its reply each cost a cross-process wake-up when the
// reader sleeps in the kernel: on the benchmark machines that is most of
// an executor call's latency. A PollingConn looks for data for a window
// before it sleeps: the executor between two requests of a busy worker,
// the worker between a request and its reply. It gives the CPU away
// between looks (sched_yield), so that on a machine with few CPUs the
// peer it waits for runs; after the window it sleeps as before, so an
// idle executor costs no CPU.
//
// The window is spent only where it pays (internal/pollbudget, the rule
// vgpu-icdd's waits follow too): after pollbudget.Misses polls in a row
// that ran out (a peer whose requests come further apart than the window)
// a read sleeps at once, and every pollbudget.Probe-th polls again. An
// ICD's launch-then-read steps reach a context's executor about 400 us
// apart against its 200 us window, so every poll missed: the rule took the
// executor from 45 % to 39 % of a CPU there (a 2-CPU host, docs/worker.md).

// PollingConn is a connection whose reads poll for a window before they
// block.
type PollingConn struct {
	rw     io.ReadWriteCloser
	raw    syscall.RawConn
	window time.Duration
	closed atomic.Bool // a poll in progress stops looking
	budget pollbudget.Budget
	// Reads counts the reads that found data; Slept, those that had to
	// sleep in the kernel for it (the wake-ups the polling did not save).
	// Missed counts the polls that ran out of the window, Skipped the
	// reads that slept without polling (the polls had been missing); each
	// is counted before the read sleeps.
	Reads, Slept, Missed, Skipped atomic.Uint64
}

// NewPollingConn wraps conn, a connection with a file descriptor (a
// *net.UnixConn), so that its reads poll for window before they block.
func NewPollingConn(conn interface {
	io.ReadWriteCloser
	syscall.Conn
}, window time.Duration) (*PollingConn, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("polling connection: %w", err)
	}
	return &PollingConn{rw: conn, raw: raw, window: window}, nil
}

// Read reads into p, looking for data for the window before it blocks.
func (c *PollingConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n        int
		rerr     error
		deadline time.Time
		looked   bool
		slept    bool
	)
	err := c.raw.Read(func(fd uintptr) bool {
		if looked {
			slept = true // the runtime waited for readability
		}
		for {
			n, rerr = unix.Read(int(fd), p)
			if !errors.Is(rerr, unix.EAGAIN) {
				if !deadline.IsZero() && !slept {
					c.budget.Paid() // the poll paid
				}
				return true
			}
			looked = true
			if c.window <= 0 || slept || c.closed.Load() {
				return false
			}
			now := time.Now()
			if deadline.IsZero() {
				if !c.budget.Look() {
					c.Skipped.Add(1)
					return false
				}
				deadline = now.Add(c.window)
			} else if !now.Before(deadline) {
				c.budget.RanOut()
				c.Missed.Add(1)
				return false
			}
			_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	c.Reads.Add(1)
	if slept {
		c.Slept.Add(1)
	}
	return n, nil
}

// Write writes p.
func (c *PollingConn) Write(p []byte) (int, error) { return c.rw.Write(p) }

// Close closes the connection.
func (c *PollingConn) Close() error {
	c.closed.Store(true)
	return c.rw.Close()
}

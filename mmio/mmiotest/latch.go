package mmiotest

import (
	"sync"

	"github.com/vgpud/vgpud/abi"
)

// ErrorLatch is a fake backend's error latch: its methods are
// mmio.Backend's Error, LatchError and AckError. The zero ErrorLatch
// holds no error; it is safe for concurrent use.
type ErrorLatch struct {
	mu    sync.Mutex
	err   abi.Status
	count uint32
}

// Error returns the latched status and how many errors were latched.
func (l *ErrorLatch) Error() (abi.Status, uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err, l.count
}

// LatchError latches s and counts it.
func (l *ErrorLatch) LatchError(s abi.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = s
	l.count++
}

// AckError clears the latched status; the count stays.
func (l *ErrorLatch) AckError() { l.mu.Lock(); defer l.mu.Unlock(); l.err = abi.StatusOK }

// Clear clears the status and the count, as a backend's Reset does.
func (l *ErrorLatch) Clear() { l.mu.Lock(); defer l.mu.Unlock(); l.err, l.count = abi.StatusOK, 0 }

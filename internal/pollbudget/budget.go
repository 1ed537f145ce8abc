package pollbudget

import "sync/atomic"

const (
	// Misses looks in a row that ran out stop the looking.
	Misses = 2
	// Probe: while stopped, every Probe-th wait looks.
	Probe = 16
)

// Budget is one poller's record. The zero Budget looks. It is safe for
// concurrent use, though each poller calls it from one goroutine at a
// time.
type Budget struct {
	misses atomic.Uint32 // looks in a row that ran out
	waits  atomic.Uint32 // waits since the looking stopped
}

// Look reports whether the next wait looks before it sleeps.
func (b *Budget) Look() bool {
	if b.misses.Load() < Misses {
		return true
	}
	return b.waits.Add(1)%Probe == 0
}

// Paid records a look that found what it waited for.
func (b *Budget) Paid() { b.misses.Store(0); b.waits.Store(0) }

// RanOut records a look that ran out of its window.
func (b *Budget) RanOut() { b.misses.Add(1) }

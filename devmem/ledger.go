package devmem

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrNoRoom is wrapped by a reservation that did not fit before its
// context ended, or that can never fit (more than the device's capacity).
var ErrNoRoom = errors.New("not enough device memory")

// Ledger accounts one device's memory. The zero value is not usable; use
// New. All methods are safe for concurrent use.
type Ledger struct {
	mu       sync.Mutex
	capacity uint64
	used     uint64
	held     map[string]uint64
	// credit is memory reserved for an instance ahead of its next
	// reservations (ReserveCredit): counted in held and used, drawn down
	// by that instance's Reserve and TryReserve.
	credit map[string]uint64
	// peak is the most each instance held since it was forgotten last.
	peak map[string]uint64
	// freed is closed (and replaced) whenever room may have appeared.
	freed chan struct{}
}

// New returns an empty ledger of a device holding capacity bytes.
func New(capacity uint64) *Ledger {
	return &Ledger{capacity: capacity, held: map[string]uint64{}, credit: map[string]uint64{}, peak: map[string]uint64{}, freed: make(chan struct{})}
}

// Capacity returns the device's memory, in bytes.
func (l *Ledger) Capacity() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.capacity
}

// SetCapacity changes the device's memory. Lowering it below what is held
// takes nothing back: later reservations wait until the sum is below it.
func (l *Ledger) SetCapacity(c uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.capacity = c
	l.wakeLocked()
}

// Used returns the bytes held by all instances.
func (l *Ledger) Used() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

// Free returns the bytes not held (0 when more is held than the capacity).
func (l *Ledger) Free() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.freeLocked()
}

func (l *Ledger) freeLocked() uint64 {
	if l.used >= l.capacity {
		return 0
	}
	return l.capacity - l.used
}

// Held returns the bytes instance id holds (its credit included).
func (l *Ledger) Held(id string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[id]
}

// Holders returns every instance's holding.
func (l *Ledger) Holders() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]uint64, len(l.held))
	for id, n := range l.held {
		out[id] = n
	}
	return out
}

// TryReserve reserves n bytes for id if they fit now (or id's credit
// covers them) and reports whether it did.
func (l *Ledger) TryReserve(id string, n uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tryLocked(id, n)
}

func (l *Ledger) tryLocked(id string, n uint64) bool {
	// A credit is drawn first; what it does not cover must fit.
	c := l.credit[id]
	take := min(c, n)
	if n-take > l.freeLocked() {
		return false
	}
	if c == take {
		delete(l.credit, id)
	} else {
		l.credit[id] = c - take
	}
	l.used += n - take
	l.held[id] += n - take
	l.peak[id] = max(l.peak[id], l.held[id])
	return true
}

// Peak returns the most id held (credit included) since it was last
// forgotten.
func (l *Ledger) Peak(id string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak[id]
}

// Reserve reserves n bytes for id, waiting until they fit or ctx ends.
// It fails at once when n can never fit (more than the capacity).
func (l *Ledger) Reserve(ctx context.Context, id string, n uint64) error {
	for {
		l.mu.Lock()
		if l.tryLocked(id, n) {
			l.mu.Unlock()
			return nil
		}
		if n > l.capacity {
			l.mu.Unlock()
			return fmt.Errorf("%d bytes on a device of %d: %w", n, l.capacity, ErrNoRoom)
		}
		freed := l.freed
		free := l.freeLocked()
		l.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return fmt.Errorf("%d bytes with %d free: %w (%w)", n, free, ErrNoRoom, ctx.Err())
		}
	}
}

// ReserveCredit waits, like Reserve, until n bytes fit, and holds them for
// id's next reservations (a suspended or moved instance's state and the
// allocation it was making), which draw it down. The credit counts as
// held by id.
func (l *Ledger) ReserveCredit(ctx context.Context, id string, n uint64) error {
	for {
		l.mu.Lock()
		if n <= l.freeLocked() {
			l.used += n
			l.held[id] += n
			l.credit[id] += n
			l.peak[id] = max(l.peak[id], l.held[id])
			l.mu.Unlock()
			return nil
		}
		if n > l.capacity {
			l.mu.Unlock()
			return fmt.Errorf("%d bytes on a device of %d: %w", n, l.capacity, ErrNoRoom)
		}
		freed, free := l.freed, l.freeLocked()
		l.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return fmt.Errorf("%d bytes with %d free: %w (%w)", n, free, ErrNoRoom, ctx.Err())
		}
	}
}

// TryCredit is ReserveCredit without waiting: it reports whether n bytes
// fit now (and are then held for id).
func (l *Ledger) TryCredit(id string, n uint64) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return l.ReserveCredit(ctx, id, n) == nil
}

// DropCredit gives back id's credit not yet drawn.
func (l *Ledger) DropCredit(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.credit[id]
	delete(l.credit, id)
	l.releaseLocked(id, c)
}

// Credit returns id's credit not yet drawn.
func (l *Ledger) Credit(id string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.credit[id]
}

// Release gives back n bytes of id's (at most what it holds).
func (l *Ledger) Release(id string, n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked(id, n)
}

func (l *Ledger) releaseLocked(id string, n uint64) {
	h := l.held[id]
	n = min(n, h)
	if n == 0 {
		return
	}
	if h == n {
		delete(l.held, id)
	} else {
		l.held[id] = h - n
	}
	if c := l.credit[id]; c > h-n {
		l.credit[id] = h - n
	}
	l.used -= n
	l.wakeLocked()
}

// Forget releases everything id holds and returns how much that was.
func (l *Ledger) Forget(id string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.held[id]
	l.releaseLocked(id, n)
	delete(l.credit, id)
	delete(l.peak, id)
	return n
}

// Set records that id holds exactly n bytes (an instance adopted after an
// upgrade in place, whose worker already holds its memory).
func (l *Ledger) Set(id string, n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.held[id]
	l.used = l.used - h + n
	if n == 0 {
		delete(l.held, id)
	} else {
		l.held[id] = n
	}
	l.peak[id] = n
	delete(l.credit, id)
	l.wakeLocked()
}

// wakeLocked wakes every waiter to look again.
func (l *Ledger) wakeLocked() {
	close(l.freed)
	l.freed = make(chan struct{})
}

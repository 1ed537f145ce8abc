package guestmem

import (
	"slices"
	"sync"
)

// PageShift is the granule of the write log: a guest page.
const PageShift = 12

// dirtyChunkPages is how many pages one chunk of the write log covers (2
// MiB of guest RAM in 512 bits).
const dirtyChunkPages = 512

// writeLog records which guest pages were written through a Map while it
// is on: the pages the device wrote while QEMU copies the VM, which QEMU
// cannot see (docs/migration.md "The vGPU runs while QEMU copies the
// VM"). It is sparse: chunks exist only where something was written.
type writeLog struct {
	mu     sync.Mutex
	chunks map[uint64]*[dirtyChunkPages / 64]uint64 // by gpa >> (PageShift + 9)
	pages  uint64                                   // distinct pages marked
}

// mark records that [gpa, gpa+n) was written. n > 0 and the range does
// not wrap (the caller checked it).
func (l *writeLog) mark(gpa, n uint64) {
	first, last := gpa>>PageShift, (gpa+n-1)>>PageShift
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := first; p <= last; p++ {
		c := l.chunks[p/dirtyChunkPages]
		if c == nil {
			c = new([dirtyChunkPages / 64]uint64)
			l.chunks[p/dirtyChunkPages] = c
		}
		w, bit := (p%dirtyChunkPages)/64, uint64(1)<<(p%64)
		if c[w]&bit == 0 {
			c[w] |= bit
			l.pages++
		}
	}
}

// LogWrites turns the write log on (a fresh, empty one) or off. While it
// is on every WriteAt, Store64 and View that may write records the pages
// it touched; TakeWritten returns them. The log costs nothing while off.
func (m *Map) LogWrites(on bool) {
	if on {
		m.log.Store(&writeLog{chunks: map[uint64]*[dirtyChunkPages / 64]uint64{}})
	} else {
		m.log.Store(nil)
	}
}

// Logging reports whether the write log is on.
func (m *Map) Logging() bool { return m.log.Load() != nil }

// TakeWritten returns the guest-physical addresses of the pages written
// since the log was turned on or last taken, in ascending order, and
// empties the log (it stays on). It returns nil when the log is off.
func (m *Map) TakeWritten() []uint64 {
	l := m.log.Load()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	chunks := l.chunks
	n := l.pages
	l.chunks, l.pages = map[uint64]*[dirtyChunkPages / 64]uint64{}, 0
	l.mu.Unlock()
	out := make([]uint64, 0, n)
	for ci, c := range chunks {
		for w, bits := range c {
			for b := 0; bits != 0; b, bits = b+1, bits>>1 {
				if bits&1 != 0 {
					out = append(out, (ci*dirtyChunkPages+uint64(w*64+b))<<PageShift)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// logged records a write of [gpa, gpa+n) if the log is on.
func (m *Map) logged(gpa, n uint64) {
	if n == 0 || gpa+(n-1) < gpa {
		return
	}
	if l := m.log.Load(); l != nil {
		l.mark(gpa, n)
	}
}

// Inside reports whether [gpa, gpa+n) is guest RAM of the current map
// (an error wrapping abi.StatusBadAddress if not), without touching it.
func (m *Map) Inside(gpa, n uint64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cache != nil {
		return m.cache.inside(gpa, n)
	}
	if m.closed {
		return ErrClosed
	}
	return m.check(gpa, n)
}

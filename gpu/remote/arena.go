package remote

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/gpu"
)

// Shared buffer memory (docs/executor-protocol.md "Shared buffer memory").
//
// An arena is a memory file both ends map: the client (the worker) places
// buffers in it and asks the server (the executor) for a buffer on that
// range (OpAllocAt), which the server makes on its own mapping of the
// same pages (gpu.HostAllocator). The client then writes and reads such a
// buffer with a memory copy of its mapping: no frame on the socket and no
// round trip. It does so only between its requests on the buffer's
// queue, which are synchronous: no launch, copy or fill of the queue is
// running in the executor then.
//
// The client trusts nothing the arena holds (it only copies between it
// and the caller's bytes); a range is reused only after the server said
// its runtime let go of it (OpRelease's and OpCloseQueue's reply), and
// is cleared (its pages given back) before that.

// ArenaPage is the arena's unit: every range is page aligned and a
// whole number of pages long.
const ArenaPage = 4096

// arenaMin is the smallest buffer placed in an arena: a smaller one
// would hold a page for less than a page of quota (a guest allocating
// many tiny buffers would multiply its memory by up to 4096 on the
// arena); those stay the executor's own, written and read over the
// socket. At a page or more a buffer holds less than twice its quota.
const arenaMin = ArenaPage

// MapArena maps the whole of the memory file f, read and write, shared.
// Its size is f's, which must be a whole number of pages.
func MapArena(f *os.File) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	size := st.Size()
	if size <= 0 || size%ArenaPage != 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("arena: size %d is not a whole number of pages", size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("arena: map %d bytes: %w", size, err)
	}
	return mem, nil
}

// extent is a range of an arena: [off, off+n).
type extent struct{ off, n uint64 }

// arena is the client's side: its mapping and the ranges that are free.
type arena struct {
	// mu is held for reading while bytes of mem are in use and for
	// writing to unmap it.
	mu  sync.RWMutex
	mem []byte // nil once unmapped

	fmu     sync.Mutex // guards what follows
	free    []extent   // sorted by offset, none adjacent to another
	refused bool       // the server cannot make buffers on it
	kept    uint64     // bytes the server's runtime never let go of
}

func newArena(mem []byte) *arena {
	return &arena{mem: mem, free: []extent{{0, uint64(len(mem))}}}
}

// take returns a free range of n bytes (rounded up to pages), first fit.
func (a *arena) take(n uint64) (extent, bool) {
	n = (n + ArenaPage - 1) &^ (ArenaPage - 1)
	a.fmu.Lock()
	defer a.fmu.Unlock()
	if a.refused || n == 0 {
		return extent{}, false
	}
	for i, e := range a.free {
		if e.n < n {
			continue
		}
		if e.n == n {
			a.free = slices.Delete(a.free, i, i+1)
		} else {
			a.free[i] = extent{e.off + n, e.n - n}
		}
		return extent{e.off, n}, true
	}
	return extent{}, false
}

// give returns a range the server's runtime let go of: its pages are
// given back to the kernel first (they read as zero again, as a new
// buffer's must), then the range is free.
func (a *arena) give(e extent) {
	a.mu.RLock()
	if a.mem != nil {
		// MADV_REMOVE frees a shared memory file's pages in the range:
		// the next user of the range sees zeros and the memory is the
		// system's again meanwhile. Should it fail, the range is
		// cleared by hand.
		p := a.mem[e.off : e.off+e.n]
		if unix.Madvise(p, unix.MADV_REMOVE) != nil {
			clear(p)
		}
	}
	a.mu.RUnlock()
	a.fmu.Lock()
	defer a.fmu.Unlock()
	i, _ := slices.BinarySearchFunc(a.free, e.off, func(x extent, off uint64) int {
		switch {
		case x.off < off:
			return -1
		case x.off > off:
			return 1
		}
		return 0
	})
	a.free = slices.Insert(a.free, i, e)
	// Merge with the next, then the previous.
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = slices.Delete(a.free, i+1, i+2)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = slices.Delete(a.free, i, i+1)
	}
}

// keep records a range the server's runtime did not let go of: it is
// never reused.
func (a *arena) keep(e extent) {
	a.fmu.Lock()
	a.kept += e.n
	a.fmu.Unlock()
}

// refuse stops placing buffers in the arena.
func (a *arena) refuse() {
	a.fmu.Lock()
	a.refused = true
	a.fmu.Unlock()
}

// use calls f with n bytes of the arena at off, or reports false once it
// is unmapped.
func (a *arena) use(off, n uint64, f func(p []byte)) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.mem == nil {
		return false
	}
	f(a.mem[off : off+n])
	return true
}

// unmap unmaps the arena once no bytes of it are in use.
func (a *arena) unmap() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mem == nil {
		return nil
	}
	err := unix.Munmap(a.mem)
	a.mem = nil
	return err
}

// SetArena gives the device an arena, mem, which the executor maps too
// (ServeArena): buffers of a page or more are placed in it from now on,
// and their writes and reads are memory copies. The device unmaps mem
// when it is closed. Call it before the device's first Alloc.
func (d *Device) SetArena(mem []byte) {
	d.arena = newArena(mem)
}

// ArenaStats says how the device's arena is used: the bytes free and the
// bytes its executor's runtime never let go of (kept out of use). Zero
// without an arena.
func (d *Device) ArenaStats() (free, kept uint64) {
	a := d.arena
	if a == nil {
		return 0, 0
	}
	a.fmu.Lock()
	defer a.fmu.Unlock()
	for _, e := range a.free {
		free += e.n
	}
	return free, a.kept
}

// allocArena places a buffer of size bytes in the arena; ok is false
// when it goes to the executor's own memory instead (no arena, too
// small, no room, or the executor cannot make it there).
func (q *Queue) allocArena(size uint64) (b *Buffer, ok bool, err error) {
	a := q.d.arena
	if a == nil || size < arenaMin {
		return nil, false, nil
	}
	e, ok := a.take(size)
	if !ok {
		return nil, false, nil
	}
	enc := q.body()
	enc.U64(e.off)
	enc.U64(size)
	body, err := q.call(OpAllocAt, enc)
	if err != nil {
		a.give(e) // the executor made nothing on it
		if errors.Is(err, gpu.ErrUnsupported) {
			a.refuse()
			return nil, false, nil
		}
		return nil, false, err
	}
	h, err := q.handle(OpAllocAt, body)
	if err != nil {
		return nil, false, err
	}
	q.amu.Lock()
	q.arenaBufs[h] = e
	q.amu.Unlock()
	return &Buffer{q: q, h: h, size: size, arena: true, ext: e}, true, nil
}

// span checks that n bytes at off lie in the buffer; op names the
// access in its error.
func (b *Buffer) span(op string, off, n uint64) error {
	if off > b.size || n > b.size-off {
		return fmt.Errorf("%s %d bytes at %d of a %d-byte buffer: %w", op, n, off, b.size, gpu.ErrOutOfRange)
	}
	return nil
}

// lend calls f with n bytes of the buffer, in the arena, at off (which
// span checked), and reports false on a lost device or once the arena
// is unmapped. The caller holds the queue's run lock.
func (b *Buffer) lend(off, n uint64, f func(p []byte)) bool {
	if b.q.d.lostErr() != nil {
		return false // the socket's error says why
	}
	return b.q.d.arena.use(b.ext.off+off, n, f)
}

// Host calls f with n bytes of the buffer at off where the buffer is in
// the arena (gpu.HostBuffer): the executor's kernels use those very
// bytes. It reports false for a buffer in the executor's own memory, a
// released one, with launches batched for the next Sync, or on a lost
// device.
func (b *Buffer) Host(off, n uint64, f func(p []byte) error) (bool, error) {
	if err := b.span("host access", off, n); err != nil {
		return false, err
	}
	q := b.q
	if !b.arena || b.released.Load() || q.closed.Load() || q.batched > 0 {
		return false, nil
	}
	// A request of the queue that may run on its buffers is in flight:
	// the caller goes the queue's way instead (in order behind it).
	if !q.run.TryLock() {
		return false, nil
	}
	defer q.run.Unlock()
	var err error
	ok := b.lend(off, n, func(p []byte) { err = f(p) })
	return ok, err
}

var _ gpu.HostBuffer = (*Buffer)(nil)

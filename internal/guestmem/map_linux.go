package guestmem

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
)

// Errors callers tell apart.
var (
	// ErrClosed is wrapped by every access after Close. It carries
	// abi.StatusBadAddress, as every access outside guest RAM does.
	ErrClosed = abi.Errorf(abi.StatusBadAddress, "guest memory closed")
	// ErrNotSealed is wrapped when a guest-RAM fd can shrink: a peer that
	// truncates the file under a mapping makes every access to the lost
	// pages fault. QEMU seals its memfd RAM (memory-backend-memfd's
	// seal=on, the default).
	ErrNotSealed = errors.New("guest RAM fd is not sealed against shrinking (F_SEAL_SHRINK): use QEMU's memory-backend-memfd with seal=on, its default")
	// ErrFault is wrapped when an access faulted (the file under the
	// mapping shrank after all); it carries abi.StatusBadAddress.
	ErrFault = abi.Errorf(abi.StatusBadAddress, "guest memory access faulted")
	// ErrTooLarge is wrapped when a memory map's regions add up to more
	// than Limit: a peer announcing terabytes of "guest RAM" would
	// otherwise fill the address space of the process that maps it. It
	// carries abi.StatusBadAddress.
	ErrTooLarge = abi.Errorf(abi.StatusBadAddress, "guest RAM regions larger than the host's memory")
)

// Limit is the most guest RAM one memory map may announce, in bytes:
// the host's RAM plus swap (sysinfo(2)), at least 1 GiB. No VM's RAM
// can be backed by more, and a worker maps each of its instances' maps,
// so the bound keeps a hostile peer from taking the worker's address
// space.
var Limit = sync.OnceValue(func() uint64 {
	const floor = 1 << 30
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return floor
	}
	unit := max(uint64(si.Unit), 1)
	return max((uint64(si.Totalram)+uint64(si.Totalswap))*unit, floor)
})

// Region is one range of guest-physical addresses backed by a file:
// [GPA, GPA+Size) is file bytes [Offset, Offset+Size) of FD.
//
// A Foreign region is instead a window of a Xen domain's guest-physical
// frames: FD is a privcmd fd (/dev/xen/privcmd, restricted to Domain with
// IOCTL_PRIVCMD_RESTRICT), [GPA, GPA+Size) is the part of the domain's
// guest-physical space the device may touch (page-aligned), Offset is 0.
// Nothing is mapped until an access needs it (the foreign mapcache,
// foreign.go); frames Xen refuses fail the accesses that touch them.
// One Update's regions are all foreign (one Domain) or all files.
type Region struct {
	GPA, Size, Offset uint64
	FD                int
	Foreign           bool
	Domain            uint16 // Xen domid_t, for a Foreign region
}

// span is one mapped region: guest bytes [gpa, gpa+len(mem)).
type span struct {
	gpa uint64
	mem []byte
}

// Map is guest RAM mapped from file descriptors. The zero value is an
// empty map (every access fails until Update). It is safe for concurrent
// use: accesses hold the read lock while they copy, Update and Close take
// the write lock only to swap the map.
type Map struct {
	// Foreign configures the mapcache of Foreign regions; set it before
	// the first Update. The zero value maps through privcmd with the
	// default bucket size and count.
	Foreign ForeignConfig

	mu     sync.RWMutex
	spans  []span   // sorted by gpa, non-overlapping
	maps   [][]byte // the mappings backing spans, one per region
	cache  *mapcache
	closed bool
	sealed bool                     // every file of spans was checked sealed against shrinking (View)
	log    atomic.Pointer[writeLog] // the write log, nil while off (LogWrites)
}

// Update replaces the memory map with regions. Each region maps, shared
// and read-write, only its window of the file, [Offset, Offset+Size)
// widened to page boundaries (the file's block size: a hugetlbfs page),
// never the whole file; several regions may be views of one fd. The
// regions must lie inside their files and add up to at most Limit()
// bytes (ErrTooLarge). Update takes ownership of the fds: it closes every
// one of them, on success and on error. On error the previous map stays
// in place.
func (m *Map) Update(regions []Region) error { return m.update(regions, true) }

func (m *Map) update(regions []Region, sealed bool) error {
	if anyForeign(regions) {
		return m.updateForeign(regions)
	}
	fds := distinctFDs(regions)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if sealed {
		if err := CheckSealed(fds); err != nil {
			return fmt.Errorf("update guest memory: %w", err)
		}
	}
	spans, maps, err := mapRegions(regions)
	if err != nil {
		return fmt.Errorf("update guest memory: %w", err)
	}
	return m.install(spans, maps, nil, sealed)
}

// install makes spans, the mappings maps behind them and cache m's
// guest memory (sealed: spans' files were checked sealed, for View), and unmaps and closes what they replace. After Close it
// unmaps and closes them instead, and errors wrapping ErrClosed.
func (m *Map) install(spans []span, maps [][]byte, cache *mapcache, sealed bool) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		unmapAll(maps)
		cache.close()
		return fmt.Errorf("update guest memory: %w", ErrClosed)
	}
	old, oldCache := m.maps, m.cache
	m.spans, m.maps, m.cache, m.sealed = spans, maps, cache, sealed
	m.mu.Unlock()
	// No reader holds the lock any more, so none uses the old mappings.
	unmapAll(old)
	oldCache.close()
	return nil
}

// CheckSealed checks that every fd is a file sealed against shrinking
// (F_SEAL_SHRINK), so that no mapping of it can lose pages under an
// access. It errors wrapping ErrNotSealed otherwise.
func CheckSealed(fds []int) error {
	for _, fd := range fds {
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		if err != nil {
			return fmt.Errorf("fd %d: F_GET_SEALS: %v: %w", fd, err, ErrNotSealed)
		}
		if seals&unix.F_SEAL_SHRINK == 0 {
			return fmt.Errorf("fd %d (seals %#x): %w", fd, seals, ErrNotSealed)
		}
	}
	return nil
}

// NewSealed returns a memfd of size bytes sealed against shrinking,
// growing and further sealing, as QEMU's memory-backend-memfd makes guest
// RAM (for harnesses that play QEMU, and for pages vgpud shares with its
// worker processes).
func NewSealed(name string, size int64) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd %s: %w", name, err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("size memfd %s: %w", name, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("seal memfd %s: %w", name, err)
	}
	return fd, nil
}

// Check validates regions as Update would, without mapping them: fds
// sealed against shrinking, regions inside their files, no overlap, at
// most Limit() bytes in all. The fds stay the caller's.
func Check(regions []Region) error {
	if anyForeign(regions) {
		return checkForeign(regions)
	}
	fds := distinctFDs(regions)
	if err := CheckSealed(fds); err != nil {
		return err
	}
	if err := checkLayout(regions); err != nil {
		return err
	}
	for _, r := range regions {
		if _, err := fileWindow(r); err != nil {
			return err
		}
	}
	return nil
}

// fileSpan is the page-aligned part of a file a region maps.
type fileSpan struct {
	off, len uint64 // the mapping: file bytes [off, off+len)
	skip     uint64 // the region starts skip bytes into the mapping
}

// fileWindow checks that r lies inside its file and returns the aligned
// window that maps it.
func fileWindow(r Region) (fileSpan, error) {
	var st unix.Stat_t
	if err := unix.Fstat(r.FD, &st); err != nil {
		return fileSpan{}, fmt.Errorf("fstat fd %d: %w", r.FD, err)
	}
	if st.Size <= 0 || r.Offset+r.Size > uint64(st.Size) {
		return fileSpan{}, abi.Errorf(abi.StatusBadAddress, "region %#x: offset %#x + size %#x beyond file of %#x bytes", r.GPA, r.Offset, r.Size, st.Size)
	}
	// mmap wants the offset page-aligned, and a hugetlbfs file's offset
	// and length huge-page-aligned: its st_blksize is the huge page.
	align := uint64(unix.Getpagesize())
	if b := uint64(st.Blksize); b > align && b&(b-1) == 0 && b <= 1<<30 {
		align = b
	}
	off := r.Offset &^ (align - 1)
	end := (r.Offset + r.Size + align - 1) &^ (align - 1)
	if end < r.Offset+r.Size || end-off > math.MaxInt {
		return fileSpan{}, abi.Errorf(abi.StatusBadAddress, "region %#x: offset %#x + size %#x: overflows", r.GPA, r.Offset, r.Size)
	}
	return fileSpan{off: off, len: end - off, skip: r.Offset - off}, nil
}

func distinctFDs(regions []Region) []int {
	var fds []int
	seen := make(map[int]bool, len(regions))
	for _, r := range regions {
		if r.FD >= 0 && !seen[r.FD] {
			seen[r.FD] = true
			fds = append(fds, r.FD)
		}
	}
	return fds
}

// checkLayout validates the regions' ranges.
func checkLayout(regions []Region) error {
	sorted := append([]Region(nil), regions...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].GPA < sorted[j].GPA })
	for i, r := range sorted {
		if r.FD < 0 {
			return abi.Errorf(abi.StatusBadAddress, "region %#x: bad fd %d", r.GPA, r.FD)
		}
		if r.Size == 0 {
			return abi.Errorf(abi.StatusBadAddress, "region %#x: empty", r.GPA)
		}
		if r.GPA+r.Size < r.GPA || r.Offset+r.Size < r.Offset {
			return abi.Errorf(abi.StatusBadAddress, "region %#x+%#x at offset %#x: overflows", r.GPA, r.Size, r.Offset)
		}
		if i > 0 && sorted[i-1].GPA+sorted[i-1].Size > r.GPA {
			return abi.Errorf(abi.StatusBadAddress, "regions at %#x and %#x overlap", sorted[i-1].GPA, r.GPA)
		}
	}
	// No overlap and no wrap: the sizes add up without overflow.
	var total uint64
	for _, r := range regions {
		total += r.Size
	}
	if limit := Limit(); total > limit {
		return fmt.Errorf("%d regions of %#x bytes in all, at most %#x: %w", len(regions), total, limit, ErrTooLarge)
	}
	return nil
}

// mapRegions validates regions and maps each one's window of its file.
func mapRegions(regions []Region) ([]span, [][]byte, error) {
	if err := checkLayout(regions); err != nil {
		return nil, nil, err
	}
	sorted := append([]Region(nil), regions...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].GPA < sorted[j].GPA })
	var maps [][]byte
	fail := func(err error) ([]span, [][]byte, error) {
		unmapAll(maps)
		return nil, nil, err
	}
	spans := make([]span, 0, len(sorted))
	for _, r := range sorted {
		w, err := fileWindow(r)
		if err != nil {
			return fail(err)
		}
		mem, err := unix.Mmap(r.FD, int64(w.off), int(w.len), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fail(fmt.Errorf("mmap fd %d bytes [%#x, +%#x): %w", r.FD, w.off, w.len, err))
		}
		maps = append(maps, mem)
		spans = append(spans, span{gpa: r.GPA, mem: mem[w.skip : w.skip+r.Size : w.skip+r.Size]})
	}
	return spans, maps, nil
}

func unmapAll(maps [][]byte) {
	for _, mem := range maps {
		// Munmap fails only for a range that was never mapped.
		_ = unix.Munmap(mem)
	}
}

// Close unmaps all guest memory. Later accesses and updates fail with
// ErrClosed. Close is idempotent.
func (m *Map) Close() error {
	m.mu.Lock()
	old, oldCache := m.maps, m.cache
	m.spans, m.maps, m.cache, m.closed = nil, nil, nil, true
	m.mu.Unlock()
	unmapAll(old)
	oldCache.close()
	return nil
}

// Mapped returns the bytes of address space the file regions' mappings
// take: each region's size rounded out to page boundaries, never more
// than a page (a huge page) or two beyond the regions' sizes.
func (m *Map) Mapped() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var n uint64
	for _, mem := range m.maps {
		n += uint64(len(mem))
	}
	return n
}

// Regions returns the current memory map as (gpa, size) pairs, sorted.
func (m *Map) Regions() [][2]uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cache != nil {
		return m.cache.regions()
	}
	out := make([][2]uint64, len(m.spans))
	for i, s := range m.spans {
		out[i] = [2]uint64{s.gpa, uint64(len(s.mem))}
	}
	return out
}

// find returns the index of the span holding gpa. Caller holds mu.
func (m *Map) find(gpa uint64) (int, bool) {
	i := sort.Search(len(m.spans), func(i int) bool {
		s := m.spans[i]
		return s.gpa+uint64(len(s.mem)) > gpa
	})
	if i < len(m.spans) && m.spans[i].gpa <= gpa {
		return i, true
	}
	return 0, false
}

var errBounds = errors.New("outside guest RAM")

// check verifies that [gpa, gpa+n) is guest RAM, possibly spanning
// adjacent regions. Caller holds mu.
func (m *Map) check(gpa, n uint64) error {
	if m.closed {
		return ErrClosed
	}
	if n == 0 {
		return nil
	}
	if gpa+(n-1) < gpa {
		return abi.Errorf(abi.StatusBadAddress, "range %#x+%#x wraps: %v", gpa, n, errBounds)
	}
	i, ok := m.find(gpa)
	if !ok {
		return abi.Errorf(abi.StatusBadAddress, "%#x: %v", gpa, errBounds)
	}
	cur, left := gpa, n
	for {
		s := m.spans[i]
		avail := s.gpa + uint64(len(s.mem)) - cur
		if left <= avail {
			return nil
		}
		cur += avail
		left -= avail
		i++
		if i >= len(m.spans) || m.spans[i].gpa != cur {
			return abi.Errorf(abi.StatusBadAddress, "range %#x+%#x: %#x: %v", gpa, n, cur, errBounds)
		}
	}
}

// guarded runs f, an access to mapped guest RAM, and turns a memory
// fault into ErrFault: were the file under a mapping shrunk (a peer that
// got around CheckSealed), the access raises SIGBUS, which Go makes a
// panic only where SetPanicOnFault is set. f does nothing but copy.
func guarded(f func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrFault, r)
		}
	}()
	f()
	return nil
}

// copyRange copies between p and guest RAM at gpa after check succeeded.
// Caller holds mu.
func (m *Map) copyRange(p []byte, gpa uint64, write bool) error {
	return guarded(func() { m.copySpans(p, gpa, write) })
}

func (m *Map) copySpans(p []byte, gpa uint64, write bool) {
	i, _ := m.find(gpa)
	for len(p) > 0 {
		s := m.spans[i]
		mem := s.mem[gpa-s.gpa:]
		var n int
		if write {
			n = copy(mem, p)
		} else {
			n = copy(p, mem)
		}
		p = p[n:]
		gpa += uint64(n)
		i++
	}
}

// View calls f with the host mapping of guest RAM [gpa, gpa+n) when the
// range lies in one mapped region of file-backed RAM whose files are
// sealed against shrinking (so that no access to it can fault, even from
// C code such as an OpenCL implementation's copy), holding the map's read
// lock while f runs: f must not keep b, nor wait for anything that may
// update the map. ok is false, and f is not called, when the range is
// not one such mapping (foreign memory, a range across regions, outside
// guest RAM): the caller copies with ReadAt or WriteAt instead, which
// report what is wrong.
//
// write says whether f may write b: with the write log on (LogWrites),
// the range is then recorded as written.
func (m *Map) View(gpa, n uint64, write bool, f func(b []byte) error) (ok bool, err error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed || m.cache != nil || !m.sealed || n == 0 || gpa+(n-1) < gpa {
		return false, nil
	}
	i, found := m.find(gpa)
	if !found {
		return false, nil
	}
	sp := m.spans[i]
	if gpa+n > sp.gpa+uint64(len(sp.mem)) {
		return false, nil
	}
	if write {
		m.logged(gpa, n)
	}
	return true, f(sp.mem[gpa-sp.gpa : gpa-sp.gpa+n : gpa-sp.gpa+n])
}

// ReadAt copies len(p) bytes of guest RAM at gpa into p. The whole range
// must be guest RAM; otherwise nothing is copied and the error wraps
// abi.StatusBadAddress.
func (m *Map) ReadAt(p []byte, gpa uint64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cache != nil {
		if err := m.cache.access(p, gpa, false); err != nil {
			return fmt.Errorf("read guest memory: %w", err)
		}
		return nil
	}
	if err := m.check(gpa, uint64(len(p))); err != nil {
		return fmt.Errorf("read guest memory: %w", err)
	}
	if err := m.copyRange(p, gpa, false); err != nil {
		return fmt.Errorf("read guest memory at %#x: %w", gpa, err)
	}
	return nil
}

// WriteAt copies p into guest RAM at gpa. The whole range must be guest
// RAM; otherwise nothing is written and the error wraps
// abi.StatusBadAddress.
func (m *Map) WriteAt(p []byte, gpa uint64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cache != nil {
		if err := m.cache.access(p, gpa, true); err != nil {
			return fmt.Errorf("write guest memory: %w", err)
		}
		m.logged(gpa, uint64(len(p)))
		return nil
	}
	if err := m.check(gpa, uint64(len(p))); err != nil {
		return fmt.Errorf("write guest memory: %w", err)
	}
	// Logged before the copy: a copy that faults part-way wrote some.
	m.logged(gpa, uint64(len(p)))
	if err := m.copyRange(p, gpa, true); err != nil {
		return fmt.Errorf("write guest memory at %#x: %w", gpa, err)
	}
	return nil
}

// Store64 atomically stores v, little-endian, at the 8-byte aligned gpa.
// The store is sequentially consistent, so every earlier write through
// this Map is visible to the guest before it.
func (m *Map) Store64(gpa uint64, v uint64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if gpa%8 != 0 {
		return fmt.Errorf("store guest memory: %w", abi.Errorf(abi.StatusBadAddress, "%#x not 8-byte aligned", gpa))
	}
	if m.cache != nil {
		if err := m.cache.store64(gpa, v); err != nil {
			return fmt.Errorf("store guest memory: %w", err)
		}
		m.logged(gpa, 8)
		return nil
	}
	if err := m.check(gpa, 8); err != nil {
		return fmt.Errorf("store guest memory: %w", err)
	}
	i, _ := m.find(gpa)
	s := m.spans[i]
	off := gpa - s.gpa
	if off+8 > uint64(len(s.mem)) {
		// Aligned words never straddle regions whose bounds are
		// 8-aligned; a region of odd size could make one.
		return fmt.Errorf("store guest memory: %w", abi.Errorf(abi.StatusBadAddress, "%#x straddles regions", gpa))
	}
	ok := true
	m.logged(gpa, 8)
	if err := guarded(func() { ok = store64(s.mem[off:off+8], v) }); err != nil {
		return fmt.Errorf("store guest memory at %#x: %w", gpa, err)
	}
	if !ok {
		return fmt.Errorf("store guest memory: %w", abi.Errorf(abi.StatusBadAddress, "%#x maps to an unaligned host address", gpa))
	}
	return nil
}

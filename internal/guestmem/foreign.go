package guestmem

import (
	"container/list"
	"errors"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
)

// Xen guest RAM is not a file: a dom0 process maps a domain's frames
// through privcmd (IOCTL_PRIVCMD_MMAPBATCH_V2), a batch of frames into
// one mapping of the privcmd fd. Mapping all of a guest's RAM at once
// would pin it all; like QEMU's Xen mapcache (hw/xen/xen-mapcache.c),
// Map keeps a bounded set of fixed-size buckets of guest frames, mapped
// when an access first needs them and evicted least recently used first.

// PageSize is Xen's page (frame) size.
const PageSize = 4096

// Defaults of ForeignConfig.
const (
	DefaultBucketBytes = 1 << 20 // QEMU's MCACHE_BUCKET_SHIFT 20
	DefaultBuckets     = 1024    // 1 GiB of guest frames mapped at most
)

// Errors of foreign regions callers tell apart.
var (
	// ErrRefused is wrapped when an access touches a guest frame Xen
	// refused to map (not RAM, paged out, a hole); it carries
	// abi.StatusBadAddress.
	ErrRefused = abi.Errorf(abi.StatusBadAddress, "guest frame refused by the hypervisor")
	// ErrForeignLayout is wrapped when foreign regions are malformed:
	// mixed with file regions, of several domains, unaligned, with an
	// offset, overlapping. It carries abi.StatusBadAddress.
	ErrForeignLayout = abi.Errorf(abi.StatusBadAddress, "bad foreign guest-RAM regions")
)

// FrameMapper is the hypervisor side of the mapcache: the raw privcmd
// calls, behind an interface so that the bucket logic is tested with a
// fake. Its methods may be called from several goroutines.
type FrameMapper interface {
	// MapFrames maps the guest frames gfns, in order, into one new
	// shared read-write mapping of len(gfns) pages. errs (len(gfns))
	// receives each frame's error: 0 for a frame mapped, a negative
	// errno for one refused, whose page must not be touched. An error
	// means nothing was mapped.
	MapFrames(gfns []uint64, errs []int32) ([]byte, error)
	// Unmap unmaps a mapping MapFrames returned.
	Unmap(mem []byte) error
	// Close releases the mapper (its fd); mappings stay valid until
	// unmapped.
	Close() error
}

// ForeignConfig configures the mapcache of Foreign regions.
type ForeignConfig struct {
	// Mapper makes the FrameMapper of a privcmd fd restricted to dom; it
	// owns fd from then on, also on error. Nil: NewPrivcmdMapper.
	Mapper func(fd int, dom uint16) (FrameMapper, error)
	// BucketBytes is the size of a bucket: a power of two, at least a
	// page. 0: DefaultBucketBytes.
	BucketBytes uint64
	// Buckets bounds the buckets kept mapped, beyond those that accesses
	// in progress use. 0: DefaultBuckets.
	Buckets int
}

// window is one foreign region's guest-physical range [gpa, end).
type window struct{ gpa, end uint64 }

// mapcache is the guest RAM of one domain, mapped a bucket at a time.
// Accesses pin the buckets they use (users); eviction skips pinned
// buckets, so an access never sees its mapping go. close runs only when
// no access is in progress (Map's write lock).
type mapcache struct {
	mapper  FrameMapper
	windows []window // sorted, non-overlapping
	shift   uint     // log2 of the bucket size
	max     int

	mu      sync.Mutex
	buckets map[uint64]*bucket // by gpa >> shift
	lru     list.List          // of *bucket, most recently used first
}

// bucket is one mapped run of guest frames from index << shift.
type bucket struct {
	index uint64
	mem   []byte
	valid []bool // per frame: mapped
	users int
	elem  *list.Element
}

func anyForeign(regions []Region) bool {
	for _, r := range regions {
		if r.Foreign {
			return true
		}
	}
	return false
}

// checkForeign validates foreign regions and returns their windows,
// sorted.
func checkForeign(regions []Region) error {
	_, err := foreignWindows(regions)
	return err
}

func foreignWindows(regions []Region) ([]window, error) {
	ws := make([]window, 0, len(regions))
	for _, r := range regions {
		switch {
		case !r.Foreign:
			return nil, fmt.Errorf("region %#x is a file among foreign regions: %w", r.GPA, ErrForeignLayout)
		case r.Domain != regions[0].Domain:
			return nil, fmt.Errorf("regions of domains %d and %d: %w", regions[0].Domain, r.Domain, ErrForeignLayout)
		case r.FD < 0:
			return nil, fmt.Errorf("region %#x: bad fd %d: %w", r.GPA, r.FD, ErrForeignLayout)
		case r.Offset != 0:
			return nil, fmt.Errorf("region %#x: offset %#x, want 0: %w", r.GPA, r.Offset, ErrForeignLayout)
		case r.Size == 0 || r.GPA%PageSize != 0 || r.Size%PageSize != 0:
			return nil, fmt.Errorf("region %#x+%#x: empty or not page-aligned: %w", r.GPA, r.Size, ErrForeignLayout)
		case r.GPA+r.Size < r.GPA:
			return nil, fmt.Errorf("region %#x+%#x: overflows: %w", r.GPA, r.Size, ErrForeignLayout)
		}
		ws = append(ws, window{r.GPA, r.GPA + r.Size})
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].gpa < ws[j].gpa })
	for i := 1; i < len(ws); i++ {
		if ws[i-1].end > ws[i].gpa {
			return nil, fmt.Errorf("regions at %#x and %#x overlap: %w", ws[i-1].gpa, ws[i].gpa, ErrForeignLayout)
		}
	}
	return ws, nil
}

// updateForeign replaces the map with a mapcache of the foreign regions.
// It takes ownership of their fds, as Update does.
func (m *Map) updateForeign(regions []Region) error {
	fds := distinctFDs(regions)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	ws, err := foreignWindows(regions)
	if err != nil {
		return fmt.Errorf("update guest memory: %w", err)
	}
	cfg := m.Foreign
	if cfg.BucketBytes == 0 {
		cfg.BucketBytes = DefaultBucketBytes
	}
	if cfg.BucketBytes < PageSize || cfg.BucketBytes&(cfg.BucketBytes-1) != 0 {
		return fmt.Errorf("update guest memory: bucket size %#x is not a power of two of at least a page", cfg.BucketBytes)
	}
	if cfg.Buckets <= 0 {
		cfg.Buckets = DefaultBuckets
	}
	if cfg.Mapper == nil {
		cfg.Mapper = NewPrivcmdMapper
	}
	// The mapper keeps its own copy: every fd handed in is closed.
	fd, err := unix.FcntlInt(uintptr(regions[0].FD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("update guest memory: dup privcmd fd: %w", err)
	}
	mapper, err := cfg.Mapper(fd, regions[0].Domain)
	if err != nil {
		return fmt.Errorf("update guest memory: domain %d: %w", regions[0].Domain, err)
	}
	shift := uint(0)
	for uint64(1)<<shift < cfg.BucketBytes {
		shift++
	}
	c := &mapcache{mapper: mapper, windows: ws, shift: shift, max: cfg.Buckets, buckets: map[uint64]*bucket{}}
	return m.install(nil, nil, c, false)
}

// close unmaps every bucket and closes the mapper. No access may be in
// progress (the caller holds Map's write lock or has swapped c out).
func (c *mapcache) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	for _, b := range c.buckets {
		_ = c.mapper.Unmap(b.mem)
	}
	c.buckets = nil
	c.lru.Init()
	c.mu.Unlock()
	_ = c.mapper.Close()
}

func (c *mapcache) regions() [][2]uint64 {
	out := make([][2]uint64, len(c.windows))
	for i, w := range c.windows {
		out[i] = [2]uint64{w.gpa, w.end - w.gpa}
	}
	return out
}

// inside checks that [gpa, gpa+n) lies in the windows, possibly across
// adjacent ones.
func (c *mapcache) inside(gpa, n uint64) error {
	if n == 0 {
		return nil
	}
	if gpa+(n-1) < gpa {
		return abi.Errorf(abi.StatusBadAddress, "range %#x+%#x wraps: %v", gpa, n, errBounds)
	}
	i := sort.Search(len(c.windows), func(i int) bool { return c.windows[i].end > gpa })
	if i == len(c.windows) || c.windows[i].gpa > gpa {
		return abi.Errorf(abi.StatusBadAddress, "%#x: %v", gpa, errBounds)
	}
	last := gpa + (n - 1)
	for ; i < len(c.windows); i++ {
		if last < c.windows[i].end {
			return nil
		}
		if i+1 == len(c.windows) || c.windows[i+1].gpa != c.windows[i].end {
			break
		}
	}
	return abi.Errorf(abi.StatusBadAddress, "range %#x+%#x: %v", gpa, n, errBounds)
}

// pin returns the bucket holding gpa, mapped, with the frames of
// [gpa, gpa+n) (inside the bucket) valid, and pinned: the caller must
// unpin it. A bucket whose needed frames were refused is mapped again
// if no access uses it (a frame Xen had paged out may be back), then
// the access fails with ErrRefused.
func (c *mapcache) pin(gpa, n uint64) (*bucket, error) {
	idx := gpa >> c.shift
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buckets[idx]
	if b != nil && !b.covers(c, gpa, n) && b.users == 0 {
		c.drop(b)
		b = nil
	}
	if b == nil {
		var err error
		if b, err = c.mapBucket(idx); err != nil {
			return nil, err
		}
	}
	c.lru.MoveToFront(b.elem)
	if !b.covers(c, gpa, n) {
		c.evict()
		return nil, fmt.Errorf("%#x+%#x of domain frames: %w", gpa, n, ErrRefused)
	}
	b.users++
	return b, nil
}

// unpin releases a bucket pin returned and trims the cache.
func (c *mapcache) unpin(b *bucket) {
	c.mu.Lock()
	b.users--
	c.evict()
	c.mu.Unlock()
}

// covers reports whether the frames of [gpa, gpa+n) are mapped in b.
func (b *bucket) covers(c *mapcache, gpa, n uint64) bool {
	base := b.index << c.shift
	first, last := (gpa-base)/PageSize, (gpa+n-1-base)/PageSize
	if last >= uint64(len(b.valid)) {
		return false
	}
	for f := first; f <= last; f++ {
		if !b.valid[f] {
			return false
		}
	}
	return true
}

// mapBucket maps bucket idx: its frames up to the end of the last
// window (frames in gaps between windows are asked for too, and never
// touched: accesses are checked against the windows first). Caller holds
// mu.
func (c *mapcache) mapBucket(idx uint64) (*bucket, error) {
	start := idx << c.shift
	end := start + uint64(1)<<c.shift
	if limit := c.windows[len(c.windows)-1].end; end < start || end > limit {
		end = limit
	}
	nfr := (end - start) / PageSize
	gfns := make([]uint64, nfr)
	errs := make([]int32, nfr)
	for i := range gfns {
		gfns[i] = start/PageSize + uint64(i)
	}
	mem, err := c.mapper.MapFrames(gfns, errs)
	if err != nil {
		return nil, fmt.Errorf("map guest frames %#x+%d: %w: %w", start/PageSize, nfr, ErrRefused, err)
	}
	if uint64(len(mem)) != nfr*PageSize {
		_ = c.mapper.Unmap(mem)
		return nil, fmt.Errorf("map guest frames %#x+%d: mapping of %d bytes: %w", start/PageSize, nfr, len(mem), ErrRefused)
	}
	b := &bucket{index: idx, mem: mem, valid: make([]bool, nfr)}
	for i, e := range errs {
		b.valid[i] = e == 0
	}
	b.elem = c.lru.PushFront(b)
	c.buckets[idx] = b
	return b, nil
}

// drop unmaps an unpinned bucket. Caller holds mu.
func (c *mapcache) drop(b *bucket) {
	c.lru.Remove(b.elem)
	delete(c.buckets, b.index)
	_ = c.mapper.Unmap(b.mem)
}

// evict drops least recently used unpinned buckets beyond max. Caller
// holds mu.
func (c *mapcache) evict() {
	for e := c.lru.Back(); e != nil && len(c.buckets) > c.max; {
		b := e.Value.(*bucket)
		e = e.Prev()
		if b.users == 0 {
			c.drop(b)
		}
	}
}

// access copies between p and guest RAM at gpa. Every bucket the range
// touches is pinned and checked before anything is copied, so a range
// with a refused frame changes nothing.
func (c *mapcache) access(p []byte, gpa uint64, write bool) error {
	n := uint64(len(p))
	if err := c.inside(gpa, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	var pinned []*bucket
	defer func() {
		for _, b := range pinned {
			c.unpin(b)
		}
	}()
	size := uint64(1) << c.shift
	for cur, left := gpa, n; left > 0; {
		k := min(left, size-cur&(size-1))
		b, err := c.pin(cur, k)
		if err != nil {
			return err
		}
		pinned = append(pinned, b)
		cur += k
		left -= k
	}
	return guarded(func() {
		cur := gpa
		for _, b := range pinned {
			mem := b.mem[cur-b.index<<c.shift:]
			var k int
			if write {
				k = copy(mem, p)
			} else {
				k = copy(p, mem)
			}
			p = p[k:]
			cur += uint64(k)
		}
	})
}

// store64 stores v atomically at the 8-byte aligned gpa.
func (c *mapcache) store64(gpa, v uint64) error {
	if err := c.inside(gpa, 8); err != nil {
		return err
	}
	b, err := c.pin(gpa, 8)
	if err != nil {
		return err
	}
	defer c.unpin(b)
	off := gpa - b.index<<c.shift
	ok := true
	if err := guarded(func() { ok = store64(b.mem[off:off+8], v) }); err != nil {
		return fmt.Errorf("at %#x: %w", gpa, err)
	}
	if !ok {
		return abi.Errorf(abi.StatusBadAddress, "%#x maps to an unaligned host address", gpa)
	}
	return nil
}

// errNotPrivcmd is wrapped when a foreign region's fd is not a character
// device.
var errNotPrivcmd = errors.New("not a character device (want /dev/xen/privcmd)")

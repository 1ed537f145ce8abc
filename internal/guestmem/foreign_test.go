package guestmem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/vgpud/vgpud/abi"
)

// fakeXen plays privcmd over a memfd that stands for a domain's RAM:
// frame g is the memfd's page g; refused frames (and frames past the
// memfd) fail with EINVAL, as Xen refuses frames that are not RAM.
type fakeXen struct {
	t       tb
	ram     int // the memfd
	size    uint64
	local   []byte // the memfd, mapped, for checking
	refused map[uint64]bool

	mu       sync.Mutex
	live     map[uintptr]int // mapping base -> bytes
	maxLive  int
	maps     int
	closed   int
	mappers  int
	failNext error
}

// tb is what the fake needs of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

func newFakeXen(t *testing.T, size uint64) *fakeXen {
	t.Helper()
	x := makeFakeXen(t, size)
	t.Cleanup(x.free)
	return x
}

// makeFakeXen is newFakeXen without the cleanup: the caller frees it.
func makeFakeXen(t tb, size uint64) *fakeXen {
	t.Helper()
	fd, err := NewSealed("fake-xen-ram", int64(size))
	if err != nil {
		t.Fatal(err)
	}
	local, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeXen{t: t, ram: fd, size: size, local: local, refused: map[uint64]bool{}, live: map[uintptr]int{}}
}

func (x *fakeXen) free() {
	unix.Munmap(x.local)
	unix.Close(x.ram)
}

// config returns a ForeignConfig whose mappers are this fake's.
func (x *fakeXen) config(bucket uint64, buckets int) ForeignConfig {
	return ForeignConfig{BucketBytes: bucket, Buckets: buckets, Mapper: func(fd int, dom uint16) (FrameMapper, error) {
		x.mu.Lock()
		x.mappers++
		x.mu.Unlock()
		return &fakeMapper{x: x, fd: fd}, nil
	}}
}

func (x *fakeXen) liveMappings() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.live)
}

type fakeMapper struct {
	x  *fakeXen
	fd int // the "privcmd" fd handed in: closed by Close
}

func (f *fakeMapper) MapFrames(gfns []uint64, errs []int32) ([]byte, error) {
	x := f.x
	x.mu.Lock()
	fail := x.failNext
	x.failNext = nil
	x.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	n := len(gfns)
	mem, err := unix.Mmap(-1, 0, n*PageSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	for i, g := range gfns {
		if x.refused[g] || (g+1)*PageSize > x.size {
			errs[i] = -int32(unix.EINVAL)
			continue
		}
		errs[i] = 0
		if _, err := unix.MmapPtr(x.ram, int64(g*PageSize), unsafe.Pointer(&mem[i*PageSize]), PageSize,
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
			unix.Munmap(mem)
			return nil, err
		}
	}
	x.mu.Lock()
	x.live[uintptr(unsafe.Pointer(&mem[0]))] = len(mem)
	x.maps++
	x.maxLive = max(x.maxLive, len(x.live))
	x.mu.Unlock()
	return mem, nil
}

func (f *fakeMapper) Unmap(mem []byte) error {
	x := f.x
	x.mu.Lock()
	p := uintptr(unsafe.Pointer(&mem[0]))
	if x.live[p] != len(mem) {
		x.mu.Unlock()
		x.t.Errorf("unmap of %#x+%d, which is not a live mapping", p, len(mem))
		return unix.EINVAL
	}
	delete(x.live, p)
	x.mu.Unlock()
	return unix.Munmap(mem)
}

func (f *fakeMapper) Close() error {
	f.x.mu.Lock()
	f.x.closed++
	f.x.mu.Unlock()
	return unix.Close(f.fd)
}

// privcmdFD stands for the restricted privcmd fd (any fd: the fake's
// mapper ignores it but closes it).
func privcmdFD(t tb) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func foreignMap(t tb, x *fakeXen, cfg ForeignConfig, windows ...[2]uint64) *Map {
	t.Helper()
	m := &Map{Foreign: cfg}
	fd := privcmdFD(t)
	var regions []Region
	for _, w := range windows {
		regions = append(regions, Region{GPA: w[0], Size: w[1], FD: fd, Foreign: true, Domain: 7})
	}
	if err := m.Update(regions); err != nil {
		t.Fatalf("Update(foreign): %v", err)
	}
	return m
}

func TestForeignReadWrite(t *testing.T) {
	x := newFakeXen(t, 4<<20)
	for i := range x.local {
		x.local[i] = byte(i * 13)
	}
	x.refused[0x205] = true // a frame Xen refuses, in the middle of a window
	m := foreignMap(t, x, x.config(64<<10, 4), [2]uint64{0, 0xa0000}, [2]uint64{0x100000, 0x300000})
	defer m.Close()

	p := make([]byte, 0x30000) // spans several buckets
	if err := m.ReadAt(p, 0x110800); err != nil || !bytes.Equal(p, x.local[0x110800:0x140800]) {
		t.Fatalf("ReadAt across buckets = %v, equal %v", err, bytes.Equal(p, x.local[0x110800:0x140800]))
	}
	for i := range p {
		p[i] = byte(i)
	}
	if err := m.WriteAt(p[:0x2000], 0x9f000); err == nil {
		t.Error("WriteAt into the hole after low RAM succeeded")
	}
	if err := m.WriteAt(p, 0x1ff000); err != nil || !bytes.Equal(p, x.local[0x1ff000:0x22f000]) {
		// 0x205 is inside: refused.
		if !errors.Is(err, ErrRefused) || abi.StatusOf(err) != abi.StatusBadAddress {
			t.Fatalf("WriteAt over a refused frame = %v, want ErrRefused with bad address", err)
		}
	} else {
		t.Fatal("WriteAt over a refused frame succeeded")
	}
	if bytes.Equal(p[:0x1000], x.local[0x1ff000:0x200000]) {
		t.Error("a failed WriteAt wrote its first page")
	}
	if err := m.WriteAt(p, 0x1c0000); err != nil || !bytes.Equal(p, x.local[0x1c0000:0x1f0000]) {
		t.Fatalf("WriteAt = %v", err)
	}
	if err := m.Store64(0x1c0008, 0x1122334455667788); err != nil {
		t.Fatalf("Store64: %v", err)
	}
	if got := binary.LittleEndian.Uint64(x.local[0x1c0008:]); got != 0x1122334455667788 {
		t.Errorf("Store64 wrote %#x", got)
	}
	if err := m.Store64(0x205000, 1); !errors.Is(err, ErrRefused) {
		t.Errorf("Store64 on a refused frame = %v, want ErrRefused", err)
	}
	if err := m.Store64(0x1c0004, 1); abi.StatusOf(err) != abi.StatusBadAddress {
		t.Errorf("unaligned Store64 = %v", err)
	}
	if err := m.ReadAt(make([]byte, 8), 0x400000); abi.StatusOf(err) != abi.StatusBadAddress {
		t.Errorf("ReadAt past the window = %v", err)
	}
	if got := m.Regions(); len(got) != 2 || got[1] != [2]uint64{0x100000, 0x300000} {
		t.Errorf("Regions() = %v", got)
	}
	if n := x.liveMappings(); n > 4 {
		t.Errorf("%d buckets mapped, at most 4", n)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if n := x.liveMappings(); n != 0 || x.closed != 1 {
		t.Errorf("after Close: %d mappings, %d mappers closed; want 0, 1", n, x.closed)
	}
	if err := m.ReadAt(p[:1], 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close = %v, want ErrClosed", err)
	}
}

// TestForeignRefusedAgain: a frame refused (paged out) when its bucket
// was mapped is asked for again on the next access that needs it.
func TestForeignRefusedAgain(t *testing.T) {
	x := newFakeXen(t, 1<<20)
	x.refused[3] = true
	m := foreignMap(t, x, x.config(64<<10, 2), [2]uint64{0, 1 << 20})
	defer m.Close()
	if err := m.ReadAt(make([]byte, 8), 3*PageSize); !errors.Is(err, ErrRefused) {
		t.Fatalf("ReadAt of a refused frame = %v", err)
	}
	if err := m.ReadAt(make([]byte, 8), 0); err != nil {
		t.Fatalf("ReadAt of a good frame of that bucket = %v", err)
	}
	delete(x.refused, 3)
	if err := m.ReadAt(make([]byte, 8), 3*PageSize); err != nil {
		t.Fatalf("ReadAt once the frame is back = %v", err)
	}
	x.failNext = unix.ESRCH
	if err := m.ReadAt(make([]byte, 8), 0x80000); !errors.Is(err, ErrRefused) || !errors.Is(err, unix.ESRCH) {
		t.Errorf("ReadAt with the batch failing = %v, want ErrRefused wrapping ESRCH", err)
	}
}

func TestForeignUpdateRejects(t *testing.T) {
	x := newFakeXen(t, 1<<20)
	file, _ := memfd(t, 8192)
	defer unix.Close(file)
	tests := []struct {
		name    string
		regions func(fd int) []Region
	}{
		{"mixed with a file", func(fd int) []Region {
			return []Region{{GPA: 0, Size: 4096, FD: fd, Foreign: true}, {GPA: 8192, Size: 4096, FD: dup(t, file)}}
		}},
		{"two domains", func(fd int) []Region {
			return []Region{{GPA: 0, Size: 4096, FD: fd, Foreign: true, Domain: 1}, {GPA: 8192, Size: 4096, FD: fd, Foreign: true, Domain: 2}}
		}},
		{"offset", func(fd int) []Region { return []Region{{GPA: 0, Size: 4096, Offset: 4096, FD: fd, Foreign: true}} }},
		{"unaligned", func(fd int) []Region { return []Region{{GPA: 0x800, Size: 4096, FD: fd, Foreign: true}} }},
		{"empty", func(fd int) []Region { return []Region{{GPA: 0, FD: fd, Foreign: true}} }},
		{"wraps", func(fd int) []Region { return []Region{{GPA: 1 << 63, Size: 1 << 63, FD: fd, Foreign: true}} }},
		{"overlap", func(fd int) []Region {
			return []Region{{GPA: 0, Size: 8192, FD: fd, Foreign: true}, {GPA: 4096, Size: 4096, FD: fd, Foreign: true}}
		}},
		{"bad fd", func(fd int) []Region {
			return []Region{{GPA: 0, Size: 4096, FD: fd, Foreign: true}, {GPA: 8192, Size: 4096, FD: -1, Foreign: true}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := foreignMap(t, x, x.config(0, 0), [2]uint64{0, 1 << 20})
			defer m.Close()
			fd := privcmdFD(t)
			regions := tt.regions(fd)
			if err := Check(regions); !errors.Is(err, ErrForeignLayout) {
				t.Errorf("Check = %v, want ErrForeignLayout", err)
			}
			if err := m.Update(regions); !errors.Is(err, ErrForeignLayout) {
				t.Errorf("Update = %v, want ErrForeignLayout", err)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				t.Error("Update kept a refused region's fd open")
			}
			if err := m.ReadAt(make([]byte, 8), 0x80000); err != nil {
				t.Errorf("the previous map is gone after a refused Update: %v", err)
			}
		})
	}
	// The real mapper refuses an fd that is not a device.
	m := &Map{}
	if err := m.Update([]Region{{GPA: 0, Size: 4096, FD: privcmdFD(t), Foreign: true}}); !errors.Is(err, errNotPrivcmd) {
		t.Errorf("Update with an eventfd for privcmd = %v, want errNotPrivcmd", err)
	}
	m.Close()
}

// TestForeignSwap: Update between foreign and file maps, both ways; the
// old mappings go.
func TestForeignSwap(t *testing.T) {
	x := newFakeXen(t, 1<<20)
	m := foreignMap(t, x, x.config(0, 0), [2]uint64{0, 1 << 20})
	defer m.Close()
	if err := m.WriteAt([]byte("xen"), 0x1000); err != nil {
		t.Fatal(err)
	}
	fd, local := memfd(t, 1<<20)
	if err := m.Update([]Region{{GPA: 0, Size: 1 << 20, FD: fd}}); err != nil {
		t.Fatal(err)
	}
	if n := x.liveMappings(); n != 0 || x.closed != 1 {
		t.Errorf("after swapping to a file: %d foreign mappings, %d mappers closed", n, x.closed)
	}
	if err := m.WriteAt([]byte("qemu"), 0x1000); err != nil || string(local[0x1000:0x1004]) != "qemu" {
		t.Fatalf("WriteAt into the file map = %v", err)
	}
	if err := m.Update([]Region{{GPA: 0, Size: 1 << 20, FD: privcmdFD(t), Foreign: true}}); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 3)
	if err := m.ReadAt(p, 0x1000); err != nil || string(p) != "xen" {
		t.Errorf("ReadAt after swapping back = %q, %v", p, err)
	}
}

// TestForeignConcurrent: readers, writers and Store64 on their own
// words while the cache (one bucket) evicts under them and Updates swap
// the map; no access sees a mapping go (that would fault: ErrFault).
func TestForeignConcurrent(t *testing.T) {
	x := newFakeXen(t, 1<<20)
	m := foreignMap(t, x, x.config(16<<10, 1), [2]uint64{0, 1 << 20})
	defer m.Close()
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 40<<10)
			got := make([]byte, len(buf))
			base := uint64(w) * (200 << 10)
			for i := range 200 {
				for j := range buf {
					buf[j] = byte(i + j + w)
				}
				if err := m.WriteAt(buf, base+uint64(i%7)*PageSize); err != nil {
					errs <- err
					return
				}
				if err := m.ReadAt(got, base+uint64(i%7)*PageSize); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(buf, got) {
					errs <- errors.New("read back other bytes")
					return
				}
				if err := m.Store64(base+8*uint64(i), uint64(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 20 {
		if err := m.Update([]Region{{GPA: 0, Size: 1 << 20, FD: privcmdFD(t), Foreign: true}}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if perAccess := 40/16 + 2; x.maxLive > 2+workers*perAccess {
		// One per cache (at most two caches overlap across an Update's
		// swap) plus the buckets pinned by each access in progress.
		t.Errorf("%d mappings at once", x.maxLive)
	}
}

// TestForeignModel: random reads, writes and Store64 across bucket and
// window boundaries, with refused frames and a cache smaller than the
// accesses, against a flat byte slice.
func TestForeignModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		const ramSize = 1 << 20
		const bucket = 16 << 10
		x := makeFakeXen(rt, ramSize)
		defer x.free()
		windows := [][2]uint64{{0, 0x40000}, {0x40000, 0x20000}, {0x80000, 0x78000}} // two adjacent; the last short of RAM
		inWindow := func(g uint64) bool {
			for _, w := range windows {
				if g >= w[0] && g < w[0]+w[1] {
					return true
				}
			}
			return false
		}
		for _, f := range rapid.SliceOfN(rapid.Uint64Range(0, ramSize/PageSize-1), 0, 12).Draw(rt, "refused") {
			x.refused[f] = true
		}
		buckets := rapid.IntRange(1, 4).Draw(rt, "buckets")
		model := make([]byte, ramSize)
		for i := range model {
			model[i] = byte(i * 31)
		}
		copy(x.local, model)
		m := foreignMap(rt, x, x.config(bucket, buckets), windows...)
		defer m.Close()
		ok := func(gpa, n uint64) bool {
			for g := gpa; g < gpa+n; g++ {
				if !inWindow(g) || x.refused[g/PageSize] {
					return false
				}
			}
			return true
		}
		gpaGen := rapid.Uint64Range(0, ramSize+0x2000)
		for range rapid.IntRange(1, 40).Draw(rt, "ops") {
			gpa := gpaGen.Draw(rt, "gpa")
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				n := rapid.Uint64Range(0, 5*bucket).Draw(rt, "n")
				p := make([]byte, n)
				err := m.ReadAt(p, gpa)
				if want := ok(gpa, n); want != (err == nil) {
					rt.Fatalf("ReadAt(%#x+%#x) = %v, want ok=%v", gpa, n, err, want)
				}
				if err == nil && n > 0 && !bytes.Equal(p, model[gpa:gpa+n]) {
					rt.Fatalf("ReadAt(%#x+%#x) read other bytes", gpa, n)
				}
				if err != nil && abi.StatusOf(err) != abi.StatusBadAddress {
					rt.Fatalf("ReadAt error %v is not a bad address", err)
				}
			case 1:
				n := rapid.Uint64Range(0, 5*bucket).Draw(rt, "n")
				p := make([]byte, n)
				for i := range p {
					p[i] = byte(gpa) ^ byte(i)
				}
				err := m.WriteAt(p, gpa)
				if want := ok(gpa, n); want != (err == nil) {
					rt.Fatalf("WriteAt(%#x+%#x) = %v, want ok=%v", gpa, n, err, want)
				}
				if err == nil && n > 0 {
					copy(model[gpa:], p)
				}
			case 2:
				gpa &^= 7
				v := rapid.Uint64().Draw(rt, "v")
				err := m.Store64(gpa, v)
				if want := gpa+8 <= ramSize && ok(gpa, 8); want != (err == nil) {
					rt.Fatalf("Store64(%#x) = %v, want ok=%v", gpa, err, want)
				}
				if err == nil {
					binary.LittleEndian.PutUint64(model[gpa:], v)
				}
			}
			if n := x.liveMappings(); n > buckets {
				rt.Fatalf("%d buckets mapped between accesses, at most %d", n, buckets)
			}
		}
		if !bytes.Equal(model, x.local) {
			rt.Fatalf("guest RAM differs from the model")
		}
	})
}

package guestmem

import (
	"bytes"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
)

var _ aggregator.GuestMemory = (*Map)(nil)

// memfd returns a memfd of size bytes filled with pattern(i) and a local
// mapping of it for checking.
func memfd(t *testing.T, size int) (fd int, local []byte) {
	t.Helper()
	fd, err := NewSealed("guestmem-test", int64(size))
	if err != nil {
		t.Fatal(err)
	}
	local, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("Mmap: %v", err)
	}
	t.Cleanup(func() { unix.Munmap(local) })
	for i := range local {
		local[i] = byte(i * 7)
	}
	return fd, local
}

func dup(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.Dup(fd)
	if err != nil {
		t.Fatalf("Dup: %v", err)
	}
	return d
}

// pcLayout maps a 2 MiB file like QEMU's pc machine: [0, 0xa0000) and
// [0x100000, 2 MiB) from the same fd at matching offsets, with a hole.
func pcLayout(t *testing.T) (*Map, []byte) {
	t.Helper()
	fd, local := memfd(t, 2<<20)
	m := &Map{}
	t.Cleanup(func() { m.Close() })
	err := m.Update([]Region{
		{GPA: 0x100000, Size: 0x100000, Offset: 0x100000, FD: fd},
		{GPA: 0, Size: 0xa0000, Offset: 0, FD: dup(t, fd)},
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	return m, local
}

func isBadAddress(err error) bool {
	return abi.StatusOf(err) == abi.StatusBadAddress
}

func TestReadWriteBounds(t *testing.T) {
	m, local := pcLayout(t)
	tests := []struct {
		name string
		gpa  uint64
		n    int
		ok   bool
	}{
		{"start", 0, 16, true},
		{"end of low", 0xa0000 - 8, 8, true},
		{"into hole", 0xa0000 - 8, 9, false},
		{"hole", 0xb0000, 1, false},
		{"start of high", 0x100000, 4096, true},
		{"end of RAM", 0x200000 - 1, 1, true},
		{"past RAM", 0x200000, 1, false},
		{"straddles end", 0x200000 - 4, 8, false},
		{"empty anywhere", math.MaxUint64, 0, true},
		{"wraps", math.MaxUint64 - 3, 8, false},
		{"top byte", math.MaxUint64, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := make([]byte, tt.n)
			err := m.ReadAt(p, tt.gpa)
			if tt.ok != (err == nil) || (err != nil && !isBadAddress(err)) {
				t.Fatalf("ReadAt(%d bytes, %#x) = %v, want ok=%v or bad address", tt.n, tt.gpa, err, tt.ok)
			}
			if tt.ok && tt.n > 0 && !bytes.Equal(p, local[tt.gpa:tt.gpa+uint64(tt.n)]) {
				t.Errorf("ReadAt(%d bytes, %#x) returned wrong bytes", tt.n, tt.gpa)
			}
			for i := range p {
				p[i] = 0xee
			}
			err = m.WriteAt(p, tt.gpa)
			if tt.ok != (err == nil) || (err != nil && !isBadAddress(err)) {
				t.Fatalf("WriteAt(%d bytes, %#x) = %v, want ok=%v or bad address", tt.n, tt.gpa, err, tt.ok)
			}
			if tt.ok && tt.n > 0 && !bytes.Equal(p, local[tt.gpa:tt.gpa+uint64(tt.n)]) {
				t.Errorf("WriteAt(%d bytes, %#x) did not reach the file", tt.n, tt.gpa)
			}
		})
	}
	// A failed write changes nothing.
	before := append([]byte(nil), local[0x9fff8:0xa0000]...)
	if err := m.WriteAt(make([]byte, 16), 0x9fff8); err == nil {
		t.Fatal("WriteAt into the hole succeeded")
	}
	if !bytes.Equal(before, local[0x9fff8:0xa0000]) {
		t.Error("failed WriteAt changed guest memory")
	}
}

func TestSpanAdjacentRegions(t *testing.T) {
	fdA, localA := memfd(t, 8192)
	fdB, localB := memfd(t, 8192)
	m := &Map{}
	t.Cleanup(func() { m.Close() })
	// GPA 0x10000-0x11000 from A's second page, 0x11000-0x13000 from B.
	if err := m.Update([]Region{{GPA: 0x10000, Size: 4096, Offset: 4096, FD: fdA}, {GPA: 0x11000, Size: 8192, FD: fdB}}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	p := make([]byte, 8192)
	for i := range p {
		p[i] = byte(i)
	}
	if err := m.WriteAt(p, 0x10800); err != nil {
		t.Fatalf("WriteAt spanning: %v", err)
	}
	want := append(append([]byte(nil), localA[4096+0x800:]...), localB[:8192-0x800]...)
	if !bytes.Equal(p, want) {
		t.Error("WriteAt spanning two regions landed in the wrong place")
	}
	q := make([]byte, 8192)
	if err := m.ReadAt(q, 0x10800); err != nil || !bytes.Equal(p, q) {
		t.Errorf("ReadAt spanning = %v, equal=%v, want nil, true", err, bytes.Equal(p, q))
	}
	if diff := cmp.Diff([][2]uint64{{0x10000, 4096}, {0x11000, 8192}}, m.Regions()); diff != "" {
		t.Errorf("Regions() (-want +got):\n%s", diff)
	}
}

func TestStore64(t *testing.T) {
	m, local := pcLayout(t)
	if err := m.Store64(0x100008, 0x1122334455667788); err != nil {
		t.Fatalf("Store64: %v", err)
	}
	if got, want := local[0x100008:0x100010], []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11}; !bytes.Equal(got, want) {
		t.Errorf("bytes after Store64 = %x, want %x", got, want)
	}
	for _, gpa := range []uint64{0x100004, 0xa0000, 0x200000, math.MaxUint64 - 7} {
		if err := m.Store64(gpa, 1); !isBadAddress(err) {
			t.Errorf("Store64(%#x) = %v, want bad address", gpa, err)
		}
	}
}

func TestUpdateRejects(t *testing.T) {
	tests := []struct {
		name    string
		regions func(fd int) []Region
	}{
		{"past end of file", func(fd int) []Region { return []Region{{GPA: 0, Size: 8192, Offset: 4096, FD: fd}} }},
		{"overlap", func(fd int) []Region {
			return []Region{{GPA: 0, Size: 8192, FD: fd}, {GPA: 4096, Size: 4096, FD: fd}}
		}},
		{"gpa wraps", func(fd int) []Region { return []Region{{GPA: math.MaxUint64 - 10, Size: 4096, FD: fd}} }},
		{"offset wraps", func(fd int) []Region { return []Region{{GPA: 0, Size: 4096, Offset: math.MaxUint64 - 10, FD: fd}} }},
		{"empty", func(fd int) []Region { return []Region{{GPA: 0, Size: 0, FD: fd}} }},
		{"bad fd", func(fd int) []Region { return []Region{{GPA: 0, Size: 4096, FD: fd}, {GPA: 4096, Size: 1, FD: -1}} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, local := pcLayout(t)
			fd, _ := memfd(t, 8192)
			if err := m.Update(tt.regions(fd)); err == nil {
				t.Fatal("Update succeeded, want error")
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
				t.Errorf("fd still open after failed Update: %v", err)
			}
			p := make([]byte, 4)
			if err := m.ReadAt(p, 0x100000); err != nil || !bytes.Equal(p, local[0x100000:0x100004]) {
				t.Errorf("old map after failed Update: ReadAt = %v", err)
			}
		})
	}
}

func TestRemapWhileReading(t *testing.T) {
	const size = 64 << 10
	fdA, localA := memfd(t, size)
	fdB, localB := memfd(t, size)
	for i := range localA {
		localA[i], localB[i] = 0xaa, 0xbb
	}
	m := &Map{}
	t.Cleanup(func() { m.Close() })
	if err := m.Update([]Region{{GPA: 0, Size: size, FD: dup(t, fdA)}}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			p := make([]byte, size)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := m.ReadAt(p, 0); err != nil {
					errs <- err
					return
				}
				if p[0] != p[size-1] || (p[0] != 0xaa && p[0] != 0xbb) {
					errs <- errors.New("torn or foreign read")
					return
				}
			}
		})
	}
	for i := range 200 {
		fd := fdA
		if i%2 == 1 {
			fd = fdB
		}
		if err := m.Update([]Region{{GPA: 0, Size: size, FD: dup(t, fd)}}); err != nil {
			t.Fatalf("Update %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("reader: %v", err)
	}
	unix.Close(fdA)
	unix.Close(fdB)
}

func TestClose(t *testing.T) {
	m, _ := pcLayout(t)
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	p := make([]byte, 8)
	if err := m.ReadAt(p, 0); !errors.Is(err, ErrClosed) || !isBadAddress(err) {
		t.Errorf("ReadAt after Close = %v, want ErrClosed", err)
	}
	if err := m.WriteAt(p, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteAt after Close = %v, want ErrClosed", err)
	}
	if err := m.Store64(0, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Store64 after Close = %v, want ErrClosed", err)
	}
	fd, _ := memfd(t, 4096)
	if err := m.Update([]Region{{GPA: 0, Size: 4096, FD: fd}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close = %v, want ErrClosed", err)
	}
}

func TestZeroMapRejects(t *testing.T) {
	var m Map
	if err := m.ReadAt(make([]byte, 1), 0); !isBadAddress(err) {
		t.Errorf("ReadAt on empty Map = %v, want bad address", err)
	}
}

// FuzzAccessBounds checks random (gpa, len) accesses against a reference
// bounds computation on the pc layout.
func FuzzAccessBounds(f *testing.F) {
	f.Add(uint64(0), uint32(16))
	f.Add(uint64(0x9fff0), uint32(0x60020))
	f.Add(uint64(math.MaxUint64-2), uint32(5))
	f.Add(uint64(0x1ffff8), uint32(8))
	fd, err := NewSealed("fuzz", 2<<20)
	if err != nil {
		f.Fatal(err)
	}
	d, _ := unix.Dup(fd)
	m := &Map{}
	f.Cleanup(func() { m.Close() })
	if err := m.Update([]Region{{GPA: 0, Size: 0xa0000, FD: fd}, {GPA: 0x100000, Size: 0x100000, Offset: 0x100000, FD: d}}); err != nil {
		f.Fatal(err)
	}
	inside := func(gpa, n uint64) bool {
		if n == 0 {
			return true
		}
		end := gpa + n
		if end < gpa {
			return false
		}
		return end <= 0xa0000 || (gpa >= 0x100000 && end <= 0x200000)
	}
	f.Fuzz(func(t *testing.T, gpa uint64, n uint32) {
		n %= 1 << 21
		p := make([]byte, n)
		err := m.ReadAt(p, gpa)
		if want := inside(gpa, uint64(n)); want != (err == nil) {
			t.Fatalf("ReadAt(%d bytes, %#x) = %v, want ok=%v", n, gpa, err, want)
		}
		if err != nil && !isBadAddress(err) {
			t.Fatalf("ReadAt(%d bytes, %#x) = %v, want bad address", n, gpa, err)
		}
		err = m.Store64(gpa, 1)
		if want := gpa%8 == 0 && inside(gpa, 8); want != (err == nil) {
			t.Fatalf("Store64(%#x) = %v, want ok=%v", gpa, err, want)
		}
	})
}

// TestUnsealedRefused: an fd that could shrink under the mapping is
// refused, with the reason, and nothing is mapped; Check says the same
// without mapping.
func TestUnsealedRefused(t *testing.T) {
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := Check([]Region{{GPA: 0, Size: 1 << 20, FD: fd}}); !errors.Is(err, ErrNotSealed) {
		t.Errorf("Check(unsealed) = %v, want ErrNotSealed", err)
	}
	m := &Map{}
	defer m.Close()
	if err := m.Update([]Region{{GPA: 0, Size: 1 << 20, FD: fd}}); !errors.Is(err, ErrNotSealed) {
		t.Errorf("Update(unsealed) = %v, want ErrNotSealed", err)
	}
	if len(m.Regions()) != 0 {
		t.Errorf("an unsealed fd was mapped: %v", m.Regions())
	}
	sealed, _ := memfd(t, 1<<20)
	if err := Check([]Region{{GPA: 0, Size: 2 << 20, FD: sealed}}); err == nil {
		t.Errorf("Check(region beyond its file) = nil error")
	}
	unix.Close(sealed)
}

// TestShrunkFileFaults: should a mapped file shrink after all (the seal
// check bypassed), accesses to the lost pages fail with a guest-visible
// status; nothing crashes.
func TestShrunkFileFaults(t *testing.T) {
	fd, err := unix.MemfdCreate("shrinks", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	keep, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(keep)
	m := &Map{}
	defer m.Close()
	if err := m.update([]Region{{GPA: 0, Size: 1 << 20, FD: fd}}, false); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteAt([]byte("before"), 0x80000); err != nil {
		t.Fatalf("WriteAt before the shrink: %v", err)
	}
	if err := unix.Ftruncate(keep, 4096); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	for name, err := range map[string]error{
		"ReadAt":  m.ReadAt(buf, 0x80000),
		"WriteAt": m.WriteAt(buf, 0x80000),
		"Store64": m.Store64(0x80000, 1),
	} {
		if !errors.Is(err, ErrFault) || abi.StatusOf(err) != abi.StatusBadAddress {
			t.Errorf("%s on a lost page = %v, want ErrFault with %v", name, err, abi.StatusBadAddress)
		}
	}
	if err := m.ReadAt(buf, 0); err != nil {
		t.Errorf("ReadAt of the page that stayed = %v", err)
	}
}

// TestViewLendsOneSealedRegion: View lends the mapping of a range inside
// one region of sealed file-backed RAM (the very bytes: a write through it
// is guest RAM), and nothing else: a range across two regions, outside
// guest RAM, empty or wrapping, or in RAM whose files were not checked
// sealed, is refused without calling f, so that the caller copies (and
// a fault in C code can never come from a view).
func TestViewLendsOneSealedRegion(t *testing.T) {
	fdA, localA := memfd(t, 8192)
	fdB, _ := memfd(t, 8192)
	m := &Map{}
	t.Cleanup(func() { m.Close() })
	if err := m.Update([]Region{{GPA: 0x10000, Size: 8192, FD: fdA}, {GPA: 0x12000, Size: 8192, FD: fdB}}); err != nil {
		t.Fatal(err)
	}
	ok, err := m.View(0x10100, 4096, true, func(b []byte) error {
		if len(b) != 4096 || cap(b) != 4096 || !bytes.Equal(b, localA[0x100:0x1100]) {
			t.Errorf("lent %d bytes (cap %d), not the region's", len(b), cap(b))
		}
		b[0] ^= 0xff
		return nil
	})
	if !ok || err != nil {
		t.Fatalf("View inside a region = %v, %v, want true, nil", ok, err)
	}
	if want := byte(0x100 * 7 & 0xff); localA[0x100] != ^want {
		t.Error("a write through the view did not reach guest RAM")
	}
	for _, r := range []struct {
		name   string
		gpa, n uint64
	}{
		{"across two regions", 0x11f00, 0x200},
		{"outside guest RAM", 0x20000, 16},
		{"empty", 0x10000, 0},
		{"wrapping", ^uint64(0) - 4, 16},
	} {
		if ok, err := m.View(r.gpa, r.n, false, func([]byte) error { t.Errorf("%s: f called", r.name); return nil }); ok || err != nil {
			t.Errorf("%s: View = %v, %v, want false, nil", r.name, ok, err)
		}
	}
	unsealed := &Map{}
	t.Cleanup(func() { unsealed.Close() })
	fd, _ := memfd(t, 8192)
	if err := unsealed.update([]Region{{GPA: 0, Size: 8192, FD: fd}}, false); err != nil {
		t.Fatal(err)
	}
	if ok, _ := unsealed.View(0, 16, false, func([]byte) error { return nil }); ok {
		t.Error("View lent RAM whose files were not checked sealed")
	}
}

package remote

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
)

// countingConn counts the bytes a client sends and receives.
type countingConn struct {
	io.ReadWriteCloser
	sent, received atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	c.received.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Write(p)
	c.sent.Add(int64(n))
	return n, err
}

func (c *countingConn) total() int64 { return c.sent.Load() + c.received.Load() }

// arenaFile returns a memory file of size bytes, as the main process
// makes for a worker and its executor, closed at the test's end.
func arenaFile(t testing.TB, size int64) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("vgpud-test-arena", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "arena")
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return f
}

// servedArena is served with an arena of size bytes that the client and
// the server each map, as a worker and its executor do; serverArena
// false serves without one (an executor that cannot use it).
func servedArena(t testing.TB, dev gpu.Device, size int64, serverArena bool) (*Device, *countingConn) {
	t.Helper()
	f := arenaFile(t, size)
	var theirs []byte
	if serverArena {
		var err error
		if theirs, err = MapArena(f); err != nil {
			t.Fatal(err)
		}
	}
	mine, err := MapArena(f)
	if err != nil {
		t.Fatal(err)
	}
	a, b := socketPair(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ServeArena(b, dev, theirs); err != nil {
			t.Errorf("ServeArena: %v", err)
		}
	}()
	t.Cleanup(func() {
		wg.Wait()
		if theirs != nil {
			unix.Munmap(theirs)
		}
	})
	cc := &countingConn{ReadWriteCloser: a}
	d, err := NewDevice(cc)
	if err != nil {
		t.Fatal(err)
	}
	d.SetArena(mine)
	return d, cc
}

// fakeArenaQueue is a queue of the host-backed fake served with a 1 MiB
// arena (serverArena false: an executor without one), closed at the
// test's end.
func fakeArenaQueue(t *testing.T, serverArena bool) *Queue {
	t.Helper()
	d, _ := servedArena(t, gputest.New(gputest.Config{HostBacked: true}), 1<<20, serverArena)
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		q.Close()
		d.Close()
	})
	return q.(*Queue)
}

// devices are the fake (host-backed) and, where there is one, the real
// CPU device an executor serves.
func arenaDevices(t *testing.T, f func(t *testing.T, dev gpu.Device)) {
	t.Run("fake", func(t *testing.T) { f(t, gputest.New(gputest.Config{HostBacked: true})) })
	t.Run("opencl", func(t *testing.T) {
		dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
		if err != nil {
			t.Fatalf("no OpenCL device: %v", err)
		}
		if !dev.Info().CPU {
			dev.Close()
			t.Skip("a GPU's buffers are not host-backed")
		}
		f(t, dev)
	})
}

// TestArenaKeepsBytesOffTheSocket: with an arena, a buffer of a page or
// more lives on memory both ends map: a 1 MiB write and read are memory
// copies that put none of their bytes on the executor's socket, a kernel
// in the executor computes on them in place, a released range is reused
// cleared, and a buffer under a page still goes to the executor's own
// memory, over the socket.
func TestArenaKeepsBytesOffTheSocket(t *testing.T) {
	arenaDevices(t, func(t *testing.T, dev gpu.Device) {
		const size = 1 << 20
		d, cc := servedArena(t, dev, 8<<20, true)
		defer d.Close()
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		bufs := make([]gpu.Buffer, 3)
		for i := range bufs {
			if bufs[i], err = q.Alloc(size); err != nil {
				t.Fatalf("Alloc = %v", err)
			}
			if !bufs[i].(*Buffer).arena {
				t.Fatalf("a %d-byte buffer is not in the arena", size)
			}
		}
		n := size / 4
		vals := make([]int32, n)
		for i := range vals {
			vals[i] = int32(i)
		}
		in, got := ints(vals...), make([]byte, size)
		before := cc.total()
		for _, b := range bufs[:2] {
			if err := q.Write(b, 0, in); err != nil {
				t.Fatalf("Write = %v", err)
			}
		}
		if err := q.Read(bufs[0], 0, got); err != nil || !bytes.Equal(got, in) {
			t.Fatalf("Read after Write = %v, equal %v", err, bytes.Equal(got, in))
		}
		if moved := cc.total() - before; moved != 0 {
			t.Errorf("two 1 MiB writes and a 1 MiB read of arena buffers put %d bytes on the socket, want 0", moved)
		}
		prog, _, err := q.Build(vadd, "")
		if err != nil {
			t.Fatal(err)
		}
		defer prog.Release()
		k, err := prog.Kernel("vadd")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release()
		if _, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{uint64(n)}}, []gpu.Arg{{Buffer: bufs[0]}, {Buffer: bufs[1]}, {Buffer: bufs[2]}}); err != nil {
			t.Fatalf("Launch = %v", err)
		}
		if err := q.Read(bufs[2], 0, got); err != nil {
			t.Fatal(err)
		}
		for i := range vals {
			vals[i] *= 2
		}
		if _, fake := dev.(*gputest.Device); !fake && !bytes.Equal(got, ints(vals...)) {
			t.Fatal("the kernel's result in the arena is wrong")
		}
		// Host lends the same bytes.
		ok, err := bufs[2].(gpu.HostBuffer).Host(4, 4, func(p []byte) error {
			if !bytes.Equal(p, got[4:8]) {
				return errors.New("Host shows other bytes than Read")
			}
			return nil
		})
		if !ok || err != nil {
			t.Fatalf("Host = %v, %v", ok, err)
		}
		// A released range comes back, cleared, once the executor's
		// runtime let go of it.
		free, _ := d.ArenaStats()
		bufs[2].Release()
		if after, kept := d.ArenaStats(); after != free+size || kept != 0 {
			t.Fatalf("after a release the arena has %d free, %d kept; want %d, 0", after, kept, free+size)
		}
		again, err := q.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		if again.(*Buffer).ext != bufs[2].(*Buffer).ext {
			t.Logf("the range was not reused (%v, then %v)", bufs[2].(*Buffer).ext, again.(*Buffer).ext)
		}
		if err := q.Read(again, 0, got); err != nil || !bytes.Equal(got, make([]byte, size)) {
			t.Fatalf("a new buffer on a reused range is not zero (%v)", err)
		}
		small, err := q.Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		if small.(*Buffer).arena {
			t.Error("a 64-byte buffer went to the arena")
		}
		before = cc.total()
		if err := q.Write(small, 0, in[:64]); err != nil {
			t.Fatal(err)
		}
		if cc.total()-before < 64 {
			t.Error("a write of a buffer outside the arena did not cross the socket")
		}
	})
}

// TestArenaRefusedFallsBack: an executor that serves no arena refuses
// OpAllocAt; the client then places every buffer in the executor's own
// memory, and everything still works.
func TestArenaRefusedFallsBack(t *testing.T) {
	q := fakeArenaQueue(t, false)
	for range 2 {
		b, err := q.Alloc(64 << 10)
		if err != nil {
			t.Fatalf("Alloc = %v", err)
		}
		if b.(*Buffer).arena {
			t.Fatal("a buffer is in an arena the executor refused")
		}
		p, got := bytes.Repeat([]byte{9}, 64<<10), make([]byte, 64<<10)
		if err := q.Write(b, 0, p); err != nil {
			t.Fatal(err)
		}
		if err := q.Read(b, 0, got); err != nil || !bytes.Equal(got, p) {
			t.Fatalf("Read = %v", err)
		}
	}
}

// TestAllocAtChecksTheRange: the executor makes an arena buffer only on
// whole arena memory at a page boundary: anything else is refused, and
// serving goes on.
func TestAllocAtChecksTheRange(t *testing.T) {
	q := fakeArenaQueue(t, true)
	for _, c := range []struct{ off, size uint64 }{
		{0, 0},
		{1, 4096},
		{1 << 20, 4096},
		{0, 1<<20 + 1},
		{4096, ^uint64(0) - 100},
		{^uint64(0) &^ 4095, 8192},
	} {
		e := q.body()
		e.U64(c.off)
		e.U64(c.size)
		if _, err := q.call(OpAllocAt, e); !errors.Is(err, gpu.ErrOutOfRange) {
			t.Errorf("alloc at %d, %d bytes = %v, want ErrOutOfRange", c.off, c.size, err)
		}
	}
	if _, err := q.Alloc(4096); err != nil {
		t.Fatalf("Alloc after refused ones = %v", err)
	}
}

// TestHostWaitsForBatchedLaunches: an arena buffer's bytes are not lent
// while launches are batched for the next Sync (they would run after the
// caller's bytes, out of order).
func TestHostWaitsForBatchedLaunches(t *testing.T) {
	gq := fakeArenaQueue(t, true)
	b, err := gq.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	prog, _, err := gq.Build(vadd, "")
	if err != nil {
		t.Fatal(err)
	}
	k, err := prog.Kernel("twice")
	if err != nil {
		t.Fatal(err)
	}
	var pl gpu.Pipeliner = gq
	if err := pl.Enqueue(k, gpu.NDRange{Dims: 1, Global: [3]uint64{4}}, []gpu.Arg{{Buffer: b}}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.(gpu.HostBuffer).Host(0, 4, func([]byte) error { return nil }); ok {
		t.Error("Host lent the bytes with a launch batched")
	}
	for _, r := range pl.Sync() {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if ok, err := b.(gpu.HostBuffer).Host(0, 4, func([]byte) error { return nil }); !ok || err != nil {
		t.Errorf("Host after Sync = %v, %v", ok, err)
	}
}

// TestArenaAllocatorKeepsRangesApart is a property test of the arena's
// free list: under any sequence of takes, gives back and keeps, no two
// live ranges overlap, every range is page aligned and inside the arena,
// the free list stays sorted with no two extents adjacent, and the bytes
// free, live and kept always add up to the arena.
func TestArenaAllocatorKeepsRangesApart(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const pages = 64
		mem, err := unix.Mmap(-1, 0, pages*ArenaPage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		a := newArena(mem)
		defer a.unmap()
		var live []extent
		var kept uint64
		t.Repeat(map[string]func(*rapid.T){
			"take": func(t *rapid.T) {
				n := rapid.Uint64Range(1, 20*ArenaPage).Draw(t, "n")
				e, ok := a.take(n)
				if !ok {
					return
				}
				if e.off%ArenaPage != 0 || e.n%ArenaPage != 0 || e.n < n || e.off+e.n > pages*ArenaPage {
					t.Fatalf("take(%d) = %+v", n, e)
				}
				for _, l := range live {
					if e.off < l.off+l.n && l.off < e.off+e.n {
						t.Fatalf("take(%d) = %+v overlaps live %+v", n, e, l)
					}
				}
				// The range reads as zero: given back ranges were cleared.
				if !a.use(e.off, e.n, func(p []byte) {
					if !bytes.Equal(p, make([]byte, len(p))) {
						t.Fatalf("range %+v is not zero", e)
					}
					p[0], p[len(p)-1] = 0xff, 0xff // dirty it for the next user
				}) {
					t.Fatal("arena unmapped")
				}
				live = append(live, e)
			},
			"give": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("nothing live")
				}
				i := rapid.IntRange(0, len(live)-1).Draw(t, "i")
				a.give(live[i])
				live = append(live[:i], live[i+1:]...)
			},
			"keep": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("nothing live")
				}
				i := rapid.IntRange(0, len(live)-1).Draw(t, "i")
				a.keep(live[i])
				kept += live[i].n
				live = append(live[:i], live[i+1:]...)
			},
			"": func(t *rapid.T) {
				a.fmu.Lock()
				free := slices.Clone(a.free)
				a.fmu.Unlock()
				var sum uint64
				for i, e := range free {
					if i > 0 && free[i-1].off+free[i-1].n >= e.off {
						t.Fatalf("free list not sorted and merged: %+v", free)
					}
					sum += e.n
				}
				for _, l := range live {
					sum += l.n
				}
				if sum+kept != pages*ArenaPage {
					t.Fatalf("free %+v + live %+v + kept %d != %d", free, live, kept, pages*ArenaPage)
				}
			},
		})
	})
}

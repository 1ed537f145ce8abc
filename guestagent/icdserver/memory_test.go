package icdserver

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// liveEvents counts the events every served connection holds.
func (s *Server) liveEvents() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		c.mu.Lock()
		n += len(c.events)
		c.mu.Unlock()
	}
	return n
}

// retained is the heap memory the process holds from the kernel: in use,
// or free but not handed back.
func retained() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapSys - ms.HeapReleased
}

// TestClosedClientsMemoryReturns: clients that each hold many unreported
// events grow the daemon's heap; once they have closed, the events are
// gone from the server's tables and the memory they took goes back to the
// kernel without waiting for a garbage collection that an idle daemon
// would not run for minutes (the test runs none itself after the start).
func TestClosedClientsMemoryReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 131072 messages")
	}
	const clients, events = 8, 16384
	fx := newFixture(t)
	debug.FreeOSMemory()
	before := retained()
	cls := make([]*client, clients)
	for i := range cls {
		cls[i], _ = fx.hello(t)
		for e := 1; e <= events; e++ {
			cls[i].send(icdproto.OpMarker, &icdproto.Marker{Event: uint64(e)})
		}
		// A Wait for the last event alone: every Marker before it has
		// been handled, and the others stay unreported.
		if r := cls[i].wait(events); len(r) != 1 || r[0].Status != 0 {
			t.Fatalf("client %d: wait for event %d = %+v", i, events, r)
		}
	}
	if got, want := fx.s.liveEvents(), clients*(events-1); got != want {
		t.Errorf("liveEvents() with the clients open = %d, want %d", got, want)
	}
	held := retained()
	if held <= before {
		t.Fatalf("the events took no heap (%d -> %d bytes): the test measures nothing", before, held)
	}
	for _, cl := range cls {
		cl.c.Close()
	}
	fx.waitIdle(t)
	if n := fx.s.liveEvents(); n != 0 {
		t.Errorf("liveEvents() after the clients closed = %d, want 0", n)
	}
	// What the clients added must go back, but for a quarter of it
	// (allocator fragmentation, the test's own buffers).
	limit := before + (held-before)/4
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for retained() > limit {
		select {
		case <-ctx.Done():
			t.Fatalf("heap memory held from the kernel after the clients closed = %d KiB, want at most %d KiB (before %d KiB, with %d clients holding %d events each %d KiB)",
				retained()>>10, limit>>10, before>>10, clients, events-1, held>>10)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Logf("heap held from the kernel: %d KiB before, %d KiB with %d clients holding %d events each, %d KiB after they closed",
		before>>10, held>>10, clients, events-1, retained()>>10)
}

// TestArenaBytesLimit: a client's arenas together may not pass
// maxArenaBytes; the Attach beyond is refused with ErrLimit and the
// connection stays usable.
func TestArenaBytesLimit(t *testing.T) {
	fx := newFixture(t)
	cl, _ := fx.hello(t)
	small := cl.attach(1, 4096)
	// A memfd as large as the limit: sparse, nothing is touched.
	fd, _ := memfd(t, maxArenaBytes, unix.F_SEAL_SHRINK)
	r := cl.call(icdproto.OpAttach, &icdproto.Attach{Arena: 2, Size: maxArenaBytes}, fd).(*icdproto.AttachReply)
	if icdproto.ErrCode(r.Status) != icdproto.ErrLimit {
		t.Errorf("Attach of %d bytes beside 4096: status %v, want %v", uint64(maxArenaBytes), icdproto.ErrCode(r.Status), icdproto.ErrLimit)
	}
	r = cl.call(icdproto.OpAttach, &icdproto.Attach{Arena: 2, Size: maxArenaBytes - 4096}, fd).(*icdproto.AttachReply)
	if r.Status != 0 {
		t.Errorf("Attach of the rest of the limit: status %v, want 0", icdproto.ErrCode(r.Status))
	}
	if br := cl.build(0, 1, small, fillSrc); br.Status != 0 {
		t.Errorf("build after the refused Attach: status %d", br.Status)
	}
}

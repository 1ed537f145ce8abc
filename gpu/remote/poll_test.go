package remote

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu/gputest"
	"github.com/vgpud/vgpud/internal/pollbudget"
)

// TestPollingConnSavesWakeups (issue 42) is the mechanism test of the
// executor socket's poll-then-block: with both ends polling, a run of
// calls made one at a time finds every request (the executor's reads)
// and every reply (the client's) without sleeping in the kernel for it,
// but the first of each; without a window the same calls work (how many
// of their reads sleep depends on who runs first). Closing a polling
// connection ends its poll at once.
func TestPollingConnSavesWakeups(t *testing.T) {
	for _, tt := range []struct {
		name   string
		window time.Duration
	}{
		{"polling", time.Hour},
		{"blocking", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := socketPair(t)
			client, err := NewPollingConn(a, tt.window)
			if err != nil {
				t.Fatal(err)
			}
			server, err := NewPollingConn(b, tt.window)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := Serve(server, gputest.New(gputest.Config{})); err != nil {
					t.Errorf("Serve: %v", err)
				}
			}()
			d, err := NewDevice(client)
			if err != nil {
				t.Fatal(err)
			}
			q, err := d.NewQueue()
			if err != nil {
				t.Fatal(err)
			}
			buf, err := q.Alloc(64)
			if err != nil {
				t.Fatal(err)
			}
			const n = 50
			slept, reads := server.Slept.Load(), server.Reads.Load()
			cslept := client.Slept.Load()
			for k := range n {
				want := bytes.Repeat([]byte{byte(k)}, 64)
				if err := q.Write(buf, 0, want); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 64)
				if err := q.Read(buf, 0, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("call %d: read %x, want %x", k, got[:4], want[:4])
				}
			}
			served, sSlept, cSlept := server.Reads.Load()-reads, server.Slept.Load()-slept, client.Slept.Load()-cslept
			if served < 2*n {
				t.Fatalf("the executor read %d times for %d calls", served, 2*n)
			}
			if tt.window > 0 && (sSlept > 1 || cSlept > 1) {
				t.Errorf("polling ends: the executor slept for %d of %d requests, the client for %d replies, want at most 1 each", sSlept, 2*n, cSlept)
			}
			// Close ends the client's poll (an hour long) and so the
			// executor's: both sides finish now.
			if err := d.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			wg.Wait()
		})
	}
}

// recordingConn forwards to a connection and records the slices written
// to it (not embedding it: net.Buffers would then bypass Write).
type recordingConn struct {
	c      *net.UnixConn
	mu     sync.Mutex
	writes [][]byte
}

func (r *recordingConn) Read(p []byte) (int, error) { return r.c.Read(p) }
func (r *recordingConn) Close() error               { return r.c.Close() }
func (r *recordingConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, p)
	r.mu.Unlock()
	return r.c.Write(p)
}

// TestWriteSendsFromTheCallersBytes (issue 42) is the mechanism test of
// the write path's saved copies: a buffer write's bytes go to the socket
// from the caller's own slice, one chunk per request, not copied into a
// request body and again into a frame.
func TestWriteSendsFromTheCallersBytes(t *testing.T) {
	a, b := socketPair(t)
	rc := &recordingConn{c: a}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := Serve(b, gputest.New(gputest.Config{})); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	d, err := NewDevice(rc)
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	const n = Chunk + 4096
	buf, err := q.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i * 13)
	}
	rc.mu.Lock()
	rc.writes = nil
	rc.mu.Unlock()
	if err := q.Write(buf, 0, p); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	sent := 0
	for _, w := range rc.writes {
		for _, part := range [][]byte{p[:Chunk], p[Chunk:]} {
			if len(w) == len(part) && &w[0] == &part[0] {
				sent++
			}
		}
	}
	rc.mu.Unlock()
	if sent != 2 {
		t.Errorf("%d of a write's 2 chunks went to the socket from the caller's bytes, want both", sent)
	}
	got := make([]byte, n)
	if err := q.Read(buf, 0, got); err != nil || !bytes.Equal(got, p) {
		t.Errorf("read back: %v, equal %v", err, bytes.Equal(got, p))
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
}

// TestLargeBodiesComeFromThePool is the mechanism test of pooled frame
// bodies (issue 42): a 4 MiB write and read, client and server in this
// process, used to allocate a fresh body for the request, the reply and
// the reply's frame, each zeroed by the runtime (12 MiB and more a round
// trip); from the pool they allocate less than one body per round trip
// on average (a collection may empty the pool now and then).
func TestLargeBodiesComeFromThePool(t *testing.T) {
	d := served(t, gputest.New(gputest.Config{}))
	t.Cleanup(func() { d.Close() })
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := q.Alloc(Chunk)
	if err != nil {
		t.Fatal(err)
	}
	p, got := make([]byte, Chunk), make([]byte, Chunk)
	for i := range p {
		p[i] = byte(i * 7)
	}
	roundTrip := func() {
		if err := q.Write(buf, 0, p); err != nil {
			t.Fatal(err)
		}
		if err := q.Read(buf, 0, got); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip() // fills the pool
	const trips = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range trips {
		roundTrip()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / trips; per >= Chunk {
		t.Errorf("%d bytes allocated per 4 MiB write and read, want less than %d", per, Chunk)
	}
	if !bytes.Equal(got, p) {
		t.Error("the bytes read back differ from those written")
	}
}

// TestPollingConnStopsWhereItMisses (issue 42) is the mechanism test of
// the budget on a real socket: a peer that writes only once the reader
// has given up looking (each message sent after the read's Missed or
// Skipped moved, so no poll can find it) gets pollbudget.Misses polls
// that run out, then reads that sleep at once but for every
// pollbudget.Probe-th, which polls again. Without the rule every read polls for its window: an
// executor whose requests come further apart than it spent its CPU on
// looking.
func TestPollingConnStopsWhereItMisses(t *testing.T) {
	a, b := socketPair(t)
	r, err := NewPollingConn(b, 50*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2 + 2*pollbudget.Probe
	got := make(chan error, 1)
	go func() {
		buf := make([]byte, 8)
		for range n {
			if _, err := r.Read(buf); err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	decided := uint64(0)
	for k := range n {
		// Wait until this read decided not to look (or stopped looking).
		for r.Missed.Load()+r.Skipped.Load() == decided {
			runtime.Gosched()
		}
		decided++
		if _, err := a.Write([]byte{byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if m, s := r.Missed.Load(), r.Skipped.Load(); m != pollbudget.Misses+2 || s != n-pollbudget.Misses-2 {
		t.Errorf("%d polls ran out and %d reads slept at once, want %d and %d", m, s, pollbudget.Misses+2, n-pollbudget.Misses-2)
	}
	r.Close()
}

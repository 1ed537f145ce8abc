//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStreamMovesEveryPiece: on a device whose buffers are device memory
// (OpenPlain), StreamWrite and StreamRead move every byte of copies
// shorter than, equal to and many times a piece, at an offset, in pieces
// of StreamPiece (the last shorter) handed out in order; what one wrote,
// Read sees, and what Write put there, the other reads.
func TestStreamMovesEveryPiece(t *testing.T) {
	q := newQueue(t, openPlain(t))
	const off = 17
	b := alloc(t, q, 8*StreamPiece)
	s := q.(Streamer)
	for _, n := range []uint64{1, 4096, StreamPiece - 1, StreamPiece, 3*StreamPiece + 5, 7*StreamPiece + 123} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*7 + int(n))
			}
			var pieces []int
			rest := src
			if err := s.StreamWrite(b, off, n, func(p []byte) error {
				pieces = append(pieces, len(p))
				copy(p, rest)
				rest = rest[len(p):]
				return nil
			}); err != nil {
				t.Fatalf("StreamWrite = %v", err)
			}
			checkPieces(t, "StreamWrite", pieces, n)
			got := make([]byte, n)
			if err := q.Read(b, off, got); err != nil || !bytes.Equal(got, src) {
				t.Fatalf("Read after StreamWrite = %v, equal %v", err, bytes.Equal(got, src))
			}
			for i := range src {
				src[i] ^= 0x5a
			}
			if err := q.Write(b, off, src); err != nil {
				t.Fatal(err)
			}
			pieces, got = nil, got[:0]
			if err := s.StreamRead(b, off, n, func(p []byte) error {
				pieces = append(pieces, len(p))
				got = append(got, p...)
				return nil
			}); err != nil {
				t.Fatalf("StreamRead = %v", err)
			}
			checkPieces(t, "StreamRead", pieces, n)
			if !bytes.Equal(got, src) {
				t.Fatal("StreamRead after Write: the bytes differ")
			}
		})
	}
}

// checkPieces checks that pieces are StreamPiece bytes each but the last,
// n in all.
func checkPieces(t *testing.T, op string, pieces []int, n uint64) {
	t.Helper()
	var sum uint64
	for i, p := range pieces {
		if i < len(pieces)-1 && p != StreamPiece || p == 0 || p > StreamPiece {
			t.Errorf("%s: piece %d of %v is %d bytes", op, i, pieces, p)
		}
		sum += uint64(p)
	}
	if sum != n {
		t.Errorf("%s: pieces %v sum to %d, want %d", op, pieces, sum, n)
	}
}

// TestStreamRefusals: a range past the buffer, a closed queue and a
// host-backed device's queue are refused without calling f; f's error
// ends a stream with that error, after which the queue and its staging
// memory serve the next stream.
func TestStreamRefusals(t *testing.T) {
	q := newQueue(t, openPlain(t))
	b := alloc(t, q, 4*StreamPiece)
	s := q.(Streamer)
	if !s.Streams() {
		t.Fatal("a plain device's queue says it does not stream")
	}
	never := func([]byte) error { t.Error("f called"); return nil }
	if err := s.StreamWrite(b, 1, 4*StreamPiece, never); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("StreamWrite past the end = %v, want ErrOutOfRange", err)
	}
	if err := s.StreamRead(b, 4*StreamPiece+1, 0, never); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("StreamRead past the end = %v, want ErrOutOfRange", err)
	}
	boom := errors.New("boom")
	for _, op := range []string{"write", "read"} {
		calls := 0
		f := func([]byte) error {
			if calls++; calls == 3 {
				return boom
			}
			return nil
		}
		var err error
		if op == "write" {
			err = s.StreamWrite(b, 0, 4*StreamPiece, f)
		} else {
			err = s.StreamRead(b, 0, 4*StreamPiece, f)
		}
		if !errors.Is(err, boom) || calls != 3 {
			t.Errorf("stream %s whose f fails on its third piece = %v after %d calls, want boom after 3", op, err, calls)
		}
	}
	want := bytes.Repeat([]byte{3}, 2*StreamPiece)
	if err := s.StreamWrite(b, 0, uint64(len(want)), func(p []byte) error { copy(p, want); return nil }); err != nil {
		t.Fatalf("StreamWrite after failed streams = %v", err)
	}
	got := make([]byte, len(want))
	if err := q.Read(b, 0, got); err != nil || !bytes.Equal(got, want) {
		t.Errorf("Read = %v, equal %v", err, bytes.Equal(got, want))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.StreamWrite(b, 0, 1, never); !errors.Is(err, ErrClosed) {
		t.Errorf("StreamWrite on a closed queue = %v, want ErrClosed", err)
	}

	hd, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	if !hd.(*device).hostBacked {
		return
	}
	hq := newQueue(t, hd)
	hb := alloc(t, hq, 4096)
	if hq.(Streamer).Streams() {
		t.Error("a host-backed device's queue says it streams")
	}
	if err := hq.(Streamer).StreamWrite(hb, 0, 4096, never); !errors.Is(err, ErrUnsupported) {
		t.Errorf("StreamWrite on a host-backed device = %v, want ErrUnsupported", err)
	}
}

// BenchmarkStream measures one copy of 1 MiB and of 64 MiB between
// scattered host memory (64 KiB runs in shuffled order, as a fragmented
// guest's pages) and the device: "direct" is one blocking transfer from
// contiguous memory (what an application does, the baseline); "staged"
// gathers a MiB at a time into ordinary memory and moves each with a
// blocking transfer (the aggregator's path before streams);
// "stream-PxN-gG" streams through N pinned pieces of P MiB, each piece
// gathered by G goroutines (1 MiB: the default geometry only). On PoCL
// opened plain the numbers say little; scripts/gpu-check.sh runs it on a
// GPU, where it chose the pieces' geometry (docs/gpu-check.md).
func BenchmarkStream(b *testing.B) {
	d := openPlain(b)
	b.Run("1MiB", func(b *testing.B) {
		benchStream(b, d, make([]byte, 1<<20), [][2]int{{StreamPiece >> 20, StreamPieces}}, []int{2})
	})
	b.Run("64MiB", func(b *testing.B) {
		benchStream(b, d, make([]byte, 64<<20), [][2]int{{1, 3}, {2, 3}, {4, 3}, {1, 6}}, []int{1, 2, 4})
	})
	// Guest RAM is a shared mapping of a memfd (QEMU's, the harness's):
	// the same copies from and into such memory.
	b.Run("64MiB-memfd", func(b *testing.B) {
		fd, err := unix.MemfdCreate("stream-bench", unix.MFD_CLOEXEC)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, 64<<20); err != nil {
			b.Fatal(err)
		}
		m, err := unix.Mmap(fd, 0, 64<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Munmap(m)
		benchStream(b, d, m, [][2]int{{StreamPiece >> 20, StreamPieces}}, []int{2})
	})
}

// benchStream runs BenchmarkStream's variants on host, the scattered
// memory (its length the copy's).
func benchStream(b *testing.B, d Device, host []byte, geos [][2]int, gs []int) {
	const run = 64 << 10
	var err error
	total := len(host)
	for i := range host {
		host[i] = byte(i)
	}
	order := mrand.New(mrand.NewPCG(1, 2)).Perm(total / run)
	// copyRuns copies between p, the bytes at offset at of the copy, and
	// the scattered runs that hold them, with g goroutines.
	copyRuns := func(p []byte, at int, g int, toHost bool) {
		var wg sync.WaitGroup
		per := (len(p)/run + g - 1) / g * run
		for lo := 0; lo < len(p); lo += per {
			wg.Go(func() {
				for o := lo; o < min(lo+per, len(p)); o += run {
					h := host[order[(at+o)/run]*run:][:min(run, len(p)-o)]
					if toHost {
						copy(h, p[o:])
					} else {
						copy(p[o:], h)
					}
				}
			})
		}
		wg.Wait()
	}
	for _, up := range []bool{true, false} {
		dir := "download"
		if up {
			dir = "upload"
		}
		q := newQueue(b, d)
		buf := alloc(b, q, uint64(total))
		b.Run(dir+"/direct", func(b *testing.B) {
			b.SetBytes(int64(total))
			for b.Loop() {
				if up {
					err = q.Write(buf, 0, host)
				} else {
					err = q.Read(buf, 0, host)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(dir+"/staged", func(b *testing.B) {
			b.SetBytes(int64(total))
			st := make([]byte, 1<<20)
			for b.Loop() {
				for at := 0; at < total; at += len(st) {
					if up {
						copyRuns(st, at, 1, false)
						err = q.Write(buf, uint64(at), st)
					} else if err = q.Read(buf, uint64(at), st); err == nil {
						copyRuns(st, at, 1, true)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		for _, geo := range geos {
			for _, g := range gs {
				b.Run(fmt.Sprintf("%s/stream-%dx%d-g%d", dir, geo[0], geo[1], g), func(b *testing.B) {
					streamPiece, streamPieces = geo[0]<<20, geo[1]
					defer func() { streamPiece, streamPieces = StreamPiece, StreamPieces }()
					sq := newQueue(b, d)
					sb := alloc(b, sq, uint64(total))
					b.SetBytes(int64(total))
					once := func() {
						at := 0
						f := func(p []byte) error {
							copyRuns(p, at, g, !up)
							at += len(p)
							return nil
						}
						if up {
							err = sq.(Streamer).StreamWrite(sb, 0, uint64(total), f)
						} else {
							err = sq.(Streamer).StreamRead(sb, 0, uint64(total), f)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					once() // untimed: the queue makes its staging memory
					for b.Loop() {
						once()
					}
				})
			}
		}
	}
}

//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// TestStreamMovesEveryPiece: on a device whose buffers are device memory
// (OpenPlain), StreamWrite and StreamRead move every byte of copies
// shorter than, equal to and many times a piece, at an offset, in pieces
// of StreamPiece (the last shorter) handed out in order; what one wrote,
// Read sees, and what Write put there, the other reads.
func TestStreamMovesEveryPiece(t *testing.T) {
	d, err := OpenPlain("")
	if err != nil {
		t.Fatalf("OpenPlain = %v", err)
	}
	defer d.Close()
	q := newQueue(t, d)
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
	d, err := OpenPlain("")
	if err != nil {
		t.Fatalf("OpenPlain = %v", err)
	}
	defer d.Close()
	q := newQueue(t, d)
	b := alloc(t, q, 4*StreamPiece)
	s := q.(Streamer)
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
	if err := hq.(Streamer).StreamWrite(hb, 0, 4096, never); !errors.Is(err, ErrUnsupported) {
		t.Errorf("StreamWrite on a host-backed device = %v, want ErrUnsupported", err)
	}
}

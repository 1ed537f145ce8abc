package codec

import (
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

var errTest = errors.New("test format")

func wrap(msg string) error { return fmt.Errorf("%w: %s", errTest, msg) }

// TestRoundTrip: what a Writer wrote, a Reader reads back, field by field,
// and Done then reports nothing left.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c, d := rapid.Uint8().Draw(t, "a"), rapid.Uint16().Draw(t, "b"), rapid.Uint32().Draw(t, "c"), rapid.Uint64().Draw(t, "d")
		raw := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "raw")
		var w Writer
		w.U8(a)
		w.U16(b)
		w.U32(c)
		w.U64(d)
		w.U32(uint32(len(raw)))
		w.Raw(raw)
		r := NewReader(w.Bytes(), wrap)
		ga, gb, gc, gd := r.U8(), r.U16(), r.U32(), r.U64()
		got := r.Bounded("raw", uint64(r.U32()), 64)
		if err := r.Done("record"); err != nil {
			t.Fatalf("Done = %v", err)
		}
		if ga != a || gb != b || gc != c || gd != d || string(got) != string(raw) {
			t.Fatalf("read %v %v %v %v %q, wrote %v %v %v %v %q", ga, gb, gc, gd, got, a, b, c, d, raw)
		}
	})
}

// TestSticky: the first failure is kept, wraps the format's sentinel, and
// every later read returns zero; short reads, lengths over their bound,
// negative takes and trailing bytes all fail without a panic.
func TestSticky(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    []byte
		read func(r *Reader)
	}{
		{"short u64", []byte{1, 2, 3}, func(r *Reader) { r.U64() }},
		{"length over its bound", []byte{9, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, func(r *Reader) { r.Bounded("f", uint64(r.U32()), 8) }},
		{"negative take", []byte{1}, func(r *Reader) { r.Take(-1) }},
		{"trailing", []byte{1, 2}, func(r *Reader) { r.U8() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(tt.b, wrap)
			tt.read(&r)
			err := r.Done("record")
			if !errors.Is(err, errTest) {
				t.Fatalf("Done = %v, want an error wrapping the sentinel", err)
			}
			if v := r.U32(); v != 0 || r.Rest() != nil || !errors.Is(r.Err(), errTest) {
				t.Errorf("after the failure: U32 = %d, Rest non-nil or error lost (%v)", v, r.Err())
			}
		})
	}
}

// TestTakeIsCapped: appending to a field taken from a body never writes
// into the bytes after it.
func TestTakeIsCapped(t *testing.T) {
	b := []byte{1, 2, 3, 4}
	r := NewReader(b, nil)
	f := r.Take(2)
	_ = append(f, 9)
	if b[2] != 3 {
		t.Errorf("append to a taken field wrote into the body: %v", b)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0, 'a', 'b', 'c', 'd'}, 8)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		r := NewReader(b, wrap)
		r.U8()
		r.Bounded("f", uint64(r.U32()), max)
		r.U16()
		r.U64()
		if err := r.Done("record"); err != nil && !errors.Is(err, errTest) {
			t.Fatalf("error %v does not wrap the sentinel", err)
		}
	})
}

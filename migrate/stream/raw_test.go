package stream

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRawRelay: records relayed with NextRaw and WriteRaw decode to the
// same records, and a corrupted payload is refused by NextRaw.
func TestRawRelay(t *testing.T) {
	recs := []Record{
		&Instance{ID: "i", MemBytes: 1},
		&Program{Handle: 1, Source: []byte("__kernel void k() {}")},
		&Buffer{Handle: 2, Size: 8192},
		&BufferData{Handle: 2, Offset: 0, Data: bytes.Repeat([]byte{7}, 8192)},
		&BufferData{Handle: 2, Offset: 4096, Data: make([]byte, 4096)},
		&BufferFree{Handle: 2},
		&Ring{Enabled: true, Slots: 64, Base: 0x1000, ComplBase: 0x2000, Head: 3, Tail: 4, Completed: 3},
		&Round{Number: 1, Final: true},
	}
	var src bytes.Buffer
	w := NewWriter(&src)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	good := bytes.Clone(src.Bytes())

	var relayed bytes.Buffer
	rw := NewWriter(&relayed)
	rr := NewReader(bytes.NewReader(good))
	for {
		raw, err := rr.NextRaw()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if raw.Type == TypeHeader || raw.Type == TypeEnd {
			if err := rw.WriteRaw(raw); !errors.Is(err, ErrInvalid) {
				t.Fatalf("WriteRaw(%v) = %v, want ErrInvalid", raw.Type, err)
			}
			continue
		}
		if _, err := raw.Decode(); err != nil {
			t.Fatal(err)
		}
		if err := rw.WriteRaw(raw); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(&relayed)
	var got []Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Type() != TypeHeader && rec.Type() != TypeEnd {
			got = append(got, rec)
		}
	}
	if d := cmp.Diff(recs, got); d != "" {
		t.Errorf("relayed records differ (-sent +got):\n%s", d)
	}

	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x40
	br := NewReader(bytes.NewReader(bad))
	var err error
	for err == nil {
		_, err = br.NextRaw()
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("NextRaw over a flipped byte: %v, want ErrCorrupt", err)
	}
}

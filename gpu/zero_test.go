package gpu

import (
	"bytes"
	"testing"
)

// TestAllocIsZeroed: memory one queue wrote and released never shows up in
// a buffer another queue allocates.
func TestAllocIsZeroed(t *testing.T) {
	d, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const size = 1 << 20
	secret := bytes.Repeat([]byte{0xA5}, size)
	for i := 0; i < 4; i++ {
		q1, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		b, err := q1.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		if err := q1.Write(b, 0, secret); err != nil {
			t.Fatal(err)
		}
		b.Release()
		q1.Close()

		q2, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		b2, err := q2.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if err := q2.Read(b2, 0, got); err != nil {
			t.Fatal(err)
		}
		q2.Close()
		if i := bytes.IndexByte(got, 0xA5); i >= 0 || bytes.ContainsFunc(got, func(r rune) bool { return r != 0 }) {
			t.Fatalf("round %d: a fresh buffer holds non-zero bytes (first 0xA5 at %d)", i, i)
		}
	}
}

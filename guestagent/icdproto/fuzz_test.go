package icdproto

import (
	"bytes"
	"testing"
)

// FuzzUnmarshal feeds arbitrary datagrams to Unmarshal: it must not panic,
// an error must come with no body, and a decoded message must encode back
// to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	for op, body := range samples() {
		b, err := Marshal(op, 7, body)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	il, err := Marshal(OpLaunch, 8, imageLaunch(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(il)
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, err := Unmarshal(b)
		if err != nil {
			if body != nil {
				t.Fatalf("Unmarshal error %v with body %v", err, body)
			}
			return
		}
		again, err := Marshal(h.Op, h.ID, body)
		if err != nil {
			t.Fatalf("Marshal(Unmarshal(%x)) = %v", b, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("Marshal(Unmarshal(b)) = %x, want %x", again, b)
		}
	})
}

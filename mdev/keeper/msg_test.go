package keeper

import (
	"errors"
	"testing"
)

func TestMsgRoundTrip(t *testing.T) {
	for _, m := range []Msg{{OpKeep, 1}, {OpDrop, 0xFFFFFFFFFFFFFFFF}, {OpKeep, ID(4242)<<32 | 7}} {
		got, err := Decode(m.Encode())
		if err != nil || got != m {
			t.Fatalf("%+v came back as %+v, %v", m, got, err)
		}
	}
	for _, b := range [][]byte{nil, make([]byte, MsgSize), {3, 1, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0}, make([]byte, MsgSize+1)} {
		if _, err := Decode(b); !errors.Is(err, ErrMsg) {
			t.Fatalf("% x: %v, want ErrMsg", b, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Msg{OpKeep, 1}.Encode())
	f.Add(Msg{OpDrop, 2}.Encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if m.ID == 0 || (m.Op != OpKeep && m.Op != OpDrop) {
			t.Fatalf("accepted %+v", m)
		}
		if string(m.Encode()) != string(b) {
			t.Fatalf("% x decoded to %+v, which encodes differently", b, m)
		}
	})
}

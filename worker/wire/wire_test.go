package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/codec"
)

// samples has one message of every type, fields away from zero.
func samples() []Msg {
	return []Msg{
		&Reply{Status: 3, Msg: "no such slot", Body: []byte{1, 2, 3}},
		&Hello{Version: Version, Device: 1, Domain: "team", Shared: true, ReuseBudget: 1 << 20, CacheBytes: 64 << 20},
		&Add{Slot: 7, ID: "0b0e5c2e-0b61-4bde-8bb5-5ea1e3d1b0a1", Reuse: true,
			Limits: Limits{MemBytes: 256 << 20, ProgramBytes: 16 << 20, ComputeUnits: 2, Profile: "vgpu-small"}},
		&Add{Slot: 8, ID: "ctx", Limits: Limits{MemBytes: 1 << 20, Profile: "p"}, Contexts: 64},
		&Remove{Slot: 7, IfEmpty: true},
		&Memory{Slot: 7, Regions: []Region{{GPA: 0, Size: 0xa0000, Offset: 0}, {GPA: 0xc0000, Size: 0x10000000 - 0xc0000, Offset: 0xc0000}}},
		&Enable{Slot: 7, Base: 0x1000, ComplBase: 0x2000, Slots: 64},
		&Disable{Slot: 7},
		&Reset{Slot: 7},
		&Quota{Slot: 7, Limits: Limits{MemBytes: 1 << 30, ProgramBytes: 1 << 20, ComputeUnits: 1, Profile: "vgpu-medium"}},
		&Reuse{Slot: 7, On: true},
		&Budget{Bytes: 1234},
		&Stats{},
		&Turn{Turn: 99, Slot: 7, Kind: TurnCompile, Cost: 3 * time.Millisecond},
		&TurnRelease{Turn: 99, Device: 2 * time.Millisecond, Slices: 4},
		&Extract{Slot: 7, Final: true},
		&Inject{Slot: 7},
		&Freeze{Slot: 7},
		&Thaw{Slot: 7, Forget: true},
		&GuestLog{Slot: 7, On: true},
		&GuestLog{Slot: 2},
		&Kicks{Slot: 7},
		&StopKicks{Slot: 9},
		&Parent{Arm: true},
		&Foreign{Slot: 7, Domain: 12, Regions: []ForeignRegion{{GPA: 0, Size: 0xf0000000}, {GPA: 1 << 32, Size: 1 << 30}}},
		&Reserve{Slot: 7, Bytes: 64 << 20},
		&Unreserve{Slot: 7, Bytes: 64 << 20},
		&Arena{Slot: 7, Context: 64, Bytes: 256 << 20},
		&TurnTaken{Turn: 9, Slot: 3, Offer: 1 << 40},
		&Reply{Status: 0, File: true},
	}
}

func TestRoundTrip(t *testing.T) {
	seen := map[Type]bool{}
	for _, m := range samples() {
		seen[m.Type()] = true
		b := Marshal(42, m)
		h, got, err := Unmarshal(b, m.fds())
		if err != nil {
			t.Fatalf("Unmarshal(Marshal(%v)) = %v", m.Type(), err)
		}
		if h.Type != m.Type() || h.ID != 42 || int(h.Len) != len(b)-HeaderSize {
			t.Errorf("%v: header %+v", m.Type(), h)
		}
		if d := cmp.Diff(m, got); d != "" {
			t.Errorf("%v round trip (-sent +got):\n%s", m.Type(), d)
		}
	}
	// Memory's encoding is what workers of earlier releases decode (an
	// upgrade in place keeps them): its bytes must not change.
	mem := Marshal(9, &Memory{Slot: 2, Regions: []Region{{GPA: 0x1000, Size: 0x2000, Offset: 0x3000}}})
	want := "050000000900000020000000000000000200000001000000" +
		"0010000000000000" + "0020000000000000" + "0030000000000000"
	if got := fmt.Sprintf("%x", mem); got != want {
		t.Errorf("Memory's encoding changed:\n got %s\nwant %s", got, want)
	}
	for ty := Type(1); ty < numTypes; ty++ {
		if !seen[ty] || newMsg(ty) == nil || ty.String() == "" {
			t.Errorf("type %d: no sample, constructor or name", ty)
		}
	}
}

func TestBodiesRoundTrip(t *testing.T) {
	for _, h := range []HelloReply{
		{Name: "pthread-skylake", ComputeUnits: 2, MaxWorkGroup: 4096, MaxAllocBytes: 1 << 30},
		{Name: "pthread-skylake", ComputeUnits: 2, MaxWorkGroup: 4096, MaxAllocBytes: 1 << 30, Features: Features},
	} {
		if got, err := DecodeHelloReply(h.EncodeBody()); err != nil || got != h {
			t.Errorf("HelloReply round trip = %+v, %v", got, err)
		}
	}
	// A worker of an earlier release wrote the first layout: no features.
	old := HelloReply{Name: "basic", Features: Features}
	if got, err := DecodeHelloReply(old.EncodeBody()[:len(old.EncodeBody())-4]); err != nil || got.Features != 0 || got.Name != "basic" {
		t.Errorf("HelloReply of an earlier worker = %+v, %v", got, err)
	}
	if _, err := DecodeHelloReply(append(old.EncodeBody(), 0)); !errors.Is(err, ErrProtocol) {
		t.Errorf("HelloReply with a trailing byte = %v, want ErrProtocol", err)
	}
	s := StatsReply{Entries: 3, Bytes: 4, Budget: 5, Hits: 6, Misses: 7, Skipped: 8, Recorded: 9, Evictions: 10, BytesSaved: 11, DeviceNanos: 12, Instances: 2}
	if got, err := DecodeStatsReply(s.EncodeBody()); err != nil || got != s {
		t.Errorf("StatsReply round trip = %+v, %v", got, err)
	}
	for _, x := range []ExtractReply{
		{Programs: 1, ProgramsFreed: 2, Buffers: 3, BuffersFreed: 4, Redirty: 5, BufferBytes: 6 << 30},
		{Programs: 1, BufferBytes: 6 << 30, GuestBytes: 8192},
	} {
		if got, err := DecodeExtractReply(x.EncodeBody()); err != nil || got != x {
			t.Errorf("ExtractReply round trip = %+v, %v", got, err)
		}
	}
	for _, rr := range []ReserveReply{{}, {Relocate: true}} {
		if got, err := DecodeReserveReply(rr.EncodeBody()); err != nil || got != rr {
			t.Errorf("ReserveReply round trip = %+v, %v", got, err)
		}
	}
	if _, err := DecodeReserveReply([]byte{2}); !errors.Is(err, ErrProtocol) {
		t.Errorf("ReserveReply with a bad boolean = %v, want ErrProtocol", err)
	}
	g := TurnGrant{SliceBudget: time.Millisecond}
	if got, err := DecodeTurnGrant(g.EncodeBody()); err != nil || got != g {
		t.Errorf("TurnGrant round trip = %+v, %v", got, err)
	}
	if _, err := DecodeTurnGrant(append(g.EncodeBody(), 0)); !errors.Is(err, ErrProtocol) {
		t.Errorf("TurnGrant with a trailing byte = %v, want ErrProtocol", err)
	}
}

func TestUnmarshalRejects(t *testing.T) {
	good := Marshal(1, &Enable{Slot: 1, Base: 0x1000, ComplBase: 0x2000, Slots: 8})
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	le := binary.LittleEndian
	tests := []struct {
		name string
		b    []byte
		fds  int
	}{
		{"short header", good[:HeaderSize-1], 0},
		{"flags", mod(func(b []byte) []byte { le.PutUint16(b[2:], 1); return b }), 0},
		{"reserved", mod(func(b []byte) []byte { le.PutUint32(b[12:], 1); return b }), 0},
		{"length too long", mod(func(b []byte) []byte { le.PutUint32(b[8:], uint32(len(b))); return b }), 0},
		{"length too short", mod(func(b []byte) []byte { le.PutUint32(b[8:], 4); return b }), 0},
		{"unknown type", mod(func(b []byte) []byte { le.PutUint16(b[0:], 999); return b }), 0},
		{"truncated payload", mod(func(b []byte) []byte { b = b[:len(b)-1]; le.PutUint32(b[8:], uint32(len(b)-HeaderSize)); return b }), 0},
		{"trailing byte", mod(func(b []byte) []byte { b = append(b, 0); le.PutUint32(b[8:], uint32(len(b)-HeaderSize)); return b }), 0},
		{"unexpected fd", good, 1},
		{"add without fds", Marshal(1, &Add{Slot: 1, ID: "x"}), 0},
		{"add with 65 contexts", Marshal(1, &Add{Slot: 1, ID: "x", Contexts: 65}), 3},
		{"add with 0 contexts written out", func() []byte {
			b := Marshal(1, &Add{Slot: 1, ID: "x"})
			b = append(b, 0, 0, 0, 0)
			le.PutUint32(b[8:], uint32(len(b)-HeaderSize))
			return b
		}(), 3},
		{"kicks without its eventfd", Marshal(1, &Kicks{Slot: 1}), 0},
		{"stop-kicks with an fd", Marshal(1, &StopKicks{Slot: 1}), 1},
		{"memory with fewer fds", Marshal(1, &Memory{Slot: 1, Regions: []Region{{Size: 4096}, {Size: 4096}}}), 1},
		{"too many regions", func() []byte {
			e := encoder{codec.Writer{B: make([]byte, HeaderSize)}}
			e.U32(1)
			e.U32(MaxRegions + 1)
			le.PutUint16(e.B[0:], uint16(TypeMemory))
			le.PutUint32(e.B[8:], uint32(len(e.B)-HeaderSize))
			return e.B
		}(), MaxRegions + 1},
		{"foreign without its fd", Marshal(1, &Foreign{Slot: 1, Regions: []ForeignRegion{{Size: 4096}}}), 0},
		{"foreign with a region per fd", Marshal(1, &Foreign{Slot: 1, Regions: []ForeignRegion{{Size: 4096}, {GPA: 8192, Size: 4096}}}), 2},
		{"foreign domain beyond domid_t", Marshal(1, &Foreign{Slot: 1, Domain: MaxDomID + 1, Regions: []ForeignRegion{{Size: 4096}}}), 1},
		{"foreign without regions", Marshal(1, &Foreign{Slot: 1}), 1},
		{"too many foreign regions", Marshal(1, &Foreign{Slot: 1, Regions: make([]ForeignRegion, MaxRegions+1)}), 1},
		{"negative budget", func() []byte {
			b := Marshal(1, &Budget{Bytes: 1})
			le.PutUint64(b[HeaderSize:], ^uint64(0))
			return b
		}(), 0},
		{"bad boolean", func() []byte {
			b := Marshal(1, &Reuse{Slot: 1, On: true})
			le.PutUint32(b[HeaderSize+4:], 2)
			return b
		}(), 0},
		{"arena for context 0", func() []byte {
			b := Marshal(1, &Arena{Slot: 1, Context: 1, Bytes: 1})
			le.PutUint32(b[HeaderSize+4:], 0)
			return b
		}(), 0},
		{"arena of nothing", func() []byte {
			b := Marshal(1, &Arena{Slot: 1, Context: 1, Bytes: 1})
			le.PutUint64(b[HeaderSize+8:], 0)
			return b
		}(), 0},
		{"reply with a false file flag", func() []byte {
			b := Marshal(1, &Reply{File: true})
			b[len(b)-4] = 0
			return b
		}(), 1},
		{"reply with a file flag but no fd", Marshal(1, &Reply{File: true}), 0},
		{"reserve of nothing", func() []byte {
			b := Marshal(1, &Reserve{Slot: 1, Bytes: 1})
			le.PutUint64(b[HeaderSize+4:], 0)
			return b
		}(), 0},
		{"bad turn kind", func() []byte {
			b := Marshal(1, &Turn{Turn: 1, Slot: 1})
			le.PutUint32(b[HeaderSize+8:], 9)
			return b
		}(), 0},
		{"string over its limit", func() []byte {
			e := encoder{codec.Writer{B: make([]byte, HeaderSize)}}
			e.U32(1)
			e.U32(MaxInstanceID + 1)
			e.B = append(e.B, make([]byte, MaxInstanceID+1)...)
			le.PutUint16(e.B[0:], uint16(TypeAdd))
			le.PutUint32(e.B[8:], uint32(len(e.B)-HeaderSize))
			return e.B
		}(), 3},
		{"string not UTF-8", func() []byte {
			b := Marshal(1, &Hello{Domain: "ab"})
			b[HeaderSize+12] = 0xff
			return b
		}(), 0},
	}
	for _, tt := range tests {
		h, m, err := Unmarshal(tt.b, tt.fds)
		if err == nil || m != nil || !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: Unmarshal = %+v, %v, %v; want nil and ErrProtocol", tt.name, h, m, err)
		}
	}
}

// FuzzUnmarshal: any bytes decode without a panic; an error comes with no
// message; a decoded message re-encodes to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	for _, m := range samples() {
		f.Add(Marshal(3, m), m.fds())
	}
	f.Fuzz(func(t *testing.T, b []byte, nfds int) {
		h, m, err := Unmarshal(b, nfds)
		if err != nil {
			if m != nil {
				t.Fatalf("Unmarshal error %v with message %+v", err, m)
			}
			return
		}
		if again := Marshal(h.ID, m); string(again) != string(b) {
			t.Fatalf("re-encoding %v differs:\n got %x\nwant %x", h.Type, again, b)
		}
	})
}

func TestConnFDs(t *testing.T) {
	a, bf, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := FileConn(bf)
	bf.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	m := &Memory{Slot: 2, Regions: []Region{{GPA: 0x1000, Size: 0x1000}}}
	if err := a.Send(5, m, int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	h, got, fds, err := b.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != 5 || len(fds) != 1 || cmp.Diff(m, got) != "" {
		t.Fatalf("Recv = %+v, %+v, %v", h, got, fds)
	}
	// The fd received is a working copy of the pipe's write end.
	if _, err := unix.Write(fds[0], []byte("x")); err != nil {
		t.Errorf("write through the received fd: %v", err)
	}
	unix.Close(fds[0])
	one := make([]byte, 1)
	if _, err := r.Read(one); err != nil || one[0] != 'x' {
		t.Errorf("read the pipe: %q, %v", one, err)
	}
	if err := a.Send(1, &Reset{Slot: 1}, int(w.Fd())); err == nil {
		t.Errorf("Send with an fd the message does not carry = nil error")
	}

	// A datagram that breaks the protocol, with an fd: the fd is closed
	// by Recv, and the error says protocol.
	raw := Marshal(1, &Reset{Slot: 1})
	if _, _, err := a.c.WriteMsgUnix(raw, unix.UnixRights(int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, fds, err := b.Recv(); !errors.Is(err, ErrProtocol) || fds != nil {
		t.Errorf("Recv(reset with an fd) = %v, %v; want ErrProtocol", fds, err)
	}
	// An oversized datagram.
	if _, err := a.c.Write(make([]byte, maxMessage+10)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.Recv(); !errors.Is(err, ErrProtocol) {
		t.Errorf("Recv(oversized) = %v, want ErrProtocol", err)
	}
	a.Close()
	if _, _, _, err := b.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Recv after the peer closed = %v, want io.EOF", err)
	}
}

// FuzzReplyBodies: the hello and extract reply bodies (from a worker,
// untrusted; each with an optional field appended) decode any bytes
// without a panic, every error wraps ErrProtocol, and what decodes
// encodes back to the same bytes.
func FuzzReplyBodies(f *testing.F) {
	for _, h := range []HelloReply{{Name: "basic", ComputeUnits: 1, MaxWorkGroup: 4096, MaxAllocBytes: 1 << 30},
		{Name: "pthread", ComputeUnits: 2, Features: Features}} {
		f.Add(h.EncodeBody(), true)
	}
	for _, x := range []ExtractReply{{Programs: 1, BufferBytes: 2}, {Buffers: 3, GuestBytes: 8192}} {
		f.Add(x.EncodeBody(), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, hello bool) {
		var again []byte
		var err error
		if hello {
			var h HelloReply
			if h, err = DecodeHelloReply(b); err == nil {
				again = h.EncodeBody()
			}
		} else {
			var x ExtractReply
			if x, err = DecodeExtractReply(b); err == nil {
				again = x.EncodeBody()
			}
		}
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		// A zero optional field written out explicitly decodes to the
		// same value as one left out: that one re-encodes shorter.
		if !bytes.Equal(again, b) && !bytes.HasPrefix(b, again) {
			t.Fatalf("%x decodes and encodes back as %x", b, again)
		}
	})
}

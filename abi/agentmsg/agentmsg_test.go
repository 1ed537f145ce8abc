package agentmsg

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func samples() []Message {
	return []Message{
		&Hello{MinVersion: 1, MaxVersion: 1, Features: FeatureWatch | FeatureHints, Ident: "vgpu-agent"},
		&Hello{MinVersion: 1, MaxVersion: 3},
		&Watch{Index: 0xfffffff0},
		&Completed{Done: 7},
		&Hints{PeriodNs: 1e8, MeanSliceNs: 3e6, WaitPPM: 500_000, PreemptPPM: 900_000, VCPUs: 2},
		&GuestStats{UptimeNs: 1, User: 2, Nice: 3, System: 4, Idle: 5, IOWait: 6, IRQ: 7, SoftIRQ: 8, Steal: 9},
		&Ping{Cookie: 42},
		&Pong{Cookie: 42},
		&Stopping{DrainMs: 10_000},
		&Quiesce{Cookie: 0x0102030405060708, DeadlineMs: 30_000},
		&Quiesced{Cookie: 1, Status: MigrationOK, Programs: 2},
		&Quiesced{Cookie: 2, Status: MigrationTimeout, Programs: 1},
		&Resume{Cookie: 3, Flags: ResumeReplugged, DeadlineMs: 60_000},
		&Resume{Cookie: 4},
		&Resumed{Cookie: 3, Status: MigrationFailed},
		&Resumed{Cookie: 5, Status: 77, Programs: 9}, // unknown statuses decode (and count as failed)
		&Unknown{T: TypeMigrationLast, Payload: []byte{1, 2, 3}},
		&Unknown{T: 0x7777},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		b := Marshal(m)
		got, n, err := Decode(b)
		if err != nil || n != len(b) {
			t.Fatalf("Decode(Marshal(%v)) = %d, %v, want %d, nil", m.Type(), n, err, len(b))
		}
		if diff := cmp.Diff(m, got); diff != "" {
			t.Errorf("Decode(Marshal(%v)) differs (-want +got):\n%s", m.Type(), diff)
		}
	}
}

func TestReaderStream(t *testing.T) {
	var stream []byte
	for _, m := range samples() {
		stream = Append(stream, m)
	}
	r := NewReader(bytes.NewReader(stream))
	for _, want := range samples() {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("Read() = %v, want %v", err, want.Type())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Read() differs (-want +got):\n%s", diff)
		}
	}
	if _, err := r.Read(); !errors.Is(err, io.EOF) {
		t.Errorf("Read() at end = %v, want io.EOF", err)
	}
}

// TestLayout pins the wire bytes of one message of each kind.
func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		m    Message
		want []byte
	}{
		{&Watch{Index: 0x01020304}, []byte{0x56, 0x47, 2, 0, 4, 0, 0, 0, 4, 3, 2, 1}},
		{&Completed{Done: 5}, []byte{0x56, 0x47, 3, 0, 4, 0, 0, 0, 5, 0, 0, 0}},
		{&Hello{MinVersion: 1, MaxVersion: 2, Features: 1, Ident: "ab"}, []byte{0x56, 0x47, 1, 0, 12, 0, 0, 0, 1, 0, 2, 0, 1, 0, 0, 0, 2, 0, 'a', 'b'}},
		{&Stopping{DrainMs: 0x01020304}, []byte{0x56, 0x47, 8, 0, 8, 0, 0, 0, 4, 3, 2, 1, 0, 0, 0, 0}},
		{&Quiesce{Cookie: 0x0807060504030201, DeadlineMs: 0x0a0b0c0d}, []byte{0x56, 0x47, 0, 1, 16, 0, 0, 0,
			1, 2, 3, 4, 5, 6, 7, 8, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0, 0, 0}},
		{&Quiesced{Cookie: 9, Status: MigrationFailed, Programs: 3}, []byte{0x56, 0x47, 1, 1, 16, 0, 0, 0,
			9, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}},
		{&Resume{Cookie: 9, Flags: ResumeReplugged, DeadlineMs: 1000}, []byte{0x56, 0x47, 2, 1, 16, 0, 0, 0,
			9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0xe8, 3, 0, 0}},
		{&Resumed{Cookie: 9, Status: MigrationTimeout, Programs: 1}, []byte{0x56, 0x47, 3, 1, 16, 0, 0, 0,
			9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}},
	} {
		if got := Marshal(tc.m); !bytes.Equal(got, tc.want) {
			t.Errorf("Marshal(%v) = % x, want % x", tc.m.Type(), got, tc.want)
		}
	}
	if got := len(Marshal(&Hints{})); got != HeaderSize+32 {
		t.Errorf("len(Marshal(Hints)) = %d, want %d", got, HeaderSize+32)
	}
	if got := len(Marshal(&GuestStats{})); got != HeaderSize+72 {
		t.Errorf("len(Marshal(GuestStats)) = %d, want %d", got, HeaderSize+72)
	}
}

func TestMalformed(t *testing.T) {
	hdr := func(magic, typ uint16, n uint32) []byte {
		b := make([]byte, HeaderSize)
		le.PutUint16(b, magic)
		le.PutUint16(b[2:], typ)
		le.PutUint32(b[4:], n)
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short header", []byte{0x56, 0x47, 1}},
		{"bad magic", hdr(0x1234, 2, 4)},
		{"huge length", hdr(Magic, 2, MaxPayload+1)},
		{"watch too short", append(hdr(Magic, 2, 3), 1, 2, 3)},
		{"watch too long", append(hdr(Magic, 2, 5), 1, 2, 3, 4, 5)},
		{"hello ident past payload", append(hdr(Magic, 1, 10), 1, 0, 1, 0, 0, 0, 0, 0, 9, 0)},
		{"hello version 0", append(hdr(Magic, 1, 10), 0, 0, 1, 0, 0, 0, 0, 0, 0, 0)},
		{"hello min > max", append(hdr(Magic, 1, 10), 3, 0, 2, 0, 0, 0, 0, 0, 0, 0)},
		{"hints wait > 100%", Marshal(&Hints{WaitPPM: 1_000_001})},
		{"quiesce too short", append(hdr(Magic, uint16(TypeQuiesce), 12), make([]byte, 12)...)},
		{"quiesced too long", append(hdr(Magic, uint16(TypeQuiesced), 17), make([]byte, 17)...)},
		{"resume empty", hdr(Magic, uint16(TypeResume), 0)},
		{"resumed too short", append(hdr(Magic, uint16(TypeResumed), 8), make([]byte, 8)...)},
		{"stopping too short", append(hdr(Magic, uint16(TypeStopping), 4), 1, 0, 0, 0)},
		{"stopping reserved", append(hdr(Magic, uint16(TypeStopping), 8), 1, 0, 0, 0, 1, 0, 0, 0)},
		{"quiesce reserved", append(hdr(Magic, uint16(TypeQuiesce), 16), 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0)},
	} {
		m, _, err := Decode(tc.b)
		if !errors.Is(err, ErrMalformed) || m != nil {
			t.Errorf("%s: Decode(% x) = %v, %v, want nil, ErrMalformed", tc.name, tc.b, m, err)
		}
		if _, err := NewReader(bytes.NewReader(tc.b)).Read(); err == nil {
			t.Errorf("%s: Read() = nil error", tc.name)
		}
	}
	// A truncated frame is not malformed, just incomplete.
	b := Marshal(&Watch{Index: 1})
	if _, _, err := Decode(b[:len(b)-1]); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Decode(truncated) = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := NewReader(bytes.NewReader(b[:len(b)-1])).Read(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Read(truncated) = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		min, max uint16
		want     uint16
		err      error
	}{
		{1, 1, 1, nil},
		{1, 9, Version, nil},
		{Version + 1, Version + 2, 0, ErrVersion},
	} {
		got, err := Negotiate(&Hello{MinVersion: tc.min, MaxVersion: tc.max})
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Negotiate(%d..%d) = %d, %v, want %d, %v", tc.min, tc.max, got, err, tc.want, tc.err)
		}
	}
}

func TestTypeNames(t *testing.T) {
	for _, m := range samples() {
		if s := m.Type().String(); s == "" {
			t.Errorf("Type(%d).String() is empty", uint16(m.Type()))
		}
	}
	if got, want := TypeReconfigFirst.String(), "reconfig-0x200"; got != want {
		t.Errorf("TypeReconfigFirst.String() = %q, want %q", got, want)
	}
	for typ, want := range map[Type]string{TypeQuiesce: "quiesce", TypeQuiesced: "quiesced", TypeResume: "resume",
		TypeResumed: "resumed", 0x0104: "migration-0x104"} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%#x).String() = %q, want %q", uint16(typ), got, want)
		}
	}
	if got := MigrationStatus(7).String(); got != "migration-status-7" || MigrationTimeout.String() != "timeout" {
		t.Errorf("MigrationStatus strings: %q, %q", got, MigrationTimeout.String())
	}
}

// TestMigrationTypes pins the type numbers of the migration messages
// (docs/agent-channel.md "Messages") and the feature bit.
func TestMigrationTypes(t *testing.T) {
	for _, tc := range []struct {
		m    Message
		want Type
	}{{&Quiesce{}, 0x0100}, {&Quiesced{}, 0x0101}, {&Resume{}, 0x0102}, {&Resumed{}, 0x0103}} {
		if got := tc.m.Type(); got != tc.want || got < TypeMigrationFirst || got > TypeMigrationLast {
			t.Errorf("%T.Type() = %#x, want %#x", tc.m, uint16(got), uint16(tc.want))
		}
	}
	if FeatureMigration != 8 {
		t.Errorf("FeatureMigration = %d, want 8", FeatureMigration)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		f.Add(Marshal(m))
	}
	f.Add([]byte{0x56, 0x47, 1, 0, 0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := Decode(b)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode error %v with message %+v", err, m)
			}
			return
		}
		if n < HeaderSize || n > len(b) {
			t.Fatalf("Decode used %d of %d bytes", n, len(b))
		}
		// Decode -> Marshal -> Decode is stable.
		again, n2, err := Decode(Marshal(m))
		if err != nil {
			t.Fatalf("re-decode of %v: %v", m.Type(), err)
		}
		if diff := cmp.Diff(m, again); diff != "" || n2 != len(Marshal(m)) {
			t.Fatalf("re-decode of %v differs:\n%s", m.Type(), diff)
		}
	})
}

func FuzzReader(f *testing.F) {
	var stream []byte
	for _, m := range samples() {
		stream = Append(stream, m)
	}
	f.Add(stream)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b))
		for i := 0; i < len(b); i++ {
			m, err := r.Read()
			if err != nil {
				if m != nil {
					t.Fatalf("Read error %v with message", err)
				}
				return
			}
		}
	})
}

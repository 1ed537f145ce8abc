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
		&Quiesce{Cookie: 6, DeadlineMs: 1, Flags: QuiesceInPlace},
		&Quiesced{Cookie: 1, Status: MigrationOK, Programs: 2},
		&Quiesced{Cookie: 2, Status: MigrationTimeout, Programs: 1},
		&Resume{Cookie: 3, Flags: ResumeReplugged, DeadlineMs: 60_000},
		&Resume{Cookie: 4},
		&Resumed{Cookie: 3, Status: MigrationFailed},
		&Resumed{Cookie: 5, Status: 77, Programs: 9}, // unknown statuses decode (and count as failed)
		&Resources{},
		&Resources{Decls: []Declaration{
			{PID: 42, MinCUs: 1, PrefCUs: 4, MinMem: 64 << 20, PrefMem: 256 << 20, Name: "vgpu-iterate"},
			{PID: 43, MinMem: 1, PrefMem: 1, Name: "exactly-thirty-two-bytes-long!!!"},
			{PID: 7},
		}},
		&Checkpoint{Cookie: 9, DeadlineMs: 30_000, To: Limits{MemBytes: 1 << 30, ComputeUnits: 8, Device: "pocl cpu", Profile: "vgpu-1g"}},
		&Checkpoint{Cookie: 10},
		&Checkpointed{Cookie: 9, Status: MigrationOK, Programs: 3},
		&Checkpointed{Cookie: 10, Status: ReconfigRefused},
		&Reconfigure{Cookie: 11, Flags: ReconfigureAborted, DeadlineMs: 1000, Now: Limits{MemBytes: 512 << 20, ComputeUnits: 2, Device: "d", Profile: "p"}},
		&Reconfigure{Cookie: 12, Flags: 0x80, Now: Limits{Device: "exactly-thirty-two-bytes-long!!!"}},
		&Reconfigured{Cookie: 11, Status: MigrationTimeout, Programs: 1},
		&Unknown{T: TypeMigrationLast, Payload: []byte{1, 2, 3}},
		&Unknown{T: 0x0206, Payload: []byte{9}},
		&Unknown{T: TypeReconfigLast},
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
		{&Quiesce{Cookie: 1, Flags: QuiesceInPlace}, []byte{0x56, 0x47, 0, 1, 16, 0, 0, 0,
			1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}},
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
	for _, tc := range []struct {
		m    Message
		want []byte
	}{
		{&Checkpointed{Cookie: 9, Status: ReconfigRefused, Programs: 1}, []byte{0x56, 0x47, 2, 2, 16, 0, 0, 0,
			9, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0}},
		{&Reconfigured{Cookie: 9, Status: MigrationOK, Programs: 2}, []byte{0x56, 0x47, 4, 2, 16, 0, 0, 0,
			9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0}},
	} {
		if got := Marshal(tc.m); !bytes.Equal(got, tc.want) {
			t.Errorf("Marshal(%v) = % x, want % x", tc.m.Type(), got, tc.want)
		}
	}
	// Checkpoint: cookie, deadline, reserved, then the limits.
	cp := Marshal(&Checkpoint{Cookie: 0x0807060504030201, DeadlineMs: 0x0a0b0c0d,
		To: Limits{MemBytes: 0x1112131415161718, ComputeUnits: 0x21222324, Device: "dev", Profile: "prof"}})
	want := append([]byte{0x56, 0x47, 1, 2, 96, 0, 0, 0,
		1, 2, 3, 4, 5, 6, 7, 8, 0x0d, 0x0c, 0x0b, 0x0a, 0, 0, 0, 0,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, 0x24, 0x23, 0x22, 0x21, 0, 0, 0, 0},
		namefield("dev")...)
	want = append(want, namefield("prof")...)
	if !bytes.Equal(cp, want) {
		t.Errorf("Marshal(checkpoint) =\n% x, want\n% x", cp, want)
	}
	// Reconfigure: cookie, flags, deadline, then the limits.
	rc := Marshal(&Reconfigure{Cookie: 2, Flags: ReconfigureAborted, DeadlineMs: 1000, Now: Limits{MemBytes: 1, ComputeUnits: 2}})
	if !bytes.Equal(rc[:HeaderSize+28], []byte{0x56, 0x47, 3, 2, 96, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0xe8, 3, 0, 0,
		1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0}) || len(rc) != HeaderSize+96 {
		t.Errorf("Marshal(reconfigure) = % x", rc)
	}
	// Resources: count, reserved, then 64-byte entries.
	rs := Marshal(&Resources{Decls: []Declaration{{PID: 0x01020304, MinCUs: 1, PrefCUs: 2, MinMem: 3, PrefMem: 4, Name: "ab"}}})
	want = append([]byte{0x56, 0x47, 0, 2, 72, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		4, 3, 2, 1, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
		3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0}, namefield("ab")...)
	if !bytes.Equal(rs, want) {
		t.Errorf("Marshal(resources) =\n% x, want\n% x", rs, want)
	}
	if got := len(Marshal(&Hints{})); got != HeaderSize+32 {
		t.Errorf("len(Marshal(Hints)) = %d, want %d", got, HeaderSize+32)
	}
	if got := len(Marshal(&GuestStats{})); got != HeaderSize+72 {
		t.Errorf("len(Marshal(GuestStats)) = %d, want %d", got, HeaderSize+72)
	}
}

// namefield is s as a NUL-padded name field.
func namefield(s string) []byte {
	b := make([]byte, NameLen)
	copy(b, s)
	return b
}

// TestReconfigEncoding: what the encoders make of values the layout
// cannot carry, and how Decode reads a preferred amount of 0.
func TestReconfigEncoding(t *testing.T) {
	long := "a-device-name-that-is-longer-than-thirty-two-bytes"
	got, _, err := Decode(Marshal(&Checkpoint{Cookie: 1, To: Limits{Device: long, Profile: "tab\there\x00é"}}))
	if err != nil {
		t.Fatal(err)
	}
	if l := got.(*Checkpoint).To; l.Device != long[:NameLen] || l.Profile != "tab?here???" {
		t.Errorf("names written as %q, %q; want %q, %q", l.Device, l.Profile, long[:NameLen], "tab?here???")
	}
	many := make([]Declaration, MaxDeclarations+5)
	for i := range many {
		many[i] = Declaration{PID: uint32(i), Name: long}
	}
	got, _, err = Decode(Marshal(&Resources{Decls: many}))
	if err != nil {
		t.Fatal(err)
	}
	ds := got.(*Resources).Decls
	if len(ds) != MaxDeclarations || ds[MaxDeclarations-1].PID != MaxDeclarations-1 || ds[0].Name != long[:NameLen] {
		t.Errorf("Resources of %d declarations decoded as %d, last pid %d, name %q", len(many), len(ds), ds[len(ds)-1].PID, ds[0].Name)
	}
	if len(Marshal(&Resources{Decls: many})) > HeaderSize+MaxPayload {
		t.Errorf("a full Resources exceeds MaxPayload")
	}
	got, _, err = Decode(Marshal(&Resources{Decls: []Declaration{{MinCUs: 3, MinMem: 5}}}))
	if err != nil {
		t.Fatal(err)
	}
	if d := got.(*Resources).Decls[0]; d.PrefCUs != 3 || d.PrefMem != 5 {
		t.Errorf("preferred 0 decoded as %d CUs, %d bytes; want the minimum, 3 and 5", d.PrefCUs, d.PrefMem)
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
		{"quiesce unknown flag", append(hdr(Magic, uint16(TypeQuiesce), 16), 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0)},
		{"resources too short", append(hdr(Magic, uint16(TypeResources), 4), 0, 0, 0, 0)},
		{"resources count past payload", resources(1, 0)},
		{"resources count over max", resources(MaxDeclarations+1, MaxDeclarations+1)},
		{"resources entries past count", resources(0, 1)},
		{"resources reserved", edit(resources(0, 0), 4, 1)},
		{"resources entry reserved", edit(resources(1, 1), 8+12, 1)},
		{"resources min mem > pref", Marshal(&Resources{Decls: []Declaration{{MinMem: 10, PrefMem: 9}}})},
		{"resources min cus > pref", Marshal(&Resources{Decls: []Declaration{{MinCUs: 2, PrefCUs: 1}}})},
		{"resources name control byte", edit(resources(1, 1), 8+32+1, 0x07)},
		{"resources name high byte", edit(resources(1, 1), 8+32, 0xc3)},
		{"resources name after nul", edit(resources(1, 1), 8+32+5, 'x')},
		{"checkpoint too short", append(hdr(Magic, uint16(TypeCheckpoint), 16), make([]byte, 16)...)},
		{"checkpoint reserved", edit(Marshal(&Checkpoint{}), 12, 1)},
		{"checkpoint limits reserved", edit(Marshal(&Checkpoint{}), 16+12, 1)},
		{"checkpoint device name", edit(Marshal(&Checkpoint{}), 16+16, 0x7f)},
		{"checkpoint profile after nul", edit(Marshal(&Checkpoint{To: Limits{Profile: "p"}}), 16+48+2, 'q')},
		{"checkpointed too long", append(hdr(Magic, uint16(TypeCheckpointed), 17), make([]byte, 17)...)},
		{"reconfigure too long", append(hdr(Magic, uint16(TypeReconfigure), 97), make([]byte, 97)...)},
		{"reconfigure profile name", edit(Marshal(&Reconfigure{}), 16+48+31, 0x80)},
		{"reconfigured empty", hdr(Magic, uint16(TypeReconfigured), 0)},
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

// resources is a Resources frame that says count entries and carries n
// zeroed ones (named "abcd").
func resources(count uint32, n int) []byte {
	p := make([]byte, 8+64*n)
	le.PutUint32(p, count)
	for i := range n {
		copy(p[8+64*i+32:], "abcd")
	}
	b := make([]byte, HeaderSize, HeaderSize+len(p))
	le.PutUint16(b, Magic)
	le.PutUint16(b[2:], uint16(TypeResources))
	le.PutUint32(b[4:], uint32(len(p)))
	return append(b, p...)
}

// edit sets payload byte off of frame b to v.
func edit(b []byte, off int, v byte) []byte {
	b[HeaderSize+off] = v
	return b
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
	if got, want := TypeReconfigLast.String(), "reconfig-0x2ff"; got != want {
		t.Errorf("TypeReconfigLast.String() = %q, want %q", got, want)
	}
	for typ, want := range map[Type]string{TypeQuiesce: "quiesce", TypeQuiesced: "quiesced", TypeResume: "resume",
		TypeResumed: "resumed", 0x0104: "migration-0x104", TypeResources: "resources", TypeCheckpoint: "checkpoint",
		TypeCheckpointed: "checkpointed", TypeReconfigure: "reconfigure", TypeReconfigured: "reconfigured",
		0x0205: "reconfig-0x205"} {
		if got := typ.String(); got != want {
			t.Errorf("Type(%#x).String() = %q, want %q", uint16(typ), got, want)
		}
	}
	if got := MigrationStatus(7).String(); got != "migration-status-7" || MigrationTimeout.String() != "timeout" {
		t.Errorf("MigrationStatus strings: %q, %q", got, MigrationTimeout.String())
	}
	if got := ReconfigRefused.String(); got != "refused" {
		t.Errorf("ReconfigRefused.String() = %q, want refused", got)
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

// TestReconfigTypes pins the type numbers of the reconfiguration
// messages, the feature bit and the refused status.
func TestReconfigTypes(t *testing.T) {
	for _, tc := range []struct {
		m    Message
		want Type
	}{{&Resources{}, 0x0200}, {&Checkpoint{}, 0x0201}, {&Checkpointed{}, 0x0202}, {&Reconfigure{}, 0x0203}, {&Reconfigured{}, 0x0204}} {
		if got := tc.m.Type(); got != tc.want || got < TypeReconfigFirst || got > TypeReconfigLast {
			t.Errorf("%T.Type() = %#x, want %#x", tc.m, uint16(got), uint16(tc.want))
		}
	}
	if FeatureReconfig != 16 || ReconfigRefused != 3 || ReconfigureAborted != 1 {
		t.Errorf("FeatureReconfig = %d, ReconfigRefused = %d, ReconfigureAborted = %d; want 16, 3, 1",
			FeatureReconfig, ReconfigRefused, ReconfigureAborted)
	}
	// Types of the range not defined here are skipped.
	m, _, err := Decode(Marshal(&Unknown{T: 0x0206, Payload: make([]byte, 100)}))
	if u, ok := m.(*Unknown); err != nil || !ok || len(u.Payload) != 100 {
		t.Errorf("Decode(0x0206 frame) = %#v, %v; want Unknown", m, err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		f.Add(Marshal(m))
	}
	f.Add([]byte{0x56, 0x47, 1, 0, 0xff, 0xff, 0, 0})
	f.Add(resources(2, 2))
	f.Add(resources(MaxDeclarations, MaxDeclarations))
	f.Add(Marshal(&Resources{Decls: []Declaration{{MinCUs: 3, MinMem: 5}}})) // preferred 0
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

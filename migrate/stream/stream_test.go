package stream

import (
	"bytes"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bytesEqual makes cmp compare byte slices at once, not byte by byte;
// nil and empty still differ.
var bytesEqual = cmp.Comparer(func(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) })

// tb is what the test helpers need of a *testing.T, *testing.F or
// *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// compressible returns n bytes that zstd shrinks well but are not zero.
func compressible(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte("migrate-me "[i%11])
	}
	return b
}

// random returns n bytes zstd cannot shrink.
func random(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// samples has one record of every type a caller writes, fields away from
// zero, and BufferData in each encoding.
func samples() []Record {
	return []Record{
		&Instance{ID: "0b0e5c2e-0b61-4bde-8bb5-5ea1e3d1b0a1", Profile: "vgpu-small", Domain: "team-a",
			Device: "pthread-skylake", MemBytes: 256 << 20, ProgramBytes: 16 << 20, MaxAlloc: 64 << 20, ComputeUnits: 2},
		&Round{Number: 1},
		&Program{Handle: 3, Flags: 0x8001, Source: []byte("__kernel void k(__global int *p) { p[0] = 1; }"), Options: []byte("-cl-fast-relaxed-math")},
		&Program{Handle: 4, Source: []byte("__kernel void z() {}")},
		&Buffer{Handle: 5, Flags: 0x3, Size: 1 << 20},
		&BufferData{Handle: 5, Offset: 4096, Data: make([]byte, 3000)},
		&BufferData{Handle: 5, Offset: 8192, Data: compressible(2000)},
		&BufferData{Handle: 5, Offset: 16384, Data: random(1, 300)},
		&Round{Number: 2, Final: true},
		&Ring{Enabled: true, Slots: 64, Base: 0x10000, ComplBase: 0x20000, Head: 0xfffffff0, Tail: 0xfffffff2,
			Completed: 0xffffffef, ErrStatus: 11, ErrCount: 2},
		&BufferFree{Handle: 6},
		&ProgramFree{Handle: 4},
		&Context{ID: 3, Slots: 64, Ring: 0x30000, Compl: 0x31000, Shadow: 0x31ffc, MemLimit: 1 << 20},
		&Buffer{Handle: 5, Size: 64},
		&Context{ID: 64, Destroyed: true},
		&Context{},
		&GuestPages{GPA: 0x7000, Data: random(2, 2*GuestPageSize)},
	}
}

// encode writes recs as a stream.
func encode(t tb, recs ...Record) []byte {
	t.Helper()
	b, _ := encodeStats(t, recs...)
	return b
}

// encodeStats writes recs as a stream; it returns the stream and the
// Writer's Stats once closed.
func encodeStats(t tb, recs ...Record) ([]byte, Stats) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatalf("Write(%v) = %v", r.Type(), err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	return buf.Bytes(), w.Stats()
}

// readAll reads records until io.EOF or an error; it fails if Next
// returns a record with an error.
func readAll(t tb, b []byte) ([]Record, error) {
	t.Helper()
	r := NewReader(bytes.NewReader(b))
	var recs []Record
	for {
		rec, err := r.Next()
		if err != nil {
			if rec != nil {
				t.Fatalf("Next() = %+v with error %v", rec, err)
			}
			if err == io.EOF {
				err = nil
			}
			return recs, err
		}
		recs = append(recs, rec)
	}
}

// content drops the Header and End a Reader returns around the records.
func content(t tb, recs []Record) []Record {
	t.Helper()
	if len(recs) < 2 || recs[0].Type() != TypeHeader || recs[len(recs)-1].Type() != TypeEnd {
		t.Fatalf("stream of %d records does not run from header to end", len(recs))
	}
	return recs[1 : len(recs)-1]
}

func TestRoundTrip(t *testing.T) {
	seen := map[Type]bool{TypeHeader: true, TypeEnd: true}
	for _, rec := range samples() {
		seen[rec.Type()] = true
		t.Run(rec.Type().String(), func(t *testing.T) {
			b := encode(t, rec)
			got, err := readAll(t, b)
			if err != nil {
				t.Fatalf("read back: %v", err)
			}
			want := []Record{
				&Header{Major: Major, Minor: Minor},
				rec,
				&End{Records: 2, PayloadBytes: uint64(len(b) - 3*HeaderSize - endSize)},
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("round trip (-sent +got):\n%s", d)
			}
		})
	}
	for ty := Type(1); ty < numTypes; ty++ {
		if !seen[ty] || !ty.known() || strings.HasPrefix(ty.String(), "type(") {
			t.Errorf("type %d: no sample or name", ty)
		}
	}
	if got := Type(numTypes).String(); got != "type(13)" {
		t.Errorf("Type(13).String() = %q", got)
	}

	// All of them in one stream.
	got, err := readAll(t, encode(t, samples()...))
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if d := cmp.Diff(samples(), content(t, got)); d != "" {
		t.Errorf("round trip (-sent +got):\n%s", d)
	}
}

// TestLayout pins the framing and every fixed payload size.
func TestLayout(t *testing.T) {
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("CRC-32C check value = %#x, want 0xe3069283", got)
	}
	b := encode(t, &Round{Number: 7, Final: true})
	crc := func(p string) string {
		raw, _ := hex.DecodeString(p)
		return hex.EncodeToString(le.AppendUint32(nil, crc32.Checksum(raw, castagnoli)))
	}
	hdrP := hex.EncodeToString([]byte(Magic)) + "0100" + "0200" + "00000000"
	roundP := "07000000" + "01000000"
	endP := "0200000000000000" + "1800000000000000"
	want := "0100" + "0000" + "10000000" + crc(hdrP) + "00000000" + hdrP +
		"0300" + "0000" + "08000000" + crc(roundP) + "00000000" + roundP +
		"0a00" + "0000" + "10000000" + crc(endP) + "00000000" + endP
	if got := hex.EncodeToString(b); got != want {
		t.Errorf("stream =\n%s\nwant\n%s", got, want)
	}

	fixed := []struct {
		rec  Record
		size int
	}{
		{&Header{Major: 1}, headerSize},
		{&Instance{ID: "a", MemBytes: 1}, instanceFixed + 1},
		{&Round{}, roundSize},
		{&Program{Handle: 1, Source: []byte("x")}, programFixed + 1},
		{&ProgramFree{Handle: 1}, handleSize},
		{&Buffer{Handle: 1, Size: 1}, bufferSize},
		{&BufferData{Handle: 1, Data: []byte{1}}, bufferDataFixed + 1},
		{&BufferFree{Handle: 1}, handleSize},
		{&Ring{}, ringSize},
		{&Context{}, contextSize},
		{&GuestPages{Data: make([]byte, GuestPageSize)}, guestPagesFixed + GuestPageSize},
		{&End{}, endSize},
	}
	sizes := map[Type]int{TypeHeader: 16, TypeInstance: 41, TypeRound: 8, TypeProgram: 17, TypeProgramFree: 4,
		TypeBuffer: 16, TypeBufferData: 21, TypeBufferFree: 4, TypeRing: 48, TypeContext: 48, TypeEnd: 16,
		TypeGuestPages: 16 + 4096}
	for _, f := range fixed {
		if got := len(f.rec.appendPayload(nil)); got != f.size || got != sizes[f.rec.Type()] {
			t.Errorf("%v payload = %d bytes, want %d", f.rec.Type(), got, sizes[f.rec.Type()])
		}
		if got := f.rec.Type().maxPayload(); got > MaxPayload || got < f.size {
			t.Errorf("%v maxPayload() = %d", f.rec.Type(), got)
		}
	}
	if MaxPayload < bufferDataFixed+MaxChunk || MaxPayload < programFixed+MaxSource+MaxOptions {
		t.Errorf("MaxPayload %d cannot hold a full chunk or program", MaxPayload)
	}
}

// rec is one record as bytes: tests rebuild streams from these.
type rec struct {
	t     Type
	flags uint16
	p     []byte
}

// split cuts a valid stream into its records.
func split(t tb, b []byte) []rec {
	t.Helper()
	var rs []rec
	for len(b) > 0 {
		if len(b) < HeaderSize {
			t.Fatalf("split: %d bytes left", len(b))
		}
		n := HeaderSize + int(le.Uint32(b[4:]))
		rs = append(rs, rec{t: Type(le.Uint16(b)), flags: le.Uint16(b[2:]), p: bytes.Clone(b[HeaderSize:n])})
		b = b[n:]
	}
	return rs
}

func (r rec) bytes() []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(r.p))
	recordHeader{Type: r.t, Flags: r.flags, Len: uint32(len(r.p)), CRC: crc32.Checksum(r.p, castagnoli)}.put(b)
	return append(b, r.p...)
}

// join assembles records with valid CRCs; with fixEnd the last record is
// replaced by an End with the right totals.
func join(rs []rec, fixEnd bool) []byte {
	var b []byte
	var payload uint64
	for i, r := range rs {
		if fixEnd && i == len(rs)-1 {
			r = rec{t: TypeEnd, p: (&End{Records: uint64(i), PayloadBytes: payload}).appendPayload(nil)}
		}
		payload += uint64(len(r.p))
		b = append(b, r.bytes()...)
	}
	return b
}

// index returns the position of the first record of type t.
func index(t tb, rs []rec, ty Type) int {
	for i, r := range rs {
		if r.t == ty {
			return i
		}
	}
	t.Fatalf("no %v record", ty)
	return -1
}

// zstdFrame builds a single-segment zstd frame by hand: a 1-byte frame
// content size fcs and one last RLE block of n bytes of 'A'.
func zstdFrame(fcs byte, n int) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, fcs}
	h := uint32(n)<<3 | 1<<1 | 1
	return append(b, byte(h), byte(h>>8), byte(h>>16), 'A')
}

func chunkPayload(enc Encoding, rawLen int, data []byte) []byte {
	return append(appendChunkFixed(nil, 5, enc, 0, rawLen), data...)
}

func TestReaderRejects(t *testing.T) {
	good := encode(t, samples()...)
	base := split(t, good)
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	// payload replaces the payload of the first record of type ty and
	// fixes CRCs and End's totals, so that only the field is wrong.
	payload := func(ty Type, f func(p []byte) []byte) []byte {
		rs := split(t, good)
		i := index(t, rs, ty)
		rs[i].p = f(rs[i].p)
		return join(rs, true)
	}
	// insert puts r before the first record of type before.
	insert := func(before Type, r rec) []byte {
		rs := split(t, good)
		i := index(t, rs, before)
		rs = append(rs[:i], append([]rec{r}, rs[i:]...)...)
		return join(rs, true)
	}
	put32 := func(off int, v uint32) func(p []byte) []byte {
		return func(p []byte) []byte { le.PutUint32(p[off:], v); return p }
	}
	put16 := func(off int, v uint16) func(p []byte) []byte {
		return func(p []byte) []byte { le.PutUint16(p[off:], v); return p }
	}
	put64 := func(off int, v uint64) func(p []byte) []byte {
		return func(p []byte) []byte { le.PutUint64(p[off:], v); return p }
	}
	chunk := func(p []byte) func([]byte) []byte { return func([]byte) []byte { return p } }
	zeros1M := func() []byte {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		return enc.EncodeAll(make([]byte, 1<<20), nil)
	}()

	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"flipped payload byte", mod(func(b []byte) []byte { b[2*HeaderSize+headerSize+3] ^= 0x40; return b }), ErrCorrupt},
		{"flipped header payload byte", mod(func(b []byte) []byte { b[HeaderSize+8] ^= 0x02; return b }), ErrCorrupt},
		{"flipped checksum", mod(func(b []byte) []byte { b[8] ^= 1; return b }), ErrCorrupt},
		{"flipped later checksum", mod(func(b []byte) []byte { b[HeaderSize+headerSize+8] ^= 1; return b }), ErrCorrupt},
		{"bad magic", payload(TypeHeader, func(p []byte) []byte { p[0] = 'X'; return p }), ErrCorrupt},
		{"header too short for its magic", payload(TypeHeader, func(p []byte) []byte { return p[:6] }), ErrCorrupt},
		{"major version 2", payload(TypeHeader, put16(8, 2)), ErrVersion},
		{"major version 2, longer header, flags", func() []byte {
			p := append((&Header{Major: 2}).appendPayload(nil), 1, 2, 3, 4)
			return rec{t: TypeHeader, flags: 0x80, p: p}.bytes()
		}(), ErrVersion},
		{"major version 0", payload(TypeHeader, put16(8, 0)), ErrVersion},
		{"header reserved", payload(TypeHeader, put32(12, 1)), ErrCorrupt},
		{"header longer", payload(TypeHeader, func(p []byte) []byte { return append(p, 0) }), ErrCorrupt},
		{"first record not header", join(base[1:], true), ErrCorrupt},
		{"second header", insert(TypeRound, base[0]), ErrCorrupt},
		{"end record count", func() []byte {
			rs := split(t, good)
			le.PutUint64(rs[len(rs)-1].p[0:], uint64(len(rs)))
			return join(rs, false)
		}(), ErrCorrupt},
		{"end payload bytes", func() []byte {
			rs := split(t, good)
			le.PutUint64(rs[len(rs)-1].p[8:], 1)
			return join(rs, false)
		}(), ErrCorrupt},
		{"end missing a skipped record", func() []byte {
			rs := split(t, good)
			rs = append(rs[:2], append([]rec{{t: 999, flags: FlagSkippable, p: []byte("x")}}, rs[2:]...)...)
			b := join(rs[:len(rs)-1], false)
			return append(b, good[len(good)-HeaderSize-endSize:]...)
		}(), ErrCorrupt},
		{"record header reserved", mod(func(b []byte) []byte { b[12] = 1; return b }), ErrCorrupt},
		{"record header flags", mod(func(b []byte) []byte { b[2] = 2; return b }), ErrCorrupt},
		{"later record header reserved", mod(func(b []byte) []byte { b[HeaderSize+headerSize+13] = 1; return b }), ErrCorrupt},
		{"unknown type", insert(TypeRound, rec{t: 99, p: []byte{1, 2, 3}}), ErrCorrupt},
		{"skippable empty record", insert(TypeRound, rec{t: 99, flags: FlagSkippable}), nil},
		{"length over MaxPayload", func() []byte {
			b := bytes.Clone(good[:HeaderSize+headerSize])
			h := make([]byte, HeaderSize)
			recordHeader{Type: 99, Flags: FlagSkippable, Len: MaxPayload + 1}.put(h)
			return append(b, h...)
		}(), ErrCorrupt},
		{"length over the type's", insert(TypeRound, rec{t: TypeRound, p: make([]byte, roundSize+1)}), ErrCorrupt},
		{"round short", insert(TypeRound, rec{t: TypeRound, p: make([]byte, roundSize-1)}), ErrCorrupt},
		{"round flags", payload(TypeRound, put32(4, 2)), ErrCorrupt},
		{"instance id empty", payload(TypeInstance, func([]byte) []byte {
			return (&Instance{MemBytes: 1}).appendPayload(nil)
		}), ErrCorrupt},
		{"instance id over limit", payload(TypeInstance, func([]byte) []byte {
			return (&Instance{ID: strings.Repeat("i", MaxInstanceID+1), MemBytes: 1}).appendPayload(nil)
		}), ErrCorrupt},
		{"instance device over limit", payload(TypeInstance, func([]byte) []byte {
			return (&Instance{ID: "i", Device: strings.Repeat("d", MaxDeviceName+1), MemBytes: 1}).appendPayload(nil)
		}), ErrCorrupt},
		{"instance id not UTF-8", payload(TypeInstance, func([]byte) []byte {
			return (&Instance{ID: "\xff", MemBytes: 1}).appendPayload(nil)
		}), ErrCorrupt},
		{"instance string length past the payload", payload(TypeInstance, func(p []byte) []byte {
			le.PutUint16(p, 60)
			return p[:20]
		}), ErrCorrupt},
		{"instance mem_bytes 0", payload(TypeInstance, func([]byte) []byte {
			return (&Instance{ID: "i"}).appendPayload(nil)
		}), ErrCorrupt},
		{"instance reserved", payload(TypeInstance, func(p []byte) []byte { p[len(p)-1] = 1; return p }), ErrCorrupt},
		{"instance trailing byte", payload(TypeInstance, func(p []byte) []byte { return append(p, 0) }), ErrCorrupt},
		{"program handle 0", payload(TypeProgram, put32(0, 0)), ErrCorrupt},
		{"program reserved", payload(TypeProgram, put16(6, 1)), ErrCorrupt},
		{"program src_len 0", payload(TypeProgram, func([]byte) []byte {
			return (&Program{Handle: 1}).appendPayload(nil)
		}), ErrCorrupt},
		{"program src_len over MaxSource", payload(TypeProgram, put32(8, MaxSource+1)), ErrCorrupt},
		{"program opts_len over MaxOptions", payload(TypeProgram, put32(12, MaxOptions+1)), ErrCorrupt},
		{"program lengths past the payload", payload(TypeProgram, put32(12, 1000)), ErrCorrupt},
		{"program trailing byte", payload(TypeProgram, func(p []byte) []byte { return append(p, 0) }), ErrCorrupt},
		{"program-free handle 0", payload(TypeProgramFree, put32(0, 0)), ErrCorrupt},
		{"buffer-free handle 0", payload(TypeBufferFree, put32(0, 0)), ErrCorrupt},
		{"buffer handle 0", payload(TypeBuffer, put32(0, 0)), ErrCorrupt},
		{"buffer size 0", payload(TypeBuffer, put64(8, 0)), ErrCorrupt},
		{"buffer size over MaxBufferSize", payload(TypeBuffer, put64(8, MaxBufferSize+1)), ErrCorrupt},
		{"chunk handle 0", payload(TypeBufferData, put32(0, 0)), ErrCorrupt},
		{"chunk encoding 3", payload(TypeBufferData, func(p []byte) []byte { p[4] = 3; return p }), ErrCorrupt},
		{"chunk reserved", payload(TypeBufferData, func(p []byte) []byte { p[7] = 1; return p }), ErrCorrupt},
		{"chunk raw_len 0", payload(TypeBufferData, chunk(chunkPayload(EncodingZero, 0, nil))), ErrCorrupt},
		{"chunk raw_len over MaxChunk", payload(TypeBufferData, chunk(chunkPayload(EncodingZero, MaxChunk+1, nil))), ErrCorrupt},
		{"chunk offset overflows", payload(TypeBufferData, put64(8, ^uint64(0)-10)), ErrCorrupt},
		{"chunk past MaxBufferSize", payload(TypeBufferData, put64(8, MaxBufferSize-1)), ErrCorrupt},
		{"chunk fixed fields short", payload(TypeBufferData, func(p []byte) []byte { return p[:bufferDataFixed-1] }), ErrCorrupt},
		{"raw chunk short", payload(TypeBufferData, chunk(chunkPayload(EncodingRaw, 10, make([]byte, 9)))), ErrCorrupt},
		{"raw chunk long", payload(TypeBufferData, chunk(chunkPayload(EncodingRaw, 10, make([]byte, 11)))), ErrCorrupt},
		{"zero chunk with data", payload(TypeBufferData, chunk(chunkPayload(EncodingZero, 10, []byte{0}))), ErrCorrupt},
		{"zstd chunk without frame", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 10, nil))), ErrCorrupt},
		{"zstd garbage", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 10, []byte("not a frame")))), ErrCorrupt},
		{"zstd bomb", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100, zeros1M))), ErrCorrupt},
		{"zstd frame declares raw_len, yields more", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100, zstdFrame(100, 200)))), ErrCorrupt},
		{"zstd frame declares raw_len, yields more than its window", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100, zstdFrame(100, 5000)))), ErrCorrupt},
		{"zstd frame declares raw_len, then a second frame", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100,
			append(zstdFrame(100, 100), zstdFrame(100, 100)...)))), ErrCorrupt},
		{"zstd frame declares raw_len, yields less", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100, zstdFrame(100, 50)))), ErrCorrupt},
		{"zstd frame declares less", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100, zstdFrame(50, 50)))), ErrCorrupt},
		{"zstd frame without content size", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100,
			[]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00, 0x23, 0x03, 0x00, 'A'}))), ErrCorrupt},
		{"zstd frame truncated", payload(TypeBufferData, chunk(chunkPayload(EncodingZstd, 100, zstdFrame(100, 100)[:8]))), ErrCorrupt},
		{"ring flags", payload(TypeRing, put32(0, 3)), ErrCorrupt},
		{"ring reserved", payload(TypeRing, put32(44, 1)), ErrCorrupt},
		{"context flags", payload(TypeContext, put32(4, 2)), ErrCorrupt},
		{"context reserved", payload(TypeContext, put32(12, 1)), ErrCorrupt},
		{"context id beyond 64", payload(TypeContext, put32(0, 65)), ErrCorrupt},
		{"guest pages unaligned", payload(TypeGuestPages, put64(0, 0x7001)), ErrCorrupt},
		{"guest pages wrap", payload(TypeGuestPages, put64(0, ^uint64(0)&^(GuestPageSize-1))), ErrCorrupt},
		{"guest pages count over the data", payload(TypeGuestPages, put32(8, 3)), ErrCorrupt},
		{"guest pages count 0", payload(TypeGuestPages, func(p []byte) []byte { return put32(8, 0)(p)[:guestPagesFixed] }), ErrCorrupt},
		{"guest pages part of a page", payload(TypeGuestPages, func(p []byte) []byte { return p[:len(p)-1] }), ErrCorrupt},
		{"guest pages reserved", payload(TypeGuestPages, put32(12, 1)), ErrCorrupt},
		{"guest pages fixed fields short", payload(TypeGuestPages, func(p []byte) []byte { return p[:guestPagesFixed-1] }), ErrCorrupt},
		{"context 0 destroyed", payload(TypeContext, func(p []byte) []byte { return put32(4, 1)(put32(0, 0)(p)) }), ErrCorrupt},
		{"end longer", func() []byte {
			rs := split(t, good)
			rs[len(rs)-1].p = append(rs[len(rs)-1].p, 0)
			return join(rs, false)
		}(), ErrCorrupt},
		{"record after end", append(bytes.Clone(good), good[HeaderSize+headerSize:]...), nil},
		{"end missing", good[:len(good)-HeaderSize-endSize], ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := readAll(t, tt.b)
			if tt.want == nil {
				// Streams that stay valid: checked for being read whole.
				if err != nil {
					t.Fatalf("read = %v, want no error", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("read = %v (after %d records), want %v", err, len(recs), tt.want)
			}
			t.Log(err)
			if n := sentinels(err); n != 1 {
				t.Errorf("error %q wraps %d of ErrVersion, ErrCorrupt, ErrTruncated", err, n)
			}
			if !strings.Contains(err.Error(), "record ") {
				t.Errorf("error %q does not name the record", err)
			}
		})
	}
}

// sentinels counts the Reader's sentinels err wraps.
func sentinels(err error) int {
	n := 0
	for _, s := range []error{ErrVersion, ErrCorrupt, ErrTruncated} {
		if errors.Is(err, s) {
			n++
		}
	}
	return n
}

func TestTruncated(t *testing.T) {
	good := encode(t, samples()...)
	for n := range len(good) {
		recs, err := readAll(t, good[:n])
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || sentinels(err) != 1 {
			t.Fatalf("read of the first %d of %d bytes = %v after %d records, want ErrTruncated", n, len(good), err, len(recs))
		}
	}
}

func TestReaderErrorsStick(t *testing.T) {
	good := encode(t, samples()...)
	r := NewReader(bytes.NewReader(good[:100]))
	var first error
	for range 20 {
		if _, err := r.Next(); err != nil {
			first = err
			break
		}
	}
	if !errors.Is(first, ErrTruncated) {
		t.Fatalf("Next() = %v, want ErrTruncated", first)
	}
	if rec, err := r.Next(); rec != nil || err != first {
		t.Errorf("Next() after an error = %v, %v; want nil, %v", rec, err, first)
	}

	// After End: io.EOF, and nothing past End is read.
	br := bytes.NewReader(append(bytes.Clone(good), "next"...))
	r = NewReader(br)
	for {
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("Next() = %v", err)
		}
		if rec.Type() == TypeEnd {
			break
		}
	}
	for range 2 {
		if rec, err := r.Next(); rec != nil || err != io.EOF {
			t.Errorf("Next() after End = %v, %v; want nil, io.EOF", rec, err)
		}
	}
	if rest, _ := io.ReadAll(br); string(rest) != "next" {
		t.Errorf("bytes left after End = %q, want %q", rest, "next")
	}

	// An error of the underlying reader is returned as it is.
	boom := errors.New("boom")
	r = NewReader(io.MultiReader(bytes.NewReader(good[:40]), iotestErr{boom}))
	var err error
	for err == nil {
		_, err = r.Next()
	}
	if !errors.Is(err, boom) || sentinels(err) != 0 {
		t.Errorf("Next() on a failing reader = %v, want boom", err)
	}
}

type iotestErr struct{ err error }

func (e iotestErr) Read([]byte) (int, error) { return 0, e.err }

// A length that lies about a short stream costs little memory.
func TestLyingLength(t *testing.T) {
	b := encode(t)[:HeaderSize+headerSize]
	h := make([]byte, HeaderSize)
	recordHeader{Type: 99, Flags: FlagSkippable, Len: MaxPayload}.put(h)
	b = append(append(b, h...), "short"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readAll(t, b)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("read = %v, want ErrTruncated", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("reading a 5-byte payload announced as %d bytes allocated %d bytes", MaxPayload, got)
	}
}

func TestSkippable(t *testing.T) {
	good := encode(t, samples()...)
	rs := split(t, good)
	// A later minor version with a skippable record of a new type.
	le.PutUint16(rs[0].p[10:], 7)
	i := index(t, rs, TypeRound)
	rs = append(rs[:i], append([]rec{{t: 0x4242, flags: FlagSkippable, p: []byte("future")}}, rs[i:]...)...)
	// Known types may carry the flag too: it only matters to readers
	// that do not know them.
	rs[i+1].flags = FlagSkippable
	got, err := readAll(t, join(rs, true))
	if err != nil {
		t.Fatalf("read = %v", err)
	}
	if d := cmp.Diff(&Header{Major: 1, Minor: 7}, got[0]); d != "" {
		t.Errorf("header (-want +got):\n%s", d)
	}
	if d := cmp.Diff(samples(), content(t, got)); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
	if end := got[len(got)-1].(*End); end.Records != uint64(len(rs)-1) {
		t.Errorf("End.Records = %d, want %d (the skipped record counted)", end.Records, len(rs)-1)
	}
}

func TestWriterRejects(t *testing.T) {
	tests := []struct {
		name string
		rec  Record
	}{
		{"nil", nil},
		{"header", &Header{Major: Major}},
		{"end", &End{}},
		{"instance without id", &Instance{MemBytes: 1}},
		{"instance id too long", &Instance{ID: strings.Repeat("x", MaxInstanceID+1), MemBytes: 1}},
		{"instance profile too long", &Instance{ID: "x", Profile: strings.Repeat("x", MaxProfileName+1), MemBytes: 1}},
		{"instance domain too long", &Instance{ID: "x", Domain: strings.Repeat("x", MaxDomainName+1), MemBytes: 1}},
		{"instance device too long", &Instance{ID: "x", Device: strings.Repeat("x", MaxDeviceName+1), MemBytes: 1}},
		{"instance not UTF-8", &Instance{ID: "x", Profile: "\xc0", MemBytes: 1}},
		{"instance without memory", &Instance{ID: "x"}},
		{"program handle 0", &Program{Source: []byte("x")}},
		{"program without source", &Program{Handle: 1}},
		{"program source too long", &Program{Handle: 1, Source: make([]byte, MaxSource+1)}},
		{"program options too long", &Program{Handle: 1, Source: []byte("x"), Options: make([]byte, MaxOptions+1)}},
		{"program-free handle 0", &ProgramFree{}},
		{"buffer handle 0", &Buffer{Size: 1}},
		{"buffer size 0", &Buffer{Handle: 1}},
		{"buffer too big", &Buffer{Handle: 1, Size: MaxBufferSize + 1}},
		{"buffer-data handle 0", &BufferData{Data: []byte{1}}},
		{"buffer-data empty", &BufferData{Handle: 1}},
		{"buffer-data past MaxBufferSize", &BufferData{Handle: 1, Offset: MaxBufferSize - 1, Data: []byte{1, 2}}},
		{"buffer-data offset overflows", &BufferData{Handle: 1, Offset: ^uint64(0), Data: []byte{1, 2}}},
		{"buffer-free handle 0", &BufferFree{}},
		{"guest pages empty", &GuestPages{GPA: 0x1000}},
		{"guest pages unaligned", &GuestPages{GPA: 0x1001, Data: make([]byte, GuestPageSize)}},
		{"guest pages part of a page", &GuestPages{Data: make([]byte, GuestPageSize+1)}},
		{"guest pages over MaxChunk", &GuestPages{Data: make([]byte, MaxChunk+GuestPageSize)}},
		{"guest pages wrap", &GuestPages{GPA: ^uint64(0) &^ (GuestPageSize - 1), Data: make([]byte, 2*GuestPageSize)}},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		w := NewWriter(&buf)
		if err := w.Write(tt.rec); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Write = %v, want ErrInvalid", tt.name, err)
		}
		if buf.Len() != 0 {
			t.Errorf("%s: refused record wrote %d bytes", tt.name, buf.Len())
		}
		// The Writer stays usable.
		if err := w.Write(&Round{Number: 1}); err != nil {
			t.Errorf("%s: Write after a refused record = %v", tt.name, err)
		}
	}

	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.BufferData(1, 0, nil); err != nil || buf.Len() != 0 {
		t.Errorf("BufferData(empty) = %v, wrote %d bytes; want nil, 0", err, buf.Len())
	}
	if err := w.BufferData(0, 0, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("BufferData(handle 0, empty) = %v, want ErrInvalid", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if err := w.Write(&Round{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
	if err := w.BufferData(1, 0, []byte{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("BufferData after Close = %v, want ErrClosed", err)
	}
	// An empty stream is Header and End.
	got, err := readAll(t, buf.Bytes())
	if err != nil || len(got) != 2 {
		t.Errorf("empty stream read = %v, %v", got, err)
	}
}

// failWriter fails after n bytes.
type failWriter struct {
	n   int
	err error
}

func (f *failWriter) Write(b []byte) (int, error) {
	if len(b) > f.n {
		n := f.n
		f.n = 0
		return n, f.err
	}
	f.n -= len(b)
	return len(b), nil
}

func TestWriterErrorsStick(t *testing.T) {
	boom := errors.New("boom")
	w := NewWriter(&failWriter{n: 60, err: boom})
	if err := w.Write(&Round{}); err != nil {
		t.Fatalf("first Write = %v", err)
	}
	err := w.Write(&Round{})
	if !errors.Is(err, boom) {
		t.Fatalf("Write past the failure = %v, want boom", err)
	}
	if err2 := w.BufferData(1, 0, []byte{1}); err2 != err {
		t.Errorf("BufferData after a failure = %v, want %v", err2, err)
	}
	if err2 := w.Close(); err2 != err {
		t.Errorf("Close after a failure = %v, want %v", err2, err)
	}
	if s := w.Stats(); s.Records != 2 || s.Bytes != 60 {
		t.Errorf("Stats() = %+v, want 2 records, 60 bytes", s)
	}
}

// chunks lists a stream's BufferData records as (encoding, raw_len,
// payload length).
type chunkInfo struct {
	enc     Encoding
	rawLen  int
	payload int
	offset  uint64
}

func chunks(t tb, b []byte) []chunkInfo {
	t.Helper()
	var cs []chunkInfo
	for _, r := range split(t, b) {
		if r.t == TypeBufferData {
			c, err := parseChunk(r.p)
			if err != nil {
				t.Fatalf("parseChunk: %v", err)
			}
			cs = append(cs, chunkInfo{c.enc, c.rawLen, len(r.p), c.offset})
		}
	}
	return cs
}

func TestBufferDataEncodings(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	big := compressible(2*MaxChunk + 5)
	big[MaxChunk+1] = 0xff // not all zero; still compressible
	parts := []struct {
		data []byte
		want []Encoding
	}{
		{make([]byte, 5000), []Encoding{EncodingZero}},
		{compressible(5000), []Encoding{EncodingZstd}},
		{random(2, 5000), []Encoding{EncodingRaw}},
		{[]byte{7}, []Encoding{EncodingRaw}},
		{big, []Encoding{EncodingZstd, EncodingZstd, EncodingRaw}}, // 5 bytes do not compress
		{make([]byte, MaxChunk+1), []Encoding{EncodingZero, EncodingZero}},
	}
	var want []Encoding
	var wantRecs []Record
	var raw uint64
	for i, p := range parts {
		off := uint64(i) << 30
		if err := w.BufferData(9, off, p.data); err != nil {
			t.Fatalf("BufferData(%d bytes) = %v", len(p.data), err)
		}
		want = append(want, p.want...)
		raw += uint64(len(p.data))
		for d := p.data; len(d) > 0; {
			n := min(len(d), MaxChunk)
			wantRecs = append(wantRecs, &BufferData{Handle: 9, Offset: off, Data: d[:n]})
			off += uint64(n)
			d = d[n:]
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cs := chunks(t, buf.Bytes())
	var got []Encoding
	var encoded uint64
	for _, c := range cs {
		got = append(got, c.enc)
		encoded += uint64(c.payload - bufferDataFixed)
		if c.payload > bufferDataFixed+c.rawLen {
			t.Errorf("chunk of %d bytes travels in %d", c.rawLen, c.payload)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("encodings (-want +got):\n%s", d)
	}
	recs, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantRecs, content(t, recs), bytesEqual); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
	s := w.Stats()
	wantStats := Stats{
		Records: uint64(len(cs) + 2), Bytes: uint64(buf.Len()),
		DataBytes: raw, DataEncoded: encoded,
		ZeroChunks: 3, ZstdChunks: 3, RawChunks: 3,
	}
	if d := cmp.Diff(wantStats, s); d != "" {
		t.Errorf("Stats() (-want +got):\n%s", d)
	}
}

// A Reader's records share no memory with it: the payload buffer it
// reuses for later records leaves them alone.
func TestRecordsAreCopies(t *testing.T) {
	b := encode(t,
		&Program{Handle: 1, Source: []byte("src"), Options: []byte("o")},
		&BufferData{Handle: 1, Data: []byte("raw")},
		&Program{Handle: 2, Source: bytes.Repeat([]byte("X"), 100), Options: bytes.Repeat([]byte("Y"), 100)},
		&BufferData{Handle: 1, Data: random(3, 100)})
	got, err := readAll(t, b)
	if err != nil {
		t.Fatal(err)
	}
	p, d := got[1].(*Program), got[2].(*BufferData)
	if string(p.Source) != "src" || string(p.Options) != "o" || string(d.Data) != "raw" {
		t.Errorf("records kept across reads = %q %q %q", p.Source, p.Options, d.Data)
	}
}

// TestIncompressibleHeadSendsRaw: a large chunk whose first 64 KiB do not
// compress travels raw without the rest being tried, even if the rest
// would have compressed; a large chunk whose head compresses is tried
// whole.
func TestIncompressibleHeadSendsRaw(t *testing.T) {
	noise := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	headNoise := append(append([]byte(nil), noise[:probeBytes]...), make([]byte, 1<<20-probeBytes)...)
	for i := probeBytes; i < len(headNoise); i++ {
		headNoise[i] = byte(i % 7) // compressible after the head
	}
	headText := bytes.Repeat([]byte("vgpud "), (1<<20)/6)
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for i, d := range [][]byte{noise, headNoise, headText} {
		if err := w.BufferData(uint32(i+1), 0, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var got []Encoding
	for _, c := range chunks(t, buf.Bytes()) {
		got = append(got, c.enc)
	}
	if d := cmp.Diff([]Encoding{EncodingRaw, EncodingRaw, EncodingZstd}, got); d != "" {
		t.Errorf("encodings (-want +got):\n%s", d)
	}
	recs, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(recs); n != 5 {
		t.Fatalf("%d records, want header, 3 chunks, end", n)
	}
}

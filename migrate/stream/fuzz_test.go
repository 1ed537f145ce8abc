package stream

import (
	"bytes"
	"hash/crc32"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzReader: any bytes read without a panic; an error comes with no
// record and wraps exactly one of the Reader's sentinels (a bytes.Reader
// fails no other way); a stream read cleanly re-encodes, through a
// Writer, to records that read back the same. With fixCRC the input's
// checksums are made right first, so that mutations reach the payload
// decoders instead of stopping at the CRC.
//
// The seeds are small streams (each under a few hundred bytes), one or
// two records each: the fuzzer minimizes every input that finds new
// coverage, in time quadratic in its length, and does no fuzzing
// meanwhile; mutants of a kilobyte stream of every record stalled a 20 s
// run for most of it.
func FuzzReader(f *testing.F) {
	var seeds [][]byte
	for _, r := range samples() {
		if _, ok := r.(*GuestPages); ok {
			continue // a page of data: its own seed below, zeros
		}
		if d, ok := r.(*BufferData); ok && len(d.Data) > 48 {
			// Raw data stays as long as it is: 48 bytes of it will do.
			r = &BufferData{Handle: d.Handle, Offset: d.Offset, Data: d.Data[:48]}
		}
		seeds = append(seeds, encode(f, r))
	}
	// A later minor version with a skippable record of a new type.
	rs := split(f, encode(f, &Round{Number: 1}))
	le.PutUint16(rs[0].p[10:], 3)
	rs = append(rs[:1], append([]rec{{t: 0x0400, flags: FlagSkippable, p: []byte("later")}}, rs[1:]...)...)
	two := encode(f, &Buffer{Handle: 5, Size: 4096}, &BufferData{Handle: 5, Data: []byte("data")})
	seeds = append(seeds,
		encode(f),
		encode(f, &BufferData{Handle: 1, Offset: 1 << 20, Data: compressible(70_000)}),
		join(rs, true),
		two[:len(two)/2],
		encode(f, &GuestPages{GPA: 0x1000, Data: make([]byte, GuestPageSize)}),
	)
	for _, b := range seeds {
		f.Add(b, false)
		f.Add(b, true)
	}

	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC {
			b = fixCRCs(b)
		}
		recs, err := readAll(t, b)
		if err != nil {
			if sentinels(err) != 1 {
				t.Fatalf("error %q wraps %d sentinels, want 1", err, sentinels(err))
			}
			return
		}
		body := content(t, recs)
		again, err := readAll(t, encode(t, body...))
		if err != nil {
			t.Fatalf("re-encoded stream: %v", err)
		}
		if d := cmp.Diff(body, content(t, again), bytesEqual); d != "" {
			t.Fatalf("re-encoded records differ (-read +re-read):\n%s", d)
		}
		if h, h2 := recs[0].(*Header), again[0].(*Header); h.Major != h2.Major {
			t.Fatalf("re-encoded header %+v, read %+v", h2, h)
		}
	})
}

// fixCRCs returns b with the checksum of every whole record made right.
func fixCRCs(b []byte) []byte {
	b = bytes.Clone(b)
	for rest := b; len(rest) >= HeaderSize; {
		n := uint64(le.Uint32(rest[4:]))
		if n > uint64(len(rest)-HeaderSize) {
			break
		}
		le.PutUint32(rest[8:], crc32.Checksum(rest[HeaderSize:HeaderSize+n], castagnoli))
		rest = rest[HeaderSize+n:]
	}
	return b
}

// A hand-made zstd frame (RLE block) that declares and yields raw_len
// bytes is accepted: the Reader takes any valid frame, not only its own
// Writer's.
func TestHandMadeZstd(t *testing.T) {
	rs := split(t, encode(t, &BufferData{Handle: 5, Data: []byte{1}}))
	rs[1].p = chunkPayload(EncodingZstd, 100, zstdFrame(100, 100))
	got, err := readAll(t, join(rs, true))
	if err != nil {
		t.Fatalf("read = %v", err)
	}
	want := &BufferData{Handle: 5, Data: bytes.Repeat([]byte("A"), 100)}
	if d := cmp.Diff(want, got[1]); d != "" {
		t.Errorf("record (-want +got):\n%s", d)
	}
}

package stream

import (
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// genData draws buffer data: all zero, compressible, random, or a mix.
func genData(t *rapid.T) []byte {
	n := rapid.OneOf(rapid.IntRange(1, 64), rapid.IntRange(1, 4096), rapid.IntRange(1, 200_000)).Draw(t, "len")
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
	switch rapid.IntRange(0, 3).Draw(t, "kind") {
	case 0: // zero
	case 1: // compressible: a short random pattern repeated
		pat := make([]byte, 1+r.IntN(16))
		for i := range pat {
			pat[i] = byte(r.Uint32())
		}
		for i := range b {
			b[i] = pat[i%len(pat)]
		}
	case 2: // random
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	case 3: // sparse: zero with a few random bytes
		for range 1 + r.IntN(8) {
			b[r.IntN(n)] = byte(r.Uint32())
		}
	}
	return b
}

func genHandle(t *rapid.T) uint32 { return rapid.Uint32Min(1).Draw(t, "handle") }

// genRecord draws one record a caller writes.
func genRecord(t *rapid.T) Record {
	// BufferData is drawn three times as often as the others.
	switch rapid.IntRange(0, 11).Draw(t, "type") {
	case 0:
		return &Instance{
			ID:           rapid.StringN(1, -1, MaxInstanceID).Draw(t, "id"),
			Profile:      rapid.StringN(-1, -1, MaxProfileName).Draw(t, "profile"),
			Domain:       rapid.StringN(-1, -1, MaxDomainName).Draw(t, "domain"),
			Device:       rapid.StringN(-1, -1, MaxDeviceName).Draw(t, "device"),
			MemBytes:     rapid.Uint64Min(1).Draw(t, "mem"),
			ProgramBytes: rapid.Uint64().Draw(t, "program_bytes"),
			MaxAlloc:     rapid.Uint64().Draw(t, "max_alloc"),
			ComputeUnits: rapid.Uint32().Draw(t, "cus"),
		}
	case 1:
		return &Round{Number: rapid.Uint32().Draw(t, "round"), Final: rapid.Bool().Draw(t, "final")}
	case 2:
		p := &Program{
			Handle: genHandle(t),
			Flags:  rapid.Uint16().Draw(t, "flags"),
			Source: rapid.SliceOfN(rapid.Byte(), 1, 512).Draw(t, "source"),
		}
		if o := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "options"); len(o) > 0 {
			p.Options = o
		}
		return p
	case 3:
		return &ProgramFree{Handle: genHandle(t)}
	case 4:
		return &Buffer{Handle: genHandle(t), Flags: rapid.Uint32().Draw(t, "flags"),
			Size: rapid.Uint64Range(1, MaxBufferSize).Draw(t, "size")}
	case 5, 8, 9:
		d := genData(t)
		return &BufferData{Handle: genHandle(t), Offset: rapid.Uint64Range(0, MaxBufferSize-uint64(len(d))).Draw(t, "offset"), Data: d}
	case 6:
		return &BufferFree{Handle: genHandle(t)}
	case 10:
		id := rapid.Uint32Range(0, MaxContexts).Draw(t, "context")
		if id == 0 {
			return &Context{}
		}
		return &Context{ID: id, Destroyed: rapid.Bool().Draw(t, "destroyed"), Slots: rapid.Uint32().Draw(t, "slots"),
			Ring: rapid.Uint64().Draw(t, "ring"), Compl: rapid.Uint64().Draw(t, "compl"),
			Shadow: rapid.Uint64().Draw(t, "shadow"), MemLimit: rapid.Uint64().Draw(t, "mem_limit")}
	case 11:
		pages := rapid.IntRange(1, 3).Draw(t, "pages")
		return &GuestPages{GPA: rapid.Uint64Range(0, 1<<40).Draw(t, "gfn") * GuestPageSize,
			Data: rapid.SliceOfN(rapid.Byte(), pages*GuestPageSize, pages*GuestPageSize).Draw(t, "data")}
	default: // 7
		return &Ring{
			Enabled: rapid.Bool().Draw(t, "enabled"), Slots: rapid.Uint32().Draw(t, "slots"),
			Base: rapid.Uint64().Draw(t, "base"), ComplBase: rapid.Uint64().Draw(t, "compl_base"),
			Head: rapid.Uint32().Draw(t, "head"), Tail: rapid.Uint32().Draw(t, "tail"),
			Completed: rapid.Uint32().Draw(t, "completed"), ErrStatus: rapid.Uint32().Draw(t, "err_status"),
			ErrCount: rapid.Uint32().Draw(t, "err_count"),
		}
	}
}

// TestPropertyRoundTrip: any sequence of valid records round-trips
// exactly; a zero chunk travels as Zero, and no chunk travels in more
// than its raw bytes and BufferData's fixed fields; End's totals and the
// Writer's Stats agree with the bytes.
func TestPropertyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := rapid.SliceOfN(rapid.Custom(genRecord), 0, 12).Draw(t, "records")
		b, stats := encodeStats(t, recs...)

		got, err := readAll(t, b)
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		if d := cmp.Diff(recs, content(t, got), bytesEqual); d != "" {
			t.Fatalf("round trip (-sent +got):\n%s", d)
		}

		var data []*BufferData
		for _, r := range recs {
			if d, ok := r.(*BufferData); ok {
				data = append(data, d)
			}
		}
		cs := chunks(t, b)
		if len(cs) != len(data) {
			t.Fatalf("%d chunks for %d BufferData records", len(cs), len(data))
		}
		var st Stats
		for i, c := range cs {
			zero := allZero(data[i].Data)
			if zero != (c.enc == EncodingZero) {
				t.Fatalf("chunk %d (all zero: %t) travels as %v", i, zero, c.enc)
			}
			if c.payload > bufferDataFixed+c.rawLen {
				t.Fatalf("chunk %d of %d bytes travels as %v in %d", i, c.rawLen, c.enc, c.payload)
			}
			if c.enc == EncodingZstd && c.payload-bufferDataFixed > c.rawLen-c.rawLen/8 {
				t.Fatalf("chunk %d of %d bytes: zstd frame of %d saves less than an eighth", i, c.rawLen, c.payload-bufferDataFixed)
			}
			st.DataBytes += uint64(c.rawLen)
			st.DataEncoded += uint64(c.payload - bufferDataFixed)
			switch c.enc {
			case EncodingZero:
				st.ZeroChunks++
			case EncodingZstd:
				st.ZstdChunks++
			default:
				st.RawChunks++
			}
		}
		st.Records, st.Bytes = uint64(len(recs)+2), uint64(len(b))
		if d := cmp.Diff(st, stats); d != "" {
			t.Fatalf("Stats() (-from the bytes +got):\n%s", d)
		}
		end := got[len(got)-1].(*End)
		if end.Records != uint64(len(recs)+1) || end.PayloadBytes != uint64(len(b))-uint64(len(recs)+2)*HeaderSize-endSize {
			t.Fatalf("End = %+v for %d records in %d bytes", end, len(recs), len(b))
		}

		// Any cut of the stream is truncated, never anything else.
		cut := rapid.IntRange(0, len(b)-1).Draw(t, "cut")
		if _, err := readAll(t, b[:cut]); !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) || sentinels(err) != 1 {
			t.Fatalf("read of %d of %d bytes = %v, want ErrTruncated", cut, len(b), err)
		}
	})
}

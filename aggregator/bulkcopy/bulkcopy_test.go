package bulkcopy

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"
)

// TestStreamCopiesLikeCopy: whatever the lengths and the alignment of
// either end, Stream copies what copy copies, and not a byte more.
func TestStreamCopiesLikeCopy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 3*blockSize+5*lineSize+63).Draw(t, "n")
		srcOff := rapid.IntRange(0, 127).Draw(t, "srcOff")
		dstOff := rapid.IntRange(0, 127).Draw(t, "dstOff")
		extra := rapid.IntRange(-8, 8).Draw(t, "extra")
		src := make([]byte, srcOff+n)
		for i := range src {
			src[i] = byte(i*7 + i>>8)
		}
		dstLen := max(n+extra, 0)
		dst := bytes.Repeat([]byte{0xee}, dstOff+dstLen+64)
		want := bytes.Clone(dst)
		wn := copy(want[dstOff:dstOff+dstLen], src[srcOff:])
		got := Stream(dst[dstOff:dstOff+dstLen], src[srcOff:])
		if got != wn {
			t.Fatalf("Stream = %d, copy = %d", got, wn)
		}
		if !bytes.Equal(dst, want) {
			t.Fatalf("Stream of %d bytes (dst +%d, src +%d) differs from copy", n, dstOff, srcOff)
		}
	})
}

// TestStreamLarge: a copy of many blocks, from and to page-aligned and
// unaligned memory, is exact.
func TestStreamLarge(t *testing.T) {
	const n = 4<<20 + 12345
	src := make([]byte, n+64)
	for i := range src {
		src[i] = byte(i ^ i>>11)
	}
	for _, off := range []int{0, 1, 31, 32, 63} {
		dst := make([]byte, n+64)
		if got := Stream(dst[off:off+n], src[64-off:]); got != n {
			t.Fatalf("Stream = %d, want %d", got, n)
		}
		if !bytes.Equal(dst[off:off+n], src[64-off:64-off+n]) {
			t.Fatalf("offset %d: the copy differs", off)
		}
	}
}

func BenchmarkStream(b *testing.B) {
	const n = 64 << 20
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i], dst[i] = byte(i), byte(i>>8) // every page its own, not the zero page
	}
	for _, c := range []struct {
		name string
		f    func(dst, src []byte) int
	}{{"copy", func(d, s []byte) int { return copy(d, s) }}, {"stream", Stream}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				for off := 0; off < n; off += 64 << 10 {
					c.f(dst[off:off+64<<10], src[off:off+64<<10])
				}
			}
		})
	}
}

package bulkcopy

// Stream copies min(len(dst), len(src)) bytes of src into dst, as copy
// does, storing past the caches where it can, and returns how many.
// The ranges must not overlap.
func Stream(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < minStream || !haveStream {
		return copy(dst, src)
	}
	dst, src = dst[:n], src[:n]
	// Up to the first 64-byte boundary of dst with copy: the stores below
	// want aligned lines.
	head := int((lineSize - addr(dst)%lineSize) % lineSize)
	copy(dst[:head], src[:head])
	dst, src = dst[head:], src[head:]
	if blocks := len(dst) / blockSize; blocks > 0 {
		streamBlocks(&dst[0], &src[0], uintptr(blocks))
		dst, src = dst[blocks*blockSize:], src[blocks*blockSize:]
	}
	if lines := len(dst) / lineSize; lines > 0 {
		streamLines(&dst[0], &src[0], uintptr(lines))
		dst, src = dst[lines*lineSize:], src[lines*lineSize:]
	}
	copy(dst, src)
	return n
}

const (
	lineSize = 64
	// blockSize is what streamBlocks copies at once: four pages, read and
	// stored as four interleaved streams, one line of each page in turn.
	blockSize = 4 * 4096
	// minStream is the shortest copy worth the setup (alignment and a
	// fence).
	minStream = 4 * lineSize
)

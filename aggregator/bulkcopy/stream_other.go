//go:build !amd64

package bulkcopy

import "unsafe"

// No streaming stores here: Stream is copy.
const haveStream = false

func addr(p []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }

func streamBlocks(dst, src *byte, blocks uintptr) {
	copy(unsafe.Slice(dst, blocks*blockSize), unsafe.Slice(src, blocks*blockSize))
}

func streamLines(dst, src *byte, lines uintptr) {
	copy(unsafe.Slice(dst, lines*lineSize), unsafe.Slice(src, lines*lineSize))
}

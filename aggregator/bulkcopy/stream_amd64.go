package bulkcopy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var haveStream = cpu.X86.HasAVX2

func addr(p []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }

// streamBlocks copies blocks × blockSize bytes from src to dst, which is
// 64-byte aligned, with non-temporal stores, and fences them.
//
//go:noescape
func streamBlocks(dst, src *byte, blocks uintptr)

// streamLines copies lines × 64 bytes the same way.
//
//go:noescape
func streamLines(dst, src *byte, lines uintptr)

//go:build linux

package driver

import "unsafe"

// addrOf is the virtual address of b's first byte (b is an mmap, which the
// Go runtime never moves).
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

package guestmem

import (
	"sync/atomic"
	"unsafe"
)

// store64 stores v, little-endian (the only byte order vgpud runs on), into
// the 8 bytes of b with one atomic store. It reports false if b is not
// 8-byte aligned in host memory.
func store64(b []byte, v uint64) bool {
	if len(b) < 8 {
		return false
	}
	p := unsafe.Pointer(&b[0])
	if uintptr(p)%8 != 0 {
		return false
	}
	atomic.StoreUint64((*uint64)(p), v)
	return true
}

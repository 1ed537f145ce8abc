package driver

import (
	"sync/atomic"
	"unsafe"
)

// load64 atomically loads the little-endian (x86, arm64) word at b[off:],
// which the device may be writing concurrently. off must be 8-byte aligned
// relative to an 8-byte aligned b.
func load64(b []byte, off int) uint64 {
	_ = b[off+7]
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

// store32 atomically stores v, little-endian, at b[off:], which the
// device may be reading concurrently. off must be 4-byte aligned relative
// to an 8-byte aligned b.
func store32(b []byte, off int, v uint32) {
	_ = b[off+3]
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// store64 atomically stores v, little-endian, at b[off:]. off must be
// 8-byte aligned relative to an 8-byte aligned b.
func store64(b []byte, off int, v uint64) {
	_ = b[off+7]
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[off])), v)
}

// aligned8 reports whether b starts on an 8-byte boundary.
func aligned8(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%8 == 0
}

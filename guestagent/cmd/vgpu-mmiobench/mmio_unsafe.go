package main

import (
	"sync/atomic"
	"unsafe"
)

// load32 and store32 are single, naturally aligned 4-byte accesses to
// mapped device memory (the compiler may neither split nor merge them).
// Callers check that off+4 <= len(mem) and off%4 == 0.
func load32(mem []byte, off uint32) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&mem[off])))
}

func store32(mem []byte, off uint32, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&mem[off])), v)
}

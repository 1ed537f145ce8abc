package driver

import (
	"sync/atomic"
	"unsafe"
)

// mmioLoad32 is a width-exact, volatile 32-bit load from mapped device
// memory (one MOV on amd64, which the device sees as one 4-byte access).
func mmioLoad32(m []byte, off uint32) uint32 {
	_ = m[off+3]
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&m[off])))
}

// mmioStore32 is a width-exact, volatile 32-bit store to mapped device
// memory. On amd64 it is an XCHG, which also orders every earlier store
// (the ring slot contents) before the doorbell.
func mmioStore32(m []byte, off uint32, v uint32) {
	_ = m[off+3]
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&m[off])), v)
}

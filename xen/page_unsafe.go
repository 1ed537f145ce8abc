package xen

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Page views over memory shared with Xen. Every field is read and written
// with an atomic load or store of its natural width: Go's atomics are
// sequentially consistent, which gives the ordering Xen's smp_rmb/smp_wmb
// pairs ask for (contents before state, state before contents).

// IOReqPage is the synchronous ioreq page (struct shared_iopage): one
// struct ioreq per vCPU.
type IOReqPage struct{ b []byte }

// NewIOReqPage returns a view of b, which must be one page, 8-byte
// aligned (a mapping is page aligned).
func NewIOReqPage(b []byte) (IOReqPage, error) {
	if err := checkPage(b); err != nil {
		return IOReqPage{}, fmt.Errorf("ioreq page: %w", err)
	}
	return IOReqPage{b: b}, nil
}

func checkPage(b []byte) error {
	if len(b) < PageSize {
		return fmt.Errorf("%d bytes, want %d", len(b), PageSize)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return fmt.Errorf("not 8-byte aligned")
	}
	return nil
}

// Slot returns vCPU i's struct ioreq (0 <= i < MaxVCPUs).
func (p IOReqPage) Slot(i int) IOReqSlot {
	return IOReqSlot{p: unsafe.Pointer(&p.b[i*IOReqSize])}
}

// IOReqSlot is one vCPU's struct ioreq in shared memory.
type IOReqSlot struct{ p unsafe.Pointer }

func (s IOReqSlot) u64(off uintptr) *uint64 { return (*uint64)(unsafe.Add(s.p, off)) }
func (s IOReqSlot) u32(off uintptr) *uint32 { return (*uint32)(unsafe.Add(s.p, off)) }

// State returns the slot's state (the low 4 bits of its bit-field byte).
func (s IOReqSlot) State() uint8 { return stateOf(atomic.LoadUint32(s.u32(stateWordOff))) }

// Load reads the whole slot: the state word first, then the contents.
func (s IOReqSlot) Load() IOReq {
	w := atomic.LoadUint32(s.u32(stateWordOff))
	r := IOReq{
		Addr:    atomic.LoadUint64(s.u64(0)),
		Data:    atomic.LoadUint64(s.u64(8)),
		Count:   atomic.LoadUint32(s.u32(16)),
		Size:    atomic.LoadUint32(s.u32(20)),
		VPEport: Port(atomic.LoadUint32(s.u32(24))),
	}
	r.setStateWord(w)
	return r
}

// Store writes r's contents and then its state word (Xen's side of the
// protocol, and tests). VPEport is written too.
func (s IOReqSlot) Store(r IOReq) {
	atomic.StoreUint64(s.u64(0), r.Addr)
	atomic.StoreUint64(s.u64(8), r.Data)
	atomic.StoreUint32(s.u32(16), r.Count)
	atomic.StoreUint32(s.u32(20), r.Size)
	atomic.StoreUint32(s.u32(24), uint32(r.VPEport))
	old := atomic.LoadUint32(s.u32(stateWordOff))
	atomic.StoreUint32(s.u32(stateWordOff), r.stateWord(old))
}

// VPEport returns the slot's event channel port.
func (s IOReqSlot) VPEport() Port { return Port(atomic.LoadUint32(s.u32(24))) }

// SetVPEport stores the slot's event channel port (Xen's side).
func (s IOReqSlot) SetVPEport(p Port) { atomic.StoreUint32(s.u32(24), uint32(p)) }

// Data returns the data field.
func (s IOReqSlot) Data() uint64 { return atomic.LoadUint64(s.u64(8)) }

// SetData stores the data field.
func (s IOReqSlot) SetData(v uint64) { atomic.StoreUint64(s.u64(8), v) }

// SwapState moves the state from old to new and reports whether the slot
// was in old; the rest of the word is kept.
func (s IOReqSlot) SwapState(old, new uint8) bool {
	p := s.u32(stateWordOff)
	for {
		w := atomic.LoadUint32(p)
		if stateOf(w) != old {
			return false
		}
		if atomic.CompareAndSwapUint32(p, w, withState(w, new)) {
			return true
		}
	}
}

// SetState stores the state, keeping the rest of the word.
func (s IOReqSlot) SetState(st uint8) {
	p := s.u32(stateWordOff)
	for {
		w := atomic.LoadUint32(p)
		if atomic.CompareAndSwapUint32(p, w, withState(w, st)) {
			return
		}
	}
}

// SetStateWord stores the raw word at offset 28 (tests and the fake's
// hostile peer: any state, type and flag bits).
func (s IOReqSlot) SetStateWord(w uint32) { atomic.StoreUint32(s.u32(stateWordOff), w) }

// BufPage is the buffered ioreq page (struct buffered_iopage): a ring of
// BufSlots writes with free-running 32-bit read and write pointers.
type BufPage struct{ b []byte }

// NewBufPage returns a view of b, one page, 8-byte aligned.
func NewBufPage(b []byte) (BufPage, error) {
	if err := checkPage(b); err != nil {
		return BufPage{}, fmt.Errorf("buffered ioreq page: %w", err)
	}
	return BufPage{b: b}, nil
}

func (p BufPage) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&p.b[off])) }

// ReadPointer returns read_pointer.
func (p BufPage) ReadPointer() uint32 { return atomic.LoadUint32(p.u32(bufReadPtrOff)) }

// WritePointer returns write_pointer.
func (p BufPage) WritePointer() uint32 { return atomic.LoadUint32(p.u32(bufWritePtrOff)) }

// AdvanceRead adds n to read_pointer atomically: with
// HVM_IOREQSRV_BUFIOREQ_ATOMIC Xen may rebase both pointers at any time
// with a 64-bit compare-and-swap, which an atomic add cannot lose.
func (p BufPage) AdvanceRead(n uint32) { atomic.AddUint32(p.u32(bufReadPtrOff), n) }

// SetPointers stores both pointers (Xen's side and tests).
func (p BufPage) SetPointers(read, write uint32) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&p.b[0])), uint64(write)<<32|uint64(read))
}

// Entry returns ring slot i mod BufSlots.
func (p BufPage) Entry(i uint32) BufIOReq {
	off := bufRingOff + int(i%BufSlots)*bufSlotSize
	r := bufFromWord(atomic.LoadUint32(p.u32(off)))
	r.Data = atomic.LoadUint32(p.u32(off + 4))
	return r
}

// SetEntry stores ring slot i mod BufSlots (Xen's side and tests).
func (p BufPage) SetEntry(i uint32, r BufIOReq) {
	off := bufRingOff + int(i%BufSlots)*bufSlotSize
	atomic.StoreUint32(p.u32(off+4), r.Data)
	atomic.StoreUint32(p.u32(off), r.word())
}

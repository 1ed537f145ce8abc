package xen

import (
	"encoding/binary"
	"fmt"
)

// Constants of xen/hvm/ioreq.h (Xen 4.17, unchanged since 4.6).
const (
	IOReqWrite = 0 // dir: the guest writes
	IOReqRead  = 1 // dir: the guest reads

	StateNone       = 0 // STATE_IOREQ_NONE: the slot is free
	StateReady      = 1 // STATE_IOREQ_READY: Xen filled the slot
	StateInProcess  = 2 // STATE_IOREQ_INPROCESS: the device model took it
	StateRespReady  = 3 // STATE_IORESP_READY: the device model answered
	TypePIO         = 0 // IOREQ_TYPE_PIO
	TypeCopy        = 1 // IOREQ_TYPE_COPY: MMIO
	TypePCIConfig   = 2 // IOREQ_TYPE_PCI_CONFIG
	TypeTimeOffset  = 7 // IOREQ_TYPE_TIMEOFFSET
	TypeInvalidate  = 8 // IOREQ_TYPE_INVALIDATE: drop the map cache
	IOReqSize       = 32
	PageSize        = 4096
	MaxVCPUs        = PageSize / IOReqSize // slots in one shared_iopage
	BufSlots        = 511                  // IOREQ_BUFFER_SLOT_NUM
	bufSlotSize     = 8
	bufRingOff      = 8 // buf_ioreq[0] after read_pointer, write_pointer
	bufReadPtrOff   = 0
	bufWritePtrOff  = 4
	stateWordOff    = 28 // the u32 holding _pad0, the bit-field byte and type
	stateShift      = 16
	dataIsPtrBit    = 1 << 20
	dirBit          = 1 << 21
	dfBit           = 1 << 22
	typeShift       = 24
	bufAddrBits     = 20
	bufAddrMask     = 1<<bufAddrBits - 1
	bufDirBit       = 1 << 9
	bufSizeShift    = 10
	bufAddrShift    = 12
	maxConfigOffset = 0xfff // PCIe extended config space
)

// Resource frames of XENMEM_resource_ioreq_server.
const (
	FrameBufIOReq = 0 // XENMEM_resource_ioreq_server_frame_bufioreq
	FrameIOReq    = 1 // XENMEM_resource_ioreq_server_frame_ioreq(0)
)

// DomID is a Xen domain id (domid_t).
type DomID uint16

// ServerID is an ioreq server id (ioservid_t).
type ServerID uint16

// Port is an event channel port (evtchn_port_t).
type Port uint32

// IOReq is one struct ioreq, decoded.
type IOReq struct {
	Addr      uint64 // guest-physical address; for PCI_CONFIG: SBDF<<32 | register
	Data      uint64 // the value, or with DataIsPtr the guest-physical address of it
	Count     uint32 // repetitions (rep prefixes)
	Size      uint32 // bytes per repetition
	VPEport   Port   // the vCPU's event channel (Xen's end)
	State     uint8
	DataIsPtr bool
	Dir       uint8 // IOReqRead or IOReqWrite
	DF        bool  // direction flag: repetitions go down
	Type      uint8
}

// MarshalIOReq encodes r as struct ioreq.
func MarshalIOReq(r IOReq) [IOReqSize]byte {
	var b [IOReqSize]byte
	le := binary.LittleEndian
	le.PutUint64(b[0:], r.Addr)
	le.PutUint64(b[8:], r.Data)
	le.PutUint32(b[16:], r.Count)
	le.PutUint32(b[20:], r.Size)
	le.PutUint32(b[24:], uint32(r.VPEport))
	le.PutUint32(b[stateWordOff:], r.stateWord(0))
	return b
}

// UnmarshalIOReq decodes struct ioreq.
func UnmarshalIOReq(b [IOReqSize]byte) IOReq {
	le := binary.LittleEndian
	r := IOReq{
		Addr:    le.Uint64(b[0:]),
		Data:    le.Uint64(b[8:]),
		Count:   le.Uint32(b[16:]),
		Size:    le.Uint32(b[20:]),
		VPEport: Port(le.Uint32(b[24:])),
	}
	r.setStateWord(le.Uint32(b[stateWordOff:]))
	return r
}

// stateWord returns the u32 at offset 28 for r, keeping old's padding.
func (r IOReq) stateWord(old uint32) uint32 {
	w := old & 0xffff // _pad0
	w |= uint32(r.State&0xf) << stateShift
	if r.DataIsPtr {
		w |= dataIsPtrBit
	}
	if r.Dir&1 != 0 {
		w |= dirBit
	}
	if r.DF {
		w |= dfBit
	}
	w |= old & (1 << 23) // _pad1
	w |= uint32(r.Type) << typeShift
	return w
}

func (r *IOReq) setStateWord(w uint32) {
	r.State = stateOf(w)
	r.DataIsPtr = w&dataIsPtrBit != 0
	r.Dir = 0
	if w&dirBit != 0 {
		r.Dir = IOReqRead
	}
	r.DF = w&dfBit != 0
	r.Type = uint8(w >> typeShift)
}

func stateOf(w uint32) uint8 { return uint8(w>>stateShift) & 0xf }

func withState(w uint32, s uint8) uint32 {
	return w&^(0xf<<stateShift) | uint32(s&0xf)<<stateShift
}

func (r IOReq) String() string {
	dir := "write"
	if r.Dir == IOReqRead {
		dir = "read"
	}
	return fmt.Sprintf("ioreq{type %d %s addr %#x data %#x size %d count %d ptr %v df %v state %d port %d}",
		r.Type, dir, r.Addr, r.Data, r.Size, r.Count, r.DataIsPtr, r.DF, r.State, r.VPEport)
}

// BufIOReq is one struct buf_ioreq of the buffered ring: a write of 1, 2
// or 4 bytes (8 takes two slots, the second carrying the high half) to a
// 20-bit address.
type BufIOReq struct {
	Type uint8
	Dir  uint8  // always IOReqWrite from Xen
	Size uint8  // log2 of the size: 0..3
	Addr uint32 // 20 bits
	Data uint32
}

// MarshalBufIOReq encodes r as struct buf_ioreq.
func MarshalBufIOReq(r BufIOReq) [bufSlotSize]byte {
	var b [bufSlotSize]byte
	binary.LittleEndian.PutUint32(b[0:], r.word())
	binary.LittleEndian.PutUint32(b[4:], r.Data)
	return b
}

// UnmarshalBufIOReq decodes struct buf_ioreq.
func UnmarshalBufIOReq(b [bufSlotSize]byte) BufIOReq {
	r := bufFromWord(binary.LittleEndian.Uint32(b[0:]))
	r.Data = binary.LittleEndian.Uint32(b[4:])
	return r
}

func (r BufIOReq) word() uint32 {
	w := uint32(r.Type)
	if r.Dir&1 != 0 {
		w |= bufDirBit
	}
	w |= uint32(r.Size&3) << bufSizeShift
	w |= (r.Addr & bufAddrMask) << bufAddrShift
	return w
}

func bufFromWord(w uint32) BufIOReq {
	r := BufIOReq{Type: uint8(w), Size: uint8(w>>bufSizeShift) & 3, Addr: w >> bufAddrShift}
	if w&bufDirBit != 0 {
		r.Dir = IOReqRead
	}
	return r
}

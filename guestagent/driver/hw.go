package driver

// Registers is BAR0 of a vGPU: width-exact, naturally aligned 32-bit
// accesses at byte offsets of abi.Reg*. In a guest it is the mmap of
// /sys/bus/pci/devices/D/resource0; in the QEMU-less harness it is a BAR
// access message over the multi-process protocol. Like a PCI read that no
// device answers, a failed read returns 0xffffffff.
type Registers interface {
	Read32(off uint32) uint32
	Write32(off uint32, v uint32)
}

// Memory hands out DMA-able memory: pinned pages whose guest-physical
// addresses the device may use until the process exits.
type Memory interface {
	// Alloc returns at least n bytes, a whole number of abi.PageSize pages,
	// page aligned, with the guest-physical address of every page.
	Alloc(n int) (DMA, error)
}

// DMA is a run of pinned pages: Buf[i*PageSize:(i+1)*PageSize] is at
// guest-physical address Pages[i]. Pages need not be contiguous.
type DMA struct {
	Buf   []byte
	Pages []uint64
}

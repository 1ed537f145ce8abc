package driver

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
)

// NewPagemapMemory returns the Memory of a Linux guest: anonymous mappings,
// locked and populated, whose guest-physical addresses are their page frame
// numbers from /proc/self/pagemap times the page size. It needs root.
//
// Pages are never freed: the device may use them until the process exits.
// Transparent huge pages are disabled on the mappings so that khugepaged
// never moves them; the guest should also set
// /proc/sys/vm/compact_unevictable_allowed to 0 so compaction leaves
// locked pages alone.
func NewPagemapMemory() Memory { return &pagemapMemory{} }

type pagemapMemory struct {
	mu sync.Mutex
}

func (m *pagemapMemory) Alloc(n int) (DMA, error) {
	if n <= 0 || n > 1<<34 {
		return DMA{}, fmt.Errorf("dma alloc of %d bytes: %w", n, ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	np := (n + abi.PageSize - 1) / abi.PageSize
	buf, err := unix.Mmap(-1, 0, np*abi.PageSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return DMA{}, fmt.Errorf("dma alloc: mmap %d bytes: %w", np*abi.PageSize, err)
	}
	fail := func(err error) (DMA, error) {
		_ = unix.Munmap(buf)
		return DMA{}, err
	}
	_ = unix.Madvise(buf, unix.MADV_NOHUGEPAGE) // best effort: older kernels lack THP
	if err := unix.Mlock(buf); err != nil {
		return fail(fmt.Errorf("dma alloc: mlock %d bytes: %w", len(buf), err))
	}
	for i := 0; i < len(buf); i += abi.PageSize {
		buf[i] = 1 // make the page present and private
		buf[i] = 0
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return fail(fmt.Errorf("dma alloc: %w", err))
	}
	defer f.Close()
	raw := make([]byte, 8*np)
	if _, err := f.ReadAt(raw, int64(addrOf(buf)/abi.PageSize)*8); err != nil {
		return fail(fmt.Errorf("dma alloc: read pagemap: %w", err))
	}
	pages := make([]uint64, np)
	for i := range pages {
		e := le.Uint64(raw[8*i:])
		pfn := e & (1<<55 - 1)
		if e&(1<<63) == 0 || pfn == 0 {
			return fail(fmt.Errorf("dma alloc: page %d of %d (pagemap entry %#x): %w", i, np, e, ErrNoPFN))
		}
		pages[i] = pfn * abi.PageSize
	}
	return DMA{Buf: buf, Pages: pages}, nil
}

// Package guestmemtest is the guest RAM of the QEMU-less test VMs that
// play a hypervisor's side of a transport (mpqemutest, vfiousertest,
// xentest): a sealed memfd, as QEMU's memory-backend-memfd makes it, laid
// out like a pc machine's (the VGA hole below 1 MiB), and DMA pages handed
// out scattered, so the device must honour every page address. It also
// counts the interrupts those VMs receive on eventfds (ReadCounter,
// WaitCounter).
package guestmemtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem"
)

// Guest-physical layout, as QEMU's pc machine presents RAM: low RAM below
// the VGA hole, high RAM from 1 MiB. The memfd backs both at offset == gpa.
const (
	LowRAMEnd  = 0xa0000
	HighRAM    = 0x100000
	MinRAM     = 2 << 20
	chunkPages = 16 // allocation order is shuffled in runs of this many pages
)

// ErrClosed is returned after Close.
var ErrClosed = errors.New("guestmemtest: ram closed")

// RAM is a test VM's guest RAM. Alloc, ReadRAM and WriteRAM are safe for
// concurrent use.
type RAM struct {
	fd   int
	size uint64

	mu  sync.RWMutex // guards ram against Close
	ram []byte       // the whole memfd; nil after Close

	allocMu sync.Mutex
	order   []uint64 // shuffled free pages
	next    int
	bufs    [][]byte // scattered views handed out by Alloc
}

var _ driver.Memory = (*RAM)(nil)

// New makes size bytes (a page multiple, at least MinRAM) of guest RAM,
// sealed against shrinking unless unsealed (a hostile peer's).
func New(name string, size uint64, unsealed bool) (*RAM, error) {
	if size < MinRAM || size%abi.PageSize != 0 || size > 1<<40 {
		return nil, fmt.Errorf("guest ram size %#x: want a page multiple >= %#x", size, MinRAM)
	}
	var fd int
	var err error
	if unsealed {
		if fd, err = unix.MemfdCreate(name+"-unsealed", unix.MFD_CLOEXEC); err == nil {
			if err = unix.Ftruncate(fd, int64(size)); err != nil {
				unix.Close(fd)
			}
		}
	} else {
		fd, err = guestmem.NewSealed(name, int64(size))
	}
	if err != nil {
		return nil, fmt.Errorf("guest ram: %w", err)
	}
	r := &RAM{fd: fd, size: size}
	if r.ram, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("map guest ram: %w", err)
	}
	r.shuffle()
	return r, nil
}

// FD is the memfd (owned by the RAM; a transport client passes dups).
func (r *RAM) FD() int { return r.fd }

// Size is the RAM's size in bytes.
func (r *RAM) Size() uint64 { return r.size }

// shuffle builds the allocation order: RAM above 1 MiB in runs of
// chunkPages pages, the runs in a fixed pseudo-random order.
func (r *RAM) shuffle() {
	var chunks []uint64
	for gpa := uint64(HighRAM); gpa < r.size; gpa += chunkPages * abi.PageSize {
		chunks = append(chunks, gpa)
	}
	rand.New(rand.NewPCG(0x76677075, r.size)).Shuffle(len(chunks), func(i, j int) {
		chunks[i], chunks[j] = chunks[j], chunks[i]
	})
	for _, c := range chunks {
		for p := range uint64(chunkPages) {
			if gpa := c + p*abi.PageSize; gpa < r.size {
				r.order = append(r.order, gpa)
			}
		}
	}
}

// Alloc hands out n bytes (rounded up to whole pages) of guest RAM above
// 1 MiB: Buf is a contiguous local view of pages scattered in
// guest-physical memory, valid until Close.
func (r *RAM) Alloc(n int) (driver.DMA, error) {
	if n <= 0 {
		return driver.DMA{}, fmt.Errorf("alloc %d bytes: %w", n, abi.Errorf(abi.StatusInvalidArgument, "size must be positive"))
	}
	pages := (n + abi.PageSize - 1) / abi.PageSize
	r.allocMu.Lock()
	defer r.allocMu.Unlock()
	if r.order == nil {
		return driver.DMA{}, fmt.Errorf("alloc: %w", ErrClosed)
	}
	if pages > len(r.order)-r.next {
		return driver.DMA{}, fmt.Errorf("alloc %d pages: %w", pages, abi.Errorf(abi.StatusOutOfResources, "guest ram exhausted"))
	}
	gpas := append([]uint64(nil), r.order[r.next:r.next+pages]...)
	buf, err := mapScattered(r.fd, gpas)
	if err != nil {
		return driver.DMA{}, fmt.Errorf("alloc %d pages: %w", pages, err)
	}
	r.next += pages
	r.bufs = append(r.bufs, buf)
	return driver.DMA{Buf: buf, Pages: gpas}, nil
}

// inRAM checks that [gpa, gpa+n) is guest RAM (not the VGA hole).
func (r *RAM) inRAM(gpa uint64, n int) error {
	end := gpa + uint64(n)
	if end < gpa || end > r.size || (gpa < HighRAM && end > LowRAMEnd) {
		return fmt.Errorf("guest ram %#x+%#x: %w", gpa, n, abi.Errorf(abi.StatusBadAddress, "outside guest ram"))
	}
	return nil
}

// ReadRAM copies guest RAM at gpa into p.
func (r *RAM) ReadRAM(gpa uint64, p []byte) error {
	return r.access(gpa, len(p), func(ram []byte) { copy(p, ram) })
}

// WriteRAM copies p into guest RAM at gpa.
func (r *RAM) WriteRAM(gpa uint64, p []byte) error {
	return r.access(gpa, len(p), func(ram []byte) { copy(ram, p) })
}

// access checks that [gpa, gpa+n) is guest RAM and calls f with the RAM
// from gpa on, under the read lock; ErrClosed once the RAM is released.
func (r *RAM) access(gpa uint64, n int, f func(ram []byte)) error {
	if err := r.inRAM(gpa, n); err != nil {
		return err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ram == nil {
		return ErrClosed
	}
	f(r.ram[gpa:])
	return nil
}

// Shrink truncates the memfd to n bytes (only an unsealed one can be):
// what a hostile peer does after sending it.
func (r *RAM) Shrink(n uint64) error {
	if err := unix.Ftruncate(r.fd, int64(n)); err != nil {
		return fmt.Errorf("shrink guest ram: %w", err)
	}
	return nil
}

// Close unmaps the RAM and every buffer Alloc returned and closes the
// memfd. Idempotent.
func (r *RAM) Close() error {
	r.allocMu.Lock()
	for _, b := range r.bufs {
		unmapScattered(b)
	}
	r.bufs, r.order, r.next = nil, nil, 0
	r.allocMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ram == nil {
		return nil
	}
	unix.Munmap(r.ram)
	r.ram = nil
	return unix.Close(r.fd)
}

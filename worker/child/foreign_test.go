package child

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/worker/wire"
)

// anonMapper maps anonymous pages for any frames: the privcmd side is
// guestmem's to test; here, only what the worker does with Foreign.
type anonMapper struct{ fd int }

func (a *anonMapper) MapFrames(gfns []uint64, errs []int32) ([]byte, error) {
	clear(errs)
	return unix.Mmap(-1, 0, len(gfns)*guestmem.PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
}
func (a *anonMapper) Unmap(mem []byte) error { return unix.Munmap(mem) }
func (a *anonMapper) Close() error           { return unix.Close(a.fd) }

func TestForeign(t *testing.T) {
	mappers := 0
	cfg := guestmem.ForeignConfig{Mapper: func(fd int, dom uint16) (guestmem.FrameMapper, error) {
		if dom != 9 {
			t.Errorf("mapper for domain %d, want 9", dom)
		}
		mappers++
		return &anonMapper{fd: fd}, nil
	}}
	s := &server{opts: Options{Foreign: cfg}, slots: map[uint32]*slot{}}
	mem := &guestmem.Map{Foreign: s.opts.Foreign}
	defer mem.Close()
	s.slots[1] = &slot{mem: mem}

	fd := func() int {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	closed := func(fd int) bool {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		return err != nil
	}
	m := &wire.Foreign{Slot: 1, Domain: 9, Regions: []wire.ForeignRegion{{GPA: 0, Size: 0xa0000}, {GPA: 0x100000, Size: 0x100000}}}
	f := fd()
	if err := s.foreign(m, []int{f}); err != nil {
		t.Fatalf("Foreign: %v", err)
	}
	if !closed(f) || mappers != 1 {
		t.Errorf("after Foreign: fd closed %v, %d mappers; want true, 1", closed(f), mappers)
	}
	if got := mem.Regions(); len(got) != 2 || got[1] != [2]uint64{0x100000, 0x100000} {
		t.Errorf("Regions() = %v", got)
	}
	if err := mem.WriteAt([]byte("dma"), 0x1ffff0); err != nil {
		t.Errorf("WriteAt: %v", err)
	}
	if err := mem.ReadAt(make([]byte, 1), 0xa0000); abi.StatusOf(err) != abi.StatusBadAddress {
		t.Errorf("ReadAt in the hole = %v, want bad address", err)
	}

	f = fd()
	m.Slot = 2
	if err := s.foreign(m, []int{f}); abi.StatusOf(err) != abi.StatusNotFound || !closed(f) {
		t.Errorf("Foreign to no slot = %v, fd closed %v; want not found, true", err, closed(f))
	}
	f = fd()
	m.Slot, m.Regions = 1, []wire.ForeignRegion{{GPA: 0x800, Size: 0x1000}}
	if err := s.foreign(m, []int{f}); err == nil || !closed(f) {
		t.Errorf("Foreign with an unaligned window = %v, fd closed %v; want an error, true", err, closed(f))
	}
}

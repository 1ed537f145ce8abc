package child

import (
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
	"github.com/vgpud/vgpud/worker/wire"
)

// A Memory message with a small window of a sealed, sparse 1 TiB memfd
// grows the worker's address space by about the window; one announcing
// 8 TiB of windows is refused. Accesses outside the windows fail.
func TestMemorySparseFile(t *testing.T) {
	s := &server{slots: map[uint32]*slot{}}
	mem := &guestmem.Map{}
	defer mem.Close()
	s.slots[1] = &slot{mem: mem}
	sparse := func(size int64) int {
		fd, err := guestmem.NewSealed("worker-sparse", size)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}

	const window = 2 << 20
	before := addrspacetest.VMSize(t)
	m := &wire.Memory{Slot: 1, Regions: []wire.Region{{GPA: 0, Size: window, Offset: 1<<40 - window}}}
	if err := s.memory(m, []int{sparse(1 << 40)}); err != nil {
		t.Fatalf("Memory(2 MiB of a 1 TiB memfd): %v", err)
	}
	if grew := int64(addrspacetest.VMSize(t) - before); grew > 1<<30 {
		t.Errorf("Memory(2 MiB of a 1 TiB memfd) grew the worker's VmSize by %d MiB, want well under 1 GiB", grew>>20)
	}
	if err := mem.WriteAt([]byte("dma"), window-3); err != nil {
		t.Errorf("WriteAt(3, %#x) = %v, want nil", window-3, err)
	}
	if err := mem.ReadAt(make([]byte, 1), window); abi.StatusOf(err) != abi.StatusBadAddress {
		t.Errorf("ReadAt(1, %#x) past the window = %v, want bad address", window, err)
	}

	const huge = 8 << 40
	before = addrspacetest.VMSize(t)
	m = &wire.Memory{Slot: 1, Regions: []wire.Region{{GPA: 0, Size: huge}}}
	if err := s.memory(m, []int{sparse(huge)}); abi.StatusOf(err) != abi.StatusBadAddress {
		t.Errorf("Memory(8 TiB window) = %v, want a bad-address error", err)
	}
	if grew := int64(addrspacetest.VMSize(t) - before); grew > 1<<30 {
		t.Errorf("Memory(8 TiB window) grew the worker's VmSize by %d MiB", grew>>20)
	}
	if got := mem.Regions(); len(got) != 1 || got[0] != [2]uint64{0, window} {
		t.Errorf("Regions() after the refusal = %v, want the earlier window", got)
	}
}

package vfiouser_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem/guestmemtest"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// TestMaxDMAMapsReachTheWorker: the VERSION reply advertises max_dma_maps
// (64); a client may use all of them with fd-backed windows, and each
// reaches the instance's worker as guest RAM, with the device still
// answering. The 65th is refused with ENOSPC. (libvfio-user's client
// found the 9th refused with EINVAL: the worker protocol carried at most 8
// regions.)
func TestMaxDMAMapsReachTheWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	_, inst, c := attachedVM(t) // maps two windows of guest RAM
	// The rest, one page each of a second memfd, above 4 GiB.
	extra, err := guestmemtest.New("extra", guestmemtest.MinRAM, false)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	const base = 1 << 32
	for i := uint64(2); i < vfiouser.MaxDMAMaps; i++ {
		if err := c.DMAMap(base+i*4096, 4096, i*4096, extra.FD()); err != nil {
			t.Fatalf("DMA_MAP %d of %d: %v", i+1, vfiouser.MaxDMAMaps, err)
		}
	}
	err = c.DMAMap(base, 4096, 0, extra.FD())
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("DMA_MAP %d = %v, want ENOSPC", vfiouser.MaxDMAMaps+1, err)
	}
	if got := c.Read32(abi.RegID); got != abi.IDMagic {
		t.Errorf("RegID after %d windows = %#x (%v)", vfiouser.MaxDMAMaps, got, c.Err())
	}
	if inst.Lost() {
		t.Errorf("the instance lost its device context")
	}
}

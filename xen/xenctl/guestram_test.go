package xenctl

import (
	"errors"
	"testing"

	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/xen"
)

// The worker's mapcache issues IOCTL_PRIVCMD_MMAPBATCH_V2 itself
// (guestmem cannot import this package); its number must be this one,
// which TestLayoutAgainstHeaders checks against the headers.
func TestGuestmemIoctlNumber(t *testing.T) {
	if guestmem.IoctlPrivcmdMmapBatchV2 != ioctlPrivcmdMmapBatchV2 {
		t.Errorf("guestmem's MMAPBATCH_V2 %#x, xenctl's %#x", guestmem.IoctlPrivcmdMmapBatchV2, ioctlPrivcmdMmapBatchV2)
	}
	if guestmem.PageSize != pageSize {
		t.Errorf("guestmem's page %d, xenctl's %d", guestmem.PageSize, pageSize)
	}
}

func TestRAMWindow(t *testing.T) {
	const gib = 1 << 30
	for _, tt := range []struct{ ram, want uint64 }{
		{0, 0},
		{1, 4096},
		{512 << 20, 512 << 20},
		{gib, gib},
		{gib + 4096, 4*gib + 4096}, // above 1 GiB, RAM may sit from 4 GiB
		{16 * gib, 19 * gib},
		{^uint64(0) - 10, 0}, // clamped: only alignment and length are checked
	} {
		got := xen.RAMWindow(tt.ram)
		if got%4096 != 0 || got < min(tt.ram, ^uint64(0)-4095) {
			t.Errorf("RAMWindow(%#x) = %#x: unaligned or short", tt.ram, got)
		}
		if tt.ram < 1<<62 && got != tt.want {
			t.Errorf("RAMWindow(%#x) = %#x, want %#x", tt.ram, got, tt.want)
		}
	}
}

// Without the guest's size there is no window to hand over: the Server
// warns and serves registers.
func TestGuestRAMNeedsSize(t *testing.T) {
	var h Handle
	if _, err := h.GuestRAM(1, 0); !errors.Is(err, xen.ErrNoGuestRAMFDs) {
		t.Errorf("GuestRAM(ram 0) = %v, want ErrNoGuestRAMFDs", err)
	}
}

package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// OpenGuest finds the vGPU (when pciDir is empty), enables and maps its
// BAR0 and returns it with the guest's pinned DMA memory: what every guest
// program does before Open. It also asks the kernel to leave locked pages
// alone during compaction (best effort: the knob needs root and a kernel
// that has it), since the device holds their physical addresses.
func OpenGuest(pciDir string) (Registers, Memory, error) {
	if pciDir == "" {
		p, err := FindPCI()
		if err != nil {
			return nil, nil, err
		}
		pciDir = p
	}
	regs, err := OpenPCI(pciDir)
	if err != nil {
		return nil, nil, err
	}
	_ = os.WriteFile("/proc/sys/vm/compact_unevictable_allowed", []byte("0"), 0)
	return regs, NewPagemapMemory(), nil
}

// reopenEvery is how often ReopenGuest looks at sysfs.
const reopenEvery = 20 * time.Millisecond

// ReopenGuest waits until the vGPU's PCI device is present, then enables
// and maps its BAR0 (OpenPCI): the registers to pass to Device.Resume after
// a migration, when a new device is hot-plugged at the same slot (or, when
// the migration was abandoned, the same device is still there). With
// pciDir "" it looks for any vGPU (FindPCI); otherwise it waits for pciDir
// to hold a device with the vGPU's vendor and device IDs. It polls sysfs
// every 20 ms, and retries OpenPCI too (the kernel creates resource0 after
// the device appears), until ctx ends.
//
// Before mapping, it writes the device's BARs back if its configuration
// space lost them (RestoreConfig): after a migration onto a VMM that keeps
// the device attached without its configuration (vfio-user-pci).
func ReopenGuest(ctx context.Context, pciDir string) (Registers, error) {
	return reopenPCI(ctx, SysfsPCI, pciDir, func(dir string) (Registers, error) {
		if _, err := RestoreConfig(dir); err != nil {
			return nil, err
		}
		return OpenPCI(dir)
	}, reopenEvery)
}

// WaitPCI waits until a vGPU is on the PCI bus with its BAR0 in sysfs and
// returns its directory, as FindPCI would: for a guest booted before its
// vGPU is hot-plugged (a libvirt domain gets it from vgpud once it runs,
// docs/operating.md). It polls sysfs every 20 ms until ctx ends.
func WaitPCI(ctx context.Context) (string, error) { return waitPCI(ctx, SysfsPCI, reopenEvery) }

func waitPCI(ctx context.Context, root string, every time.Duration) (string, error) {
	var dir string
	_, err := reopenPCI(ctx, root, "", func(d string) (Registers, error) {
		if _, err := os.Stat(filepath.Join(d, "resource0")); err != nil {
			return nil, err
		}
		dir = d
		return nil, nil
	}, every)
	return dir, err
}

func reopenPCI(ctx context.Context, root, pciDir string, open func(string) (Registers, error), every time.Duration) (Registers, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		dir, err := pciDir, error(nil)
		if dir == "" {
			dir, err = findPCI(root)
		} else if v, dv := sysfsHex(dir, "vendor"), sysfsHex(dir, "device"); v != abi.VendorID || dv != abi.DeviceID {
			err = fmt.Errorf("%s: device %04x:%04x, want %04x:%04x: %w", dir, v, dv, abi.VendorID, abi.DeviceID, ErrNoDevice)
		}
		if err == nil {
			var regs Registers
			if regs, err = open(dir); err == nil {
				return regs, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("reopen vgpu: %w (last try: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// findDevice returns the address (e.g. "0000:00:03.0") of the first PCI
// device, in address order, with the given vendor and device IDs.
func findDevice(sysfs string, id [2]uint16) (string, error) {
	dir := filepath.Join(sysfs, "bus/pci/devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("list PCI devices: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	for _, bdf := range names {
		v, err1 := readHex(filepath.Join(dir, bdf, "vendor"))
		d, err2 := readHex(filepath.Join(dir, bdf, "device"))
		if err1 == nil && err2 == nil && v == uint64(id[0]) && d == uint64(id[1]) {
			return bdf, nil
		}
	}
	return "", fmt.Errorf("no PCI device %04x:%04x in %s", id[0], id[1], dir)
}

func readHex(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 64)
}

// bar is a mapped BAR.
type bar struct {
	mem []byte
}

// openBAR0 enables the device and maps its resource0.
func openBAR0(sysfs, bdf string) (*bar, error) {
	dev := filepath.Join(sysfs, "bus/pci/devices", bdf)
	if err := os.WriteFile(filepath.Join(dev, "enable"), []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("enable %s: %w", bdf, err)
	}
	f, err := os.OpenFile(filepath.Join(dev, "resource0"), os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s BAR0: %w", bdf, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s BAR0: %w", bdf, err)
	}
	size := st.Size()
	if size < 4 || size > 1<<30 {
		return nil, fmt.Errorf("%s BAR0 size %d: want 4 bytes to 1 GiB", bdf, size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s BAR0: %w", bdf, err)
	}
	return &bar{mem: mem}, nil
}

// Read32 and Write32 access the register at off; off must be 4-byte
// aligned and inside the BAR (checked by the caller once).
func (b *bar) Read32(off uint32) uint32     { return load32(b.mem, off) }
func (b *bar) Write32(off uint32, v uint32) { store32(b.mem, off, v) }

func (b *bar) Close() error {
	if b.mem == nil {
		return errors.New("bar already closed")
	}
	err := unix.Munmap(b.mem)
	b.mem = nil
	return err
}

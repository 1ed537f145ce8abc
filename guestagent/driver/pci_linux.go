package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
)

// SysfsPCI is where Linux lists PCI devices.
const SysfsPCI = "/sys/bus/pci/devices"

// FindPCI returns the sysfs directory of the first vGPU (by bus address).
func FindPCI() (string, error) { return findPCI(SysfsPCI) }

func findPCI(root string) (string, error) {
	dirs, err := findAllPCI(root)
	if err != nil {
		return "", err
	}
	return dirs[0], nil
}

// FindAllPCI returns the sysfs directories of every vGPU, by bus address:
// for a program that serves them all (vgpu-icdd).
func FindAllPCI() ([]string, error) { return findAllPCI(SysfsPCI) }

func findAllPCI(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("find vgpu: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var dirs []string
	for _, n := range names {
		dir := filepath.Join(root, n)
		if sysfsHex(dir, "vendor") == abi.VendorID && sysfsHex(dir, "device") == abi.DeviceID &&
			sysfsHex(dir, "class") == abi.ClassCode {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("find vgpu: no device %04x:%04x class %06x in %s: %w",
			abi.VendorID, abi.DeviceID, abi.ClassCode, root, ErrNoDevice)
	}
	return dirs, nil
}

// sysfsHex reads a "0x..." sysfs attribute, -1 when absent or malformed.
func sysfsHex(dir, attr string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, attr))
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 64)
	if err != nil {
		return -1
	}
	return v
}

// OpenPCI enables the PCI device at the sysfs directory dir and maps its
// BAR0 (resource0). The returned Registers also implement io.Closer, which
// unmaps the BAR.
func OpenPCI(dir string) (Registers, error) {
	if err := os.WriteFile(filepath.Join(dir, "enable"), []byte("1"), 0); err != nil {
		return nil, fmt.Errorf("open pci %s: enable: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "resource0"), os.O_RDWR|unix.O_SYNC, 0)
	if err != nil {
		return nil, fmt.Errorf("open pci %s: %w", dir, err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, abi.BAR0Size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("open pci %s: mmap resource0: %w", dir, err)
	}
	return &bar{mem: m}, nil
}

// bar is a mapped BAR0.
type bar struct{ mem []byte }

func (b *bar) ok(off uint32) bool { return off%4 == 0 && int(off) <= len(b.mem)-4 }

// Read32 loads the register at off; unaligned or out-of-range offsets read
// as 0xffffffff, like an unanswered PCI read.
func (b *bar) Read32(off uint32) uint32 {
	if !b.ok(off) {
		return 0xffffffff
	}
	return mmioLoad32(b.mem, off)
}

// Write32 stores v at off; unaligned or out-of-range offsets are ignored.
func (b *bar) Write32(off, v uint32) {
	if b.ok(off) {
		mmioStore32(b.mem, off, v)
	}
}

// Close unmaps the BAR.
func (b *bar) Close() error {
	if b.mem == nil {
		return nil
	}
	err := unix.Munmap(b.mem)
	b.mem = nil
	return err
}

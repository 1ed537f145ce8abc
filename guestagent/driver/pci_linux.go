package driver

import (
	"encoding/binary"
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

// Linux's IORESOURCE flags in a sysfs "resource" line (include/linux/ioport.h).
const (
	ioresourceIO    = 0x00000100
	ioresourceMem   = 0x00000200
	ioresourceMem64 = 0x00100000
)

// Configuration space offsets and command register bits RestoreConfig
// writes (PCI 3.0, 6.2.2 and 6.2.5).
const (
	cfgCommand   = 0x04
	cfgBAR0      = 0x10
	cmdIO        = 1 << 0
	cmdMemory    = 1 << 1
	cmdBusMaster = 1 << 2
	pciBARs      = 6
)

// RestoreConfig writes the BARs of the PCI function dir (a sysfs device
// directory) back from the kernel's resources, and turns its decoders and
// bus mastering on, when its configuration space no longer holds them; it
// reports whether it did. That happens after a live migration onto a VMM
// that keeps the device attached but not its configuration: QEMU 11.1's
// vfio-user-pci migrates no state, so the destination's device comes up as
// after a reset, unmapped, under a guest kernel that still has it at its
// old addresses (docs/migration.md). Writing the addresses back makes the
// VMM map the BARs where the guest expects them. A device whose BARs hold
// the kernel's addresses is left alone. It is SaveConfig then Restore.
func RestoreConfig(dir string) (bool, error) {
	c, err := SaveConfig(dir)
	if err != nil {
		return false, err
	}
	return c.Restore()
}

// SavedConfig is what RestoreConfig writes back into a PCI function's
// configuration space, computed beforehand (SaveConfig) so that the
// write-back after a migration does only that: read the header, write the
// words that differ (in a TCG guest every code path runs cold on the
// destination's VMM, and the resume waits for it).
type SavedConfig struct {
	dir   string
	words []configWord // the BAR dwords at the kernel's addresses
	cmd   uint16       // the decoders those BARs need
	// f is the function's configuration space, opened by SaveConfig so
	// that Restore, right after a migration, walks no sysfs path: in a
	// guest whose paths run cold on the destination (TCG) the open took
	// 32 ms of a 51 ms write-back. Restore or Close closes it.
	f *os.File
}

// configWord is a BAR dword: val in the bits outside keep, which hold
// what the function reports (its type bits).
type configWord struct {
	off       int64
	val, keep uint32
}

// SaveConfig reads the kernel's resources for the PCI function dir and its
// configuration header, and returns what Restore writes back.
func SaveConfig(dir string) (*SavedConfig, error) {
	res, err := os.ReadFile(filepath.Join(dir, "resource"))
	if err != nil {
		return nil, fmt.Errorf("save pci config %s: %w", dir, err)
	}
	c := &SavedConfig{dir: dir}
	lines := strings.Split(strings.TrimSpace(string(res)), "\n")
	for i := 0; i < pciBARs && i < len(lines); i++ {
		start, flags, ok := parseResource(lines[i])
		if !ok || start == 0 {
			continue
		}
		off := int64(cfgBAR0 + 4*i)
		switch {
		case flags&ioresourceIO != 0:
			c.cmd |= cmdIO
			c.words = append(c.words, configWord{off, uint32(start) &^ 0x3, 0x3})
		case flags&ioresourceMem != 0:
			c.cmd |= cmdMemory
			c.words = append(c.words, configWord{off, uint32(start) &^ 0xf, 0xf})
			if flags&ioresourceMem64 != 0 && i+1 < pciBARs {
				i++
				c.words = append(c.words, configWord{int64(cfgBAR0 + 4*i), uint32(start >> 32), 0})
			}
		}
	}
	if c.f, err = os.OpenFile(filepath.Join(dir, "config"), os.O_RDWR, 0); err != nil {
		return nil, fmt.Errorf("save pci config %s: %w", dir, err)
	}
	return c, nil
}

// Close releases what SaveConfig holds, for a configuration that will not
// be restored. Restore closes it itself.
func (c *SavedConfig) Close() error {
	if c.f == nil {
		return nil
	}
	f := c.f
	c.f = nil
	return f.Close()
}

// parseResource reads the start address and flags of a sysfs "resource"
// line ("0x<start> 0x<end> 0x<flags>").
func parseResource(line string) (start, flags uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return 0, 0, false
	}
	var v [3]uint64
	for i, s := range f {
		n, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
		if err != nil {
			return 0, 0, false
		}
		v[i] = n
	}
	return v[0], v[2], true
}

// Restore writes the saved BARs back where the function's configuration
// space no longer holds them, then turns on the decoders they need and bus
// mastering; it reports whether it wrote anything. It uses, and closes,
// the configuration space SaveConfig opened; called again, it opens it.
func (c *SavedConfig) Restore() (bool, error) {
	f := c.f
	c.f = nil
	if f == nil {
		var err error
		if f, err = os.OpenFile(filepath.Join(c.dir, "config"), os.O_RDWR, 0); err != nil {
			return false, fmt.Errorf("restore pci config %s: %w", c.dir, err)
		}
	}
	defer f.Close()
	// Only the words written back are read, each on its own, not the whole
	// header: every config access traps to the VMM (and QEMU's
	// vfio-user-pci may ask vgpud), right after a migration.
	buf := make([]byte, 4)
	wrote := false
	for _, w := range c.words {
		if _, err := f.ReadAt(buf, w.off); err != nil {
			return false, fmt.Errorf("restore pci config %s: read BAR at %#x: %w", c.dir, w.off, err)
		}
		cur := le32(buf)
		if cur&^w.keep == w.val {
			continue
		}
		binary.LittleEndian.PutUint32(buf, w.val|cur&w.keep)
		if _, err := f.WriteAt(buf, w.off); err != nil {
			return false, fmt.Errorf("restore pci config %s: BAR at %#x: %w", c.dir, w.off, err)
		}
		wrote = true
	}
	if !wrote {
		return false, nil
	}
	if _, err := f.ReadAt(buf[:2], cfgCommand); err != nil {
		return false, fmt.Errorf("restore pci config %s: read command: %w", c.dir, err)
	}
	cmd := binary.LittleEndian.Uint16(buf) | c.cmd | cmdBusMaster
	binary.LittleEndian.PutUint16(buf, cmd)
	if _, err := f.WriteAt(buf[:2], cfgCommand); err != nil {
		return false, fmt.Errorf("restore pci config %s: command: %w", c.dir, err)
	}
	return true, nil
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

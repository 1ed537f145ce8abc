package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vgpud/vgpud/abi"
)

// SysfsUIOPCIGeneric is the sysfs directory of the uio_pci_generic driver
// (present once the module is loaded: modprobe uio_pci_generic).
const SysfsUIOPCIGeneric = "/sys/bus/pci/drivers/uio_pci_generic"

// BindUIO binds the PCI device at the sysfs directory pciDir (FindPCI) to
// uio_pci_generic, by writing the vGPU's vendor and device ID to the
// driver's new_id (which also binds every matching unbound device), and
// returns its /dev/uioN path. A device already bound to it is left alone.
// Binding uio_pci_generic does not disturb the BAR0 mapping of OpenPCI.
func BindUIO(pciDir string) (string, error) {
	return bindUIO(pciDir, SysfsUIOPCIGeneric, "/dev")
}

func bindUIO(pciDir, drvDir, devDir string) (string, error) {
	if uio, err := findUIO(pciDir, devDir); err == nil {
		return uio, nil
	}
	if _, err := os.Stat(drvDir); err != nil {
		return "", fmt.Errorf("bind uio_pci_generic (is the module loaded?): %w", err)
	}
	id := fmt.Sprintf("%04x %04x\n", abi.VendorID, abi.DeviceID)
	if err := os.WriteFile(filepath.Join(drvDir, "new_id"), []byte(id), 0); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("bind uio_pci_generic: new_id: %w", err)
	}
	if _, err := findUIO(pciDir, devDir); err != nil {
		// The ID was known already (EEXIST) but this device is unbound:
		// bind it by address.
		bdf := filepath.Base(pciDir)
		if err := os.WriteFile(filepath.Join(drvDir, "bind"), []byte(bdf), 0); err != nil && !errors.Is(err, os.ErrExist) {
			return "", fmt.Errorf("bind uio_pci_generic: bind %s: %w", bdf, err)
		}
	}
	return findUIO(pciDir, devDir)
}

// findUIO returns the /dev path of the uio device of pciDir.
func findUIO(pciDir, devDir string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(pciDir, "uio"))
	if err != nil {
		return "", fmt.Errorf("find uio of %s: %w", pciDir, err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "uio") {
			return filepath.Join(devDir, e.Name()), nil
		}
	}
	return "", fmt.Errorf("find uio of %s: %w", pciDir, ErrNoDevice)
}

// OpenUIOBlocker binds the device at pciDir to uio_pci_generic, opens its
// /dev/uioN and its config file and returns a UIOBlocker on regs (the
// device's BAR0).
func OpenUIOBlocker(pciDir string, regs Registers) (*UIOBlocker, error) {
	l, err := OpenUIOLine(pciDir)
	if err != nil {
		return nil, err
	}
	return NewUIOBlocker(regs, l.uio, l.cfg)
}

// OpenUIOLine binds the device at pciDir to uio_pci_generic and returns
// its INTx as an IRQLine (for Interrupts).
func OpenUIOLine(pciDir string) (*UIOLine, error) {
	path, err := BindUIO(pciDir)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open uio: %w", err)
	}
	cfg, err := os.OpenFile(filepath.Join(pciDir, "config"), os.O_RDWR, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open pci config: %w", err)
	}
	return NewUIOLine(f, cfg), nil
}

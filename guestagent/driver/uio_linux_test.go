package driver

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestBindUIO(t *testing.T) {
	root := t.TempDir()
	pci := filepath.Join(root, "devices", "0000:00:04.0")
	drv := filepath.Join(root, "drivers", "uio_pci_generic")
	for _, d := range []string{pci, drv} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bindUIO(pci, filepath.Join(root, "drivers", "missing"), "/dev"); err == nil {
		t.Errorf("bindUIO without the driver = nil error")
	}
	// The fake kernel does not bind: no uio directory appears.
	if _, err := bindUIO(pci, drv, "/dev"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bindUIO(no uio appears) = %v, want ErrNotExist", err)
	}
	if b, err := os.ReadFile(filepath.Join(drv, "new_id")); err != nil || string(b) != "7667 0001\n" {
		t.Errorf("new_id = %q, %v, want \"7667 0001\\n\"", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(drv, "bind")); err != nil || string(b) != "0000:00:04.0" {
		t.Errorf("bind = %q, %v, want the device address", b, err)
	}
	if err := os.MkdirAll(filepath.Join(pci, "uio", "uio3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := bindUIO(pci, drv, "/dev"); err != nil || got != "/dev/uio3" {
		t.Errorf("bindUIO(bound) = %q, %v, want /dev/uio3", got, err)
	}
}

package agent

import (
	"os"
	"path/filepath"

	"github.com/vgpud/vgpud/guestagent/driver"
)

// saveVGPUConfig saves the vGPU's PCI configuration from its function dir,
// found first when dir is "" or no longer holds a function, for the Relay
// to write back after a migration in place (Relay.inPlaceConfig).
func saveVGPUConfig(dir string) (configRestorer, string, error) {
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "resource0")); err != nil {
			dir = ""
		}
	}
	if dir == "" {
		var err error
		if dir, err = driver.FindPCI(); err != nil {
			return nil, "", err
		}
	}
	c, err := driver.SaveConfig(dir)
	if err != nil {
		return nil, "", err
	}
	return c, dir, nil
}

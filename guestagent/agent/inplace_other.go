//go:build !linux

package agent

import (
	"errors"
	"fmt"
)

// saveVGPUConfig: a guest's PCI configuration is reached through Linux's
// sysfs only; elsewhere programs reopen the device.
func saveVGPUConfig(string) (configRestorer, string, error) {
	return nil, "", fmt.Errorf("save the vGPU's configuration: %w", errors.ErrUnsupported)
}

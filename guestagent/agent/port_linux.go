package agent

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// PortPath finds the character device of the virtio-serial port called
// name: /dev/<vportNpM> where /sys/class/virtio-ports/<vportNpM>/name
// holds name. sysRoot "" means "/sys".
func PortPath(sysRoot, name string) (string, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	ports, err := filepath.Glob(filepath.Join(sysRoot, "class/virtio-ports/*/name"))
	if err != nil {
		return "", err
	}
	for _, p := range ports {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/" + filepath.Base(filepath.Dir(p)), nil
		}
	}
	return "", fmt.Errorf("virtio port %q: not found (is virtio_console loaded?): %w", name, os.ErrNotExist)
}

// OpenPort returns an opener of the virtio-serial port called name, for
// New.
func OpenPort(name string) func() (io.ReadWriteCloser, error) {
	return func() (io.ReadWriteCloser, error) {
		path, err := PortPath("", name)
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open agent port: %w", err)
		}
		return f, nil
	}
}

// DialRelay returns an opener of the vgpu-agent daemon's relay socket,
// for New.
func DialRelay(path string) func() (io.ReadWriteCloser, error) {
	return func() (io.ReadWriteCloser, error) {
		c, err := net.Dial("unix", path)
		if err != nil {
			return nil, fmt.Errorf("dial agent relay: %w", err)
		}
		return c, nil
	}
}

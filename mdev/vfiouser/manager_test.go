package vfiouser_test

import (
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// attachedVM starts a manager over the host's OpenCL device with the
// vfio-user transport, creates a vgpu-small instance and attaches the
// specification's client to it (16 MiB of guest RAM, mapped); everything
// is closed when the test ends.
func attachedVM(t *testing.T) (*mdev.Manager, *mdev.Instance, *vfiousertest.Client) {
	t.Helper()
	return attachedVMWith(t, mdev.Config{Devices: []gpu.Device{openDevice(t)}})
}

// openDevice opens the host's OpenCL device, closed when the test ends.
func openDevice(t *testing.T) gpu.Device {
	t.Helper()
	dev, err := gpu.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// attachedVMWith is attachedVM with the manager configured by cfg (its
// devices among it; the socket directory, transport and logger are set
// here).
func attachedVMWith(t *testing.T, cfg mdev.Config) (*mdev.Manager, *mdev.Instance, *vfiousertest.Client) {
	t.Helper()
	// A short directory: t.TempDir's path can make the instance
	// socket's name longer than a Unix socket address holds.
	dir, err := os.MkdirTemp("", "vu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.SocketDir, cfg.Transport, cfg.Logger = dir, vfiouser.Transport{}, slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := mdev.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.Socket(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := vfiousertest.New(conn, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for deadline := time.Now().Add(30 * time.Second); !inst.Attached(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not attached")
		}
	}
	return m, inst, c
}

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
	dev, err := gpu.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	// A short directory: t.TempDir's path can make the instance
	// socket's name longer than a Unix socket address holds.
	dir, err := os.MkdirTemp("", "vu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: dir, Transport: vfiouser.Transport{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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

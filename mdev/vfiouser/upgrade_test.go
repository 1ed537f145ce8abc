package vfiouser_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// TestUpgradeRefusedWhileAttached: an upgrade in place cannot hand a
// vfio-user session over, so pausing the manager for one fails with
// ErrNotPausable, and after Unpause the VM goes on as if nothing happened.
func TestUpgradeRefusedWhileAttached(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	dev, err := gpu.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	dir, err := os.MkdirTemp("", "vu")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: dir, Transport: vfiouser.Transport{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
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
	defer c.Close()
	for deadline := time.Now().Add(30 * time.Second); !inst.Attached(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not attached")
		}
	}
	if err := m.Pause(context.Background()); !errors.Is(err, mdev.ErrNotPausable) {
		t.Errorf("Pause with a vfio-user VM attached = %v, want ErrNotPausable", err)
	}
	m.Unpause()
	if got := c.Read32(abi.RegID); got != abi.IDMagic {
		t.Errorf("RegID after the refused upgrade = %#x (%v)", got, c.Err())
	}
	if _, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"}); err != nil {
		t.Errorf("Create after the refused upgrade: %v", err)
	}
}

package main

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// TestVFIOUserDaemon runs vgpud -transport vfio-user: an instance listens
// at <uuid>.vfio-user.sock, the spec-written client attaches there as
// QEMU 10.1 would, and the guest suite computes through it (with the
// kick doorbell on the ioeventfd).
func TestVFIOUserDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	sock, _, stop := daemonOn(t, t.TempDir(), "-transport", "vfio-user")
	defer stop()
	c := control.NewClient(sock)
	ctx := context.Background()
	info, err := c.Create(ctx, mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(info.Socket, info.UUID+".vfio-user.sock") {
		t.Fatalf("instance socket %q, want <uuid>.vfio-user.sock", info.Socket)
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: info.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := vfiousertest.New(conn, 64<<20)
	if err != nil {
		t.Fatalf("vfio-user attach: %v", err)
	}
	defer cl.Close()
	d, err := driver.Open(cl, cl, driver.Options{Kick: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if rep := suite.Run(ctx, d, suite.Options{VectorN: 4096, ReduceN: 1 << 14}); !rep.OK() {
		t.Fatalf("suite over vfio-user:\n%s", rep)
	}
}

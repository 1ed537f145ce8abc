package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/icdserver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

// icdHost is vgpu-icdd's server over an in-process vgpud (sandboxed
// workers, executors) with one vgpu-medium instance, whose profile offers
// device contexts, on the harness VM.
type icdHost struct {
	srv      *icdserver.Server
	m        *mdev.Manager
	inst     *mdev.Instance
	deadline time.Time // every client's replies are due by then
}

// hostOptions size an icdHost.
type hostOptions struct {
	RAM      uint64                  // the harness VM's RAM
	Policy   icdserver.ContextPolicy // the server's
	Wait     time.Duration           // the server's Timeout: how long a Wait waits
	Deadline time.Duration           // from now, for every reply
}

func newICDHost(t *testing.T, o hostOptions) *icdHost {
	t.Helper()
	if testing.Short() {
		t.Skip("needs an OpenCL device")
	}
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("no OpenCL device: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	// Not t.TempDir(): the sockets' paths must fit a sockaddr_un.
	dir, err := os.MkdirTemp("", "vx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: dir, Transport: mpqemu.Transport{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-medium"})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := mpqemutest.Dial(inst.Socket(), o.RAM)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	d, err := driver.Open(vm, vm, driver.Options{StagingBytes: 8 << 20, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if got := d.Info().MaxContexts; got != abi.MaxContexts {
		t.Fatalf("vgpu-medium offers %d device contexts, want %d", got, abi.MaxContexts)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv := icdserver.New(icdserver.Config{Devices: []*driver.Device{d}, Timeout: o.Wait, Logger: log, Contexts: o.Policy})
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), o.Deadline)
	t.Cleanup(cancel)
	deadline, _ := ctx.Deadline()
	return &icdHost{srv: srv, m: m, inst: inst, deadline: deadline}
}

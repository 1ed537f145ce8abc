// Package host starts the in-process vgpud that the benchmark programs
// measure: one OpenCL device, an instance manager with sockets in a
// temporary directory, and logs kept to errors so they do not interleave
// with the printed tables. It knows nothing of what is measured.
package host

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// Host is an in-process vgpud.
type Host struct {
	Dev gpu.Device
	Mgr *mdev.Manager
	Dir string // temporary directory: instance sockets, guest images

	vfioUser bool // Mode.VFIOUser
	posted   bool // Mode.Posted
}

// Start opens the device named by selector (gpu.Open) and a manager on it,
// whose instances run in worker processes (vgpud's default).
func Start(selector, prefix string) (*Host, error) { return StartWith(selector, prefix, false) }

// StartWith is Start; inProcess runs the instances in this process instead
// (the unsafe baseline of bench/isolation).
func StartWith(selector, prefix string, inProcess bool) (*Host, error) {
	return StartMode(selector, prefix, Mode{InProcess: inProcess})
}

// Mode is how a Host runs its instances' device work: in workers with
// their kernels in executors (vgpud's default, the zero Mode), or one of
// the unsafe baselines of bench/isolation.
type Mode struct {
	InProcess       bool // in this process (mdev.Config.InProcess)
	KernelsInWorker bool // CPU devices' kernels in the workers (mdev.Config.KernelsInWorker)
	// PollWindow is the workers' poll window (mdev.Config.PollWindow:
	// 0 the default, negative never polls).
	PollWindow time.Duration
	// RequestEveryTurn: no free turn parked at an instance (mdev.Config.RequestEveryTurn).
	RequestEveryTurn bool
	// VFIOUser serves the instances over vfio-user (vgpud's default
	// transport) instead of mpqemu; Host.Dial then attaches its VMs so.
	VFIOUser bool
	// Posted: those VMs post their BAR writes and take no kick
	// ioeventfd, as QEMU 11.1's vfio-user-pci (vfiousertest.QEMU101);
	// else they kick on the ioeventfd, as a client that wires it would.
	Posted bool
}

// StartMode is Start with the instances run as mode says.
func StartMode(selector, prefix string, mode Mode) (*Host, error) {
	dev, err := gpu.Open(selector)
	if err != nil {
		return nil, fmt.Errorf("open opencl device: %w", err)
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		dev.Close()
		return nil, err
	}
	// Each path's hang-up is logged as a warning: errors only.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var tr transport.Socket = mpqemu.Transport{}
	if mode.VFIOUser {
		tr = vfiouser.Transport{}
	}
	mgr, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: dir, Transport: tr, Logger: log,
		InProcess: mode.InProcess, KernelsInWorker: mode.KernelsInWorker, PollWindow: mode.PollWindow, RequestEveryTurn: mode.RequestEveryTurn})
	if err != nil {
		os.RemoveAll(dir)
		dev.Close()
		return nil, err
	}
	return &Host{Dev: dev, Mgr: mgr, Dir: dir, vfioUser: mode.VFIOUser, posted: mode.Posted}, nil
}

// Close stops the manager, closes the device and removes the directory.
func (h *Host) Close() error {
	err := errors.Join(h.Mgr.Close(), h.Dev.Close())
	os.RemoveAll(h.Dir)
	return err
}

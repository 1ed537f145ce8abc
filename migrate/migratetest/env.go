package migratetest

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/qmp"
)

// Env is what a test or benchmark of migration and restarts runs with:
// vgpud and vgpuctl built, the guest kernel and an initramfs with
// vgpu-agent and vgpu-iterate, and a TLS directory every daemon may use.
type Env struct {
	Bin    string // vgpud and vgpuctl
	TLSDir string
	Kernel imagetest.Kernel
	Initrd string
	// SerialLog, if set, gets a copy of every guest's console.
	SerialLog io.Writer
}

// NewEnv builds an Env in dir, which must exist.
func NewEnv(ctx context.Context, dir string) (*Env, error) {
	e := &Env{Bin: filepath.Join(dir, "bin"), TLSDir: filepath.Join(dir, "tls")}
	img := filepath.Join(dir, "guest")
	for _, d := range []string{e.Bin, e.TLSDir, img} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := BuildTools(ctx, e.Bin); err != nil {
		return nil, err
	}
	k, err := imagetest.FindKernel()
	if err != nil {
		return nil, fmt.Errorf("guest kernel: %w (make kernel)", err)
	}
	e.Kernel = k
	if e.Initrd, err = imagetest.BuildInitramfs(ctx, img, k,
		"github.com/vgpud/vgpud/guestagent/cmd/vgpu-agent", "github.com/vgpud/vgpud/guestagent/cmd/vgpu-iterate"); err != nil {
		return nil, err
	}
	ca, err := MakeCA()
	if err != nil {
		return nil, err
	}
	if err := ca.WriteHostDir(e.TLSDir); err != nil {
		return nil, err
	}
	return e, nil
}

// StartVM starts QEMU (512 MiB) for the instance whose sockets start with
// base (Daemon.InstanceBase): with incoming "", with the vGPU as
// migrate.DefaultDeviceID, booting with kernel command line app; otherwise
// without it, waiting at incoming for the VM to arrive by migration. Its
// QMP monitor and agent channel are where vgpud looks for them.
func (e *Env) StartVM(ctx context.Context, base, incoming, app string) (*qemuvm.VM, error) {
	cfg := qemuvm.Config{Kernel: e.Kernel.Vmlinuz, Initrd: e.Initrd, MemMiB: 512, Append: app,
		AgentSocket: base + ".agent.sock", QMPSocket: base + ".qmp", Incoming: incoming, SerialLog: e.SerialLog}
	if incoming == "" {
		f, err := qemuvm.DialProxy(base + ".sock")
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cfg.Devices = []qemuvm.ProxyDevice{{ID: migrate.DefaultDeviceID, FD: f}}
	}
	return qemuvm.Start(ctx, cfg)
}

// StartVFIOUserVM is StartVM for a vgpud run with -transport vfio-user:
// QEMU 11.1 from the VMM root (qemuvm.RepoVMMRoot), the vGPU attached by
// vfio-user-pci to base.vfio-user.sock. With incoming set the device is
// attached too (vfio-user-pci connects at QEMU's start, so the instance
// must exist: vgpuctl create -incoming), and it returns once the
// monitor, where vgpud looks for the destination QEMU, answers.
func (e *Env) StartVFIOUserVM(ctx context.Context, base, incoming, app string) (*qemuvm.VM, error) {
	return e.StartVFIOUserGuest(ctx, base, incoming, qemuvm.Config{Kernel: e.Kernel.Vmlinuz, Initrd: e.Initrd, MemMiB: 512, Append: app})
}

// StartVFIOUserGuest is StartVFIOUserVM for another guest: cfg says what
// boots (kernel, initramfs, disk, memory, command line) and this adds
// the vGPU, the sockets, the console copy and QEMU 11.1's root. Both ends
// of a migration must get the same cfg.
func (e *Env) StartVFIOUserGuest(ctx context.Context, base, incoming string, cfg qemuvm.Config) (*qemuvm.VM, error) {
	root, err := qemuvm.RepoVMMRoot()
	if err != nil {
		return nil, err
	}
	cfg.AgentSocket, cfg.QMPSocket, cfg.Incoming, cfg.SerialLog = base+".agent.sock", base+".qmp", incoming, e.SerialLog
	cfg.VFIOUser = []qemuvm.VFIOUserDevice{{ID: migrate.DefaultDeviceID, Socket: base + ".vfio-user.sock"}}
	root.Apply(&cfg)
	vm, err := qemuvm.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if incoming != "" {
		if err := waitQMP(ctx, vm, cfg.QMPSocket); err != nil {
			vm.Kill()
			return nil, err
		}
	}
	return vm, nil
}

// waitQMP waits until QEMU's monitor at path answers (QEMU from the root
// takes a moment to create it), or QEMU ends, or ctx does.
func waitQMP(ctx context.Context, vm *qemuvm.VM, path string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		mon, err := qmp.Dial(dctx, path)
		cancel()
		if err == nil {
			mon.Close()
			return nil
		}
		select {
		case <-vm.Done():
			return fmt.Errorf("QEMU ended before its monitor answered: %v\n%s", vm.Wait(), strings.Join(vm.Lines(), "\n"))
		case <-ctx.Done():
			return fmt.Errorf("QEMU's monitor at %s: %w (last: %v)", path, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

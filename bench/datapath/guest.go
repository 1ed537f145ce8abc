package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/vgpud/vgpud/guestagent/image"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// Guest programs in the benchmark's initramfs.
const (
	mmioBenchPkg = "github.com/vgpud/vgpud/guestagent/cmd/vgpu-mmiobench"
	benchPkg     = "github.com/vgpud/vgpud/guestagent/cmd/vgpu-bench"
)

// guestImage is the test guest's kernel and an initramfs holding both
// benchmark programs.
type guestImage struct {
	kernel imagetest.Kernel
	initrd string
}

// buildGuest finds the kernel and builds the initramfs in dir.
func buildGuest(ctx context.Context, dir string) (*guestImage, error) {
	k, err := imagetest.FindKernel()
	if err != nil {
		return nil, fmt.Errorf("guest: %w (or run with -qemu=false)", err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		return nil, err
	}
	initBin, err := imagetest.BuildStatic(ctx, bin, imagetest.InitPackage)
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	spec := image.Spec{Init: initBin, Modules: k.Modules}
	for _, p := range []string{mmioBenchPkg, benchPkg} {
		b, err := imagetest.BuildStatic(ctx, bin, p)
		if err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
		spec.Files = append(spec.Files, image.File{Src: b, Dst: image.BinDir + "/" + path.Base(p), Mode: 0o755})
	}
	out := filepath.Join(dir, "initramfs.cpio")
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	if err := image.Build(f, spec); err != nil {
		f.Close()
		return nil, fmt.Errorf("guest: initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return &guestImage{kernel: k, initrd: out}, nil
}

// guestRun is one boot: a program with its arguments, next to a vGPU
// instance and extra QEMU devices.
type guestRun struct {
	prog   string   // under /bin
	args   []string // no commas or spaces
	extra  []string // further -device values
	marker string   // result line prefix
	lines  int      // result lines to collect
}

// boot starts a guest with inst attached through x-pci-proxy-dev on the
// host's QEMU, collects the program's result lines (JSON after the marker)
// and waits for the guest to power off.
func (b *bench) boot(ctx context.Context, inst *mdev.Instance, r guestRun) ([]json.RawMessage, error) {
	return b.bootOn(ctx, inst, r, nil)
}

// bootOn is boot; with root set, on QEMU 11.1 from the VMM root with inst
// (of a vfio-user manager) attached by vfio-user-pci.
func (b *bench) bootOn(ctx context.Context, inst *mdev.Instance, r guestRun, root *qemuvm.VMMRoot) ([]json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.bootTimeout)
	defer cancel()
	cfg := qemuvm.Config{
		Kernel:       b.guest.kernel.Vmlinuz,
		Initrd:       b.guest.initrd,
		Append:       "vgpu.run=" + r.prog + " vgpu.args=" + strings.Join(r.args, ","),
		ExtraDevices: r.extra,
		SerialLog:    b.cfg.serial,
	}
	if root != nil {
		cfg.VFIOUser = []qemuvm.VFIOUserDevice{{ID: "vgpu0", Socket: inst.Socket()}}
		root.Apply(&cfg)
	} else {
		f, err := qemuvm.DialProxy(inst.Socket())
		if err != nil {
			return nil, err
		}
		defer f.Close() // QEMU has its own copy
		cfg.Devices = []qemuvm.ProxyDevice{{ID: "vgpu0", FD: f}}
	}
	vm, err := qemuvm.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer vm.Kill()
	start := time.Now()
	if _, err := vm.WaitLine(ctx, "VGPU-INIT run="); err != nil {
		return nil, err
	}
	b.bootTime = append(b.bootTime, time.Since(start))
	var out []json.RawMessage
	for range r.lines {
		l, err := vm.WaitLine(ctx, r.marker)
		if err != nil {
			return nil, err
		}
		out = append(out, json.RawMessage(strings.TrimPrefix(l, r.marker)))
	}
	if l, err := vm.WaitLine(ctx, "VGPU-INIT exit="); err != nil {
		return nil, err
	} else if l != "VGPU-INIT exit=0" {
		return nil, fmt.Errorf("guest program %s: %s\n%s", r.prog, l, strings.Join(vm.Lines(), "\n"))
	}
	if err := vm.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// newInstance creates a vGPU instance for one path and returns a function
// destroying it.
func (b *bench) newInstance() (*mdev.Instance, func() error, error) {
	inst, err := b.mgr.Create(mdev.CreateRequest{Profile: b.cfg.profile})
	if err != nil {
		return nil, nil, err
	}
	return inst, func() error { return b.mgr.Destroy(inst.UUID()) }, nil
}

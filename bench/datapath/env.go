package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// environment is the header of the report.
type environment struct {
	Date      string
	Go        string
	CPUs      int
	OpenCL    string
	QEMU      string
	Accel     string
	Kernel    string // guest kernel release, if guests boot
	GuestMiB  int
	GuestCPUs int
}

func describe(ctx context.Context, dev gpu.Device, cfg config) environment {
	in := dev.Info()
	e := environment{
		Date:   time.Now().Format(time.RFC3339),
		Go:     runtime.Version(),
		CPUs:   runtime.NumCPU(),
		OpenCL: fmt.Sprintf("%s (%s, %d compute units)", in.Name, in.Platform, in.ComputeUnits),
		QEMU:   "not used (-qemu=false)",
	}
	if cfg.qemu {
		e.QEMU = qemuVersion(ctx)
		e.Accel = "tcg (no KVM)"
		e.GuestMiB, e.GuestCPUs = qemuvm.DefaultMemMiB, qemuvm.DefaultCPUs
	}
	return e
}

// qemuVersion is the first line of `qemu-system-x86_64 --version`.
func qemuVersion(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, qemuvm.DefaultQEMU, "--version").Output()
	if err != nil {
		return fmt.Sprintf("unknown (%v)", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

func (e environment) print(w io.Writer) {
	fmt.Fprintf(w, "vgpud data-path benchmark, %s, %s\n", e.Date, e.Go)
	fmt.Fprintf(w, "  host CPUs:     %d\n", e.CPUs)
	fmt.Fprintf(w, "  OpenCL device: %s\n", e.OpenCL)
	fmt.Fprintf(w, "  QEMU:          %s\n", e.QEMU)
	if e.Accel != "" {
		fmt.Fprintf(w, "  accelerator:   %s\n", e.Accel)
		fmt.Fprintf(w, "  guest:         Linux %s, %d vCPU, %d MiB\n", e.Kernel, e.GuestCPUs, e.GuestMiB)
	}
}

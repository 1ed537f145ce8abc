package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/guestagent/driver"
)

// moduleOrder is the load order of the modules the guest needs
// (docs/design.md): each after those it depends on. Other *.ko files in
// /lib/modules load afterwards, sorted by name.
var moduleOrder = []string{
	"virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev",
	"virtio_pci", "virtio_console", "uio", "uio_pci_generic",
}

const modulesDir = "/lib/modules"

var log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
	// The guest clock says nothing useful; keep lines short.
	ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	},
})).With("prog", "vgpu-init")

// boot sets the guest up, runs the requested program and returns its exit
// code, or -1 if it could not run.
func boot() int {
	mountAll()
	loadModules()

	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		fmt.Printf("%sread kernel command line: %v\n", markerError, err)
		return -1
	}
	cfg, err := parseCmdline(string(raw))
	if err != nil {
		fmt.Printf("%s%v\n", markerError, err)
		return -1
	}
	if !cfg.Klog {
		// Kernel messages printed while the program runs would cut its
		// console lines in two; they stay readable in dmesg.
		if err := os.WriteFile("/proc/sys/kernel/printk", []byte("1"), 0); err != nil {
			log.Warn("lower console log level", "err", err)
		}
	}
	if cfg.Wait > 0 {
		waitVGPU(cfg.Wait)
	}
	return runProgram(cfg)
}

// waitVGPU waits at most d for a vGPU on the PCI bus (vgpu.wait): a VM
// whose vGPU is hot-plugged after it started (a libvirt domain, plugged
// by vgpud on its start event) would otherwise run the program before the
// device is there. If none comes the program runs anyway, and says so.
func waitVGPU(d time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	dir, err := driver.WaitPCI(ctx)
	if err != nil {
		log.Warn("no vGPU appeared; running the program anyway", "waited", d, "err", err)
		return
	}
	fmt.Printf("%s%s after %v\n", markerVGPU, filepath.Base(dir), time.Since(start).Round(time.Millisecond))
}

func mountAll() {
	for _, m := range []struct {
		fstype, target string
		flags          uintptr
		data           string
	}{
		{"proc", "/proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", unix.MS_NOSUID, "mode=0755"},
		{"tmpfs", "/tmp", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			log.Error("mkdir", "path", m.target, "err", err)
		}
		err := unix.Mount(m.fstype, m.target, m.fstype, m.flags, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			log.Error("mount", "fs", m.fstype, "path", m.target, "err", err)
		}
	}
}

// loadModules loads moduleOrder, skipping absent modules, then any other
// module in modulesDir.
func loadModules() {
	seen := make(map[string]bool)
	for _, name := range moduleOrder {
		seen[name+".ko"] = true
		path := filepath.Join(modulesDir, name+".ko")
		if _, err := os.Stat(path); err != nil {
			log.Info("module absent, skipped", "module", name)
			continue
		}
		loadModule(path)
	}
	rest, err := filepath.Glob(filepath.Join(modulesDir, "*.ko"))
	if err != nil {
		log.Error("list modules", "err", err)
		return
	}
	slices.Sort(rest)
	for _, path := range rest {
		if !seen[filepath.Base(path)] {
			loadModule(path)
		}
	}
}

func loadModule(path string) {
	f, err := os.Open(path)
	if err != nil {
		log.Error("open module", "path", path, "err", err)
		return
	}
	defer f.Close()
	err = unix.FinitModule(int(f.Fd()), "", 0)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		log.Error("load module", "path", path, "err", err)
	}
}

// runProgram runs /bin/<cfg.Run> on the console and returns its exit code:
// 128+signal if a signal ended it, -1 if it did not start.
func runProgram(cfg config) int {
	path := "/bin/" + cfg.Run
	cmd := exec.Command(path, cfg.Args...)
	cmd.Stdin = nil
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/bin", "HOME=/", "TERM=dumb"}
	fmt.Printf("%s%s args=%s\n", markerRun, cfg.Run, strings.Join(cfg.Args, ","))
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exitErr.ExitCode()
	default:
		fmt.Printf("%srun %s: %v\n", markerError, path, err)
		return -1
	}
}

// powerOff syncs and powers the machine off. If that fails it exits, and
// the kernel panics on init's death; with panic=-1 on the command line and
// QEMU's -no-reboot the VM still ends.
func powerOff() {
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	fmt.Printf("%spower off: %v\n", markerError, err)
	os.Exit(1)
}

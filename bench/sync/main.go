package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/image"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/guestagent/syncjob"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/agentchan"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

const syncPkg = "github.com/vgpud/vgpud/guestagent/cmd/vgpu-sync"

func main() {
	benchmain.Main("bench/sync", benchmain.Stdout(run))
}

// result is vgpu-sync's line plus what the host saw during that mode.
type result struct {
	syncjob.Result

	kernelNs, launches uint64 // host: device time and launches during the mode
	hostNs             int64  // host: wall time between the mode's begin and result lines
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	modes := fs.String("modes", "poll+block+hybrid+auto", "sync modes, separated by +")
	steps := fs.Int("steps", 600, "steps per mode")
	cpuIters := fs.Int("cpu-iters", 3000, "iterations of each guest CPU step")
	kernelIters := fs.Int("kernel-iters", 4000, "iterations per work item of each kernel")
	vcpuCore := fs.Int("vcpu-core", 1, "host core the guest's vCPU thread is pinned to")
	device := fs.String("device", "pthread", "OpenCL device")
	runs := fs.Int("runs", 1, "guest boots per setting; each row is the run with the median runtime of its mode")
	verbose := fs.Bool("v", false, "guest console and vgpud logs on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || *steps < 1 || *cpuIters < 0 || *kernelIters < 1 {
		return fmt.Errorf("-runs %d, -steps %d, -cpu-iters %d, -kernel-iters %d: want positive values", *runs, *steps, *cpuIters, *kernelIters)
	}
	// The host's cores, not this process's: the benchmark is meant to run
	// under taskset on another core than the vCPU's (runtime.NumCPU
	// counts only the cores this process may use).
	cores, err := hostCores()
	if err != nil {
		return err
	}
	if *vcpuCore < 0 || *vcpuCore >= cores {
		return fmt.Errorf("-vcpu-core %d: this host has cores 0..%d", *vcpuCore, cores-1)
	}
	for _, m := range strings.Split(*modes, "+") {
		if _, err := driver.ParseSyncMode(m); err != nil {
			return fmt.Errorf("-modes: %w", err)
		}
	}
	logLevel := slog.LevelWarn
	if *verbose {
		logLevel = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel}))

	dir, err := os.MkdirTemp("", "vgpud-bench-sync-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	k, initrd, err := buildGuest(ctx, dir)
	if err != nil {
		return err
	}
	d, err := gpu.Open(*device)
	if err != nil {
		return err
	}
	defer d.Close()
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}, SocketDir: filepath.Join(dir, "sock"), Transport: mpqemu.Transport{}, Logger: log})
	if err != nil {
		return err
	}
	defer m.Close()

	guestArgs := fmt.Sprintf("-agent,port,-modes,%s,-steps,%d,-cpu-iters,%d,-kernel-iters,%d", *modes, *steps, *cpuIters, *kernelIters)
	var samples [2][][]result // [setting][run][mode]
	for run := range *runs {
		for i, contended := range []bool{false, true} {
			inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
			if err != nil {
				return err
			}
			rs, err := runGuest(ctx, k, initrd, inst, guestArgs, len(strings.Split(*modes, "+")), *vcpuCore, contended, *verbose)
			if err != nil {
				return fmt.Errorf("run %d contended=%v: %w", run, contended, err)
			}
			samples[i] = append(samples[i], rs)
			if err := m.Destroy(inst.UUID()); err != nil {
				return err
			}
		}
	}
	var all [2][]result
	for i := range samples {
		all[i] = medians(samples[i])
	}
	printTable(stdout, all, *steps, *cpuIters, *kernelIters, *vcpuCore, *runs)
	return nil
}

// medians returns, per mode, the run whose runtime is the median (the
// lower middle for an even count) of that mode's runs.
func medians(runs [][]result) []result {
	if len(runs) == 0 {
		return nil
	}
	out := make([]result, len(runs[0]))
	for j := range out {
		var col []result
		for _, rs := range runs {
			if j < len(rs) {
				col = append(col, rs[j])
			}
		}
		sort.Slice(col, func(a, b int) bool { return col[a].RuntimeNs < col[b].RuntimeNs })
		out[j] = col[(len(col)-1)/2]
	}
	return out
}

func buildGuest(ctx context.Context, dir string) (imagetest.Kernel, string, error) {
	k, err := imagetest.FindKernel()
	if err != nil {
		return k, "", err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		return k, "", err
	}
	initBin, err := imagetest.BuildStatic(ctx, bin, imagetest.InitPackage)
	if err != nil {
		return k, "", err
	}
	b, err := imagetest.BuildStatic(ctx, bin, syncPkg)
	if err != nil {
		return k, "", err
	}
	spec := image.Spec{Init: initBin, Modules: k.Modules,
		Files: []image.File{{Src: b, Dst: image.BinDir + "/" + path.Base(syncPkg), Mode: 0o755}}}
	out := filepath.Join(dir, "initramfs.cpio")
	f, err := os.Create(out)
	if err != nil {
		return k, "", err
	}
	defer f.Close()
	if err := image.Build(f, spec); err != nil {
		return k, "", err
	}
	return k, out, f.Close()
}

// runGuest boots one guest running every mode; with contended, a CPU hog
// shares the vCPU's core for the whole run.
func runGuest(ctx context.Context, k imagetest.Kernel, initrd string, inst *mdev.Instance, guestArgs string, nModes, core int, contended, verbose bool) ([]result, error) {
	f, err := qemuvm.DialProxy(inst.Socket())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	cfg := qemuvm.Config{Kernel: k.Vmlinuz, Initrd: initrd, MemMiB: 512,
		Append:      "vgpu.run=vgpu-sync vgpu.args=" + guestArgs,
		Devices:     []qemuvm.ProxyDevice{{ID: "vgpu0", FD: f}},
		AgentSocket: inst.AgentSocket()}
	if verbose {
		cfg.SerialLog = os.Stderr
	}
	vm, err := qemuvm.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer vm.Kill()
	f.Close()

	// The agent channel's peer is QEMU: pin its vCPU thread once it runs.
	var pid int
	for pid == 0 {
		if pid = inst.Agent().PeerPID(); pid == 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-vm.Done():
				return nil, fmt.Errorf("qemu exited: %s", strings.Join(vm.Lines(), "\n"))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if _, err := vm.WaitLine(ctx, "VGPU-INIT run="); err != nil {
		return nil, err
	}
	tids, err := agentchan.VCPUThreads(pid, "")
	if err != nil || len(tids) == 0 {
		return nil, fmt.Errorf("vcpu threads of qemu %d: %v %v", pid, tids, err)
	}
	var set unix.CPUSet
	set.Set(core)
	for _, tid := range tids {
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return nil, fmt.Errorf("pin vcpu thread %d: %w", tid, err)
		}
	}
	if contended {
		hog := exec.Command("taskset", "-c", fmt.Sprint(core), "sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			return nil, fmt.Errorf("cpu hog: %w", err)
		}
		defer func() { hog.Process.Kill(); hog.Wait() }()
	}

	st := inst.Stats()
	var out []result
	for range nModes {
		if _, err := vm.WaitLine(ctx, syncjob.BeginPrefix); err != nil {
			return nil, err
		}
		k0, l0, t0 := st.KernelNanos.Load(), st.Launches.Load(), time.Now()
		line, err := vm.WaitLine(ctx, syncjob.LinePrefix+"{")
		if err != nil {
			return nil, err
		}
		var r result
		_, js, _ := strings.Cut(line, syncjob.LinePrefix)
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			return nil, fmt.Errorf("result line %q: %w", line, err)
		}
		r.kernelNs, r.launches, r.hostNs = st.KernelNanos.Load()-k0, st.Launches.Load()-l0, time.Since(t0).Nanoseconds()
		out = append(out, r)
	}
	if _, err := vm.WaitLine(ctx, "VGPU-INIT exit=0"); err != nil {
		return out, err
	}
	return out, nil
}

// hostCores is the number of the host's configured cores (the highest
// possible CPU number + 1), whatever this process's affinity.
func hostCores() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("host cores: %w", err)
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

// parseCPUList returns the highest CPU number + 1 of a kernel CPU list
// such as "0-3,8".
func parseCPUList(s string) (int, error) {
	n := 0
	for _, r := range strings.Split(s, ",") {
		last := r
		if i := strings.IndexByte(r, '-'); i >= 0 {
			last = r[i+1:]
		}
		v, err := strconv.Atoi(last)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("cpu list %q: bad range %q", s, r)
		}
		n = max(n, v+1)
	}
	return n, nil
}

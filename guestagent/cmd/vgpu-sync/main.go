// Command vgpu-sync runs inside a guest: a NAMD-like loop (a CPU step,
// then a short kernel, then a wait for it) on the vGPU, once per sync mode
// (poll, block, hybrid, auto), and prints one machine-readable line per
// mode:
//
//	VGPU-SYNC {"mode":"hybrid","steps":..,"runtime_ns":..,"launch_ns":..,"wait_ns":..,...}
//
// launch_ns is the mean time from the end of a CPU step until the
// kernel's doorbell write returned; wait_ns the mean time from then until
// the guest saw the fence. Blocking waits go through the agent channel:
// -agent port opens the virtio-serial port in-process, -agent relay uses
// vgpu-agent's socket, -agent none polls only. Needs root.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/vgpud/vgpud/guestagent/agent"
	"github.com/vgpud/vgpud/guestagent/cmd/internal/cmdmain"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/syncjob"
)

// The console format is shared with bench/sync.
const (
	LinePrefix  = syncjob.LinePrefix
	BeginPrefix = syncjob.BeginPrefix
)

// Result is one mode's measurements.
type Result = syncjob.Result

// kernelSrc spins iters times per work item: a short kernel of tunable
// length. The step number makes every launch distinct, so vgpud's result
// reuse cannot answer it from its table (the loop converges to a fixed
// point and would otherwise repeat inputs).
const kernelSrc = `__kernel void namd_step(__global float *x, uint iters, uint step) {
	size_t i = get_global_id(0);
	float v = x[i] + (float)step * 1e-7f;
	for (uint k = 0; k < iters; k++) v = v * 0.999f + 0.001f;
	x[i] = v;
}`

// Config is one run's workload.
type Config struct {
	Steps       int
	CPUIters    int // iterations of the CPU step
	KernelIters uint32
	Items       uint64
	Timeout     time.Duration
}

var sink float64

// step numbers every launch of the process, across modes: with it no two
// launches have the same inputs, so result reuse never answers one.
var step uint32

// cpuStep is the guest-side computation between kernels.
func cpuStep(iters int) {
	v := 1.0
	for i := range iters {
		v = math.Sqrt(v + float64(i))
	}
	sink += v
}

// runMode runs the loop once with s and returns its measurements.
func runMode(d *driver.Device, s *driver.Sync, cfg Config, out io.Writer) (Result, error) {
	p, _, err := d.Build(kernelSrc, "")
	if err != nil {
		return Result{}, fmt.Errorf("build: %w", err)
	}
	defer d.FreeProgram(p)
	buf, err := d.CreateBuffer(cfg.Items * 4)
	if err != nil {
		return Result{}, err
	}
	defer d.Free(buf)
	if err := d.Write(buf, 0, make([]byte, cfg.Items*4)); err != nil {
		return Result{}, err
	}
	// Warm up: the first launches build and cache the kernel.
	for range 3 {
		step++
		if err := d.Launch(p, "namd_step", driver.Range1(cfg.Items, 0), driver.BufferArg(buf), driver.Uint32Arg(cfg.KernelIters), driver.Uint32Arg(step)); err != nil {
			return Result{}, err
		}
		if err := d.FinishSync(s, "step"); err != nil {
			return Result{}, err
		}
	}
	before := s.Stats()
	fmt.Fprintf(out, "%s%s\n", BeginPrefix, s.Mode())
	var launch, wait time.Duration
	start := time.Now()
	for range cfg.Steps {
		cpuStep(cfg.CPUIters)
		t0 := time.Now()
		step++
		if err := d.Launch(p, "namd_step", driver.Range1(cfg.Items, 0), driver.BufferArg(buf), driver.Uint32Arg(cfg.KernelIters), driver.Uint32Arg(step)); err != nil {
			return Result{}, err
		}
		if err := d.Flush(); err != nil {
			return Result{}, err
		}
		t1 := time.Now()
		if err := d.FinishSync(s, "step"); err != nil {
			return Result{}, err
		}
		launch += t1.Sub(t0)
		wait += time.Since(t1)
	}
	runtime := time.Since(start)
	after := s.Stats()
	head := make([]byte, 4)
	if err := d.Read(buf, 0, head); err != nil {
		return Result{}, err
	}
	n := int64(max(cfg.Steps, 1))
	return Result{
		Mode: s.Mode().String(), Steps: cfg.Steps, RuntimeNs: runtime.Nanoseconds(),
		LaunchNs: launch.Nanoseconds() / n, WaitNs: wait.Nanoseconds() / n,
		Polled: after.Polled - before.Polled, Blocked: after.Blocked - before.Blocked,
		Threshold: s.Threshold().Nanoseconds(),
		Checksum:  uint32(head[0]) | uint32(head[1])<<8 | uint32(head[2])<<16 | uint32(head[3])<<24,
	}, nil
}

func main() {
	cmdmain.Main("vgpu-sync", func(ctx context.Context, args []string) error { return run(ctx, args, os.Stdout) }, os.Interrupt)
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vgpu-sync", flag.ContinueOnError)
	fs.SetOutput(stdout)
	modes := fs.String("modes", "poll,block,hybrid,auto", "sync modes to run, in order, separated by , or +")
	via := fs.String("agent", "port", "agent channel (hints, and the blocking path with -blocker agent): port (open the virtio port), relay (vgpu-agent's socket) or none")
	blockVia := fs.String("blocker", "agent", "what blocking waits sleep on: agent (Watch/Completed on the channel) or uio (INTx through uio_pci_generic: on vfio-user, or x-pci-proxy-dev under KVM; docs/ABI.md \"Interrupts\")")
	var cfg Config
	fs.IntVar(&cfg.Steps, "steps", 300, "steps per mode")
	fs.IntVar(&cfg.CPUIters, "cpu-iters", 20000, "iterations of each CPU step")
	kiters := fs.Uint("kernel-iters", 2000, "iterations per work item of each kernel")
	fs.Uint64Var(&cfg.Items, "items", 256, "work items per kernel")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Minute, "give up on the device after this long per wait")
	verbose := fs.Bool("v", false, "debug logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.KernelIters = uint32(*kiters)
	lvl := slog.LevelWarn
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	var ms []driver.SyncMode
	for _, m := range strings.FieldsFunc(*modes, func(r rune) bool { return r == ',' || r == '+' }) {
		sm, err := driver.ParseSyncMode(m)
		if err != nil {
			return err
		}
		ms = append(ms, sm)
	}
	var ag *agent.Client
	switch *via {
	case "port":
		ag = agent.New(agent.OpenPort(agent.PortName), agent.Options{Ident: "vgpu-sync", Logger: log})
	case "relay":
		sock := os.Getenv("VGPU_AGENT_SOCKET")
		if sock == "" {
			sock = agent.DefaultRelaySocket
		}
		ag = agent.New(agent.DialRelay(sock), agent.Options{Ident: "vgpu-sync", Logger: log})
	case "none":
	default:
		return fmt.Errorf("-agent %q: want port, relay or none", *via)
	}
	var blocker driver.Blocker
	hints := func() driver.SliceHints { return driver.SliceHints{} }
	if ag != nil {
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- ag.Run(actx) }()
		defer func() { cancel(); <-done }()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		err := ag.WaitReady(wctx)
		wcancel()
		if err != nil {
			return fmt.Errorf("agent channel: %w", err)
		}
		// Let the first hints arrive (the host samples every 100 ms).
		timer := time.NewTimer(2 * time.Second)
	hintWait:
		for {
			ch := ag.Changed()
			if _, ok := ag.Hints(); ok {
				break
			}
			select {
			case <-ch:
			case <-timer.C:
				log.Warn("no vcpu hints from the host")
				break hintWait
			}
		}
		timer.Stop()
		blocker, hints = ag, ag.SliceHints
	}

	pciDir := mustFind()
	regs, err := driver.OpenPCI(pciDir)
	if err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	d, err := driver.Open(regs, driver.NewPagemapMemory(), driver.Options{Timeout: cfg.Timeout, Logger: log})
	if err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	defer d.Close()
	switch *blockVia {
	case "agent":
	case "uio":
		ub, err := driver.OpenUIOBlocker(pciDir, d.Regs())
		if err != nil {
			return fmt.Errorf("-blocker uio: %w", err)
		}
		defer ub.Close()
		defer func() {
			in, re := ub.Stats()
			fmt.Fprintf(stdout, "%sinterrupts=%d rechecks=%d\n", syncjob.UIOPrefix, in, re)
		}()
		blocker = ub
	default:
		return fmt.Errorf("-blocker %q: want agent or uio", *blockVia)
	}
	for _, m := range ms {
		s := driver.NewSync(driver.SyncOptions{Mode: m, Blocker: blocker, Hints: hints})
		r, err := runMode(d, s, cfg, stdout)
		if err != nil {
			return fmt.Errorf("%v: %w", m, err)
		}
		if ag != nil {
			h, _ := ag.Hints()
			r.HintSlice, r.HintWait = int64(h.MeanSliceNs), h.WaitPPM
		}
		b, _ := json.Marshal(r)
		fmt.Fprintf(stdout, "%s%s\n", LinePrefix, b)
	}
	return nil
}

func mustFind() string {
	p, err := driver.FindPCI()
	if err != nil {
		return ""
	}
	return p
}

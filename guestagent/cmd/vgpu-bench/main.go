// Command vgpu-bench runs inside a guest the data-path benchmark's matmul
// job (package guestagent/job, the same work bench/datapath runs on the host): it
// finds the vGPU on the PCI bus, opens it with the guest driver library, runs
// the job -runs times (default 1), and prints its own timing as one line per
// run (bench/README.md):
//
//	VGPU-BENCH {"n":512,"iterations":10,"setup_ns":...,"total_ns":...,"kernel_ns":...,...}
//
// It exits non-zero if the job failed or its result disagreed with the CPU
// reference. It needs root (pagemap, sysfs, mlock) and is built static.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/vgpud/vgpud/guestagent/cmd/internal/cmdmain"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/job"
)

// Marker prefixes the result line.
const Marker = "VGPU-BENCH "

// Line is the result line's JSON.
type Line struct {
	job.Result
	Device  string `json:"device"`  // the vGPU's name register
	Profile string `json:"profile"` // its profile
}

func main() {
	cmdmain.Main("vgpu-bench", func(ctx context.Context, args []string) error { return run(ctx, args, os.Stdout) }, os.Interrupt)
}

// openDevice finds (if path is empty) and maps the vGPU; tests replace it.
var openDevice = driver.OpenGuest

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vgpu-bench", flag.ContinueOnError)
	fs.SetOutput(stdout)
	s := job.Default()
	fs.IntVar(&s.N, "n", s.N, "matrix side")
	fs.IntVar(&s.Reps, "reps", s.Reps, "matmuls (each with an upload of A and a download of C)")
	fs.IntVar(&s.Local, "local", s.Local, "work-group side")
	fs.Uint64Var(&s.Seed, "seed", s.Seed, "input seed")
	runs := fs.Int("runs", 1, "run the job this many times, one result line each")
	device := fs.String("device", "", "sysfs directory of the vGPU (default: search /sys/bus/pci/devices)")
	staging := fs.Int("staging", driver.DefaultStagingBytes, "DMA staging pool bytes")
	timeout := fs.Duration("timeout", driver.DefaultTimeout, "give up on the device after this long per wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if *runs < 1 || *runs > 1000 {
		return fmt.Errorf("-runs %d: want 1..1000", *runs)
	}
	regs, mem, err := openDevice(*device)
	if err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := driver.Open(regs, mem, driver.Options{StagingBytes: *staging, Timeout: *timeout, Logger: log})
	if err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	defer d.Close()
	for range *runs {
		dd := job.NewDriverDevice(d)
		res, err := job.Run(ctx, s, dd)
		if err != nil {
			return err
		}
		if err := dd.Free(); err != nil {
			return fmt.Errorf("free: %w", err)
		}
		b, err := json.Marshal(Line{Result: res, Device: d.Info().Name, Profile: d.Info().Profile})
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stdout, "%s%s\n", Marker, b); err != nil {
			return err
		}
	}
	return nil
}

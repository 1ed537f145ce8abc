// Command vgpu-suite runs inside a guest: it finds the vGPU on the PCI bus,
// opens it with the guest driver and runs the correctness suite (-mode
// suite), the hostile-guest run (-mode hostile) or the suite -repeat times
// with the same inputs (-mode reuse, for result reuse). It prints a report and a
// machine-readable "VGPU-RESULT {json}" line on stdout and exits 0 only if
// every case passed. It needs root (pagemap, sysfs, mlock).
package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/vgpud/vgpud/guestagent/cmd/internal/cmdmain"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/suite"
)

func main() {
	cmdmain.Main("vgpu-suite", func(ctx context.Context, args []string) error { return run(ctx, args, os.Stdout) }, os.Interrupt)
}

// errFailed means the suite ran and some case failed.
var errFailed = errors.New("some cases failed")

// openDevice finds (if path is empty) and maps the vGPU; tests replace it.
var openDevice = driver.OpenGuest

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vgpu-suite", flag.ContinueOnError)
	fs.SetOutput(stdout)
	mode := fs.String("mode", "suite", "what to run: suite, hostile, reuse (the suite -repeat times with the same inputs) or attack (isolation attacks, docs/isolation.md)")
	repeat := fs.Int("repeat", 2, "-mode reuse: runs of the suite")
	device := fs.String("device", "", "sysfs directory of the vGPU (default: search /sys/bus/pci/devices)")
	var o suite.Options
	fs.Uint64Var(&o.Seed, "seed", 1, "input seed")
	fs.IntVar(&o.VectorN, "vector-n", 262144, "vector add and SAXPY length")
	fs.IntVar(&o.MatrixN, "matrix-n", 256, "matrix side (multiple of 16)")
	fs.IntVar(&o.ReduceN, "reduce-n", 1<<20, "reduction length")
	staging := fs.Int("staging", driver.DefaultStagingBytes, "DMA staging pool bytes")
	timeout := fs.Duration("timeout", driver.DefaultTimeout, "give up on the device after this long per wait")
	verbose := fs.Bool("v", false, "debug logs on stderr")
	needles := fs.String("needles", "", "-mode attack: secrets (hex, separated by :) no attack may read back")
	secret := fs.String("secret", "", "hex bytes to keep in a device buffer during the run; checked intact at the end")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	plant, err := hex.DecodeString(*secret)
	if err != nil {
		return fmt.Errorf("-secret: %w", err)
	}
	var hidden [][]byte
	for _, h := range strings.Split(*needles, ":") {
		n, err := hex.DecodeString(h)
		if err != nil {
			return fmt.Errorf("-needles: %w", err)
		}
		if len(n) > 0 {
			hidden = append(hidden, n)
		}
	}
	var runSuite func(context.Context, *driver.Device, suite.Options) suite.Report
	switch *mode {
	case "suite":
		runSuite = suite.Run
	case "hostile":
		runSuite = suite.RunHostile
	case "reuse":
		if *repeat < 1 || *repeat > 100 {
			return fmt.Errorf("-repeat %d: want 1..100", *repeat)
		}
		runSuite = repeated(*repeat)
	case "attack":
		// Set below: it reopens the device after every loss.
	default:
		return fmt.Errorf("-mode %q: want suite, hostile, reuse or attack", *mode)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	regs, mem, err := openDevice(*device)
	if err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	start := time.Now()
	d, err := driver.Open(regs, mem, driver.Options{StagingBytes: *staging, Timeout: *timeout, Logger: log})
	if err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	if *mode == "attack" {
		runSuite = func(ctx context.Context, d0 *driver.Device, _ suite.Options) suite.Report {
			r, last := suite.RunAttacks(ctx, d0, suite.AttackOptions{Needles: hidden, Reopen: func() (*driver.Device, error) {
				// Each open takes new DMA pages: the smallest pool.
				return driver.Open(regs, mem, driver.Options{StagingBytes: driver.MinStagingBytes, Timeout: *timeout, Logger: log})
			}})
			d = last
			return r
		}
	}
	if len(plant) > 0 {
		runSuite = keeping(plant, runSuite)
	}
	r := runSuite(ctx, d, o)
	closeErr := d.Close()
	fmt.Fprint(stdout, r.String())
	fmt.Fprintf(stdout, "total %v\n", time.Since(start).Round(time.Millisecond))
	fmt.Fprintln(stdout, r.MarshalLine())
	if !r.OK() {
		return fmt.Errorf("%s: %d of %d: %w", *mode, r.Fail, r.Pass+r.Fail, errFailed)
	}
	if closeErr != nil {
		return fmt.Errorf("close vgpu: %w", closeErr)
	}
	return nil
}

// keeping wraps run: a buffer holds secret (repeated over 64 KiB) during
// the run, and a last case checks that it still does.
func keeping(secret []byte, run func(context.Context, *driver.Device, suite.Options) suite.Report) func(context.Context, *driver.Device, suite.Options) suite.Report {
	return func(ctx context.Context, d *driver.Device, o suite.Options) suite.Report {
		want := bytes.Repeat(secret, (64<<10)/len(secret))
		b, err := d.CreateBuffer(uint64(len(want)))
		if err == nil {
			err = d.Write(b, 0, want)
		}
		if err == nil {
			err = d.Finish()
		}
		r := run(ctx, d, o)
		c := suite.Case{Name: "secret-intact", OK: true}
		got := make([]byte, len(want))
		if err == nil {
			err = d.Read(b, 0, got)
		}
		switch {
		case err != nil:
			c.OK, c.Err = false, err.Error()
		case !bytes.Equal(got, want):
			c.OK, c.Err = false, "the buffer holding the secret changed"
		}
		if c.OK {
			r.Pass++
		} else {
			r.Fail++
		}
		r.Cases = append(r.Cases, c)
		return r
	}
}

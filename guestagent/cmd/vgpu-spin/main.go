// Command vgpu-spin runs inside a guest and keeps its vGPU busy: it
// launches a compute-bound kernel in batches (so that the instance always
// has queued work) for a given time, then checks the result. It prints
// "VGPU-SPIN start" before the first batch and "VGPU-SPIN done {json}"
// at the end; tests/sched_test.go reads both to measure how vgpud shares
// the device between guests. It needs root (pagemap, sysfs, mlock).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/vgpud/vgpud/guestagent/cmd/internal/cmdmain"
	"github.com/vgpud/vgpud/guestagent/driver"
)

func main() {
	cmdmain.Main("vgpu-spin", func(ctx context.Context, args []string) error { return run(ctx, args, os.Stdout) }, os.Interrupt)
}

// Source is the kernel: sliceable by vgpud (only get_global_id).
const Source = `__kernel void spin(__global float *out, uint iters) {
	size_t i = get_global_id(0);
	float x = (float)i * 0.001f;
	for (uint k = 0; k < iters; k++) x = x * 0.999f + sin(x);
	out[i] = x;
}`

// Result is the done line's JSON.
type Result struct {
	Launches int     `json:"launches"`
	Seconds  float64 `json:"seconds"`
	Checked  bool    `json:"checked"`
}

// Line prefixes.
const (
	StartLine = "VGPU-SPIN start"
	DoneLine  = "VGPU-SPIN done "
)

// openDevice finds and maps the vGPU; tests replace it.
var openDevice = func() (driver.Registers, driver.Memory, error) { return driver.OpenGuest("") }

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vgpu-spin", flag.ContinueOnError)
	fs.SetOutput(stdout)
	dur := fs.Duration("duration", 20*time.Second, "how long to keep the device busy")
	items := fs.Uint64("items", 16384, "work items per launch (a multiple of 64)")
	iters := fs.Uint("iters", 20, "loop iterations per work item")
	batch := fs.Int("batch", 16, "launches per batch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *items == 0 || *items%64 != 0 || *items > 1<<24 || *batch < 1 || *batch > 48 || *iters > 1<<20 {
		return fmt.Errorf("-items %d, -batch %d, -iters %d: want a multiple of 64 up to 2^24, 1..48, up to 2^20", *items, *batch, *iters)
	}
	regs, mem, err := openDevice()
	if err != nil {
		return err
	}
	d, err := driver.Open(regs, mem, driver.Options{})
	if err != nil {
		return err
	}
	defer d.Close()
	prog, log, err := d.Build(Source, "")
	if err != nil {
		return fmt.Errorf("build: %w\n%s", err, log)
	}
	out, err := d.CreateBuffer(4 * *items)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, StartLine)
	start := time.Now()
	var res Result
	for time.Since(start) < *dur && ctx.Err() == nil {
		for range *batch {
			if err := d.Launch(prog, "spin", driver.Range1(*items, 64), driver.BufferArg(out), driver.Uint32Arg(uint32(*iters))); err != nil {
				return err
			}
		}
		if err := d.Finish(); err != nil {
			return err
		}
		res.Launches += *batch
	}
	res.Seconds = time.Since(start).Seconds()
	got := make([]byte, 4*64)
	if err := d.Read(out, 0, got); err != nil {
		return err
	}
	res.Checked, err = check(got, uint32(*iters))
	if err != nil {
		return err
	}
	b, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s%s\n", DoneLine, b)
	return nil
}

var errWrong = errors.New("wrong result")

// check compares the first work items with the same loop on the CPU,
// within float tolerance (the device's sin may differ in the last bits).
func check(b []byte, iters uint32) (bool, error) {
	for i := 0; i < len(b)/4; i++ {
		got := math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
		x := float32(i) * 0.001
		for range iters {
			x = x*0.999 + float32(math.Sin(float64(x)))
		}
		if math.Abs(float64(got-x)) > 1e-3*max(1, math.Abs(float64(x))) {
			return false, fmt.Errorf("item %d = %v, want %v: %w", i, got, x, errWrong)
		}
	}
	return true, nil
}

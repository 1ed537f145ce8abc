package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
)

func main() {
	benchmain.Main("interference", run)
}

// profileName is the vGPU type of every guest: small, and enough of them
// per device for two of each workload.
const profileName = "bench"

type config struct {
	window    time.Duration
	reps      int
	out       string
	device    string
	workloads []string
	measured  string
}

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("interference", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	fs.DurationVar(&c.window, "window", 3*time.Second, "how long each workload runs alone and each pair runs together")
	fs.IntVar(&c.reps, "reps", 1, "repetitions of every measurement (averaged)")
	fs.StringVar(&c.out, "out", filepath.Join("build", "interference.json"), "dataset file to write")
	fs.StringVar(&c.device, "device", os.Getenv("VGPUD_TEST_DEVICE"), "OpenCL device: index or name substring")
	names := fs.String("workloads", "", "comma-separated workloads (default: all)")
	fs.StringVar(&c.measured, "measured", "", "the dataset's measured field (default: git commit and date)")
	if err := benchmain.Parse(fs, args); err != nil {
		return c, err
	}
	switch {
	case c.window < 10*time.Millisecond || c.window > time.Hour:
		return c, fmt.Errorf("-window %v: want 10ms..1h", c.window)
	case c.reps < 1 || c.reps > 100:
		return c, fmt.Errorf("-reps %d: want 1..100", c.reps)
	case c.out == "":
		return c, errors.New("-out: want a file name")
	}
	if *names != "" {
		seen := map[string]bool{}
		for _, n := range strings.Split(*names, ",") {
			if n = strings.TrimSpace(n); n != "" && !seen[n] {
				seen[n] = true
				c.workloads = append(c.workloads, n)
			}
		}
	}
	if _, err := byName(c.workloads); err != nil {
		return c, err
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ws, _ := byName(c.workloads)
	dev, err := gpu.Open(c.device)
	if err != nil {
		return err
	}
	defer dev.Close()
	sockets, err := os.MkdirTemp("", "vgpud-interference-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sockets)
	mgr, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: sockets, Transport: mpqemu.Transport{},
		Profiles: []mdev.Profile{{Name: profileName, MemBytes: 256 << 20, Share: 1, MaxPerDevice: 2*len(ws) + 2}}})
	if err != nil {
		return err
	}
	defer mgr.Close()
	fmt.Fprintf(stderr, "interference: %d workloads on %s, window %v, %d rep(s)\n", len(ws), gpu.Describe(dev.Info()), c.window, c.reps)

	// Two guests of each workload: a pair of a workload with itself
	// needs two instances.
	gs := make([][2]*guest, len(ws))
	defer func() {
		for _, pair := range gs {
			for _, g := range pair {
				if g != nil {
					g.close()
				}
			}
		}
	}()
	for i, w := range ws {
		for k := range gs[i] {
			if gs[i][k], err = newGuest(mgr, w); err != nil {
				return err
			}
			if err := w.iter(gs[i][k]); err != nil { // warm up: first launches
				return fmt.Errorf("%s: %w", w.name, err)
			}
		}
	}

	ds := &interference.Dataset{Version: interference.DatasetVersion, Device: gpu.Describe(dev.Info()), Measured: measured(c.measured)}
	alone := make([]float64, len(ws))
	for i, w := range ws {
		var feats []interference.Features
		for range c.reps {
			r, err := measure(ctx, []*guest{gs[i][0]}, c.window)
			if err != nil {
				return err
			}
			alone[i] += r[0].perIter / float64(c.reps)
			feats = append(feats, r[0].features)
		}
		f := meanFeatures(feats)
		ds.Workloads = append(ds.Workloads, interference.Workload{Name: w.name, Features: f, AloneSec: alone[i]})
		fmt.Fprintf(stderr, "alone %-12s %8.3f ms/iter  device util %.2f  kernel mean %.3f ms  %.0f MB/s to device\n",
			w.name, 1e3*alone[i], f.DeviceUtil, f.KernelMeanMs, f.ToDevMBps)
	}
	over := make([][]float64, len(ws))
	for i := range over {
		over[i] = make([]float64, len(ws))
	}
	for i := range ws {
		for j := i; j < len(ws); j++ {
			a, b := gs[i][0], gs[j][0]
			if i == j {
				b = gs[i][1]
			}
			var pa, pb float64
			for range c.reps {
				r, err := measure(ctx, []*guest{a, b}, c.window)
				if err != nil {
					return err
				}
				pa, pb = pa+r[0].perIter/float64(c.reps), pb+r[1].perIter/float64(c.reps)
			}
			over[i][j], over[j][i] = pa/alone[i]-1, pb/alone[j]-1
			if i == j {
				over[i][i] = (pa+pb)/2/alone[i] - 1
			}
			fmt.Fprintf(stderr, "pair  %-12s + %-12s overheads %+.3f %+.3f\n", ws[i].name, ws[j].name, over[i][j], over[j][i])
		}
	}
	for i, v := range ws {
		for j, a := range ws {
			ds.Pairs = append(ds.Pairs, interference.Pair{Victim: v.name, Aggressor: a.name, Overhead: clampOverhead(over[i][j])})
		}
	}
	if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
		return err
	}
	if err := ds.Save(c.out); err != nil {
		return err
	}
	printMatrix(stdout, ds, ws, over)
	fmt.Fprintf(stdout, "\ndataset written to %s\n", c.out)
	return nil
}

// clampOverhead keeps a measured overhead inside what a dataset accepts
// (a run whose victim went faster than alone reads slightly below 0).
func clampOverhead(v float64) float64 {
	return min(max(v, interference.MinOverhead), interference.MaxOverhead)
}

func printMatrix(w io.Writer, ds *interference.Dataset, ws []workload, over [][]float64) {
	t := table.Table{Title: fmt.Sprintf("Overhead of the row's workload beside the column's (time per iteration / alone - 1), %s", ds.Device)}
	t.Header = []string{"victim \\ aggressor"}
	for _, w := range ws {
		t.Header = append(t.Header, w.name)
	}
	for i, v := range ws {
		row := []string{v.name}
		for j := range ws {
			row = append(row, fmt.Sprintf("%.2f", over[i][j]))
		}
		t.Add(row...)
	}
	t.Note("measured %s", ds.Measured)
	t.Print(w)
}

// measured is the dataset's provenance: text, else the commit and date.
func measured(text string) string {
	if text != "" {
		return text
	}
	rev := "unknown commit"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		rev = "commit " + strings.TrimSpace(string(out))
	}
	return rev + ", " + time.Now().UTC().Format("2006-01-02")
}

// result is one guest's part of a measurement.
type result struct {
	perIter  float64 // seconds per iteration
	features interference.Features
}

// measure runs each guest's workload in a loop for window, all at once,
// and returns each one's time per iteration and features over the
// interval. Every guest completes at least two iterations.
func measure(ctx context.Context, gs []*guest, window time.Duration) ([]result, error) {
	res := make([]result, len(gs))
	errs := make(chan error, len(gs))
	stop := time.Now().Add(window)
	for i, g := range gs {
		go func() {
			before, busy0 := g.inst.Counters(), g.busy
			start := time.Now()
			n := 0
			for n < 2 || (time.Now().Before(stop) && ctx.Err() == nil) {
				if err := g.w.iter(g); err != nil {
					errs <- fmt.Errorf("%s: %w", g.w.name, err)
					return
				}
				n++
			}
			el := time.Since(start)
			f := mdev.FeaturesBetween(before, g.inst.Counters())
			f.VCPUs, f.VCPUUtil = 1, min((g.busy-busy0).Seconds()/el.Seconds(), 1)
			res[i] = result{perIter: el.Seconds() / float64(n), features: f}
			errs <- nil
		}()
	}
	var err error
	for range gs {
		err = errors.Join(err, <-errs)
	}
	if err == nil {
		err = ctx.Err()
	}
	return res, err
}

// meanFeatures averages features field by field.
func meanFeatures(fs []interference.Features) interference.Features {
	var sum [interference.NumFeatures]float64
	for _, f := range fs {
		for k := range interference.NumFeatures {
			sum[k] += f.Get(k) / float64(len(fs))
		}
	}
	return interference.Features{DeviceUtil: sum[interference.DeviceUtil], MemUtil: sum[interference.MemUtil],
		ToDevMBps: sum[interference.ToDevMBps], FromDevMBps: sum[interference.FromDevMBps], VCPUs: sum[interference.VCPUs],
		VCPUUtil: sum[interference.VCPUUtil], VMMemGiB: sum[interference.VMMemGiB], WorkItems: sum[interference.WorkItems],
		KernelMeanMs: sum[interference.KernelMeanMs], LongKernelMeanMs: sum[interference.LongKernelMeanMs],
		LongShortRatio: sum[interference.LongShortRatio], LaunchesPerSec: sum[interference.LaunchesPerSec]}
}

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/job"
)

// matmulTable runs the job on every path and compares each with the host.
func (b *bench) matmulTable(ctx context.Context) (*table.Table, error) {
	s := b.cfg.job
	t := &table.Table{
		Title: fmt.Sprintf("Virtualization overhead: %d x %d float matmul x %d (upload A, multiply, download C each; ratio to the host)",
			s.N, s.N, s.Reps),
		Header: []string{"path", "total", "per matmul", "kernel (device)", "overhead/matmul", "vs host", "setup", "totals (min-max)"},
	}
	hostRuns, err := b.hostJob(ctx)
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	harnessRuns, err := b.harnessJob(ctx)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	var guestRuns []job.Result
	if b.guest != nil {
		if guestRuns, err = b.guestJob(ctx); err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
	}
	host := median(hostRuns)
	row := func(name string, runs []job.Result) {
		r := median(runs)
		kernel := time.Duration(-1)
		if r.KernelLaunches > 0 {
			kernel = time.Duration(r.KernelNS / int64(r.KernelLaunches))
		}
		over := missing
		if name != hostRow {
			over = msCell(r.PerMatMul() - host.PerMatMul())
			if r.PerMatMul() < host.PerMatMul() {
				over = "-" + msCell(host.PerMatMul()-r.PerMatMul())
			}
		}
		t.Add(name, msCell(time.Duration(r.TotalNS)), msCell(r.PerMatMul()), msCell(kernel), over,
			ratioCell(float64(r.TotalNS), float64(host.TotalNS)), msCell(time.Duration(r.SetupNS)), spread(runs))
	}
	row(hostRow, hostRuns)
	row("harness + driver library (host process)", harnessRuns)
	if b.guest != nil {
		row("QEMU guest via x-pci-proxy-dev (TCG)", guestRuns)
	}
	t.Note("same job (guestagent/job) on every path: upload B, then %d x (upload A (alternating 2 inputs), matmul %dx%d in %dx%d groups, download C);",
		s.Reps, s.N, s.N, s.Local, s.Local)
	t.Note("each row is the run with the median total of %d runs on that path (the last column gives the range)", b.cfg.runs)
	t.Note("total excludes setup (program build and buffer allocation); kernel = device time from OpenCL profiling (host) or the completion record")
	t.Note("each path checked %d elements of its last C against a CPU reference", job.Checks)
	if len(b.bootTime) > 0 {
		var ds []string
		for _, d := range b.bootTime {
			ds = append(ds, d.Round(100*time.Millisecond).String())
		}
		t.Note("guest boots (QEMU start to the benchmark program), not in any figure: %v", ds)
	}
	return t, nil
}

const hostRow = "host: gpu.Queue directly (baseline)"

// median returns the run with the median total (the lower middle one for
// an even count).
func median(runs []job.Result) job.Result {
	if len(runs) == 0 {
		return job.Result{}
	}
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b job.Result) int { return cmp.Compare(a.TotalNS, b.TotalNS) })
	return s[(len(s)-1)/2]
}

// spread is the range of the runs' totals.
func spread(runs []job.Result) string {
	if len(runs) < 2 {
		return missing
	}
	lo, hi := runs[0].TotalNS, runs[0].TotalNS
	for _, r := range runs[1:] {
		lo, hi = min(lo, r.TotalNS), max(hi, r.TotalNS)
	}
	return fmt.Sprintf("%.0f-%.0f ms", float64(lo)/1e6, float64(hi)/1e6)
}

func (b *bench) hostJob(ctx context.Context) ([]job.Result, error) {
	q, err := b.dev.NewQueue()
	if err != nil {
		return nil, err
	}
	defer q.Close()
	var out []job.Result
	for range b.cfg.runs {
		h := host.NewJobDevice(q)
		r, err := job.Run(ctx, b.cfg.job, h)
		h.Release()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (b *bench) harnessJob(ctx context.Context) (_ []job.Result, err error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, destroy()) }()
	// Room for the staging pool and the driver's rings.
	vm, err := attachHarness(inst, 64<<20)
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	d, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var out []job.Result
	for range b.cfg.runs {
		dd := job.NewDriverDevice(d)
		r, err := job.Run(ctx, b.cfg.job, dd)
		if err != nil {
			return nil, err
		}
		if err := dd.Free(); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (b *bench) guestJob(ctx context.Context) (_ []job.Result, err error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, destroy()) }()
	s := b.cfg.job
	raw, err := b.boot(ctx, inst, guestRun{
		prog: "vgpu-bench",
		args: []string{"-n", strconv.Itoa(s.N), "-reps", strconv.Itoa(s.Reps), "-local", strconv.Itoa(s.Local),
			"-seed", strconv.FormatUint(s.Seed, 10), "-runs", strconv.Itoa(b.cfg.runs)},
		marker: "VGPU-BENCH ",
		lines:  b.cfg.runs,
	})
	if err != nil {
		return nil, err
	}
	return parseBench(raw, s)
}

// parseBench decodes vgpu-bench's lines and checks that each ran s.
func parseBench(raw []json.RawMessage, s job.Spec) ([]job.Result, error) {
	var out []job.Result
	for _, l := range raw {
		var r job.Result
		if err := json.Unmarshal(l, &r); err != nil {
			return nil, fmt.Errorf("decode %s: %w", l, err)
		}
		if r.N != s.N || r.Reps != s.Reps || r.Checked != job.Checks || r.TotalNS <= 0 {
			return nil, fmt.Errorf("guest result %s: want n %d, %d iterations, %d checked, a positive total", l, s.N, s.Reps, job.Checks)
		}
		out = append(out, r)
	}
	return out, nil
}

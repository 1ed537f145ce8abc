package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/vgpud/vgpud/bench/job"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// matmulTable runs the job on every path and compares each with the host.
func (b *bench) matmulTable(ctx context.Context) (*table, error) {
	s := b.cfg.job
	t := &table{
		title: fmt.Sprintf("Virtualization overhead: %d x %d float matmul x %d (upload A, multiply, download C each; ratio to the host)",
			s.N, s.N, s.Reps),
		header: []string{"path", "total", "per matmul", "kernel (device)", "overhead/matmul", "vs host", "setup"},
	}
	host, err := b.hostJob(ctx)
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	harness, err := b.harnessJob(ctx)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	var guest job.Result
	if b.guest != nil {
		if guest, err = b.guestJob(ctx); err != nil {
			return nil, fmt.Errorf("guest: %w", err)
		}
	}
	row := func(name string, r job.Result) {
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
		t.add(name, msCell(time.Duration(r.TotalNS)), msCell(r.PerMatMul()), msCell(kernel), over,
			ratioCell(float64(r.TotalNS), float64(host.TotalNS)), msCell(time.Duration(r.SetupNS)))
	}
	row(hostRow, host)
	row("harness + driver library (host process)", harness)
	if b.guest != nil {
		row("QEMU guest via x-pci-proxy-dev (TCG)", guest)
	}
	t.note("same job (bench/job) on every path: upload B, then %d x (upload A (alternating 2 inputs), matmul %dx%d in %dx%d groups, download C);",
		s.Reps, s.N, s.N, s.Local, s.Local)
	t.note("total excludes setup (program build and buffer allocation); kernel = device time from OpenCL profiling (host) or the completion record")
	t.note("each path checked %d elements of its last C against a CPU reference", job.Checks)
	if len(b.bootTime) > 0 {
		var ds []string
		for _, d := range b.bootTime {
			ds = append(ds, d.Round(100*time.Millisecond).String())
		}
		t.note("guest boots (QEMU start to the benchmark program), not in any figure: %v", ds)
	}
	return t, nil
}

const hostRow = "host: gpu.Queue directly (baseline)"

func (b *bench) hostJob(ctx context.Context) (job.Result, error) {
	q, err := b.dev.NewQueue()
	if err != nil {
		return job.Result{}, err
	}
	defer q.Close()
	h := &hostDevice{q: q}
	defer h.release()
	return job.Run(ctx, b.cfg.job, h)
}

func (b *bench) harnessJob(ctx context.Context) (_ job.Result, err error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return job.Result{}, err
	}
	defer func() { err = errors.Join(err, destroy()) }()
	// Room for the staging pool and the driver's rings.
	vm, err := attachHarness(inst, 64<<20)
	if err != nil {
		return job.Result{}, err
	}
	defer vm.Close()
	d, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		return job.Result{}, err
	}
	defer d.Close()
	dd := job.NewDriverDevice(d)
	r, err := job.Run(ctx, b.cfg.job, dd)
	if err != nil {
		return r, err
	}
	return r, dd.Free()
}

func (b *bench) guestJob(ctx context.Context) (_ job.Result, err error) {
	inst, destroy, err := b.newInstance()
	if err != nil {
		return job.Result{}, err
	}
	defer func() { err = errors.Join(err, destroy()) }()
	s := b.cfg.job
	raw, err := b.boot(ctx, inst, guestRun{
		prog: "vgpu-bench",
		args: []string{"-n", strconv.Itoa(s.N), "-reps", strconv.Itoa(s.Reps), "-local", strconv.Itoa(s.Local),
			"-seed", strconv.FormatUint(s.Seed, 10)},
		marker: "VGPU-BENCH ",
		lines:  1,
	})
	if err != nil {
		return job.Result{}, err
	}
	var r job.Result
	if err := json.Unmarshal(raw[0], &r); err != nil {
		return r, fmt.Errorf("decode %s: %w", raw[0], err)
	}
	if r.N != s.N || r.Reps != s.Reps || r.Checked != job.Checks || r.TotalNS <= 0 {
		return r, fmt.Errorf("guest result %s: want n %d, %d iterations, %d checked", raw[0], s.N, s.Reps, job.Checks)
	}
	return r, nil
}

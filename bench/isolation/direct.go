package main

import (
	"context"
	"fmt"

	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/job"
)

// direct is the matmul table's baseline without vgpud: a queue of its own
// on the host's OpenCL platform (gpu.OpenPlain on the same selector: buffers
// and transfers as an application has them, never host-backed), on which
// job.Run does the job's exact work (source, build options, sizes, NDRange,
// repetitions), timed and checked the same way as through vgpud.
type direct struct {
	dev gpu.Device
	q   gpu.Queue
}

func newDirect(selector string) (*direct, error) {
	dev, err := gpu.OpenPlain(selector)
	if err != nil {
		return nil, fmt.Errorf("direct: open opencl device: %w", err)
	}
	q, err := dev.NewQueue()
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("direct: %w", err)
	}
	return &direct{dev: dev, q: q}, nil
}

func (d *direct) close() {
	d.q.Close()
	d.dev.Close()
}

// runJob runs the job once and releases what it created (untimed).
func (d *direct) runJob(ctx context.Context, s job.Spec) (job.Result, error) {
	h := host.NewJobDevice(d.q)
	defer h.Release()
	return job.Run(ctx, s, h)
}

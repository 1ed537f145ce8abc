package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/job"
)

// direct is the matmul table's baseline without vgpud: a queue of its own
// on the host's OpenCL platform (gpu.Open on the same selector), on which
// job.Run does the job's exact work (source, build options, sizes, NDRange,
// repetitions), timed and checked the same way as through vgpud.
type direct struct {
	dev gpu.Device
	q   gpu.Queue
}

func newDirect(selector string) (*direct, error) {
	dev, err := gpu.Open(selector)
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
	h := &hostDevice{q: d.q}
	defer h.release()
	return job.Run(ctx, s, h)
}

// hostDevice is job.Device on a gpu.Queue: every call blocks until its
// work is done, as the guest driver's do once they wait. It is
// bench/datapath's host baseline, which lives in that command's package.
type hostDevice struct {
	q    gpu.Queue
	prog gpu.Program
	k    gpu.Kernel
	bufs []gpu.Buffer
}

var _ job.Device = (*hostDevice)(nil)

func (h *hostDevice) Build(source, options string) error {
	p, log, err := h.q.Build(source, options)
	if err != nil {
		return fmt.Errorf("%w (log: %q)", err, log)
	}
	h.prog = p
	h.k, err = p.Kernel(job.Kernel)
	return err
}

func (h *hostDevice) Alloc(size uint64) (job.Buf, error) {
	b, err := h.q.Alloc(size)
	if err != nil {
		return 0, err
	}
	h.bufs = append(h.bufs, b)
	return job.Buf(len(h.bufs) - 1), nil
}

func (h *hostDevice) buf(b job.Buf) (gpu.Buffer, error) {
	if b < 0 || int(b) >= len(h.bufs) {
		return nil, fmt.Errorf("buffer %d: have %d", b, len(h.bufs))
	}
	return h.bufs[b], nil
}

func (h *hostDevice) Write(b job.Buf, p []byte) error {
	gb, err := h.buf(b)
	if err != nil {
		return err
	}
	return h.q.Write(gb, 0, p)
}

func (h *hostDevice) Read(b job.Buf, p []byte) error {
	gb, err := h.buf(b)
	if err != nil {
		return err
	}
	return h.q.Read(gb, 0, p)
}

// MatMul launches the kernel with the arguments and range DriverDevice
// gives it: a, b, c, n as a uint32, n x n in local x local groups.
func (h *hostDevice) MatMul(a, b, c job.Buf, n, local int) (time.Duration, error) {
	args := make([]gpu.Arg, 4)
	for i, x := range []job.Buf{a, b, c} {
		gb, err := h.buf(x)
		if err != nil {
			return 0, err
		}
		args[i].Buffer = gb
	}
	args[3].Scalar = binary.LittleEndian.AppendUint32(nil, uint32(n))
	r := gpu.NDRange{Dims: 2, Global: [3]uint64{uint64(n), uint64(n)}, Local: [3]uint64{uint64(local), uint64(local)}}
	return h.q.Launch(h.k, r, args)
}

// Finish has nothing to wait for: every Queue call blocks.
func (h *hostDevice) Finish() error { return nil }

func (h *hostDevice) release() {
	for _, b := range h.bufs {
		b.Release()
	}
	h.bufs = nil
	if h.k != nil {
		h.k.Release()
	}
	if h.prog != nil {
		h.prog.Release()
	}
}

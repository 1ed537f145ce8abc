package host

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/job"
)

// JobDevice runs a guestagent/job directly on a gpu.Queue, with no
// virtualization at all: the benchmarks' baseline (bench/datapath's host
// row, bench/isolation's direct mode). Every call blocks until its work
// is done, as the guest driver's do once they wait.
type JobDevice struct {
	q    gpu.Queue
	k    gpu.Kernel
	prog gpu.Program
	bufs []gpu.Buffer
}

// NewJobDevice returns a JobDevice on q; Release frees what a job made.
func NewJobDevice(q gpu.Queue) *JobDevice { return &JobDevice{q: q} }

var _ job.Device = (*JobDevice)(nil)

func (h *JobDevice) Build(source, options string) error {
	p, log, err := h.q.Build(source, options)
	if err != nil {
		return fmt.Errorf("%w (log: %q)", err, log)
	}
	h.prog = p
	h.k, err = p.Kernel(job.Kernel)
	return err
}

func (h *JobDevice) Alloc(size uint64) (job.Buf, error) {
	b, err := h.q.Alloc(size)
	if err != nil {
		return 0, err
	}
	h.bufs = append(h.bufs, b)
	return job.Buf(len(h.bufs) - 1), nil
}

func (h *JobDevice) buf(b job.Buf) (gpu.Buffer, error) {
	if b < 0 || int(b) >= len(h.bufs) {
		return nil, fmt.Errorf("buffer %d: have %d", b, len(h.bufs))
	}
	return h.bufs[b], nil
}

func (h *JobDevice) Write(b job.Buf, p []byte) error {
	gb, err := h.buf(b)
	if err != nil {
		return err
	}
	return h.q.Write(gb, 0, p)
}

func (h *JobDevice) Read(b job.Buf, p []byte) error {
	gb, err := h.buf(b)
	if err != nil {
		return err
	}
	return h.q.Read(gb, 0, p)
}

func (h *JobDevice) MatMul(a, b, c job.Buf, n, local int) (time.Duration, error) {
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
func (h *JobDevice) Finish() error { return nil }

// Release frees what the job created.
func (h *JobDevice) Release() {
	for _, b := range h.bufs {
		b.Release()
	}
	h.bufs = nil
	if h.k != nil {
		h.k.Release()
		h.k = nil
	}
	if h.prog != nil {
		h.prog.Release()
		h.prog = nil
	}
}

package child

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vgpud/vgpud/gpu"
)

// ExitContextLost is a worker's exit code when its device context became
// unusable (gpu.ErrContextLost): the main process counts it under
// worker.CauseContextLost, and its instances start again on a fresh
// worker, with a fresh context, as after any worker's end.
const ExitContextLost = 3

// lostGuard is a gpu.Device whose queues report the first error that says
// the device context is unusable (gpu.ErrContextLost) to lost. On NVIDIA's
// OpenCL a kernel's illegal memory access fails every later call of the
// context, builds included: without this a domain whose guest ran such a
// kernel got device errors forever (seen on an H200), where on a CPU
// device the same kernel ends the worker and the domain starts afresh.
type lostGuard struct {
	gpu.Device
	once sync.Once
	lost func(error)
}

// guardLost wraps d; lost runs once, on the first lost-context error.
func guardLost(d gpu.Device, lost func(error)) gpu.Device {
	return &lostGuard{Device: d, lost: lost}
}

func (g *lostGuard) check(err error) error {
	if err != nil && errors.Is(err, gpu.ErrContextLost) {
		g.once.Do(func() { g.lost(err) })
	}
	return err
}

func (g *lostGuard) NewQueue() (gpu.Queue, error) {
	q, err := g.Device.NewQueue()
	if err != nil {
		return nil, g.check(err)
	}
	lq := &lostQueue{Queue: q, g: g}
	if _, ok := q.(gpu.Pipeliner); ok {
		return &lostPipeliner{lq}, nil
	}
	return lq, nil
}

// lostQueue is a queue of a lostGuard.
type lostQueue struct {
	gpu.Queue
	g *lostGuard
}

func (q *lostQueue) Alloc(size uint64) (gpu.Buffer, error) {
	b, err := q.Queue.Alloc(size)
	return b, q.g.check(err)
}

func (q *lostQueue) Write(b gpu.Buffer, off uint64, p []byte) error {
	return q.g.check(q.Queue.Write(b, off, p))
}

func (q *lostQueue) Read(b gpu.Buffer, off uint64, p []byte) error {
	return q.g.check(q.Queue.Read(b, off, p))
}

func (q *lostQueue) Copy(src, dst gpu.Buffer, srcOff, dstOff, n uint64) error {
	return q.g.check(q.Queue.Copy(src, dst, srcOff, dstOff, n))
}

func (q *lostQueue) Fill(b gpu.Buffer, off, n uint64, pattern []byte) error {
	return q.g.check(q.Queue.Fill(b, off, n, pattern))
}

func (q *lostQueue) Build(source, options string) (gpu.Program, string, error) {
	p, log, err := q.Queue.Build(source, options)
	return p, log, q.g.check(err)
}

func (q *lostQueue) Launch(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) (time.Duration, error) {
	d, err := q.Queue.Launch(k, r, args)
	return d, q.g.check(err)
}

// StreamWrite and StreamRead make a lostQueue a gpu.Streamer whatever its
// queue is: one that is not streams nothing (gpu.ErrUnsupported), and the
// caller writes and reads instead.
func (q *lostQueue) Streams() bool {
	s, ok := q.Queue.(gpu.Streamer)
	return ok && s.Streams()
}

func (q *lostQueue) StreamWrite(b gpu.Buffer, off, n uint64, fill func(p []byte) error) error {
	s, ok := q.Queue.(gpu.Streamer)
	if !ok {
		return fmt.Errorf("stream write: %T: %w", q.Queue, gpu.ErrUnsupported)
	}
	return q.g.check(s.StreamWrite(b, off, n, fill))
}

func (q *lostQueue) StreamRead(b gpu.Buffer, off, n uint64, drain func(p []byte) error) error {
	s, ok := q.Queue.(gpu.Streamer)
	if !ok {
		return fmt.Errorf("stream read: %T: %w", q.Queue, gpu.ErrUnsupported)
	}
	return q.g.check(s.StreamRead(b, off, n, drain))
}

// lostPipeliner is a lostQueue whose queue also enqueues launches without
// waiting for each (gpu.Pipeliner): the aggregator pipelines launches
// only on a queue that is one.
type lostPipeliner struct{ *lostQueue }

func (q *lostPipeliner) Enqueue(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) error {
	return q.g.check(q.Queue.(gpu.Pipeliner).Enqueue(k, r, args))
}

func (q *lostPipeliner) Sync() []gpu.LaunchResult {
	res := q.Queue.(gpu.Pipeliner).Sync()
	for _, r := range res {
		q.g.check(r.Err)
	}
	return res
}

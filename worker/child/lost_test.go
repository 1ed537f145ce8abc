package child

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
)

// TestLostGuard: the first call that fails with a lost context (NVIDIA's
// -9999) is reported, once; other failures and successes are not, and
// every call's result reaches the caller unchanged.
func TestLostGuard(t *testing.T) {
	poison := false
	dev := gputest.New(gputest.Config{Fault: func(op string) error {
		switch {
		case op == gputest.OpLaunch && !poison:
			return &gpu.CLError{Op: "clEnqueueNDRangeKernel", Code: -5} // ordinary: out of resources
		case poison:
			return &gpu.CLError{Op: "clFinish", Code: -9999}
		}
		return nil
	}})
	var lost []error
	g := guardLost(dev, func(err error) { lost = append(lost, err) })
	q, err := g.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	b, err := q.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Write(b, 0, make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Launch(nil, gpu.NDRange{Dims: 1, Global: [3]uint64{1, 1, 1}}, nil); err == nil {
		t.Fatal("Launch with a fault = nil error")
	}
	if len(lost) != 0 {
		t.Fatalf("an ordinary failure was reported as a lost context: %v", lost)
	}
	poison = true
	for i := range 3 {
		err := q.Write(b, 0, make([]byte, 64))
		if !errors.Is(err, gpu.ErrContextLost) || !errors.Is(err, gpu.ErrDevice) {
			t.Errorf("Write %d = %v, want ErrContextLost (an ErrDevice)", i, err)
		}
	}
	if _, _, err := q.Build("__kernel void k(void) {}", ""); !errors.Is(err, gpu.ErrContextLost) {
		t.Errorf("Build = %v, want ErrContextLost", err)
	}
	if len(lost) != 1 || !errors.Is(lost[0], gpu.ErrContextLost) {
		t.Errorf("lost reported %d times (%v), want once", len(lost), fmt.Sprint(lost))
	}
}

// pipelinedQueue is a fake queue that also takes launches without waiting
// (gpu.Pipeliner); its Sync reports every launch with err.
type pipelinedQueue struct {
	gpu.Queue
	n   int
	err error
}

func (q *pipelinedQueue) Enqueue(gpu.Kernel, gpu.NDRange, []gpu.Arg) error { q.n++; return nil }

func (q *pipelinedQueue) Sync() []gpu.LaunchResult {
	res := make([]gpu.LaunchResult, q.n)
	for i := range res {
		res[i].Err = q.err
	}
	q.n = 0
	return res
}

type pipelinedDevice struct {
	gpu.Device
	err error
}

func (d *pipelinedDevice) NewQueue() (gpu.Queue, error) {
	q, err := d.Device.NewQueue()
	return &pipelinedQueue{Queue: q, err: d.err}, err
}

// TestLostGuardPipelines: a guarded queue is a gpu.Pipeliner exactly when
// the queue it guards is one (the aggregator pipelines launches only on
// such a queue), and a lost context among an enqueued batch's outcomes is
// reported.
func TestLostGuardPipelines(t *testing.T) {
	var lost []error
	q, err := guardLost(gputest.New(gputest.Config{}), func(err error) { lost = append(lost, err) }).NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := q.(gpu.Pipeliner); ok {
		t.Errorf("the guard of a queue that does not pipeline launches is a gpu.Pipeliner")
	}
	q.Close()
	dead := &gpu.CLError{Op: "clFinish", Code: -9999}
	q, err = guardLost(&pipelinedDevice{Device: gputest.New(gputest.Config{}), err: dead}, func(err error) { lost = append(lost, err) }).NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	pl, ok := q.(gpu.Pipeliner)
	if !ok {
		t.Fatal("the guard of a gpu.Pipeliner queue is not one")
	}
	for range 2 {
		if err := pl.Enqueue(nil, gpu.NDRange{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if res := pl.Sync(); len(res) != 2 || !errors.Is(res[1].Err, gpu.ErrContextLost) {
		t.Errorf("Sync = %v, want two outcomes, context lost", res)
	}
	if len(lost) != 1 {
		t.Errorf("lost reported %d times, want once", len(lost))
	}
}

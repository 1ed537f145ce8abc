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

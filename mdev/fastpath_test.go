package mdev

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// tickKernel makes every launch depend on the one before it.
const tickKernel = `__kernel void tick(__global uint *a, uint k) {
	size_t i = get_global_id(0);
	a[i] = a[i] * 3u + k + (uint)i;
}`

// TestQueuedLaunchesShareTurnsAndWaits (issue 32) is the mechanism test
// of the fast command path across the process boundaries, on vgpud's
// default configuration (sandboxed worker, kernels in an executor): a run
// of launches the guest queued together takes fewer device turns than it
// has launches (each turn is a request and a grant between the worker and
// the main process's scheduler), every launch is enqueued without a wait
// of its own (one executor round trip per run, not per launch), and the
// result is the one of launches run in order.
func TestQueuedLaunchesShareTurnsAndWaits(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}})
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small"})
	vm := attach(t, inst)
	d, err := driver.Open(vm, vm, driver.Options{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	p, log, err := d.Build(tickKernel, "")
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log)
	}
	const items, n = 64, 40
	b, err := d.CreateBuffer(4 * items)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	turns, piped := inst.Sched().Turns, inst.be.Shared().Pipelined.Load()
	for k := range n {
		if err := d.Launch(p, "tick", driver.Range1(items, 0), driver.BufferArg(b), driver.Uint32Arg(uint32(k))); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 4*items)
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := d.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		want := uint32(0)
		for k := range n {
			want = want*3 + uint32(k) + uint32(i)
		}
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != want {
			t.Fatalf("a[%d] = %d after %d launches, want %d", i, v, n, want)
		}
	}
	if got := inst.be.Shared().Pipelined.Load() - piped; got != n {
		t.Errorf("%d of %d queued launches were enqueued without a wait of their own, want all", got, n)
	}
	// The read after them takes a turn of its own (the ring was empty
	// between): n launches and the read, fewer than n+1 turns.
	if got := inst.Sched().Turns - turns; got >= n {
		t.Errorf("%d queued launches and a read took %d device turns, want fewer than %d", n, got, n)
	}
}

package mdev

import (
	"bytes"
	"crypto/rand"
	"errors"
	"sync"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// TestContextsInTheWorker plays two processes of one VM, each with its
// own device context, where the contexts are OpenCL contexts of the
// worker itself: on a GPU, which has no executors (a context there was
// never run before issue 42's GPU check), and on a CPU device with
// KernelsInWorker. Each context computes right while the other does; one
// cannot name the other's buffers; closing one leaves the other and the
// default ring going, and it comes back by opening it again, on the same worker.
// On a device off the host (a GPU) a wild pointer in one context then
// loses that context (wildEndsItsContextAlone); on a CPU device it ends
// the worker (kernels in the worker are the unsafe configuration
// executors replaced), so that part runs only off the host.
func TestContextsInTheWorker(t *testing.T) {
	dev := openGPU(t)
	m := newExecutorManager(t, Config{Devices: []gpu.Device{dev}, Profiles: []Profile{contextProfile}, KernelsInWorker: true})
	if m.Pool().KernelsInExecutor(0) {
		t.Fatal("KernelsInWorker: the pool still runs kernels in executors")
	}
	inst := mustCreate(t, m, CreateRequest{Profile: contextProfile.Name})
	_, d, _ := markedGuest(t, inst)
	worker := inst.WorkerPID()
	a, err := d.OpenContext(driver.ContextOptions{ID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { a.Close() }()
	v, err := d.OpenContext(driver.ContextOptions{ID: 2, MemLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	secret := make([]byte, 4096)
	rand.Read(secret)
	sb := mustBuffer(t, v, 4096)
	if err := errors.Join(v.Write(sb, 0, secret), v.Finish()); err != nil {
		t.Fatal(err)
	}
	// The other context's handle names nothing in this one.
	if err := errors.Join(a.Read(sb, 0, make([]byte, 4096)), a.Finish()); err == nil {
		t.Error("context 1 read a buffer handle of context 2")
	}

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, c := range []*driver.Device{a, v, d} {
		wg.Go(func() { errs[i] = contextVectorAdd(c, 1<<16, 20) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("job %d of three at once: %v", i, err)
		}
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*driver.Device{v, d} {
		if err := contextVectorAdd(c, 4096, 2); err != nil {
			t.Errorf("context %d after context 1 closed: %v", c.Context(), err)
		}
	}
	if a, err = d.OpenContext(driver.ContextOptions{ID: 1}); err != nil {
		t.Fatalf("open context 1 again: %v", err)
	}
	if err := contextVectorAdd(a, 4096, 2); err != nil {
		t.Errorf("context 1 opened again: %v", err)
	}

	if got := make([]byte, 4096); v.Read(sb, 0, got) != nil || v.Finish() != nil || !bytes.Equal(got, secret) {
		t.Error("context 2's buffer changed")
	}
	if inst.WorkerPID() != worker {
		t.Errorf("the worker changed (%d -> %d)", worker, inst.WorkerPID())
	}
	if !dev.Info().CPU {
		wildEndsItsContextAlone(t, inst, a, v, d)
	}
}

// wildEndsItsContextAlone launches a wild pointer in context a while v
// computes. The context is lost; where the platform keeps the loss to
// that OpenCL context, v and the default ring d go on and a comes back by
// reopening. NVIDIA's does not (an H200, 2026-11-30: the next build on
// the worker's own context failed with NV_ILLEGAL_MEMORY_ACCESS too): the
// worker then ends, as on any lost context of its own, and every ring of
// the VM comes back by reopening on a fresh worker, which this checks
// instead, saying so. No job may see a wrong result either way.
func wildEndsItsContextAlone(t *testing.T, inst *Instance, a, v, d *driver.Device) {
	t.Helper()
	worker := inst.WorkerPID()
	var wg sync.WaitGroup
	var victimErr error
	wg.Go(func() { victimErr = contextVectorAdd(v, 1<<16, 40) })
	err := launchWild(t, a)
	wg.Wait()
	if !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("the wild write in context 1 = %v, want its context lost", err)
	}
	for _, e := range []error{victimErr, contextVectorAdd(d, 4096, 2)} {
		if e != nil && !errors.Is(e, driver.ErrDeviceLost) {
			t.Errorf("a job beside the wild write failed otherwise than by losing its device: %v", e)
		}
	}
	shared := victimErr != nil || inst.WorkerPID() != worker
	if shared {
		t.Logf("on this platform a context's illegal access ended the worker and every ring of the VM (context 2: %v); they come back by reopening", victimErr)
	}
	// The default ring first: a context is made and destroyed through it.
	for _, c := range []*driver.Device{d, a, v} {
		if err := contextVectorAdd(c, 4096, 2); errors.Is(err, driver.ErrDeviceLost) {
			if err := c.Reopen(); err != nil {
				t.Fatalf("reopen context %d: %v", c.Context(), err)
			}
		}
		if err := contextVectorAdd(c, 4096, 2); err != nil {
			t.Errorf("context %d after the wild write and a reopen: %v", c.Context(), err)
		}
	}
}

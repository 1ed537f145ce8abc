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
// On a device off the host (a GPU) a wild pointer in one context must end
// that context alone too; on a CPU device it ends the worker (kernels in
// the worker are the unsafe configuration executors replaced), so that
// part runs only off the host.
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

	if !dev.Info().CPU {
		wildEndsItsContextAlone(t, a, v, d)
	}
	if got := make([]byte, 4096); v.Read(sb, 0, got) != nil || v.Finish() != nil || !bytes.Equal(got, secret) {
		t.Error("context 2's buffer changed")
	}
	if inst.WorkerPID() != worker {
		t.Errorf("the worker changed (%d -> %d)", worker, inst.WorkerPID())
	}
}

// wildEndsItsContextAlone launches a wild pointer in context a while v
// computes: a is lost, v and the default ring d go on, and a comes back
// by reopening.
func wildEndsItsContextAlone(t *testing.T, a, v, d *driver.Device) {
	t.Helper()
	var wg sync.WaitGroup
	var victimErr error
	wg.Go(func() { victimErr = contextVectorAdd(v, 1<<16, 40) })
	wp, _, err := a.Build(wildKernel, "")
	if err != nil {
		t.Fatal(err)
	}
	wb := mustBuffer(t, a, 4)
	err = a.Launch(wp, "wild", driver.Range1(1, 0), driver.BufferArg(wb))
	if err == nil {
		err = a.Finish()
	}
	wg.Wait()
	t.Logf("the wild write in context 1: %v", err)
	if victimErr != nil {
		t.Errorf("context 2's job while context 1's kernel wrote through a wild pointer: %v", victimErr)
	}
	if err := contextVectorAdd(d, 4096, 2); err != nil {
		t.Errorf("the default ring after context 1's wild write: %v", err)
	}
	if errors.Is(err, driver.ErrDeviceLost) {
		if err := a.Reopen(); err != nil {
			t.Fatalf("reopen context 1 after its loss: %v", err)
		}
	}
	if err := contextVectorAdd(a, 4096, 2); err != nil {
		t.Errorf("context 1 after the wild write: %v", err)
	}
}

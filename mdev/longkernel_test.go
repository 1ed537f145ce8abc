package mdev

import (
	"errors"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/worker"
)

// patientProfile has budgets far beyond any test's wait: only a crash, a
// kill or preemption can end what its instances run.
var patientProfile = Profile{Name: "patient", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8,
	TurnTimeout: Duration(10 * time.Minute), BuildTimeout: Duration(10 * time.Minute)}

// TestWildPointerEndsWorkerAtOnce: a kernel that writes through a wild
// pointer ends its worker by the signal, not by the watchdog: with a
// kernel limit of ten minutes, the guest sees its device lost well within
// its two-minute wait, and the end is counted as a signal.
func TestWildPointerEndsWorkerAtOnce(t *testing.T) {
	m := newManager(t, []Profile{patientProfile})
	inst, err := m.Create(CreateRequest{Profile: patientProfile.Name})
	if err != nil {
		t.Fatal(err)
	}
	vm := attach(t, inst)
	d, err := driver.Open(vm, vm, driver.Options{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, _, err := d.Build(`__kernel void wild(__global int *o) { *(__global int *)0x10 = 1; o[0] = 2; }`, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CreateBuffer(256)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, make([]byte, 256)); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "wild", driver.Range1(1, 0), driver.BufferArg(b)); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); !errors.Is(err, driver.ErrDeviceLost) {
		t.Fatalf("Finish after a wild write = %v, want ErrDeviceLost", err)
	}
	exits := m.Pool().Exits()
	if exits[worker.CauseSignal] != 1 || exits[worker.CauseWatchdog] != 0 {
		t.Errorf("worker exits = %v, want one by %s and none by %s", exits, worker.CauseSignal, worker.CauseWatchdog)
	}
}

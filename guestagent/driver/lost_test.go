package driver_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// reapUntilLost calls Reap until it fails, at most until ctx ends.
func reapUntilLost(ctx context.Context, t *testing.T, d *driver.Device) error {
	t.Helper()
	for {
		if _, err := d.Reap(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Reap never reported the lost device: %v", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// TestReapFailsInflightOnLoss: commands in flight when the device context
// is lost never complete on the device; Reap notices the loss from
// RegError and fails each of them with StatusDeviceLost, once; every call
// fails with ErrDeviceLost until Reopen, after which the device works and
// a handle from before names nothing.
func TestReapFailsInflightOnLoss(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{StagingBytes: driver.MinStagingBytes, Timeout: time.Minute})
	old, err := d.CreateBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := d.Build("__kernel void fill(__global uint *o, uint v) {}", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}

	f.Hold() // what is submitted now stays in flight, as a kernel that never ends
	var launch, write, read, marker recorder
	if err := d.LaunchNotify(p, "fill", driver.Range1(16, 0), 0, []driver.Arg{driver.BufferArg(old), driver.Uint32Arg(1)}, launch.done); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteNotify(old, 0, make([]byte, 4096), write.done); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 4096)
	if err := d.ReadAsync(old, 0, dst, read.done); err != nil {
		t.Fatal(err)
	}
	if err := d.Marker(marker.done); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Reap(); n != 0 || err != nil {
		t.Fatalf("Reap() while held = %d, %v, want 0, nil", n, err)
	}
	f.Lose()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := reapUntilLost(ctx, t, d); !errors.Is(err, driver.ErrDeviceLost) {
		t.Fatalf("Reap() on a lost device = %v, want ErrDeviceLost", err)
	}
	for name, r := range map[string]*recorder{"launch": &launch, "write": &write, "read": &read, "marker": &marker} {
		if len(r.got) != 1 || r.got[0].Status != abi.StatusDeviceLost {
			t.Errorf("%s completions = %+v, want one StatusDeviceLost", name, r.got)
		}
	}
	if d.Pending() != 0 || !d.Lost() {
		t.Errorf("after the loss: Pending() = %d, Lost() = %v, want 0, true", d.Pending(), d.Lost())
	}
	if _, err := d.CreateBuffer(64); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("CreateBuffer on a lost device = %v, want ErrDeviceLost", err)
	}
	if _, err := d.Reap(); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("Reap() again = %v, want ErrDeviceLost", err)
	}

	if err := d.Reopen(); err != nil {
		t.Fatalf("Reopen() = %v", err)
	}
	if d.Lost() || f.Buffers() != 0 {
		t.Errorf("after Reopen: Lost() = %v, %d buffers on the device, want false, 0", d.Lost(), f.Buffers())
	}
	b, err := d.CreateBuffer(256)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{7, 1, 9, 3}, 64)
	if err := d.Write(b, 0, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := d.Read(b, 0, got); err != nil || !bytes.Equal(got, want) {
		t.Errorf("Read after Reopen = %v, bytes equal %v", err, bytes.Equal(got, want))
	}
	if err := d.Read(old, 0, got[:16]); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("Read of a buffer from before the loss = %v, want ErrDeviceLost", err)
	}
	if err := d.Launch(p, "fill", driver.Range1(16, 0), driver.BufferArg(b), driver.Uint32Arg(1)); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("Launch of a program from before the loss = %v, want ErrDeviceLost", err)
	}
	if err := d.Free(old); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("Free of a buffer from before the loss = %v, want ErrDeviceLost", err)
	}
	if d.Pending() != 0 {
		t.Errorf("Pending() = %d: a stale object reached the device", d.Pending())
	}
}

// TestWaitOnLostDeviceFailsInflight: a synchronous wait that notices the
// loss fails the tracked commands in flight too, and CheckLost notices a
// loss with nothing in flight.
func TestWaitOnLostDeviceFailsInflight(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{Timeout: time.Minute})
	b, err := d.CreateBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if d.CheckLost() {
		t.Fatal("CheckLost() on a live device = true")
	}
	f.Hold()
	var write recorder
	if err := d.WriteNotify(b, 0, make([]byte, 64), write.done); err != nil {
		t.Fatal(err)
	}
	f.Lose()
	if err := d.Read(b, 0, make([]byte, 64)); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("Read on a lost device = %v, want ErrDeviceLost", err)
	}
	if len(write.got) != 1 || write.got[0].Status != abi.StatusDeviceLost {
		t.Errorf("write completions = %+v, want one StatusDeviceLost", write.got)
	}
	if err := d.Reopen(); err != nil {
		t.Fatalf("Reopen() = %v", err)
	}

	f.Lose() // nothing in flight: only a look at RegError tells
	if !d.CheckLost() {
		t.Fatal("CheckLost() on a lost device = false")
	}
	if err := d.Reopen(); err != nil {
		t.Fatalf("Reopen() = %v", err)
	}
	if _, err := d.CreateBuffer(64); err != nil {
		t.Errorf("CreateBuffer after the second Reopen = %v", err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish after the second Reopen = %v", err)
	}
}

// TestLossKeepsWhatCompleted: commands whose completions landed before the
// device context was lost keep their results, though nobody reaped them
// before the loss was noticed (vgpu-icdd's CheckLost, or a wait, may be
// the first to look); only what was still in flight fails.
func TestLossKeepsWhatCompleted(t *testing.T) {
	d, f := open(t, drivertest.Config{}, driver.Options{StagingBytes: driver.MinStagingBytes, Timeout: time.Minute})
	b, err := d.CreateBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	var done, inflight recorder
	if err := d.WriteNotify(b, 0, make([]byte, 4096), done.done); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil { // the fake completes it now; nobody reaps
		t.Fatal(err)
	}
	f.Hold()
	if err := d.Marker(inflight.done); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Lose()
	if !d.CheckLost() {
		t.Fatal("CheckLost() on a lost device = false")
	}
	if len(done.got) != 1 || done.got[0].Status != abi.StatusOK {
		t.Errorf("the write that completed before the loss: completions %+v, want one StatusOK", done.got)
	}
	if len(inflight.got) != 1 || inflight.got[0].Status != abi.StatusDeviceLost {
		t.Errorf("the marker in flight at the loss: completions %+v, want one StatusDeviceLost", inflight.got)
	}
}

package vfiouser_test

import (
	"bytes"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
)

// TestKicksGoStraightToTheWorker (issue 42) is the mechanism test of the
// kick ioeventfd handed to the worker (docs/worker.md "Kicks straight to
// the worker"): on vgpud's default configuration (a sandboxed worker, the
// kernels of a CPU device in an executor) each kick of the guest wakes the
// worker itself and none passes through vgpud's main process, with a poll
// word (ABI 1.6) and with the kick alone (1.3: the tail shadow programmed
// in registers, which the worker learns through the instance page). The
// worker never polls here, so every command is kicked. Through a
// relocation (the main process takes the kicks while the ring is frozen,
// and hands them to the new worker after) and a worker's crash (the
// fresh worker takes them; meanwhile the main process, and a kick then
// reads the device lost) the guest's round trips stay correct, and the
// kicks go straight to the worker again afterwards.
func TestKicksGoStraightToTheWorker(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts driver.Options
	}{
		{"poll word", driver.Options{}},
		{"kick alone", driver.Options{Kick: true, NoNotify: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, inst, c := attachedVMWith(t, mdev.Config{Devices: []gpu.Device{openDevice(t), openDevice(t)}, PollWindow: -1})
			d, err := driver.Open(c, c, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			const n = 20
			k0, bells := inst.Kicks(), d.Stats().Doorbells
			if err := roundTrips(d, n); err != nil {
				t.Fatal(err)
			}
			k := inst.Kicks()
			if rang := d.Stats().Doorbells - bells; rang < n {
				t.Fatalf("the guest rang %d doorbells for %d round trips: not kicking", rang, n)
			}
			if k.Direct == k0.Direct || k.Relayed != k0.Relayed {
				t.Fatalf("kicks %+v -> %+v: want the worker's count up, none through the main process", k0, k)
			}

			// A relocation while the guest goes on.
			var moveErr error
			var mv sync.WaitGroup
			mv.Go(func() {
				one := 1
				_, moveErr = m.Realloc(t.Context(), inst.UUID(), mdev.ReallocRequest{Device: &one})
			})
			if err := roundTrips(d, n); err != nil {
				t.Errorf("round trips during the relocation: %v", err)
			}
			mv.Wait()
			if moveErr != nil {
				t.Fatalf("Realloc: %v", moveErr)
			}
			assertDirect(t, inst, d, "after the relocation")

			// The worker's crash: the guest reopens on a fresh worker.
			if err := syscall.Kill(inst.WorkerPID(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			for !inst.Lost() { // the reaper marks it
				time.Sleep(time.Millisecond)
			}
			// With no worker, the main process takes the kicks (each one
			// latches what any doorbell would: the device is lost).
			k0 = inst.Kicks()
			if err := c.Kick(); err != nil {
				t.Fatal(err)
			}
			for inst.Kicks().Relayed == k0.Relayed {
				time.Sleep(time.Millisecond)
			}
			if st, _ := inst.Error(); st != abi.StatusDeviceLost {
				t.Errorf("a kick while the worker is gone: error %v, want %v", st, abi.StatusDeviceLost)
			}
			if err := d.Reopen(); err != nil {
				t.Fatalf("reopen after the worker's crash: %v", err)
			}
			assertDirect(t, inst, d, "after the worker's crash")
		})
	}
}

// assertDirect runs round trips and fails unless every kick they rang
// was the worker's.
func assertDirect(t *testing.T, inst *mdev.Instance, d *driver.Device, when string) {
	t.Helper()
	const n = 10
	k0 := inst.Kicks()
	if err := roundTrips(d, n); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if k := inst.Kicks(); k.Direct == k0.Direct || k.Relayed != k0.Relayed {
		t.Errorf("%s: kicks %+v -> %+v: want the worker's count up, none through the main process", when, k0, k)
	}
}

// roundTrips writes n patterns into a fresh buffer, each read back and
// checked: one kicked command after another.
func roundTrips(d *driver.Device, n int) error {
	b, err := d.CreateBuffer(64)
	if err != nil {
		return err
	}
	defer d.Free(b)
	for k := range n {
		want := bytes.Repeat([]byte{byte(k + 1)}, 64)
		if err := d.Write(b, 0, want); err != nil {
			return err
		}
		got := make([]byte, 64)
		if err := d.Read(b, 0, got); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("round %d: read back %x, want %x", k, got[:8], want[:8])
		}
	}
	return nil
}

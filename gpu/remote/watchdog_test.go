package remote

import (
	"encoding/binary"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
)

// stallingExecutor answers Info, then treats the next request as stall
// says: "silent" answers nothing, "half" sends the header of a 16 MiB
// reply and a few bytes of it, nothing more, "late" answers after delay.
// It reads (and drops) everything else until the connection ends.
func stallingExecutor(t *testing.T, stall string, delay time.Duration) *Device {
	t.Helper()
	a, b := socketPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f, err := readFrame(b)
		if err != nil {
			return
		}
		b.Write(appendFrame(nil, f.seq, 0, []byte(`{"Name":"x"}`)))
		if f, err = readFrame(b); err != nil {
			return
		}
		switch stall {
		case "half":
			h := binary.LittleEndian.AppendUint32(nil, 16<<20)
			h = binary.LittleEndian.AppendUint32(h, f.seq)
			b.Write(append(h, 0, 1, 2, 3))
		case "late":
			time.Sleep(delay)
			b.Write(appendFrame(nil, f.seq, 0, []byte{1, 0, 0, 0}))
		}
		io.Copy(io.Discard, b)
	}()
	t.Cleanup(func() { a.Close(); <-done })
	d, err := NewDevice(a)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestWatchdogEndsStalledExecutor: an executor that answers nothing, or
// sends a reply's header and part of its body and then nothing (the
// attack of issue 40: a length of 16 MiB, then silence), loses the device
// once the request waited its bound (and the confirmation), with an
// error that is ErrContextLost and ErrUnanswered, and Expired is told;
// it does not wait for the connection's end.
func TestWatchdogEndsStalledExecutor(t *testing.T) {
	for _, stall := range []string{"silent", "half"} {
		t.Run(stall, func(t *testing.T) {
			d := stallingExecutor(t, stall, 0)
			expired := make(chan Op, 1)
			d.SetWatchdog(&Watchdog{
				Bound:   func(Op) time.Duration { return 50 * time.Millisecond },
				Expired: func(op Op, _ time.Duration) { expired <- op },
			})
			_, err := d.NewQueue()
			if !errors.Is(err, gpu.ErrContextLost) || !errors.Is(err, ErrUnanswered) {
				t.Fatalf("NewQueue from a stalled executor = %v, want ErrContextLost and ErrUnanswered", err)
			}
			if op := <-expired; op != OpNewQueue {
				t.Errorf("Expired(%d), want OpNewQueue", op)
			}
			if _, err := d.NewQueue(); !errors.Is(err, gpu.ErrContextLost) {
				t.Errorf("NewQueue after the loss = %v, want ErrContextLost", err)
			}
			d.Close()
		})
	}
}

// TestWatchdogPausedAndAnswered: a request answered within its bound is
// not touched; one whose bound ran out across a pause of the caller's
// clock (Paused changed: a preemption stopped worker and executor
// together) gets its whole bound again, and its late answer is taken.
func TestWatchdogPausedAndAnswered(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		d := stallingExecutor(t, "late", 10*time.Millisecond)
		d.SetWatchdog(&Watchdog{
			Bound:   func(Op) time.Duration { return time.Minute },
			Expired: func(Op, time.Duration) { t.Error("Expired for an answered request") },
		})
		if _, err := d.NewQueue(); err != nil {
			t.Errorf("NewQueue = %v", err)
		}
		// Not d.Close: this executor answers nothing more; the
		// connection ends with the test.
	})
	t.Run("paused", func(t *testing.T) {
		// The answer comes after 4 bounds; the clock "pauses" at every
		// look, as if the process had been stopped each time.
		d := stallingExecutor(t, "late", 200*time.Millisecond)
		var pauses atomic.Uint64
		d.SetWatchdog(&Watchdog{
			Bound:   func(Op) time.Duration { return 50 * time.Millisecond },
			Paused:  func() uint64 { return pauses.Add(1) },
			Expired: func(Op, time.Duration) { t.Error("Expired across pauses") },
		})
		if _, err := d.NewQueue(); err != nil {
			t.Errorf("NewQueue = %v", err)
		}
		if pauses.Load() < 3 {
			t.Errorf("Paused looked at %d times, want a look per expiry", pauses.Load())
		}
	})
}

package worker

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/gpu"
)

// eventfdWait bounds what takes microseconds when nothing is wrong:
// generous, so that a loaded machine never reaches it.
const eventfdWait = time.Minute

// bounded runs f and waits for it, at most eventfdWait; then it calls
// unstick (which undoes what blocks f) until f returns, and reports
// false.
func bounded(f, unstick func()) bool {
	ctx, cancel := context.WithTimeout(context.Background(), eventfdWait)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	for {
		unstick()
		select {
		case <-done:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// eventfdAdd adds v to the counter of the eventfd fd.
func eventfdAdd(t *testing.T, fd int, v uint64) {
	t.Helper()
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	if _, err := unix.Write(fd, b[:]); err != nil {
		t.Errorf("write %#x to eventfd: %v", v, err)
	}
}

// TestHostileWorkerEventfds: the instance's doorbell and notify eventfds
// share their open files (and so O_NONBLOCK) with the worker, an
// untrusted peer. A worker that makes them blocking, filling the
// doorbell's counter or leaving the notify counter empty, must not hang
// the guest's doorbell (which rings under the register file's locks),
// an upgrade's pause, or the instance's Close.
func TestHostileWorkerEventfds(t *testing.T) {
	for _, tt := range []struct {
		mode  string
		notes int // notices the worker sends before it misbehaves
	}{
		{"blocking-bell", 0},
		{"blocking-notify", 1},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			p := liarPool(t, tt.mode, liarDevice)
			defer p.Close()
			notes := make(chan struct{}, 16)
			b, err := p.Create(InstanceConfig{
				ID: "hostile", Domain: "instance:hostile",
				Limits: Limits{MemBytes: 1 << 20, BuildTimeout: time.Second},
				Notify: func(uint32) {
					select {
					case notes <- struct{}{}:
					default:
					}
				},
			})
			if err != nil {
				t.Fatalf("Create = %v", err)
			}
			in := b.(*procInstance)
			// The test's own copies of the shared open files, to undo
			// what blocks if the fix is missing (so that the test fails
			// rather than hangs).
			bell, err := unix.Dup(in.bellFD)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(bell)
			notify, err := unix.Dup(int(in.notify.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(notify)
			ctx, cancel := context.WithTimeout(context.Background(), eventfdWait)
			defer cancel()
			for range tt.notes {
				// The relay took the worker's notice: its next read
				// meets an empty, blocking eventfd.
				select {
				case <-notes:
				case <-ctx.Done():
					t.Fatal("the worker's notice never reached the Notify hook")
				}
			}
			unstick := func() {
				var c [8]byte
				// A full doorbell counter: a blocked write goes on (a
				// read that does not block on an empty one either).
				_, _ = unix.Preadv2(bell, [][]byte{c[:]}, -1, unix.RWF_NOWAIT)
				eventfdAdd(t, notify, 1)     // an empty notify counter: a blocked read returns
				// (and the relay's next read blocks again, until the
				// file is closed)
			}

			if !bounded(func() {
				for i, err := range []error{in.Doorbell(1), in.Kick(0x1000), in.Doorbell(2)} {
					if err != nil {
						t.Errorf("ring %d = %v, want nil", i, err)
					}
				}
			}, unstick) {
				t.Fatal("Doorbell/Kick blocked on the doorbell eventfd the worker made blocking and filled")
			}

			var perr error
			if !bounded(func() { perr = p.Pause(context.Background()) }, unstick) {
				t.Error("Pause blocked on an eventfd the worker made blocking")
			}
			p.Resume() // also after a failed Pause, which may have paused some of the pool
			if perr != nil {
				t.Fatalf("Pause = %v", perr)
			}

			var cerr error
			if !bounded(func() { cerr = in.Close() }, unstick) {
				t.Fatal("Close blocked on an eventfd the worker made blocking")
			}
			if cerr != nil {
				t.Errorf("Close = %v", cerr)
			}
			if err := p.Close(); err != nil {
				t.Errorf("pool Close = %v", err)
			}
		})
	}
}

// BenchmarkDoorbell: what a guest's doorbell costs the register path
// (call: Doorbell returns) and how long until the worker's side reads it
// (visible: Doorbell, then a read of the eventfd through the runtime's
// poller, as the worker reads it; the ringing goroutine parks meanwhile,
// as the register path's does, waiting for its transport's next message).
func BenchmarkDoorbell(b *testing.B) {
	p, err := NewPool(Config{
		Devices: []gpu.Info{liarDevice}, Dir: b.TempDir(), Executable: liar(b, "stale-bell"), NoSandbox: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	be, err := p.Create(InstanceConfig{
		ID: "bench", Domain: "instance:bench",
		Limits: Limits{MemBytes: 1 << 20, BuildTimeout: time.Second},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	in := be.(*procInstance)
	fd, err := unix.Dup(in.bellFD)
	if err != nil {
		b.Fatal(err)
	}
	peer := os.NewFile(uintptr(fd), "doorbell") // non-blocking: the runtime's poller
	defer peer.Close()
	var c [8]byte
	b.Run("call", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := in.Doorbell(uint32(i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	_, _ = unix.Read(fd, c[:]) // the calls' count
	b.Run("visible", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := in.Doorbell(uint32(i)); err != nil {
				b.Fatal(err)
			}
			if _, err := peer.Read(c[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

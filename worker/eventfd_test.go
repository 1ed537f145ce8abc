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

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/internal/irqfd/irqfdtest"
)

// closeBounded closes in, which must not block on an eventfd the worker
// made blocking (bounded, with unstick), and then the pool p.
func closeBounded(t *testing.T, p *Pool, in *procInstance, unstick func()) {
	t.Helper()
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
}

// bounded runs f and waits for it, at most irqfdtest.Patience; then it
// calls unstick (which undoes what blocks f) until f returns, and
// reports false.
func bounded(f, unstick func()) bool {
	ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
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

// relent undoes, from the worker's side, what a hostile worker did to
// the instance's eventfds (their dups bell and notify), so that whatever
// blocked on them returns: a writer blocked on a full counter, a reader
// blocked on an empty one.
func relent(t *testing.T, bell, notify int) {
	for _, fd := range []int{bell, notify} {
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Errorf("set O_NONBLOCK: %v", err)
		}
	}
	var c [8]byte
	_, _ = unix.Read(bell, c[:])
	// Not irqfdtest.Add: relent runs while f may still be blocked, and a
	// Fatal here would leave it so; bounded must go on until f returns.
	one := binary.NativeEndian.AppendUint64(nil, 1)
	for _, fd := range []int{bell, notify} {
		if _, err := unix.Write(fd, one); err != nil {
			t.Errorf("write 0x1 to eventfd: %v", err)
		}
	}
}

// blockFDs clears O_NONBLOCK on the open files of fds, as a hostile
// worker does on its copies.
func blockFDs(t *testing.T, fds ...int) {
	t.Helper()
	for _, fd := range fds {
		if err := unix.SetNonblock(fd, false); err != nil {
			t.Fatalf("clear O_NONBLOCK: %v", err)
		}
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
				Notify: notifyInto(notes),
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
			ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
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
			unstick := func() { relent(t, bell, notify) }

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

			closeBounded(t, p, in, unstick)
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

// TestAdoptedHostileEventfds: an upgrade in place hands a new pool an
// instance whose eventfds a hostile worker left blocking, the doorbell's
// counter full, and whose worker ended meanwhile (the instance is lost).
// The new pool relays notices, the guest's reset brings the instance
// back on a fresh worker (the stale doorbell count drained without
// blocking: stale-bell refuses an Add that comes with one), the doorbell
// rings without blocking, and Close returns.
func TestAdoptedHostileEventfds(t *testing.T) {
	page, err := guestmem.NewSealed("vgpud-test-instance", abi.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(page, 0, abi.PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	_, err = aggregator.SharedIn(m, true)
	unix.Munmap(m)
	if err != nil {
		t.Fatal(err)
	}
	var fds []int // page, bell, notify: the table's, then the pool's
	fds = append(fds, page)
	for range 2 {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC) // blocking, as the worker left them
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	bell, err := unix.Dup(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(bell)
	notify, err := unix.Dup(fds[2])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(notify)
	irqfdtest.Add(t, bell, irqfdtest.CounterMax)
	h := handover.Instance{UUID: "adopted", Worker: -1, Why: "its worker ended during the upgrade",
		Page: 0, Bell: 1, Notify: 2, Listener: handover.None}

	p := liarPool(t, "stale-bell", liarDevice)
	defer p.Close()
	if err := p.Adopt(nil, nil, []handover.Instance{h}, handover.NewTable(fds)); err != nil {
		t.Fatalf("Adopt = %v", err)
	}
	notes := make(chan struct{}, 16)
	b, err := p.Create(InstanceConfig{
		ID: "adopted", Domain: "instance:adopted",
		Limits: Limits{MemBytes: 1 << 20, BuildTimeout: time.Second},
		Notify: notifyInto(notes),
	})
	if err != nil {
		t.Fatalf("Create (adopt) = %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("Start = %v", err)
	}
	in := b.(*procInstance)
	unstick := func() { relent(t, bell, notify) }
	blockFDs(t, bell, notify) // adopting them made them non-blocking again

	ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
	defer cancel()
	irqfdtest.Add(t, notify, 1) // a completion notice
	select {
	case <-notes:
	case <-ctx.Done():
		t.Fatal("the adopted instance's notice relay did not relay a notice")
	}
	if !bounded(in.Reset, unstick) {
		t.Fatal("Reset blocked draining the doorbell eventfd the worker made blocking")
	}
	if in.Lost() {
		t.Fatal("after Reset the instance is still lost: the fresh worker refused it (a stale doorbell count came with it?)")
	}
	blockFDs(t, bell) // the fresh worker, as hostile
	irqfdtest.Add(t, bell, irqfdtest.CounterMax)
	if !bounded(func() {
		if err := in.Doorbell(1); err != nil {
			t.Errorf("Doorbell(1) = %v, want nil", err)
		}
	}, unstick) {
		t.Fatal("Doorbell blocked on the doorbell eventfd the worker made blocking and filled")
	}
	closeBounded(t, p, in, unstick)
}

// notifyInto is a Notify that posts a notice on notes, dropping those
// that find it full.
func notifyInto(notes chan<- struct{}) func(uint32) {
	return func(uint32) {
		select {
		case notes <- struct{}{}:
		default:
		}
	}
}

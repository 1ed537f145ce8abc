package irqfd

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/irqfd/irqfdtest"
)

// dup returns a second fd of fd's open file, for what takes ownership
// of it (New closes it) while the test keeps fd.
func dup(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// read waits until the eventfd's counter is nonzero and takes it.
func read(t *testing.T, fd int) uint64 {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, int(irqfdtest.Patience/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("poll eventfd: %d, %v: nothing to read", n, err)
		}
		break
	}
	var b [8]byte
	if _, err := unix.Read(fd, b[:]); err != nil {
		t.Fatalf("read eventfd: %v", err)
	}
	return binary.NativeEndian.Uint64(b[:])
}

func TestCheck(t *testing.T) {
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	f, err := os.CreateTemp(t.TempDir(), "irqfd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	memfd, err := unix.MemfdCreate("irqfd-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(memfd)
	_, fullPipe := irqfdtest.FullPipe(t)
	tests := []struct {
		name string
		fd   int
		ok   bool
	}{
		{"eventfd", irqfdtest.Eventfd(t, 0), true},
		{"nonblocking eventfd", irqfdtest.Eventfd(t, unix.EFD_NONBLOCK), true},
		{"full blocking pipe", fullPipe, false},
		{"socket", sock, false},
		{"file", int(f.Fd()), false},
		{"memfd", memfd, false},
		{"negative", -1, false},
		{"not open", 1 << 20, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.fd)
			if tc.ok && err != nil {
				t.Errorf("Check(%s) = %v, want nil", tc.name, err)
			}
			if !tc.ok && !errors.Is(err, ErrNotEventfd) {
				t.Errorf("Check(%s) = %v, want ErrNotEventfd", tc.name, err)
			}
		})
	}
}

// New refuses a full blocking pipe, closing it.
func TestNewRefusesPipe(t *testing.T) {
	_, w := irqfdtest.FullPipe(t)
	fd := dup(t, w)
	tr, err := New(fd, nil)
	if !errors.Is(err, ErrNotEventfd) {
		tr.Close()
		t.Fatalf("New(full pipe) = %v, want ErrNotEventfd", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("the refused fd is still open (F_GETFD: %v)", err)
	}
}

// Signals add up on the counter, in the Trigger's goroutine.
func TestSignalCounts(t *testing.T) {
	peer := irqfdtest.Eventfd(t, 0)
	fd := dup(t, peer)
	tr, err := New(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for range n {
		tr.Signal()
	}
	var got uint64
	for got < n {
		got += read(t, peer) // blocks until the writer added more
	}
	if got != n {
		t.Errorf("counter after %d Signals = %d, want %d", n, got, n)
	}
	tr.Close()
	<-tr.Done()
	if w, d, f := tr.Stats(); w != n || d != 0 || f != 0 {
		t.Errorf("Stats() = %d, %d, %d, want %d, 0, 0", w, d, f, n)
	}
}

// An eventfd at its counter's maximum, blocking (as a hostile peer
// leaves it, clearing O_NONBLOCK again after New set it): Signal returns,
// the write is dropped rather than blocking, and Close ends the Trigger.
func TestSignalFullCounterDoesNotBlock(t *testing.T) {
	peer := irqfdtest.Eventfd(t, 0)
	fd := dup(t, peer)
	irqfdtest.Add(t, peer, irqfdtest.CounterMax)
	tr, err := New(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(peer), unix.F_SETFL, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
	defer cancel()
	signalled := make(chan struct{})
	go func() {
		defer close(signalled)
		for range 3 {
			tr.Signal()
		}
	}()
	select {
	case <-signalled:
	case <-ctx.Done():
		t.Fatal("Signal blocked on a full eventfd")
	}
	for {
		if _, d, _ := tr.Stats(); d == 3 {
			break
		}
		select {
		case <-ctx.Done():
			w, d, f := tr.Stats()
			t.Fatalf("Stats() = %d, %d, %d: the writer never dropped its 3 signals (blocked in write?)", w, d, f)
		case <-time.After(time.Millisecond):
		}
	}
	tr.Close()
	select {
	case <-tr.Done():
	case <-ctx.Done():
		t.Fatal("the Trigger did not end after Close")
	}
	if got := read(t, peer); got != irqfdtest.CounterMax {
		t.Errorf("counter = %#x, want %#x (nothing added)", got, uint64(irqfdtest.CounterMax))
	}
}

// Close needs no Signal, and a closed Trigger's Signal does nothing.
func TestCloseIdle(t *testing.T) {
	tr, err := New(dup(t, irqfdtest.Eventfd(t, unix.EFD_NONBLOCK)), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	tr.Close()
	<-tr.Done()
	tr.Signal()
	var nilTrigger *Trigger
	nilTrigger.Close()
}

// Drain never blocks: not on an empty eventfd that the peer made
// blocking, and a full one is read and reset.
func TestDrainBlockingEventfd(t *testing.T) {
	fd := irqfdtest.Eventfd(t, 0)
	for _, tc := range []struct {
		name string
		add  uint64
	}{
		{"empty", 0},
		{"one", 1},
		{"full", irqfdtest.CounterMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.add != 0 {
				irqfdtest.Add(t, fd, tc.add)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
			defer cancel()
			type result struct {
				n   uint64
				err error
			}
			got := make(chan result, 1)
			go func() {
				n, err := Drain(fd)
				got <- result{n, err}
			}()
			select {
			case r := <-got:
				if r.n != tc.add || r.err != nil {
					t.Errorf("Drain(eventfd at %#x) = %#x, %v, want %#x, nil", tc.add, r.n, r.err, tc.add)
				}
			case <-ctx.Done():
				irqfdtest.Add(t, fd, 1) // let the blocked read return
				<-got
				t.Fatalf("Drain(blocking eventfd at %#x) blocked", tc.add)
			}
		})
	}
}

// A peer that clears O_NONBLOCK between the writer's F_SETFL and its
// write, with the counter full, blocks the writer: Close returns at once
// and its read of the counter lets the writer end.
func TestCloseUnblocksBlockedWriter(t *testing.T) {
	peer := irqfdtest.Eventfd(t, 0)
	fd := dup(t, peer)
	irqfdtest.Add(t, peer, irqfdtest.CounterMax)
	writing := make(chan struct{})
	beforeWrite = func(int) {
		if _, err := unix.FcntlInt(uintptr(peer), unix.F_SETFL, 0); err != nil {
			panic(err)
		}
		close(writing)
	}
	defer func() { beforeWrite = nil }()
	tr, err := New(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.Signal()
	<-writing
	// The writer is in (or about to enter) a write that blocks; Close
	// must not wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), irqfdtest.Patience)
	defer cancel()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		tr.Close()
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close waited for a writer blocked on a full eventfd")
	}
	for {
		select {
		case <-tr.Done():
			return
		case <-ctx.Done():
			t.Fatal("the blocked writer did not end after Close and Unblock")
		case <-time.After(time.Millisecond):
			// Close may have read the counter before the write began to
			// wait (then the write did not block at all) or while the
			// write was about to: Unblock reads it again.
			tr.Unblock()
		}
	}
}

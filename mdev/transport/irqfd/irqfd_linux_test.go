package irqfd

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wait is how long a test waits for something that takes microseconds:
// generous, so a loaded machine never fails it.
const wait = time.Minute

// counterMax is the largest value an eventfd's counter holds: a write of
// 1 to a counter there blocks (or fails with EAGAIN).
const counterMax = 0xfffffffffffffffe

func eventfd(t *testing.T, flags int) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|flags)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func add(t *testing.T, fd int, v uint64) {
	t.Helper()
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	if _, err := unix.Write(fd, b[:]); err != nil {
		t.Fatalf("write %#x to eventfd: %v", v, err)
	}
}

// read waits until the eventfd's counter is nonzero and takes it.
func read(t *testing.T, fd int) uint64 {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, int(wait/time.Millisecond))
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

// fullPipe returns a pipe's write end, blocking, with the pipe full.
func fullPipe(t *testing.T) int {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]) })
	buf := make([]byte, 1<<16)
	for {
		if _, err := unix.Write(p[1], buf); errors.Is(err, unix.EAGAIN) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETFL, 0); err != nil {
		t.Fatal(err)
	}
	return p[1]
}

func TestCheck(t *testing.T) {
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "irqfd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	memfd, err := unix.MemfdCreate("irqfd-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		fd   int
		ok   bool
	}{
		{"eventfd", eventfd(t, 0), true},
		{"nonblocking eventfd", eventfd(t, unix.EFD_NONBLOCK), true},
		{"full blocking pipe", fullPipe(t), false},
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
		if tc.fd >= 0 && tc.fd != int(f.Fd()) && tc.fd != 1<<20 {
			unix.Close(tc.fd)
		}
	}
}

// New refuses a full blocking pipe, closing it.
func TestNewRefusesPipe(t *testing.T) {
	fd := fullPipe(t)
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
	fd := eventfd(t, 0)
	peer, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(peer)
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
	fd := eventfd(t, 0)
	peer, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(peer)
	add(t, peer, counterMax)
	tr, err := New(fd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(peer), unix.F_SETFL, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
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
	if got := read(t, peer); got != counterMax {
		t.Errorf("counter = %#x, want %#x (nothing added)", got, uint64(counterMax))
	}
}

// Close needs no Signal, and a closed Trigger's Signal does nothing.
func TestCloseIdle(t *testing.T) {
	tr, err := New(eventfd(t, unix.EFD_NONBLOCK), nil)
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
	fd := eventfd(t, 0)
	defer unix.Close(fd)
	for _, tc := range []struct {
		name string
		add  uint64
	}{
		{"empty", 0},
		{"one", 1},
		{"full", counterMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.add != 0 {
				add(t, fd, tc.add)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
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
				add(t, fd, 1) // let the blocked read return
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
	fd := eventfd(t, 0)
	peer, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(peer)
	add(t, peer, counterMax)
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
	ctx, cancel := context.WithTimeout(context.Background(), wait)
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

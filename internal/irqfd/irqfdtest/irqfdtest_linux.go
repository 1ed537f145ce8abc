package irqfdtest

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Patience is how long a hostile-fd test waits for something that takes
// microseconds before it calls it blocked: generous, so that a loaded
// machine never fails it.
const Patience = time.Minute

// CounterMax is the largest value an eventfd's counter holds: adding 1
// to it blocks a blocking eventfd (a non-blocking one fails with EAGAIN).
const CounterMax = 0xfffffffffffffffe

// FullPipe returns both ends of a pipe whose buffer is full; the write
// end is blocking, so a write to it blocks until r is read. Both ends
// are closed when the test ends.
func FullPipe(t testing.TB) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
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
	return p[0], p[1]
}

// Eventfd returns a new eventfd, its counter 0, made with EFD_CLOEXEC and
// flags (0: blocking; unix.EFD_NONBLOCK). The test owns it: it is closed
// when the test ends, so hand a dup to whatever takes ownership.
func Eventfd(t testing.TB, flags int) int {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// Add adds v to the counter of the eventfd fd (CounterMax fills it) and
// fails the test if the write does. Call it from the test's goroutine.
func Add(t testing.TB, fd int, v uint64) {
	t.Helper()
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	if _, err := unix.Write(fd, b[:]); err != nil {
		t.Fatalf("write %#x to eventfd: %v", v, err)
	}
}

// Returns runs f and waits up to Patience for it to return; if it has not
// by then, it calls unblock (which must let f go on, e.g. by reading a
// full counter), waits for f and fails the test: f blocked on a hostile
// fd. what names f in the failure.
func Returns(t testing.TB, what string, f, unblock func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	timer := time.NewTimer(Patience)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		unblock()
		<-done
		t.Fatalf("%s did not return within %v with the interrupt fd's counter full", what, Patience)
	}
}

package irqfd

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWatcherWaitsInThePoller is the mechanism test of the kick path's
// wait (issue 42): the Watcher of an eventfd (vfio-user's kick ioeventfd
// and unmask eventfd, mpqemu's resample eventfd) parks in the runtime's poller, never in a blocking
// system call, which would keep its P from the ring goroutine that its
// callback wakes until sysmon took it back; and each signal calls the
// callback once, however many came before it was read, until shutdown.
func TestWatcherWaitsInThePoller(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	calls := make(chan struct{}, 16)
	w, err := Watch(fd, func() { calls <- struct{}{} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	signal := func(n uint64) {
		var b [8]byte
		b[0] = byte(n)
		if _, err := unix.Write(fd, b[:]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		signal(uint64(i + 1))
		select {
		case <-calls:
		case <-time.After(time.Minute):
			t.Fatalf("signal %d: no call", i)
		}
		state := watcherState(t)
		if state != "IO wait" {
			t.Fatalf("after signal %d the watcher waits in state %q, want \"IO wait\" (the runtime poller)", i, state)
		}
	}
	w.Stop()
	signal(1)
	select {
	case <-calls:
		t.Fatal("a call after shutdown")
	default:
	}
}

// watcherState waits until the watcher's goroutine is parked and returns
// its state as a goroutine dump names it.
func watcherState(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		buf := make([]byte, 1<<20)
		dump := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(dump, "\n\n") {
			if !strings.Contains(g, "irqfd.(*Watcher).loop") {
				continue
			}
			head := g[:strings.Index(g, "\n")]
			state := head[strings.Index(head, "[")+1 : strings.Index(head, "]")]
			if i := strings.Index(state, ","); i >= 0 {
				state = state[:i]
			}
			if state != "running" && state != "runnable" {
				return state
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no parked watcher goroutine in:\n%s", dump)
		}
		runtime.Gosched()
	}
}

package vfiouser

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/irqfd"
)

// watcher is a goroutine that calls fn each time an eventfd it does not
// own is signalled (the kick ioeventfd, the INTx unmask eventfd), until
// shutdown.
//
// It waits in the Go runtime's poller on a duplicate of the fd, not in a
// blocking poll(2): a goroutine blocked in a system call keeps its P
// until sysmon takes it back (tens of microseconds to milliseconds on an
// idle process), so the ring's goroutine that fn wakes waited that long
// behind it, and every kick of a guest on vfio-user paid it (a 64-byte
// read through an in-process vgpud took 110-210 us on the kick's
// ioeventfd against 18 us on mpqemu's socket: bench/README.md, issue 42
// fifth round). The counter is read only with irqfd.Drain, which never
// blocks even if the peer sharing the open file cleared its O_NONBLOCK.
type watcher struct {
	f    *os.File // the duplicate, owned here
	done chan struct{}
}

// watch starts calling fn on each signal of fd, which must be an
// eventfd (irqfd.Prepare'd or made non-blocking by its creator); fd
// stays the caller's.
func watch(fd int, fn func()) (*watcher, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup eventfd: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("eventfd non-blocking: %w", err)
	}
	w := &watcher{f: os.NewFile(uintptr(dup), "eventfd"), done: make(chan struct{})}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, err
	}
	go w.loop(rc, fn)
	return w, nil
}

func (w *watcher) loop(rc interface {
	Read(func(fd uintptr) bool) error
}, fn func()) {
	defer close(w.done)
	for {
		var n uint64
		var derr error
		err := rc.Read(func(fd uintptr) bool {
			// Signals that came before the read are one event, which
			// every use here tolerates.
			n, derr = irqfd.Drain(int(fd))
			return derr != nil || n > 0 // else: wait until readable
		})
		if err != nil || derr != nil {
			return // closed by shutdown, or the fd is not an eventfd
		}
		fn()
	}
}

// shutdown stops the goroutine and waits for it; the watched fd may be
// closed afterwards. A nil watcher is a no-op.
func (w *watcher) shutdown() {
	if w == nil {
		return
	}
	w.f.Close() // wakes the poller's wait with an error
	<-w.done
}

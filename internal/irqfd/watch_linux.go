package irqfd

import (
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
)

// Watcher is a goroutine that calls a function each time an eventfd it
// does not own is signalled (vfio-user's kick ioeventfd and INTx unmask
// eventfd, mpqemu's resample eventfd), until Stop.
//
// It waits in the Go runtime's poller on a duplicate of the fd, not in a
// blocking poll(2): a goroutine blocked in a system call keeps its P
// until sysmon takes it back (tens of microseconds to milliseconds on an
// idle process), so the ring's goroutine that fn wakes waited that long
// behind it, and every kick of a guest on vfio-user paid it (a 64-byte
// read through an in-process vgpud took 110-210 us on the kick's
// ioeventfd against 18 us on mpqemu's socket: bench/README.md, issue 42
// fifth round). The counter is read only with Drain, which never blocks
// even if the peer sharing the open file cleared its O_NONBLOCK.
type Watcher struct {
	f    *os.File // the duplicate, owned here
	done chan struct{}
}

// Watch starts calling fn on each signal of fd, an eventfd (Prepare'd,
// or made non-blocking by its creator); fd stays the caller's, to close
// after Stop. Signals that come before a read are one call. A failed
// read (fd not an eventfd after all) ends the watch, logged on log.
func Watch(fd int, fn func(), log *slog.Logger) (*Watcher, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup eventfd: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("eventfd non-blocking: %w", err)
	}
	w := &Watcher{f: os.NewFile(uintptr(dup), "eventfd"), done: make(chan struct{})}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	go w.loop(rc, fn, log)
	return w, nil
}

func (w *Watcher) loop(rc interface {
	Read(func(fd uintptr) bool) error
}, fn func(), log *slog.Logger) {
	defer close(w.done)
	for {
		var n uint64
		var derr error
		err := rc.Read(func(fd uintptr) bool {
			// Signals that came before the read are one event, which
			// every use here tolerates.
			n, derr = Drain(int(fd))
			return derr != nil || n > 0 // else: wait until readable
		})
		if err != nil {
			return // closed by Stop
		}
		if derr != nil {
			log.Error("irqfd: watched eventfd", "err", derr)
			return
		}
		fn()
	}
}

// Stop stops the goroutine and waits for it; the watched fd may be
// closed afterwards. A nil Watcher is a no-op.
func (w *Watcher) Stop() {
	if w == nil {
		return
	}
	w.f.Close() // wakes the poller's wait with an error
	<-w.done
}

package vfiouser

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/irqfd"
)

// watcher is a goroutine that calls fn each time an eventfd it does not
// own is signalled (the kick ioeventfd, the INTx unmask eventfd), until
// shutdown.
type watcher struct {
	fd   int // the watched eventfd (owned by the caller)
	stop int // eventfd written to stop the goroutine (owned here)
	done chan struct{}
}

func watch(fd int, fn func()) (*watcher, error) {
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, err
	}
	w := &watcher{fd: fd, stop: stop, done: make(chan struct{})}
	go w.loop(fn)
	return w, nil
}

func (w *watcher) loop(fn func()) {
	defer close(w.done)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.stop), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			continue
		}
		// The counter is reset by the read (never a blocking one: a
		// client's unmask eventfd is shared with it); signals that came
		// before it are one event, which every use here tolerates.
		if _, err := irqfd.Drain(w.fd); err != nil {
			return
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
	var one [8]byte
	one[0] = 1
	unix.Write(w.stop, one[:]) // cannot fail short of a closed fd
	<-w.done
	unix.Close(w.stop)
}

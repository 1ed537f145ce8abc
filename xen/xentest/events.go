package xentest

import (
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/xen"
)

// Events is a fake event channel handle: local ports bound to the
// domain's Xen-side ports, a queue of pending ones and an eventfd that is
// readable while the queue is not empty. A port that fired is masked
// until Unmask; firing again meanwhile delivers it once more on Unmask,
// as the Linux evtchn driver does.
type Events struct {
	h  *Hypervisor
	fd int

	mu        sync.Mutex
	closed    bool
	next      xen.Port
	remote    map[xen.Port]xen.Port // local -> Xen-side, 0 once Xen closed its end
	queue     []xen.Port
	masked    map[xen.Port]bool
	again     map[xen.Port]bool
	restrictd bool
}

var _ xen.Events = (*Events)(nil)

// OpenEvents opens a handle.
func (h *Hypervisor) OpenEvents() (xen.Events, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("xentest: event channel eventfd: %w", err)
	}
	e := &Events{h: h, fd: fd, next: firstLocal, remote: map[xen.Port]xen.Port{}, masked: map[xen.Port]bool{}, again: map[xen.Port]bool{}}
	h.mu.Lock()
	h.calls["evtchn_open"]++
	h.handles = append(h.handles, e)
	h.mu.Unlock()
	return e, nil
}

// Fd is readable while a port is pending.
func (e *Events) Fd() int { return e.fd }

// BindInterdomain binds a new local port to the domain's port remote,
// which must be one of an ioreq server's and not bound yet.
func (e *Events) BindInterdomain(dom xen.DomID, remote xen.Port) (xen.Port, error) {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.opLocked("evtchn_bind_interdomain", dom); err != nil {
		return 0, err
	}
	known := false
	for _, s := range h.servers {
		known = known || remote == s.bufPort || slices.Contains(s.vcpuPort, remote)
	}
	if _, dup := h.bound[remote]; !known || dup {
		return 0, fmt.Errorf("xentest: bind port %d of domain %d: %w", remote, dom, unix.EINVAL)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, fmt.Errorf("xentest: bind on a closed handle: %w", unix.EBADF)
	}
	local := e.next
	e.next++
	e.remote[local] = remote
	h.bound[remote] = binding{h: e, local: local}
	return local, nil
}

// Unbind releases a local port.
func (e *Events) Unbind(local xen.Port) error {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["evtchn_unbind"]++
	e.mu.Lock()
	defer e.mu.Unlock()
	remote, ok := e.remote[local]
	if !ok {
		return fmt.Errorf("xentest: unbind port %d: %w", local, unix.EINVAL)
	}
	delete(e.remote, local)
	delete(e.masked, local)
	delete(e.again, local)
	if b, ok := h.bound[remote]; ok && b.h == e && b.local == local {
		delete(h.bound, remote)
	}
	return nil
}

// Notify signals the Xen-side port bound to local.
func (e *Events) Notify(local xen.Port) error {
	e.mu.Lock()
	remote, ok := e.remote[local]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("xentest: notify port %d: %w", local, unix.EINVAL)
	}
	if remote != 0 {
		e.h.notifyFromDM(remote)
	}
	return nil
}

// Pending pops the next pending port.
func (e *Events) Pending() (xen.Port, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, false, fmt.Errorf("xentest: pending on a closed handle: %w", unix.EBADF)
	}
	if len(e.queue) == 0 {
		var b [8]byte
		unix.Read(e.fd, b[:]) // the queue and the eventfd change together under mu
		return 0, false, nil
	}
	p := e.queue[0]
	e.queue = e.queue[1:]
	return p, true, nil
}

// Unmask re-enables a port; one that fired while masked pends again.
func (e *Events) Unmask(local xen.Port) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.remote[local]; !ok {
		return fmt.Errorf("xentest: unmask port %d: %w", local, unix.EINVAL)
	}
	e.masked[local] = false
	if e.again[local] {
		e.again[local] = false
		e.pushLocked(local)
	}
	return nil
}

// Restrict records the restriction.
func (e *Events) Restrict(dom xen.DomID) error {
	if dom != e.h.dom {
		return fmt.Errorf("xentest: restrict evtchn to %d: %w", dom, unix.EPERM)
	}
	e.mu.Lock()
	e.restrictd = true
	e.mu.Unlock()
	return nil
}

// Close closes the handle; its bindings go.
func (e *Events) Close() error {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls["evtchn_close"]++
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for local, remote := range e.remote {
		if b, ok := h.bound[remote]; ok && b.h == e && b.local == local {
			delete(h.bound, remote)
		}
	}
	for i, o := range h.handles {
		if o == e {
			h.handles = append(h.handles[:i], h.handles[i+1:]...)
			break
		}
	}
	return unix.Close(e.fd)
}

// deliver makes local pending (Xen signalled its remote end).
func (e *Events) deliver(local xen.Port) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if _, ok := e.remote[local]; !ok {
		return
	}
	if e.masked[local] {
		e.again[local] = true
		return
	}
	e.masked[local] = true
	e.pushLocked(local)
}

func (e *Events) pushLocked(local xen.Port) {
	e.queue = append(e.queue, local)
	e.kickLocked()
}

// kick wakes a poller without a port (the domain was destroyed).
func (e *Events) kick() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kickLocked()
}

func (e *Events) kickLocked() {
	if e.closed {
		return
	}
	var one [8]byte
	le.PutUint64(one[:], 1)
	unix.Write(e.fd, one[:])
}

// orphan records that Xen closed the remote end of local.
func (e *Events) orphan(local xen.Port) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.remote[local]; ok {
		e.remote[local] = 0
	}
}

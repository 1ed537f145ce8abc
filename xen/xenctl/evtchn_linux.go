package xenctl

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/xen"
)

// /dev/xen/evtchn ioctls (linux/include/uapi/xen/evtchn.h).
const (
	ioctlEvtchnBindInterdomain = 'E'<<8 | 1 | 8<<16 // { u32 remote_domain, remote_port }
	ioctlEvtchnUnbind          = 'E'<<8 | 3 | 4<<16 // { u32 port }
	ioctlEvtchnNotify          = 'E'<<8 | 4 | 4<<16 // { u32 port }
	ioctlEvtchnRestrictDomid   = 'E'<<8 | 6 | 2<<16 // { domid_t domid }
)

// Events is an event channel handle on /dev/xen/evtchn (libxenevtchn):
// reading the fd yields pending ports (each masked until written back),
// writing a port unmasks it.
type Events struct {
	fd int // raw: an os.File would park reads in the netpoller
}

var _ xen.Events = (*Events)(nil)

// OpenEvents opens /dev/xen/evtchn, non-blocking so Pending never waits.
func (h *Handle) OpenEvents() (xen.Events, error) {
	return OpenEvents()
}

// OpenEvents opens an event channel handle.
func OpenEvents() (*Events, error) {
	fd, err := unix.Open(EvtchnPath, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("xenctl: open %s: %w", EvtchnPath, err)
	}
	return &Events{fd: fd}, nil
}

// Fd is the handle's descriptor, readable while a port is pending. The
// handle belongs to one Server, which closes it only after its loop.
func (e *Events) Fd() int { return e.fd }

func (e *Events) ioctl(req uintptr, arg unsafe.Pointer) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(e.fd), req, uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// BindInterdomain is xenevtchn_bind_interdomain; it returns the local port.
func (e *Events) BindInterdomain(dom xen.DomID, remote xen.Port) (xen.Port, error) {
	arg := [2]uint32{uint32(dom), uint32(remote)}
	r, err := e.ioctl(ioctlEvtchnBindInterdomain, unsafe.Pointer(&arg))
	if err != nil {
		return 0, wrap(fmt.Sprintf("bind port %d of", remote), dom, err)
	}
	return xen.Port(r), nil
}

// Unbind is xenevtchn_unbind.
func (e *Events) Unbind(local xen.Port) error {
	arg := uint32(local)
	if _, err := e.ioctl(ioctlEvtchnUnbind, unsafe.Pointer(&arg)); err != nil {
		return fmt.Errorf("xenctl: unbind port %d: %w", local, err)
	}
	return nil
}

// Notify is xenevtchn_notify.
func (e *Events) Notify(local xen.Port) error {
	arg := uint32(local)
	if _, err := e.ioctl(ioctlEvtchnNotify, unsafe.Pointer(&arg)); err != nil {
		return fmt.Errorf("xenctl: notify port %d: %w", local, err)
	}
	return nil
}

// Pending is xenevtchn_pending on a non-blocking handle.
func (e *Events) Pending() (xen.Port, bool, error) {
	var b [4]byte
	n, err := unix.Read(e.fd, b[:])
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("xenctl: read pending port: %w", err)
	}
	if n != 4 {
		return 0, false, fmt.Errorf("xenctl: read pending port: %d bytes", n)
	}
	return xen.Port(le.Uint32(b[:])), true, nil
}

// Unmask is xenevtchn_unmask.
func (e *Events) Unmask(local xen.Port) error {
	var b [4]byte
	le.PutUint32(b[:], uint32(local))
	if _, err := unix.Write(e.fd, b[:]); err != nil {
		return fmt.Errorf("xenctl: unmask port %d: %w", local, err)
	}
	return nil
}

// Restrict is xenevtchn_restrict.
func (e *Events) Restrict(dom xen.DomID) error {
	d := uint16(dom)
	_, err := e.ioctl(ioctlEvtchnRestrictDomid, unsafe.Pointer(&d))
	return wrap("restrict event channels to", dom, err)
}

// Close closes the handle; the driver unbinds its ports.
func (e *Events) Close() error { return unix.Close(e.fd) }

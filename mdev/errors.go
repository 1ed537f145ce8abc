package mdev

import "errors"

// Errors callers tell apart with errors.Is.
var (
	ErrNotFound       = errors.New("no such instance")
	ErrExists         = errors.New("instance exists")
	ErrUnknownProfile = errors.New("unknown profile")
	ErrNoCapacity     = errors.New("no device has room for the instance")
	ErrManagerClosed  = errors.New("manager closed")
	// ErrNoDevice is returned for a physical device index out of range.
	ErrNoDevice = errors.New("no such device")
	// ErrAttached is returned when a VM tries to attach to an instance
	// that already serves one.
	ErrAttached = errors.New("instance already attached to a VM")
	// ErrReuseOff is returned for reuse settings of a manager whose reuse
	// is turned off.
	ErrReuseOff = errors.New("result reuse is off in this vgpud")
	// ErrNoDomain is returned for a reuse domain that does not exist.
	ErrNoDomain = errors.New("no such reuse domain")
	// ErrNotPausable is returned by an upgrade in place while a VM is
	// attached through a transport whose sessions cannot be handed over
	// (transport.Pausable).
	ErrNotPausable = errors.New("the attached VM's transport cannot be handed over")
)

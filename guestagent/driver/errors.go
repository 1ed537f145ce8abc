package driver

import (
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/abi"
)

// Sentinel errors.
var (
	// ErrNoDevice means no vGPU was found or the BAR does not identify as one.
	ErrNoDevice = errors.New("no vgpu device")
	// ErrVersion means the device's ABI major version is not the driver's.
	ErrVersion = errors.New("unsupported vgpu abi version")
	// ErrTimeout means the device did not complete a command or fence in
	// Options.Timeout.
	ErrTimeout = errors.New("vgpu device timed out")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("vgpu device closed")
	// ErrSuspended means a call waited Options.Timeout for a device
	// suspended by Suspend (a migration) to be resumed, and gave up.
	ErrSuspended = errors.New("vgpu device suspended")
	// ErrInvalid means the caller passed an argument the driver rejects
	// before submitting anything (it wraps abi.StatusInvalidArgument).
	ErrInvalid = abi.Errorf(abi.StatusInvalidArgument, "invalid driver argument")
	// ErrProtocol means the device wrote a completion record that does not
	// match the command it completes (wrong tag or opcode).
	ErrProtocol = abi.Errorf(abi.StatusInternal, "completion does not match command")
	// ErrDeviceLost means the instance's device context is gone (its
	// worker process in vgpud ended): every buffer and program is lost,
	// and the device must be opened (reset) again.
	ErrDeviceLost = abi.Errorf(abi.StatusDeviceLost, "vgpu device context lost")
	// ErrNoINTx means the device does not announce abi.FeatureINTx (an ABI 1.0
	// device): it never interrupts, so it cannot be slept on.
	ErrNoINTx = errors.New("vgpu device has no interrupt (FeatureINTx)")
	// ErrUnsupported means the device's ABI minor version is too old for
	// the command asked for (e.g. buffer-copy on a device before ABI 1.4);
	// nothing was submitted. It carries abi.StatusInvalidOpcode, what such
	// a device would answer.
	ErrUnsupported = abi.Errorf(abi.StatusInvalidOpcode, "command not in the device's abi version")
	// ErrNoPFN means /proc/self/pagemap did not give a page frame number: the
	// process is not root (the kernel hides PFNs) or the page is not present.
	ErrNoPFN = errors.New("pagemap gives no page frame number (not root, or page not present)")
)

// CommandError reports a command the device completed with a non-OK status.
type CommandError struct {
	Index  uint64     // ring index of the command (free-running)
	Opcode abi.Opcode // opcode of the command
	Tag    uint64     // tag of the command
	Status abi.Status // status of the completion record
	Detail uint64     // detail word of the completion record
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("vgpu command %d (%v, tag %#x): %v (detail %d)", e.Index, e.Opcode, e.Tag, e.Status, e.Detail)
}

// Unwrap returns an *abi.StatusError of the command's status, so that
// abi.StatusOf(err) recovers it and errors.Is(err, abi.StatusX.Error()) holds.
func (e *CommandError) Unwrap() error { return e.Status.Error() }

// Is makes a command the device completed StatusDeviceLost (a device
// context's loss, docs/ABI.md "Device contexts") an ErrDeviceLost.
func (e *CommandError) Is(target error) bool {
	return target == ErrDeviceLost && e.Status == abi.StatusDeviceLost
}

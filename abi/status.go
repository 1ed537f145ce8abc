package abi

import (
	"errors"
	"fmt"
)

// Status is the 32-bit result code the device reports in a completion
// record and in RegError (docs/ABI.md "Status codes").
type Status uint32

// Status codes. Values are part of the ABI: never renumber.
const (
	StatusOK              Status = 0
	StatusInvalidOpcode   Status = 1  // unknown opcode
	StatusInvalidArgument Status = 2  // a field is out of range or reserved bits are set
	StatusBadAddress      Status = 3  // a guest-physical range is outside guest RAM or misaligned
	StatusNotFound        Status = 4  // handle or kernel name unknown to this instance
	StatusExists          Status = 5  // handle already in use
	StatusQuotaExceeded   Status = 6  // over the profile's device memory
	StatusBuildFailed     Status = 7  // program did not compile; log written if asked
	StatusLaunchFailed    Status = 8  // the device rejected the launch
	StatusOutOfResources  Status = 9  // the physical device ran out of memory or queues
	StatusDeviceError     Status = 10 // the physical device failed
	StatusRingOverflow    Status = 11 // doorbell beyond the ring (RegError only)
	StatusRingConfig      Status = 12 // bad ring configuration (RegError only)
	StatusBusy            Status = 13 // operation needs an idle ring (RegError only)
	StatusBadAccess       Status = 14 // register access of wrong width or alignment (RegError only)
	StatusInternal        Status = 15 // a vgpud bug; reported, never hidden
	StatusDeviceLost      Status = 16 // the instance's device context is gone; reset to continue (ABI 1.2)
)

var statusNames = [...]string{
	StatusOK:              "ok",
	StatusInvalidOpcode:   "invalid opcode",
	StatusInvalidArgument: "invalid argument",
	StatusBadAddress:      "bad address",
	StatusNotFound:        "not found",
	StatusExists:          "exists",
	StatusQuotaExceeded:   "quota exceeded",
	StatusBuildFailed:     "build failed",
	StatusLaunchFailed:    "launch failed",
	StatusOutOfResources:  "out of resources",
	StatusDeviceError:     "device error",
	StatusRingOverflow:    "ring overflow",
	StatusRingConfig:      "ring misconfigured",
	StatusBusy:            "busy",
	StatusBadAccess:       "bad register access",
	StatusInternal:        "internal error",
	StatusDeviceLost:      "device lost",
}

// NumStatus is one more than the largest defined status.
const NumStatus = len(statusNames)

// String is the status's description, or status(N) for an undefined one.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint32(s))
}

// Error returns an error carrying s, or nil for StatusOK.
func (s Status) Error() error {
	if s == StatusOK {
		return nil
	}
	return &StatusError{Status: s}
}

// StatusError is an error that maps to a device status. Wrap it with
// fmt.Errorf("...: %w") to add context; StatusOf recovers the status.
type StatusError struct {
	Status Status
	Msg    string
}

// Error is the status's description, then the message if there is one.
func (e *StatusError) Error() string {
	if e.Msg == "" {
		return e.Status.String()
	}
	return e.Status.String() + ": " + e.Msg
}

// Is makes errors.Is(err, abi.StatusX.Error()) hold for any error of that
// status; a target with a message (a sentinel) matches only itself.
func (e *StatusError) Is(target error) bool {
	t, ok := target.(*StatusError)
	return ok && t.Status == e.Status && (t.Msg == "" || t.Msg == e.Msg)
}

// Errorf returns a StatusError with a formatted message.
func Errorf(s Status, format string, args ...any) error {
	return &StatusError{Status: s, Msg: fmt.Sprintf(format, args...)}
}

// StatusOf returns the status an error carries: StatusOK for nil, the
// status of the first StatusError in the chain, else StatusInternal. Errors
// of other packages (the physical device's) are mapped to statuses by the
// aggregator, at its one boundary to the guest.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return StatusInternal
}

// ErrMalformed is wrapped by every decoding error of this package.
var ErrMalformed = Errorf(StatusInvalidArgument, "malformed")

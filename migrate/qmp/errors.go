package qmp

import (
	"errors"
)

var (
	// ErrClosed is wrapped by every error of a call made on, or pending
	// when, a Monitor closed: by Close, by QEMU hanging up, or after a
	// protocol error.
	ErrClosed = errors.New("monitor closed")
	// ErrProtocol is wrapped by errors about bytes that are not QMP: JSON
	// that does not parse, a message over MaxMessageSize, a reply without an
	// id, a greeting that is not one.
	ErrProtocol = errors.New("protocol error")
	// ErrCommandNotFound matches (errors.Is) a QMP error of class
	// CommandNotFound: this QEMU has no such command.
	ErrCommandNotFound = errors.New("command not found")
	// ErrDeviceNotFound matches (errors.Is) a QMP error of class
	// DeviceNotFound.
	ErrDeviceNotFound = errors.New("device not found")
	// ErrMigrationFailed is wrapped by WaitMigration's error when the
	// migration ended in status failed or cancelled.
	ErrMigrationFailed = errors.New("migration failed")
	// ErrMigrationCancelled is wrapped, beside ErrMigrationFailed, by
	// WaitMigration's error when the migration was cancelled.
	ErrMigrationCancelled = errors.New("cancelled")
	// ErrMigrationEnded is wrapped by WaitMigrationUntil's error when the
	// migration completed before the state it waited for.
	ErrMigrationEnded = errors.New("migration completed before the state waited for")
)

// QMP error classes QEMU 7.2 sends (QapiErrorClass).
const (
	ClassGenericError    = "GenericError"
	ClassCommandNotFound = "CommandNotFound"
	ClassDeviceNotActive = "DeviceNotActive"
	ClassDeviceNotFound  = "DeviceNotFound"
	ClassKVMMissingCap   = "KVMMissingCap"
)

// Error is a QMP error reply: {"error": {"class": ..., "desc": ...}}.
// Commands return it wrapped with the command's name; use errors.As.
type Error struct {
	// Class is the QMP error class, one of the Class* constants.
	Class string `json:"class"`
	// Desc is QEMU's human-readable description.
	Desc string `json:"desc"`
}

func (e *Error) Error() string {
	return "qemu " + e.Class + ": " + e.Desc
}

// Is reports whether target is the sentinel for e's class.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrCommandNotFound:
		return e.Class == ClassCommandNotFound
	case ErrDeviceNotFound:
		return e.Class == ClassDeviceNotFound
	}
	return false
}

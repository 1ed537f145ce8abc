package qemuvm

import "errors"

// Errors callers tell apart with errors.Is.
var (
	// ErrConfig reports an unusable Config.
	ErrConfig = errors.New("bad vm config")
	// ErrExited reports that QEMU exited before the awaited console line.
	ErrExited = errors.New("qemu exited")
)

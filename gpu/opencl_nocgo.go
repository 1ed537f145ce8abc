//go:build !cgo

package gpu

import "fmt"

// Devices reports ErrNoPlatform: OpenCL is reached through cgo, and this
// binary was built without it.
func Devices() ([]Info, error) {
	return nil, fmt.Errorf("%w: vgpud was built with CGO_ENABLED=0; rebuild with cgo and an OpenCL ICD", ErrNoPlatform)
}

// Open reports ErrNoPlatform, as Devices does.
func Open(selector string) (Device, error) {
	_, err := Devices()
	return nil, err
}

// OpenPlain reports ErrNoPlatform, as Devices does.
func OpenPlain(selector string) (Device, error) { return Open(selector) }

// GuardRuntimeThreads does nothing: without cgo no OpenCL runtime runs in
// this process.
func GuardRuntimeThreads(uint64) error { return nil }

//go:build cgo

package gpu

// The OpenCL implementation (cgo) is in files by object: opencl_enumerate.go
// (platforms, devices and their properties), opencl_device.go (Device),
// opencl_queue.go (Queue), opencl_buffer.go (Buffer), opencl_program.go
// (Program, building), opencl_kernel.go (Kernel, argument and kernel
// info) and opencl_launch.go (Launch, Enqueue, Sync). Each cgo file
// includes opencl_cgo.h and declares in its own preamble the static C
// helpers (vg_*) it calls; this one links the ICD loader and holds the Go
// helpers the others share. opencl_nocgo.go stands in for Devices and
// Open without cgo.

/*
#cgo LDFLAGS: -lOpenCL
#include "opencl_cgo.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"strings"
	"unsafe"
)

// clErr returns nil for CL_SUCCESS, else a *CLError naming op and code.
func clErr(op string, code C.cl_int) error {
	if code == C.CL_SUCCESS {
		return nil
	}
	return &CLError{Op: op, Code: int32(code)}
}

// cString returns buf up to its first NUL.
func cString(buf []byte) string {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}

// maxInfoString bounds a string an info query returns: names and type
// names, which a compiler keeps short.
const maxInfoString = 64 << 10

// infoString runs an OpenCL string query (size first, then the bytes).
func infoString(get func(n C.size_t, v unsafe.Pointer, ret *C.size_t) C.cl_int) (string, error) {
	var n C.size_t
	if err := clErr("info query", get(0, nil, &n)); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	if n > maxInfoString {
		return "", fmt.Errorf("a string of %d bytes: %w", n, ErrDevice)
	}
	buf := make([]byte, n)
	if err := clErr("info query", get(n, unsafe.Pointer(&buf[0]), nil)); err != nil {
		return "", err
	}
	return strings.TrimSpace(cString(buf)), nil
}

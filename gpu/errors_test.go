package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/abi"
)

func TestEveryCodeHasNameAndStatus(t *testing.T) {
	// Every code OpenCL 1.2 to 2.2 defines, and the ICD loader's.
	var codes []int32
	for c := int32(0); c >= -19; c-- {
		codes = append(codes, c)
	}
	for c := int32(-30); c >= -72; c-- {
		codes = append(codes, c)
	}
	codes = append(codes, clPlatformNotFoundKHR)
	for _, c := range codes {
		name := CodeName(c)
		if !strings.HasPrefix(name, "CL_") || strings.HasPrefix(name, "CL_ERROR(") {
			t.Errorf("CodeName(%d) = %q, want a CL_ name", c, name)
		}
		st := codeStatus(c)
		if (c == 0) != (st == abi.StatusOK) || int(st) >= abi.NumStatus {
			t.Errorf("codeStatus(%d) = %v, want a defined status (ok only for 0)", c, st)
		}
	}
	if len(clCodes) != len(codes) {
		t.Errorf("len(clCodes) = %d, want %d", len(clCodes), len(codes))
	}
	if got := CodeName(-9999); got != "CL_ERROR(-9999)" {
		t.Errorf("CodeName(-9999) = %q, want CL_ERROR(-9999)", got)
	}
	if got := codeStatus(-9999); got != abi.StatusDeviceError {
		t.Errorf("codeStatus(-9999) = %v, want %v", got, abi.StatusDeviceError)
	}
}

func TestCLError(t *testing.T) {
	for _, tc := range []struct {
		code   int32
		status abi.Status
		is     error
	}{
		{-11, abi.StatusBuildFailed, ErrBuildFailed},
		{-43, abi.StatusBuildFailed, ErrBuildFailed},
		{-46, abi.StatusNotFound, ErrNoKernel},
		{-4, abi.StatusOutOfResources, ErrOutOfMemory},
		{-5, abi.StatusOutOfResources, ErrOutOfMemory},
		{-6, abi.StatusOutOfResources, ErrOutOfMemory},
		{-54, abi.StatusLaunchFailed, ErrInvalidLaunch},
		{-53, abi.StatusLaunchFailed, ErrInvalidLaunch},
		{-52, abi.StatusLaunchFailed, ErrInvalidLaunch},
		{-51, abi.StatusLaunchFailed, ErrInvalidLaunch},
		{-30, abi.StatusInvalidArgument, nil},
		{-61, abi.StatusInvalidArgument, nil},
		{-1001, abi.StatusDeviceError, ErrNoPlatform},
		{-1, abi.StatusDeviceError, ErrNoDevice},
		{-36, abi.StatusDeviceError, nil},
	} {
		err := fmt.Errorf("context: %w", &CLError{Op: "clOp", Code: tc.code})
		if got := abi.StatusOf(err); got != tc.status {
			t.Errorf("StatusOf(code %d) = %v, want %v", tc.code, got, tc.status)
		}
		for _, s := range []error{ErrBuildFailed, ErrNoKernel, ErrOutOfMemory, ErrInvalidLaunch, ErrNoPlatform, ErrNoDevice} {
			if got, want := errors.Is(err, s), s == tc.is; got != want {
				t.Errorf("errors.Is(code %d, %v) = %v, want %v", tc.code, s, got, want)
			}
		}
	}
	e := &CLError{Op: "clEnqueueNDRangeKernel", Code: -54}
	if got, want := e.Error(), "clEnqueueNDRangeKernel: CL_INVALID_WORK_GROUP_SIZE (-54)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestStatusError(t *testing.T) {
	err := fmt.Errorf("outer: %w", errorf(abi.StatusLaunchFailed, "launch k: %w", ErrInvalidLaunch))
	if !errors.Is(err, ErrInvalidLaunch) || abi.StatusOf(err) != abi.StatusLaunchFailed {
		t.Errorf("errorf(...) = %v (status %v), want ErrInvalidLaunch with launch failed", err, abi.StatusOf(err))
	}
}

package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
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
	codes = append(codes, clPlatformNotFoundKHR, -9999)
	for _, c := range codes {
		name := CodeName(c)
		if c != -9999 && !strings.HasPrefix(name, "CL_") || strings.HasPrefix(name, "CL_ERROR(") {
			t.Errorf("CodeName(%d) = %q, want a CL_ name", c, name)
		}
		if k := codeKind(c); (c == 0) != (k == kindNone) || k > kindLost {
			t.Errorf("codeKind(%d) = %v, want a defined kind (none only for 0)", c, k)
		}
	}
	if len(clCodes) != len(codes) {
		t.Errorf("len(clCodes) = %d, want %d", len(clCodes), len(codes))
	}
	if got := CodeName(-9998); got != "CL_ERROR(-9998)" {
		t.Errorf("CodeName(-9998) = %q, want CL_ERROR(-9998)", got)
	}
	if got := codeKind(-9998); got != kindDevice {
		t.Errorf("codeKind(-9998) = %v, want a device failure", got)
	}
}

func TestCLError(t *testing.T) {
	for _, tc := range []struct {
		code int32
		is   []error // the sentinels it matches; it matches no other
	}{
		{-11, []error{ErrBuildFailed}},
		{-43, []error{ErrBuildFailed}},
		{-46, []error{ErrNoKernel}},
		{-4, []error{ErrOutOfMemory}},
		{-5, []error{ErrOutOfMemory}},
		{-6, []error{ErrOutOfMemory}},
		{-54, []error{ErrInvalidLaunch}},
		{-53, []error{ErrInvalidLaunch}},
		{-52, []error{ErrInvalidLaunch}},
		{-51, []error{ErrInvalidLaunch}},
		{-30, []error{ErrInvalidArgument}},
		{-61, []error{ErrInvalidArgument}},
		{-1001, []error{ErrNoPlatform, ErrDevice}},
		{-1, []error{ErrNoDevice, ErrDevice}},
		{-36, []error{ErrDevice}},
		{-9998, []error{ErrDevice}},
		// NVIDIA's illegal memory access poisons the context.
		{-9999, []error{ErrDevice, ErrContextLost}},
	} {
		err := fmt.Errorf("context: %w", &CLError{Op: "clOp", Code: tc.code})
		for _, s := range []error{ErrBuildFailed, ErrNoKernel, ErrOutOfMemory, ErrInvalidLaunch, ErrNoPlatform, ErrNoDevice, ErrInvalidArgument, ErrDevice, ErrContextLost} {
			want := false
			for _, w := range tc.is {
				want = want || w == s
			}
			if got := errors.Is(err, s); got != want {
				t.Errorf("errors.Is(code %d, %v) = %v, want %v", tc.code, s, got, want)
			}
		}
	}
	e := &CLError{Op: "clEnqueueNDRangeKernel", Code: -54}
	if got, want := e.Error(), "clEnqueueNDRangeKernel: CL_INVALID_WORK_GROUP_SIZE (-54)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	// The sentinels that stand for a broader kind wrap it.
	if !errors.Is(ErrOutOfRange, ErrInvalidArgument) || !errors.Is(ErrSourceRejected, ErrBuildFailed) {
		t.Errorf("ErrOutOfRange / ErrSourceRejected do not wrap their kinds")
	}
}

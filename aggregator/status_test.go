package aggregator

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
)

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want abi.Status
	}{
		{nil, abi.StatusOK},
		{abi.Errorf(abi.StatusQuotaExceeded, "quota"), abi.StatusQuotaExceeded},
		{fmt.Errorf("read: %w", abi.Errorf(abi.StatusBadAddress, "x")), abi.StatusBadAddress},
		{fmt.Errorf("build: %w", &gpu.CLError{Op: "clBuildProgram", Code: -11}), abi.StatusBuildFailed},
		{fmt.Errorf("build: %w", gpu.ErrSourceRejected), abi.StatusBuildFailed},
		{&gpu.CLError{Op: "clCreateKernel", Code: -46}, abi.StatusNotFound},
		{&gpu.CLError{Op: "clCreateBuffer", Code: -4}, abi.StatusOutOfResources},
		{&gpu.CLError{Op: "clEnqueueNDRangeKernel", Code: -54}, abi.StatusLaunchFailed},
		{&gpu.CLError{Op: "clCreateBuffer", Code: -61}, abi.StatusInvalidArgument},
		{fmt.Errorf("write: %w", gpu.ErrOutOfRange), abi.StatusInvalidArgument},
		{&gpu.CLError{Op: "kernel execution", Code: -9999}, abi.StatusDeviceError},
		{fmt.Errorf("launch: %w", gpu.ErrForeign), abi.StatusInternal},
		{fmt.Errorf("turn: %w", context.Canceled), abi.StatusDeviceError},
		{errors.New("anything else"), abi.StatusInternal},
	}
	for _, tt := range tests {
		if got := statusOf(tt.err); got != tt.want {
			t.Errorf("statusOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

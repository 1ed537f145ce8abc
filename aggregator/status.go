package aggregator

import (
	"context"
	"errors"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
)

// statusOf is the one place where an error becomes the status a guest
// reads (in a completion record or the error register): an error the
// aggregator, the ABI decoders or guest memory made carries its status
// (abi.StatusError); the physical device's sentinels (package gpu, which
// knows nothing of guests) are mapped here; anything else is an internal
// error.
func statusOf(err error) abi.Status {
	if err == nil {
		return abi.StatusOK
	}
	var se *abi.StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	for _, m := range deviceStatuses {
		if errors.Is(err, m.err) {
			return m.status
		}
	}
	if errors.Is(err, context.Canceled) {
		return abi.StatusDeviceError // the instance is closing
	}
	return abi.StatusInternal
}

// deviceStatuses maps package gpu's sentinels to statuses, the more
// specific first (ErrSourceRejected is an ErrBuildFailed, ErrOutOfRange an
// ErrInvalidArgument).
var deviceStatuses = []struct {
	err    error
	status abi.Status
}{
	{gpu.ErrBuildFailed, abi.StatusBuildFailed},
	{gpu.ErrNoKernel, abi.StatusNotFound},
	{gpu.ErrOutOfMemory, abi.StatusOutOfResources},
	{gpu.ErrInvalidLaunch, abi.StatusLaunchFailed},
	{gpu.ErrInvalidArgument, abi.StatusInvalidArgument},
	{gpu.ErrDevice, abi.StatusDeviceError},
	{gpu.ErrNoDevice, abi.StatusDeviceError},
	{gpu.ErrNoPlatform, abi.StatusDeviceError},
	{gpu.ErrClosed, abi.StatusInternal},
	{gpu.ErrForeign, abi.StatusInternal},
}

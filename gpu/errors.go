package gpu

import (
	"errors"
	"fmt"

	"github.com/vgpud/vgpud/abi"
)

// More sentinels for failures found in Go before OpenCL is called.
var (
	// ErrClosed is returned for use of a closed Device or Queue or a
	// released Buffer, Program or Kernel.
	ErrClosed = errors.New("use of closed or released object")
	// ErrForeign is returned when a Buffer, Program or Kernel is used on
	// a Queue that did not create it.
	ErrForeign = errors.New("object belongs to another queue")
	// ErrOutOfRange is returned when a Write or Read falls outside the
	// buffer.
	ErrOutOfRange = errors.New("range outside buffer")
	// ErrSourceRejected is returned by Build for source or options that
	// could reach host files (#include, -I and the like).
	ErrSourceRejected = errors.New("program source or options rejected")
)

// OpenCL error codes this package refers to by name.
const (
	clSuccess                   = 0
	clDeviceNotFound            = -1
	clMemObjectAllocationFail   = -4
	clOutOfResources            = -5
	clOutOfHostMemory           = -6
	clBuildProgramFailure       = -11
	clKernelArgInfoNotAvailable = -19
	clInvalidBuildOptions       = -43
	clInvalidKernelName         = -46
	clPlatformNotFoundKHR       = -1001
)

// CLError is a failed OpenCL call: Op is the C function, Code its cl_int
// result. It maps to a guest-visible status (Status) and matches the
// package's sentinel errors with errors.Is (e.g. CL_BUILD_PROGRAM_FAILURE
// is ErrBuildFailed).
type CLError struct {
	Op   string
	Code int32
}

func (e *CLError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, CodeName(e.Code), e.Code)
}

// Status is the guest-visible status for the failure.
func (e *CLError) Status() abi.Status { return codeStatus(e.Code) }

// Is reports whether target is the sentinel this code stands for.
func (e *CLError) Is(target error) bool {
	switch target {
	case ErrBuildFailed:
		return e.Code == clBuildProgramFailure || e.Code == clInvalidBuildOptions ||
			e.Code == -15 || e.Code == -17 // compile/link program failure
	case ErrNoKernel:
		return e.Code == clInvalidKernelName
	case ErrOutOfMemory:
		return codeStatus(e.Code) == abi.StatusOutOfResources
	case ErrInvalidLaunch:
		return codeStatus(e.Code) == abi.StatusLaunchFailed
	case ErrNoPlatform:
		return e.Code == clPlatformNotFoundKHR
	case ErrNoDevice:
		return e.Code == clDeviceNotFound
	}
	return false
}

// clCodes names every OpenCL 1.2 error code (plus the 2.x ones a newer ICD
// may return and the ICD loader's "no platform") and gives its status.
var clCodes = map[int32]struct {
	name   string
	status abi.Status
}{
	0:     {"CL_SUCCESS", abi.StatusOK},
	-1:    {"CL_DEVICE_NOT_FOUND", abi.StatusDeviceError},
	-2:    {"CL_DEVICE_NOT_AVAILABLE", abi.StatusDeviceError},
	-3:    {"CL_COMPILER_NOT_AVAILABLE", abi.StatusDeviceError},
	-4:    {"CL_MEM_OBJECT_ALLOCATION_FAILURE", abi.StatusOutOfResources},
	-5:    {"CL_OUT_OF_RESOURCES", abi.StatusOutOfResources},
	-6:    {"CL_OUT_OF_HOST_MEMORY", abi.StatusOutOfResources},
	-7:    {"CL_PROFILING_INFO_NOT_AVAILABLE", abi.StatusDeviceError},
	-8:    {"CL_MEM_COPY_OVERLAP", abi.StatusInvalidArgument},
	-9:    {"CL_IMAGE_FORMAT_MISMATCH", abi.StatusInvalidArgument},
	-10:   {"CL_IMAGE_FORMAT_NOT_SUPPORTED", abi.StatusInvalidArgument},
	-11:   {"CL_BUILD_PROGRAM_FAILURE", abi.StatusBuildFailed},
	-12:   {"CL_MAP_FAILURE", abi.StatusDeviceError},
	-13:   {"CL_MISALIGNED_SUB_BUFFER_OFFSET", abi.StatusInvalidArgument},
	-14:   {"CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", abi.StatusDeviceError},
	-15:   {"CL_COMPILE_PROGRAM_FAILURE", abi.StatusBuildFailed},
	-16:   {"CL_LINKER_NOT_AVAILABLE", abi.StatusDeviceError},
	-17:   {"CL_LINK_PROGRAM_FAILURE", abi.StatusBuildFailed},
	-18:   {"CL_DEVICE_PARTITION_FAILED", abi.StatusDeviceError},
	-19:   {"CL_KERNEL_ARG_INFO_NOT_AVAILABLE", abi.StatusDeviceError},
	-30:   {"CL_INVALID_VALUE", abi.StatusInvalidArgument},
	-31:   {"CL_INVALID_DEVICE_TYPE", abi.StatusDeviceError},
	-32:   {"CL_INVALID_PLATFORM", abi.StatusDeviceError},
	-33:   {"CL_INVALID_DEVICE", abi.StatusDeviceError},
	-34:   {"CL_INVALID_CONTEXT", abi.StatusDeviceError},
	-35:   {"CL_INVALID_QUEUE_PROPERTIES", abi.StatusDeviceError},
	-36:   {"CL_INVALID_COMMAND_QUEUE", abi.StatusDeviceError},
	-37:   {"CL_INVALID_HOST_PTR", abi.StatusInvalidArgument},
	-38:   {"CL_INVALID_MEM_OBJECT", abi.StatusLaunchFailed},
	-39:   {"CL_INVALID_IMAGE_FORMAT_DESCRIPTOR", abi.StatusInvalidArgument},
	-40:   {"CL_INVALID_IMAGE_SIZE", abi.StatusInvalidArgument},
	-41:   {"CL_INVALID_SAMPLER", abi.StatusLaunchFailed},
	-42:   {"CL_INVALID_BINARY", abi.StatusBuildFailed},
	-43:   {"CL_INVALID_BUILD_OPTIONS", abi.StatusBuildFailed},
	-44:   {"CL_INVALID_PROGRAM", abi.StatusDeviceError},
	-45:   {"CL_INVALID_PROGRAM_EXECUTABLE", abi.StatusDeviceError},
	-46:   {"CL_INVALID_KERNEL_NAME", abi.StatusNotFound},
	-47:   {"CL_INVALID_KERNEL_DEFINITION", abi.StatusBuildFailed},
	-48:   {"CL_INVALID_KERNEL", abi.StatusLaunchFailed},
	-49:   {"CL_INVALID_ARG_INDEX", abi.StatusLaunchFailed},
	-50:   {"CL_INVALID_ARG_VALUE", abi.StatusLaunchFailed},
	-51:   {"CL_INVALID_ARG_SIZE", abi.StatusLaunchFailed},
	-52:   {"CL_INVALID_KERNEL_ARGS", abi.StatusLaunchFailed},
	-53:   {"CL_INVALID_WORK_DIMENSION", abi.StatusLaunchFailed},
	-54:   {"CL_INVALID_WORK_GROUP_SIZE", abi.StatusLaunchFailed},
	-55:   {"CL_INVALID_WORK_ITEM_SIZE", abi.StatusLaunchFailed},
	-56:   {"CL_INVALID_GLOBAL_OFFSET", abi.StatusLaunchFailed},
	-57:   {"CL_INVALID_EVENT_WAIT_LIST", abi.StatusDeviceError},
	-58:   {"CL_INVALID_EVENT", abi.StatusDeviceError},
	-59:   {"CL_INVALID_OPERATION", abi.StatusDeviceError},
	-60:   {"CL_INVALID_GL_OBJECT", abi.StatusInvalidArgument},
	-61:   {"CL_INVALID_BUFFER_SIZE", abi.StatusInvalidArgument},
	-62:   {"CL_INVALID_MIP_LEVEL", abi.StatusInvalidArgument},
	-63:   {"CL_INVALID_GLOBAL_WORK_SIZE", abi.StatusLaunchFailed},
	-64:   {"CL_INVALID_PROPERTY", abi.StatusInvalidArgument},
	-65:   {"CL_INVALID_IMAGE_DESCRIPTOR", abi.StatusInvalidArgument},
	-66:   {"CL_INVALID_COMPILER_OPTIONS", abi.StatusBuildFailed},
	-67:   {"CL_INVALID_LINKER_OPTIONS", abi.StatusBuildFailed},
	-68:   {"CL_INVALID_DEVICE_PARTITION_COUNT", abi.StatusDeviceError},
	-69:   {"CL_INVALID_PIPE_SIZE", abi.StatusInvalidArgument},
	-70:   {"CL_INVALID_DEVICE_QUEUE", abi.StatusDeviceError},
	-71:   {"CL_INVALID_SPEC_ID", abi.StatusInvalidArgument},
	-72:   {"CL_MAX_SIZE_RESTRICTION_EXCEEDED", abi.StatusOutOfResources},
	-1001: {"CL_PLATFORM_NOT_FOUND_KHR", abi.StatusDeviceError},
}

// CodeName returns the OpenCL name of an error code, e.g.
// "CL_INVALID_WORK_GROUP_SIZE", or "CL_ERROR(n)" for an unknown one.
func CodeName(code int32) string {
	if c, ok := clCodes[code]; ok {
		return c.name
	}
	return fmt.Sprintf("CL_ERROR(%d)", code)
}

// codeStatus maps an OpenCL error code to a guest-visible status; unknown
// codes (vendor extensions, crashed kernels) are device errors.
func codeStatus(code int32) abi.Status {
	if c, ok := clCodes[code]; ok {
		return c.status
	}
	return abi.StatusDeviceError
}

// statusError is a failure found in Go before OpenCL was called. It keeps
// the wrapped sentinel for errors.Is and carries a guest-visible status.
type statusError struct {
	status abi.Status
	err    error
}

func (e *statusError) Error() string      { return e.err.Error() }
func (e *statusError) Unwrap() error      { return e.err }
func (e *statusError) Status() abi.Status { return e.status }

// errorf formats an error (use %w to wrap a sentinel) with status s.
func errorf(s abi.Status, format string, args ...any) error {
	return &statusError{status: s, err: fmt.Errorf(format, args...)}
}

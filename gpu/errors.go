package gpu

import (
	"errors"
	"fmt"
)

// Sentinel errors callers tell apart with errors.Is. Every error this
// package returns wraps one of them (a *CLError matches the one its code's
// kind stands for), so a caller can map any failure to its own terms (the
// aggregator maps them to guest-visible statuses) without this package
// knowing of guests.
var (
	ErrNoPlatform = errors.New("no OpenCL platform installed")
	ErrNoDevice   = errors.New("no such OpenCL device")
	// ErrBuildFailed: the program did not compile (or its source was
	// refused: ErrSourceRejected).
	ErrBuildFailed = errors.New("program build failed")
	// ErrNoKernel: the program has no kernel of that name.
	ErrNoKernel = errors.New("no such kernel")
	// ErrOutOfMemory: device or host resources ran out.
	ErrOutOfMemory = errors.New("device out of memory")
	// ErrInvalidLaunch: the launch's geometry or arguments do not fit the
	// kernel.
	ErrInvalidLaunch = errors.New("invalid launch")
	// ErrInvalidArgument: a size, range or value the caller gave is out
	// of bounds (ErrOutOfRange is one).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrDevice: the device failed in a way the caller could not have
	// prevented (a crashed kernel, an unexpected OpenCL error).
	ErrDevice = errors.New("device error")
	// ErrContextLost: the device context is unusable from now on (a
	// kernel's illegal memory access on NVIDIA's OpenCL, code -9999,
	// fails every later call of the context). It is an ErrDevice too.
	// The context's owner must drop it and open a new one.
	ErrContextLost = fmt.Errorf("device context lost: %w", ErrDevice)
	// ErrClosed is returned for use of a closed Device or Queue or a
	// released Buffer, Program or Kernel.
	ErrClosed = errors.New("use of closed or released object")
	// ErrUnsupported is returned by a call the device cannot serve (a
	// HostAllocator's AllocOn on a device that does not work on host
	// memory in place).
	ErrUnsupported = errors.New("not supported by this device")
	// ErrForeign is returned when a Buffer, Program or Kernel is used on
	// a Queue that did not create it.
	ErrForeign = errors.New("object belongs to another queue")
	// ErrOutOfRange is returned when a Write or Read falls outside the
	// buffer; it is an ErrInvalidArgument too.
	ErrOutOfRange = fmt.Errorf("range outside buffer: %w", ErrInvalidArgument)
	// ErrSourceRejected is returned by Build for source or options that
	// could reach host files (#include, -I and the like); it is an
	// ErrBuildFailed too.
	ErrSourceRejected = fmt.Errorf("program source or options rejected: %w", ErrBuildFailed)
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
// result. It matches with errors.Is the sentinel of its code's kind (e.g.
// CL_BUILD_PROGRAM_FAILURE is ErrBuildFailed, CL_INVALID_VALUE is
// ErrInvalidArgument, an unknown code is ErrDevice).
type CLError struct {
	Op   string
	Code int32
}

func (e *CLError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, CodeName(e.Code), e.Code)
}

// Is reports whether target is the sentinel this code stands for.
func (e *CLError) Is(target error) bool {
	switch target {
	case ErrBuildFailed:
		return e.Code == clBuildProgramFailure || e.Code == clInvalidBuildOptions ||
			e.Code == -15 || e.Code == -17 // compile/link program failure
	case ErrNoKernel:
		return e.Code == clInvalidKernelName
	case ErrOutOfMemory:
		return codeKind(e.Code) == kindResources
	case ErrInvalidLaunch:
		return codeKind(e.Code) == kindLaunch
	case ErrInvalidArgument:
		return codeKind(e.Code) == kindArgument
	case ErrDevice:
		return codeKind(e.Code) == kindDevice || codeKind(e.Code) == kindLost
	case ErrContextLost:
		return codeKind(e.Code) == kindLost
	case ErrNoPlatform:
		return e.Code == clPlatformNotFoundKHR
	case ErrNoDevice:
		return e.Code == clDeviceNotFound
	}
	return false
}

// kind is what an OpenCL error code says about a failure.
type kind uint8

const (
	kindNone      kind = iota // CL_SUCCESS
	kindDevice                // the device or runtime failed
	kindArgument              // a value the caller gave is invalid
	kindResources             // resources ran out
	kindBuild                 // a program did not build
	kindName                  // no kernel of that name
	kindLaunch                // a launch does not fit its kernel
	kindLost                  // the context is unusable from now on
)

// clCodes names every OpenCL 1.2 error code (plus the 2.x ones a newer ICD
// may return and the ICD loader's "no platform") and gives its kind.
var clCodes = map[int32]struct {
	name string
	kind kind
}{
	0:     {"CL_SUCCESS", kindNone},
	-1:    {"CL_DEVICE_NOT_FOUND", kindDevice},
	-2:    {"CL_DEVICE_NOT_AVAILABLE", kindDevice},
	-3:    {"CL_COMPILER_NOT_AVAILABLE", kindDevice},
	-4:    {"CL_MEM_OBJECT_ALLOCATION_FAILURE", kindResources},
	-5:    {"CL_OUT_OF_RESOURCES", kindResources},
	-6:    {"CL_OUT_OF_HOST_MEMORY", kindResources},
	-7:    {"CL_PROFILING_INFO_NOT_AVAILABLE", kindDevice},
	-8:    {"CL_MEM_COPY_OVERLAP", kindArgument},
	-9:    {"CL_IMAGE_FORMAT_MISMATCH", kindArgument},
	-10:   {"CL_IMAGE_FORMAT_NOT_SUPPORTED", kindArgument},
	-11:   {"CL_BUILD_PROGRAM_FAILURE", kindBuild},
	-12:   {"CL_MAP_FAILURE", kindDevice},
	-13:   {"CL_MISALIGNED_SUB_BUFFER_OFFSET", kindArgument},
	-14:   {"CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST", kindDevice},
	-15:   {"CL_COMPILE_PROGRAM_FAILURE", kindBuild},
	-16:   {"CL_LINKER_NOT_AVAILABLE", kindDevice},
	-17:   {"CL_LINK_PROGRAM_FAILURE", kindBuild},
	-18:   {"CL_DEVICE_PARTITION_FAILED", kindDevice},
	-19:   {"CL_KERNEL_ARG_INFO_NOT_AVAILABLE", kindDevice},
	-30:   {"CL_INVALID_VALUE", kindArgument},
	-31:   {"CL_INVALID_DEVICE_TYPE", kindDevice},
	-32:   {"CL_INVALID_PLATFORM", kindDevice},
	-33:   {"CL_INVALID_DEVICE", kindDevice},
	-34:   {"CL_INVALID_CONTEXT", kindDevice},
	-35:   {"CL_INVALID_QUEUE_PROPERTIES", kindDevice},
	-36:   {"CL_INVALID_COMMAND_QUEUE", kindDevice},
	-37:   {"CL_INVALID_HOST_PTR", kindArgument},
	-38:   {"CL_INVALID_MEM_OBJECT", kindLaunch},
	-39:   {"CL_INVALID_IMAGE_FORMAT_DESCRIPTOR", kindArgument},
	-40:   {"CL_INVALID_IMAGE_SIZE", kindArgument},
	-41:   {"CL_INVALID_SAMPLER", kindLaunch},
	-42:   {"CL_INVALID_BINARY", kindBuild},
	-43:   {"CL_INVALID_BUILD_OPTIONS", kindBuild},
	-44:   {"CL_INVALID_PROGRAM", kindDevice},
	-45:   {"CL_INVALID_PROGRAM_EXECUTABLE", kindDevice},
	-46:   {"CL_INVALID_KERNEL_NAME", kindName},
	-47:   {"CL_INVALID_KERNEL_DEFINITION", kindBuild},
	-48:   {"CL_INVALID_KERNEL", kindLaunch},
	-49:   {"CL_INVALID_ARG_INDEX", kindLaunch},
	-50:   {"CL_INVALID_ARG_VALUE", kindLaunch},
	-51:   {"CL_INVALID_ARG_SIZE", kindLaunch},
	-52:   {"CL_INVALID_KERNEL_ARGS", kindLaunch},
	-53:   {"CL_INVALID_WORK_DIMENSION", kindLaunch},
	-54:   {"CL_INVALID_WORK_GROUP_SIZE", kindLaunch},
	-55:   {"CL_INVALID_WORK_ITEM_SIZE", kindLaunch},
	-56:   {"CL_INVALID_GLOBAL_OFFSET", kindLaunch},
	-57:   {"CL_INVALID_EVENT_WAIT_LIST", kindDevice},
	-58:   {"CL_INVALID_EVENT", kindDevice},
	-59:   {"CL_INVALID_OPERATION", kindDevice},
	-60:   {"CL_INVALID_GL_OBJECT", kindArgument},
	-61:   {"CL_INVALID_BUFFER_SIZE", kindArgument},
	-62:   {"CL_INVALID_MIP_LEVEL", kindArgument},
	-63:   {"CL_INVALID_GLOBAL_WORK_SIZE", kindLaunch},
	-64:   {"CL_INVALID_PROPERTY", kindArgument},
	-65:   {"CL_INVALID_IMAGE_DESCRIPTOR", kindArgument},
	-66:   {"CL_INVALID_COMPILER_OPTIONS", kindBuild},
	-67:   {"CL_INVALID_LINKER_OPTIONS", kindBuild},
	-68:   {"CL_INVALID_DEVICE_PARTITION_COUNT", kindDevice},
	-69:   {"CL_INVALID_PIPE_SIZE", kindArgument},
	-70:   {"CL_INVALID_DEVICE_QUEUE", kindDevice},
	-71:   {"CL_INVALID_SPEC_ID", kindArgument},
	-72:   {"CL_MAX_SIZE_RESTRICTION_EXCEEDED", kindResources},
	-1001: {"CL_PLATFORM_NOT_FOUND_KHR", kindDevice},
	// NVIDIA's OpenCL, for a kernel's illegal memory access (CUDA's
	// sticky error): the launch, and then every call of the context,
	// builds included, fail with it (seen on an H200, driver
	// 580.159.04).
	-9999: {"NV_ILLEGAL_MEMORY_ACCESS", kindLost},
}

// CodeName returns the OpenCL name of an error code, e.g.
// "CL_INVALID_WORK_GROUP_SIZE", or "CL_ERROR(n)" for an unknown one.
func CodeName(code int32) string {
	if c, ok := clCodes[code]; ok {
		return c.name
	}
	return fmt.Sprintf("CL_ERROR(%d)", code)
}

// codeKind is the kind of an OpenCL error code; unknown codes (vendor
// extensions, crashed kernels) are device failures.
func codeKind(code int32) kind {
	if c, ok := clCodes[code]; ok {
		return c.kind
	}
	return kindDevice
}

package gpu

import (
	"strings"
	"time"
)

// Info describes one physical device.
type Info struct {
	Index            int    // position in the enumeration (see Open)
	Platform         string // OpenCL platform name
	Name             string
	Vendor           string
	Version          string // device OpenCL version string
	DriverVersion    string
	ComputeUnits     uint32
	GlobalMemBytes   uint64
	MaxAllocBytes    uint64
	MaxWorkGroupSize uint64
	MaxWorkItemSizes [3]uint64
	LocalMemBytes    uint64
	// CPU: a CL_DEVICE_TYPE_CPU device (PoCL's): its kernels run on the
	// host's cores in the process that launched them, so stopping that
	// process stops them (sched preemption, docs/scheduler.md).
	CPU  bool
	Caps Caps
}

// Caps are a device's OpenCL C limits and capabilities as clGetDeviceInfo
// reports them, read once when the device is enumerated; the guest's
// device-info command passes them on, restricted by the instance's profile
// (docs/ABI.md "Device-information blob"). A property the device does not
// report (fp16 and fp64 configs on a device without them, printf's buffer
// before OpenCL 1.2) is zero.
type Caps struct {
	MaxConstantBufferSize    uint64 // CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, bytes
	MaxConstantArgs          uint64 // CL_DEVICE_MAX_CONSTANT_ARGS
	MaxParameterSize         uint64 // CL_DEVICE_MAX_PARAMETER_SIZE, bytes
	MemBaseAddrAlign         uint64 // CL_DEVICE_MEM_BASE_ADDR_ALIGN, bits
	MinDataTypeAlignSize     uint64 // CL_DEVICE_MIN_DATA_TYPE_ALIGN_SIZE, bytes
	MaxClockFrequency        uint64 // CL_DEVICE_MAX_CLOCK_FREQUENCY, MHz
	AddressBits              uint64 // CL_DEVICE_ADDRESS_BITS
	SingleFPConfig           uint64 // CL_DEVICE_SINGLE_FP_CONFIG
	DoubleFPConfig           uint64 // CL_DEVICE_DOUBLE_FP_CONFIG; 0: no fp64
	HalfFPConfig             uint64 // CL_DEVICE_HALF_FP_CONFIG; 0: no fp16
	ProfilingTimerResolution uint64 // CL_DEVICE_PROFILING_TIMER_RESOLUTION, ns
	PrintfBufferSize         uint64 // CL_DEVICE_PRINTF_BUFFER_SIZE, bytes
	// PreferredVectorWidth and NativeVectorWidth are
	// CL_DEVICE_{PREFERRED,NATIVE}_VECTOR_WIDTH_* for char, short, int,
	// long, float, double and half, in that order.
	PreferredVectorWidth [7]uint32
	NativeVectorWidth    [7]uint32
	EndianLittle         bool   // CL_DEVICE_ENDIAN_LITTLE
	Extensions           string // CL_DEVICE_EXTENSIONS, as reported (space separated)
	Images               ImageCaps
	// IL: the device builds SPIR-V modules of every version in
	// ILVersions (CL_DEVICE_IL_VERSION lists them): a queue's BuildIL.
	IL bool
}

// ImageCaps are a device's image limits (CL_DEVICE_IMAGE_*), all zero
// where it has no images (CL_DEVICE_IMAGE_SUPPORT false).
type ImageCaps struct {
	Supported    bool
	Max2D        [2]uint64 // CL_DEVICE_IMAGE2D_MAX_WIDTH, _HEIGHT
	Max3D        [3]uint64 // CL_DEVICE_IMAGE3D_MAX_WIDTH, _HEIGHT, _DEPTH
	MaxArraySize uint64    // CL_DEVICE_IMAGE_MAX_ARRAY_SIZE
	MaxReadArgs  uint64    // CL_DEVICE_MAX_READ_IMAGE_ARGS
	MaxWriteArgs uint64    // CL_DEVICE_MAX_WRITE_IMAGE_ARGS
	MaxSamplers  uint64    // CL_DEVICE_MAX_SAMPLERS
	// Formats are those clGetSupportedImageFormats lists for 2D images
	// a kernel may both read and write (CL_MEM_READ_WRITE).
	Formats []ImageFormat
	// MaxBufferSize is CL_DEVICE_IMAGE_MAX_BUFFER_SIZE (pixels of an
	// image made from a buffer), BufferFormats the formats it lists
	// for such images (CL_MEM_OBJECT_IMAGE1D_BUFFER, CL_MEM_READ_WRITE).
	MaxBufferSize uint64
	BufferFormats []ImageFormat
}

// ImageFormat is OpenCL's cl_image_format: a channel order and a channel
// data type (CL_RGBA, CL_UNORM_INT8, ...).
type ImageFormat struct {
	Order    uint32
	DataType uint32
}

// ExtensionList returns the names of c.Extensions.
func (c *Caps) ExtensionList() []string { return strings.Fields(c.Extensions) }

// Device is one physical compute device. It is safe for concurrent use.
type Device interface {
	Info() Info
	// NewQueue creates an in-order execution stream with its own buffers,
	// programs and kernels. vgpud gives each vGPU instance its own queue.
	NewQueue() (Queue, error)
	Close() error
}

// Queue is an in-order stream of work on a Device. Its methods block until
// the work is done. A Queue is used by one goroutine at a time.
type Queue interface {
	// Alloc returns a buffer of size bytes, all zero: device memory is
	// recycled between queues (VMs) and must never carry one's data to
	// another.
	Alloc(size uint64) (Buffer, error)
	// Write copies p into b at off.
	Write(b Buffer, off uint64, p []byte) error
	// Read copies len(p) bytes of b at off into p.
	Read(b Buffer, off uint64, p []byte) error
	// Copy copies n bytes of src at srcOff into dst at dstOff on the
	// device (clEnqueueCopyBuffer). Both ranges must lie in their
	// buffers and, when src and dst are the same buffer, not overlap.
	Copy(src, dst Buffer, srcOff, dstOff, n uint64) error
	// Fill writes copies of pattern over n bytes of b at off
	// (clEnqueueFillBuffer). len(pattern) is a power of two up to
	// MaxFillPattern and divides off and n.
	Fill(b Buffer, off, n uint64, pattern []byte) error
	// Build compiles OpenCL C source. On a compile error it returns the
	// build log and an error for which errors.Is(err, ErrBuildFailed).
	Build(source, options string) (Program, string, error)
	// Launch runs k over r with args and returns the kernel's device time
	// measured by profiling events.
	Launch(k Kernel, r NDRange, args []Arg) (time.Duration, error)
	Close() error
}

// ILBuilder is implemented by a Queue that can build programs from SPIR-V
// modules (clCreateProgramWithIL): BuildIL is Build for a module, checked
// first by CheckIL. Where the device cannot (Caps.IL false) it returns an
// error for which errors.Is(err, ErrUnsupported).
type ILBuilder interface {
	BuildIL(module []byte, options string) (Program, string, error)
}

// Pipeliner is implemented by a Queue that can take launches without
// waiting for each (the fast command path, docs/architecture.md): many
// short kernels queued back to back cost the device's launch overhead,
// not a round trip each. Enqueue starts k over r with args behind the
// queue's earlier work and returns without waiting; an error from it
// means the launch was not enqueued and has no result in Sync. Sync
// waits for every launch enqueued since the last Sync and returns each
// one's outcome in order. The caller must Sync before any other call on
// the queue (Close excepted, which discards what is pending).
type Pipeliner interface {
	Enqueue(k Kernel, r NDRange, args []Arg) error
	Sync() []LaunchResult
}

// Printer is implemented by a Queue that captures what its kernels print
// (OpenCL C's printf, which a runtime writes to its process's standard
// output): an executor's (gpu/remote, docs/executor-protocol.md
// "OpLaunchPrinting"). LaunchPrinting is Launch that also returns what
// the kernel printed, at most max bytes of it, and how many bytes more it
// printed, which were dropped. Where the device cannot capture after all
// it returns an error for which errors.Is(err, ErrUnsupported), without
// launching.
type Printer interface {
	LaunchPrinting(k Kernel, r NDRange, args []Arg, max int) (time.Duration, Printout, error)
}

// Printout is what one launch printed.
type Printout struct {
	Data    []byte
	Dropped uint64 // bytes printed beyond what Data holds
}

// Streamer is implemented by a Queue that moves long copies through
// staging memory of its own, host memory its device's copy engine reaches
// directly (pinned memory on a GPU), with the host's copy of one piece
// overlapping the device's transfer of the pieces around it: a copy
// between scattered host memory and the device then runs at the copy
// engine's speed, not at a blocking transfer's from ordinary memory plus
// a gather. StreamWrite moves n bytes into b at off: fill writes the next
// len(p) bytes of the source into p, called piece by piece in order.
// StreamRead moves n bytes of b at off out: drain takes the next len(p)
// bytes from p, piece by piece in order. Neither keeps p, nor calls the
// queue from f; every transfer begun has ended when they return. Both
// return an error for which errors.Is(err, ErrUnsupported), without
// calling f, where the queue cannot stream (a host-backed device's, whose
// copies are memory copies already, or where its staging memory could
// not be made): the caller then uses Write and Read.
type Streamer interface {
	// Streams reports whether the queue streams: false where its
	// StreamWrite and StreamRead return ErrUnsupported.
	Streams() bool
	StreamWrite(b Buffer, off, n uint64, fill func(p []byte) error) error
	StreamRead(b Buffer, off, n uint64, drain func(p []byte) error) error
}

// StreamPiece is the size of each piece of a queue's staging memory, and
// StreamPieces how many it has: a stream overlaps the host's copy into or
// out of one piece with the device's transfer of the others. Measured on
// an H200 (BenchmarkStream, docs/gpu-check.md; 64 MiB from 64 KiB runs,
// gathered by two goroutines): 1 MiB pieces ran uploads at 1.1x of
// direct, 2 MiB at 1.4x, 4 MiB at 1.7x, six 1 MiB pieces no better than
// three. 2 MiB by three holds 6 MiB of pinned host memory per queue that
// streams, made on its first stream and kept until it closes.
const (
	StreamPiece  = 2 << 20
	StreamPieces = 3
)

// LaunchResult is the outcome of an enqueued launch: its device time
// measured by profiling events, or its error.
type LaunchResult struct {
	Device time.Duration
	Err    error
}

// Buffer is device memory.
type Buffer interface {
	Size() uint64
	Release()
}

// HostBuffer is implemented by a Buffer that may live on host memory its
// device uses in place (a CPU device's, where Open found that it does;
// docs/architecture.md "Host-backed buffers"). Host calls f with n bytes
// of the buffer's own memory at off and returns f's error; it reports
// false, without calling f, when the buffer is not host-backed, is
// released, or its queue has launches enqueued that may be using it
// (Sync them first). f must not keep p nor call the buffer's queue.
type HostBuffer interface {
	Buffer
	Host(off, n uint64, f func(p []byte) error) (bool, error)
}

// HostAllocator is implemented by a Queue whose device works on host
// memory in place (docs/architecture.md "Host-backed buffers"): it can
// make a buffer on memory its caller owns. An executor makes buffers on
// the arena it shares with its worker this way, so that the worker's
// writes and reads of them are memory copies (docs/executor-protocol.md
// "Shared buffer memory").
type HostAllocator interface {
	// AllocOn makes a buffer of len(p) bytes on p, which must be zero and
	// aligned to a page, and which the caller keeps mapped and does not
	// reuse until ReleaseOn reported that the runtime let go of it.
	// errors.Is(err, ErrUnsupported) where the queue's device does not
	// work on host memory in place.
	AllocOn(p []byte) (Buffer, error)
	// ReleaseOn releases b, which AllocOn made, and reports whether the
	// runtime has let go of its memory: false leaves the memory to the
	// runtime, which may still use it, and the caller must not reuse it.
	ReleaseOn(b Buffer) bool
}

// Program is a built program.
type Program interface {
	// Kernel returns the kernel named name; errors.Is(err, ErrNoKernel)
	// when the program has none.
	Kernel(name string) (Kernel, error)
	// KernelNames lists the program's kernels.
	KernelNames() []string
	// Info describes every kernel of the program on the queue's device
	// (clCreateKernelsInProgram, clGetKernelInfo, clGetKernelWorkGroupInfo,
	// clGetKernelArgInfo), sorted by name.
	Info() ([]KernelInfo, error)
	Release()
}

// Kernel is one entry point of a Program.
type Kernel interface {
	Name() string
	NumArgs() int
	Release()
}

// Arg is one kernel argument: exactly one of Buffer, Scalar, Local or
// Sampler is set. Image, with Buffer, makes the buffer an image argument
// whose pixels it holds (Image).
type Arg struct {
	Buffer  Buffer
	Image   *Image // with Buffer: an image argument
	Scalar  []byte
	Local   uint64 // bytes of __local memory
	Sampler *Sampler
}

// NDRange is the index space of a launch. Local all zero lets the device
// choose the work-group size.
type NDRange struct {
	Dims   int
	Offset [3]uint64
	Global [3]uint64
	Local  [3]uint64
}

// MaxFillPattern is the largest pattern Queue.Fill takes: OpenCL's largest
// built-in type, a 16-element vector of 8-byte elements.
const MaxFillPattern = 128

// KernelInfo describes one kernel of a program on a device.
type KernelInfo struct {
	Name                 string
	WorkGroupSize        uint64    // CL_KERNEL_WORK_GROUP_SIZE
	PreferredMultiple    uint64    // CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE
	LocalMemSize         uint64    // CL_KERNEL_LOCAL_MEM_SIZE
	PrivateMemSize       uint64    // CL_KERNEL_PRIVATE_MEM_SIZE
	CompileWorkGroupSize [3]uint64 // CL_KERNEL_COMPILE_WORK_GROUP_SIZE
	Args                 []ArgInfo // one per parameter (CL_KERNEL_NUM_ARGS)
}

// ArgInfo describes one kernel parameter as the device reports it for a
// program built with -cl-kernel-arg-info; a field the device does not
// report is zero.
type ArgInfo struct {
	AddressQualifier uint32 // CL_KERNEL_ARG_ADDRESS_*, Arg* below
	AccessQualifier  uint32 // CL_KERNEL_ARG_ACCESS_*
	TypeQualifier    uint32 // CL_KERNEL_ARG_TYPE_* bits
	TypeName         string
	Name             string
}

// OpenCL's values of ArgInfo's qualifiers, for implementations that are
// not OpenCL (gputest).
const (
	ArgAddressGlobal   = 0x119B
	ArgAddressLocal    = 0x119C
	ArgAddressConstant = 0x119D
	ArgAddressPrivate  = 0x119E
	ArgAccessNone      = 0x11A3
	ArgTypeConst       = 1 << 0
	ArgTypeRestrict    = 1 << 1
	ArgTypeVolatile    = 1 << 2
)

package gpu

import "time"

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
}

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
	// Build compiles OpenCL C source. On a compile error it returns the
	// build log and an error for which errors.Is(err, ErrBuildFailed).
	Build(source, options string) (Program, string, error)
	// Launch runs k over r with args and returns the kernel's device time
	// measured by profiling events.
	Launch(k Kernel, r NDRange, args []Arg) (time.Duration, error)
	Close() error
}

// Buffer is device memory.
type Buffer interface {
	Size() uint64
	Release()
}

// Program is a built program.
type Program interface {
	// Kernel returns the kernel named name; errors.Is(err, ErrNoKernel)
	// when the program has none.
	Kernel(name string) (Kernel, error)
	// KernelNames lists the program's kernels.
	KernelNames() []string
	Release()
}

// Kernel is one entry point of a Program.
type Kernel interface {
	Name() string
	NumArgs() int
	Release()
}

// Arg is one kernel argument: exactly one of Buffer, Scalar or Local is set.
type Arg struct {
	Buffer Buffer
	Scalar []byte
	Local  uint64 // bytes of __local memory
}

// NDRange is the index space of a launch. Local all zero lets the device
// choose the work-group size.
type NDRange struct {
	Dims   int
	Offset [3]uint64
	Global [3]uint64
	Local  [3]uint64
}

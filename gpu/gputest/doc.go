// Package gputest is an in-memory fake of gpu.Device (with its Queue,
// Buffer, Program and Kernel) for fast tests and fuzzing of code that
// drives a device, such as the aggregator.
//
// It is a test double: it never compiles or runs anything. Buffers are Go
// byte slices, zeroed at Alloc and bound-checked by Write and Read. Build
// screens source and options with gpu.CheckSource, as the real device does
// (but with no compiler to ask which macros it predefines, so inline
// assembly under a condition on such a name, as in pyopencl's Random123,
// is refused where PoCL builds it), and then only parses the kernel
// signatures,
//
//	__kernel void NAME(params) { ... }   (or kernel void NAME(...))
//
// skipping comments, literals and preprocessor lines and requiring
// balanced brackets and, outside comments and literals, only ASCII that
// may appear in OpenCL C (so random bytes fail to build, as they would on a
// real device). It does not run the preprocessor: a kernel spelled
// through a macro is not seen. A parameter is a buffer when it is a
// __global or __constant pointer, __local memory when it is a __local
// pointer, an image (a buffer with a gpu.Image whose type and extent it
// checks, not its size: the fake knows no pixel sizes) for image1d_t,
// image1d_array_t, image2d_t, image2d_array_t and image3d_t, a gpu.Sampler
// (its modes checked) for sampler_t, an object that cannot be set from
// bytes for image buffers, pipes, events and queues, and a
// by-value scalar otherwise; a scalar of a built-in type (int, float4,
// ...) must be passed with exactly its size (OpenCL's sizes: a 3-vector is
// as large as a 4-vector). Launch
// checks what the real device checks before and while it enqueues: the
// argument count and kinds, buffer ownership, and the ND-range (1..3
// dimensions, nonzero global sizes, local sizes all set or all zero and
// dividing the global ones, the device's work-group and __local memory
// limits, no overflow). It then writes nothing to any buffer and reports a
// fixed device time (Config.LaunchTime). Copy and Fill check ranges,
// overlap and the pattern as the real device does and move the bytes.
// Program.Info reports the parsed kernels with the device's largest
// work-group size, and each parameter's address space, const, restrict
// and volatile qualifiers, type and name as written (the real device
// normalises type names; the fake does not).
//
// Every error wraps the sentinel the real device's would (package gpu's
// ErrInvalidArgument or ErrOutOfRange for bad sizes and ranges,
// ErrOutOfMemory past Config.MemLimit, ErrBuildFailed or ErrSourceRejected,
// ErrNoKernel, ErrInvalidLaunch, ErrClosed, ErrForeign), so callers' error
// mapping is exercised as in production. Config.Fault injects device
// failures. Nothing depends on time or randomness: the same calls give the
// same results. What Build makes of a source and its options is memoised
// for the whole process (it is a pure function of them), because tests,
// fuzzing most, build the same few sources over and over.
//
// Concurrency is as in package gpu: a Device is safe for concurrent use; a
// Queue and what it created are used by one goroutine at a time, though
// Close and the idempotent Release methods may be called from any. Lock
// order: queue, then device. No input makes it panic.
package gputest

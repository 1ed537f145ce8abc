// Package gpu is the physical compute device: the Device/Queue/Buffer/
// Program/Kernel interface in gpu.go and its OpenCL implementation (cgo
// against the ICD loader, OpenCL 1.2 API only, so any vendor's ICD works).
//
// It owns device enumeration and selection (Devices, Open), one cl_context
// per Device, one profiling-enabled in-order command queue per Queue, and the
// mapping of OpenCL failures to errors: *CLError names the call and the CL
// code, and matches with errors.Is the sentinel of its code's kind
// (ErrBuildFailed, ErrNoKernel, ErrOutOfMemory, ErrInvalidLaunch,
// ErrInvalidArgument, ErrDevice); every other error wraps one of the
// sentinels too. It knows nothing of VMs, guests, rings, transports or the
// guest ABI: callers (the aggregator) hand it sizes, bytes, source text and
// launch geometry, and map its sentinels to what their guests see.
//
// Inputs are treated as hostile all the same. Write, Read, Copy and Fill
// bound-check in Go before calling C (Copy refuses overlapping ranges of
// one buffer, Fill a pattern OpenCL does not take); Launch checks the argument count and, from the
// kernel's argument info (every program is built with -cl-kernel-arg-info),
// that each argument is the kind the parameter needs, so bytes can never be
// taken for a cl_mem handle; objects of another Queue are refused. Build
// first runs CheckSourceFor, because the compiler runs inside this process:
// with PoCL 3.1, #include "/etc/..." puts a host file into the build log and
// "#pragma clang __debug llvm_fatal_error" aborts the process. On a device
// that is no GPU it also screens inline assembly the compiler may compile,
// asking the compiler which names it predefines where the verdict depends
// on them (one small extra build, cached per options).
//
// Host-backed buffers (opencl_hostmem.go): Open probes a CPU device that
// shares the host's memory once, and if it uses a CL_MEM_USE_HOST_PTR
// buffer's memory in place (PoCL's devices do), every buffer of it lives
// on memory this package allocates, zeroed, and Write and Read are memory
// copies under the queue's lock; HostBuffer lends that memory to a caller
// (the aggregator's in-place copies) while no launch is enqueued. Such a
// device's queues are HostAllocators too: AllocOn makes a buffer on memory
// the caller owns (an executor's arena, shared with its worker) and
// ReleaseOn says when the runtime let go of it (its destructor callback).
// OpenPlain opens a device without them, as an application has it.
//
// Thread stacks (threads_linux.go): GuardRuntimeThreads sets the guard
// region below the stacks of the threads the OpenCL runtime makes from
// then on (PoCL's work-item threads), so that a kernel's private arrays
// overflowing its stack fault instead of storing into a mapping below.
//
// Streams (opencl_stream.go): a queue of a device whose buffers are device
// memory (a GPU's) is a Streamer: on its first stream it makes
// StreamPieces pieces of CL_MEM_ALLOC_HOST_PTR memory (pinned host memory
// on NVIDIA's platform), mapped for as long as it lives, and moves a long
// copy piece by piece, the caller's gather into or scatter out of one
// piece overlapping the non-blocking transfers of the others.
//
// Concurrency: a Device is safe for concurrent use. A Queue, and the
// Buffers, Programs and Kernels created through it, belong to that Queue and
// are used by one goroutine at a time; an internal mutex per Queue still
// serialises every OpenCL call on it, so Device.Close, Queue.Close and the
// idempotent Release methods are safe against work in progress and a
// cl_kernel's arguments are never set by two launches at once. Lock order:
// queue, then device. Closing a Queue releases everything created through
// it; closing a Device closes its Queues.
//
// PoCL 3.1 (Debian 12) facts: POCL_DEVICES="pthread basic" gives two CPU
// devices named "pthread-..." and "basic-..." (2 and 1 compute units); the
// first build of a program takes about 1 s, later builds of the same source
// about 60 ms from PoCL's kernel cache; an empty launch costs about 21 us.
// Launch returns CL_PROFILING_COMMAND_END - START, the device time only.
//
// NVIDIA's OpenCL (driver 580.159.04 on an H100 and an H200, Ubuntu
// 24.04; run on 2026-11-26 and 27 by scripts/gpu-check.sh, this
// package's tests built on Debian 12 with Debian's ICD loader carried
// along; docs/gpu-check.md): one platform "NVIDIA CUDA", OpenCL C 1.2,
// 132 compute units, 79.2 GiB of memory and 19.8 GiB per allocation
// (H100; H200: 139.8 and 35.0 GiB). Every test passes but
// TestProgramInfo, which skips there: NVIDIA's ptxas fails ("Parsing
// error near '}'") on its empty kernel without parameters, declared
// "(void)" or "()" alike, a build failure with its log, as a guest sees
// it. A kernel's illegal memory access fails that call and every later
// one of the context with -9999 (ErrContextLost). TestPoCLDriversPresent
// skips where the platform is not PoCL.
package gpu

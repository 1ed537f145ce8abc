// Package kernelout captures what an OpenCL runtime writes to its process's
// standard output, where a kernel's printf output goes (PoCL writes it
// with write(2) on fd 1 as the kernel completes; rusticl through Rust's
// line-buffered stdout), so that an executor can hand each launch's output
// to the guest that launched it (docs/executor-protocol.md
// "OpLaunchPrinting").
//
// A Capture puts a pipe where the descriptor was and drains it all the
// time into a buffer of bounded size, dropping (and counting) what does not
// fit, so a kernel that prints without end never blocks on a full pipe.
// Take returns what was written before it was called: it reads what is
// still in the pipe itself, under the same lock the drain reads and
// appends under, so nothing written before Take is left behind.
//
// It owns the pipe and its drain goroutine, and knows nothing of OpenCL,
// guests or the protocol.
package kernelout

// Package remote serves a gpu.Device to another process and uses one served
// so: the executor protocol (docs/executor-protocol.md), the seam that lets
// the process that runs a guest's kernels be a different one from the
// process that maps the guest's RAM (issue 31, docs/isolation.md).
//
// On a CPU device (PoCL, rusticl on llvmpipe) a kernel is native code in the
// process that launches it and can read and write all of that process's
// memory. Serve runs in an executor process that holds the OpenCL context,
// the programs and the buffers and nothing else; NewDevice, in the process
// that interprets the guest's commands and copies between guest RAM and
// buffers, returns a gpu.Device whose every call is a request to that
// executor. A kernel then reaches the executor's memory only: never guest
// RAM, never another executor's buffers.
//
// Shared buffer memory (arena.go): given an arena, memory both ends map
// (SetArena, ServeArena), the client places buffers of a page or more in
// it and writes and reads them with memory copies; the bytes never cross
// the connection. Who makes the arena, and bounds it, is the caller's
// business.
//
// It owns the protocol's framing and codec (proto.go), the client objects
// (Device, Queue, Buffer, Program, Kernel over a connection) and the server
// (object tables keyed by the handles it gives out, one goroutine per queue
// so that each queue's calls stay in order). It knows nothing of guests,
// rings, workers or sandboxes: the caller starts the executor process,
// confines it and hands both ends their connection.
//
// Trust: the executor runs guest code, so the client treats every reply as
// hostile (lengths, handles, counts and JSON are checked; a reply that
// breaks the protocol, or a connection that ends, makes the device lost:
// every later call fails with an error that is gpu.ErrContextLost). The
// server treats requests as malformed-possible too and answers them with
// an error, never a panic. Both decoders have fuzz targets.
package remote

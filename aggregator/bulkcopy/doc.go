// Package bulkcopy copies large byte ranges with non-temporal stores: the
// bytes go to memory without first reading the destination's cache lines
// and without evicting what the caches hold, as glibc's memcpy does past
// a size of the order of the last-level cache (and PoCL's
// clEnqueueWriteBuffer with it), where Go's copy keeps to ordinary stores.
// On this project's machines that moves a 256 MiB copy at ~10 GB/s
// against ~7 GB/s (bench/README.md, "Issue 42, third round").
//
// It owns only that copy. Whether a copy is large enough to be worth it
// is the caller's decision: the stored bytes are not in any cache
// afterwards, which costs a reader that comes soon after a small copy.
// It knows nothing of guests, buffers or devices.
//
// Stream uses AVX2 on amd64 where the CPU has it (golang.org/x/sys/cpu)
// and Go's copy everywhere else.
package bulkcopy

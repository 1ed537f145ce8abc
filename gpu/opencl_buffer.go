//go:build cgo

package gpu

/*
#include "opencl_cgo.h"

static cl_int vg_create_buffer(cl_context c, size_t size, cl_mem *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateBuffer(c, CL_MEM_READ_WRITE, size, NULL, &err);
	return err;
}

// vg_zero_buffer clears a new buffer before anyone can read it: device
// memory is recycled between users and must never show one the data of
// another.
static cl_int vg_zero_buffer(cl_command_queue q, cl_mem m, size_t size) {
	const cl_uchar zero = 0;
	cl_int err = clEnqueueFillBuffer(q, m, &zero, 1, 0, size, 0, NULL, NULL);
	if (err != CL_SUCCESS) return err;
	return clFinish(q);
}

// vg_copy_buffer copies n bytes between buffers and waits for it.
static cl_int vg_copy_buffer(cl_command_queue q, cl_mem src, cl_mem dst, size_t src_off, size_t dst_off, size_t n) {
	cl_int err = clEnqueueCopyBuffer(q, src, dst, src_off, dst_off, n, 0, NULL, NULL);
	if (err != CL_SUCCESS) return err;
	return clFinish(q);
}

// vg_fill_buffer fills n bytes of m at off with a pattern (copied by the
// enqueue) and waits for it.
static cl_int vg_fill_buffer(cl_command_queue q, cl_mem m, const void *pattern, size_t pattern_len, size_t off, size_t n) {
	cl_int err = clEnqueueFillBuffer(q, m, pattern, pattern_len, off, n, 0, NULL, NULL);
	if (err != CL_SUCCESS) return err;
	return clFinish(q);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// buffer, program and kernel fields other than the handles are immutable;
// the handles are guarded by owner.mu and nil once released.
type buffer struct {
	owner *queue
	size  uint64
	mem   C.cl_mem
	host  unsafe.Pointer // the buffer's memory, when host-backed (opencl_hostmem.go)
	// released is, for a buffer on its caller's memory (AllocOn), the
	// flag the runtime sets when it lets go of that memory.
	released *C.int
}

var _ HostBuffer = (*buffer)(nil)

// Alloc creates a buffer of size bytes on the queue's device, cleared to
// zero before it is returned.
func (q *queue) Alloc(size uint64) (Buffer, error) {
	if err := q.dev.checkAllocSize(size); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return nil, q.closedErr("alloc")
	}
	b := &buffer{owner: q, size: size}
	if q.dev.hostBacked {
		if err := q.allocHost(b); err != nil {
			return nil, fmt.Errorf("alloc %d bytes: %w", size, err)
		}
		q.buffers[b] = struct{}{}
		return b, nil
	}
	if err := clErr("clCreateBuffer", C.vg_create_buffer(q.dev.ctx, C.size_t(size), &b.mem)); err != nil {
		return nil, fmt.Errorf("alloc %d bytes: %w", size, err)
	}
	if err := clErr("clEnqueueFillBuffer", C.vg_zero_buffer(q.q, b.mem, C.size_t(size))); err != nil {
		C.clReleaseMemObject(b.mem)
		return nil, fmt.Errorf("alloc %d bytes: clear: %w", size, err)
	}
	q.buffers[b] = struct{}{}
	return b, nil
}

// checkAllocSize refuses a buffer of size bytes the device cannot make,
// as clCreateBuffer would (CL_INVALID_BUFFER_SIZE).
func (d *device) checkAllocSize(size uint64) error {
	if size == 0 || size > d.info.MaxAllocBytes {
		return fmt.Errorf("alloc %d bytes: size must be 1..%d (device max allocation): %w",
			size, d.info.MaxAllocBytes, &CLError{Op: "clCreateBuffer", Code: -61})
	}
	return nil
}

// checkBuffer returns b as this queue's live buffer. q.mu must be held.
func (q *queue) checkBuffer(op string, b Buffer) (*buffer, error) {
	bb, ok := b.(*buffer)
	if !ok || bb == nil {
		return nil, fmt.Errorf("%s: buffer %T is not an OpenCL buffer of this package: %w", op, b, ErrForeign)
	}
	if bb.owner != q {
		return nil, fmt.Errorf("%s: buffer: %w", op, ErrForeign)
	}
	if bb.mem == nil {
		return nil, fmt.Errorf("%s: buffer: %w", op, ErrClosed)
	}
	return bb, nil
}

// span checks that [off, off+n) lies in a buffer of size size without
// overflowing.
func span(op string, size, off uint64, n int) error {
	if off > size || uint64(n) > size-off {
		return fmt.Errorf("%s %d bytes at %d of a %d-byte buffer: %w", op, n, off, size, ErrOutOfRange)
	}
	return nil
}

// Write copies p into b at off, blocking.
func (q *queue) Write(b Buffer, off uint64, p []byte) error { return q.transfer("write", b, off, p) }

// Read copies len(p) bytes of b at off into p, blocking.
func (q *queue) Read(b Buffer, off uint64, p []byte) error { return q.transfer("read", b, off, p) }

// transfer is a blocking write (op "write") or read of p at off in b.
func (q *queue) transfer(op string, b Buffer, off uint64, p []byte) error {
	if bb, ok := b.(*buffer); ok && bb != nil {
		if err := span(op, bb.size, off, len(p)); err != nil {
			return err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return q.closedErr(op)
	}
	bb, err := q.checkBuffer(op, b)
	if err != nil || len(p) == 0 {
		return err
	}
	if h := bb.hostLocked(off, uint64(len(p))); h != nil {
		if op == "write" {
			copy(h, p)
		} else {
			copy(p, h)
		}
		return nil
	}
	call, code := "clEnqueueReadBuffer", C.cl_int(0)
	if op == "write" {
		call = "clEnqueueWriteBuffer"
		code = C.clEnqueueWriteBuffer(q.q, bb.mem, C.CL_TRUE, C.size_t(off), C.size_t(len(p)), unsafe.Pointer(&p[0]), 0, nil, nil)
	} else {
		code = C.clEnqueueReadBuffer(q.q, bb.mem, C.CL_TRUE, C.size_t(off), C.size_t(len(p)), unsafe.Pointer(&p[0]), 0, nil, nil)
	}
	if err := clErr(call, code); err != nil {
		return fmt.Errorf("%s %d bytes at %d: %w", op, len(p), off, err)
	}
	return nil
}

// Copy copies n bytes of src at srcOff into dst at dstOff, blocking.
func (q *queue) Copy(src, dst Buffer, srcOff, dstOff, n uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return q.closedErr("copy")
	}
	sb, err := q.checkBuffer("copy", src)
	if err != nil {
		return err
	}
	db, err := q.checkBuffer("copy", dst)
	if err != nil {
		return err
	}
	switch {
	case n == 0:
		return fmt.Errorf("copy of 0 bytes: %w", ErrInvalidArgument)
	case srcOff > sb.size || n > sb.size-srcOff:
		return fmt.Errorf("copy %d bytes from %d of a %d-byte buffer: %w", n, srcOff, sb.size, ErrOutOfRange)
	case dstOff > db.size || n > db.size-dstOff:
		return fmt.Errorf("copy %d bytes to %d of a %d-byte buffer: %w", n, dstOff, db.size, ErrOutOfRange)
	case sb == db && srcOff < dstOff+n && dstOff < srcOff+n:
		return fmt.Errorf("copy %d bytes from %d to %d of one buffer: ranges overlap: %w", n, srcOff, dstOff, ErrInvalidArgument)
	}
	if err := clErr("clEnqueueCopyBuffer", C.vg_copy_buffer(q.q, sb.mem, db.mem, C.size_t(srcOff), C.size_t(dstOff), C.size_t(n))); err != nil {
		return fmt.Errorf("copy %d bytes: %w", n, err)
	}
	return nil
}

// Fill writes copies of pattern over n bytes of b at off, blocking.
func (q *queue) Fill(b Buffer, off, n uint64, pattern []byte) error {
	pl := uint64(len(pattern))
	if pl == 0 || pl > MaxFillPattern || pl&(pl-1) != 0 || off%pl != 0 || n%pl != 0 || n == 0 {
		return fmt.Errorf("fill %d bytes at %d with a %d-byte pattern: %w", n, off, pl, ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return q.closedErr("fill")
	}
	bb, err := q.checkBuffer("fill", b)
	if err != nil {
		return err
	}
	if off > bb.size || n > bb.size-off {
		return fmt.Errorf("fill %d bytes at %d of a %d-byte buffer: %w", n, off, bb.size, ErrOutOfRange)
	}
	if err := clErr("clEnqueueFillBuffer", C.vg_fill_buffer(q.q, bb.mem, unsafe.Pointer(&pattern[0]), C.size_t(pl), C.size_t(off), C.size_t(n))); err != nil {
		return fmt.Errorf("fill %d bytes: %w", n, err)
	}
	return nil
}

// Size is the buffer's size in bytes.
func (b *buffer) Size() uint64 { return b.size }

// Release frees the buffer's device memory. It is idempotent.
func (b *buffer) Release() {
	b.owner.mu.Lock()
	defer b.owner.mu.Unlock()
	b.releaseLocked()
}

// releaseLocked frees the buffer's memory and forgets it. owner.mu must be
// held.
func (b *buffer) releaseLocked() {
	if b.mem != nil {
		C.clReleaseMemObject(b.mem)
		b.mem, b.host = nil, nil
	}
	delete(b.owner.buffers, b)
}

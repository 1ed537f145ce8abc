//go:build cgo

package gpu

/*
#include "opencl_cgo.h"
#include <string.h>
#include <sys/mman.h>

// vg_host is host memory a buffer was created on (CL_MEM_USE_HOST_PTR):
// freed by the runtime's destructor callback, once the runtime is done
// with it (OpenCL 1.2 section 5.4.1).
typedef struct {
	void *ptr;
	size_t size;
	int mapped; // 1: mmap'd, 0: posix_memalign'd
} vg_host;

// vg_host_mmap_min is the size from which host memory is mapped afresh:
// zero already and committed only as it is touched. Smaller buffers share
// the allocator's pages and are cleared by hand.
enum { vg_host_mmap_min = 1 << 20 };

static void *vg_host_alloc(size_t size, size_t align, int *mapped) {
	void *p = NULL;
	if (size >= vg_host_mmap_min) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		*mapped = 1;
		return p == MAP_FAILED ? NULL : p;
	}
	if (align < sizeof(void *)) align = sizeof(void *);
	if (posix_memalign(&p, align, size) != 0) return NULL;
	memset(p, 0, size);
	*mapped = 0;
	return p;
}

static void vg_host_free(void *ptr, size_t size, int mapped) {
	if (mapped) munmap(ptr, size);
	else free(ptr);
}

static void CL_CALLBACK vg_host_destroyed(cl_mem m, void *user) {
	vg_host *h = user;
	(void)m;
	vg_host_free(h->ptr, h->size, h->mapped);
	free(h);
}

// vg_create_host_buffer creates a buffer of size bytes on new zeroed host
// memory aligned to align bytes, which the runtime frees when it releases
// the buffer; *host is that memory.
static cl_int vg_create_host_buffer(cl_context c, size_t size, size_t align, cl_mem *out, void **host) {
	vg_host *h = malloc(sizeof *h);
	if (h == NULL) return CL_OUT_OF_HOST_MEMORY;
	h->size = size;
	h->ptr = vg_host_alloc(size, align, &h->mapped);
	if (h->ptr == NULL) {
		free(h);
		return CL_OUT_OF_HOST_MEMORY;
	}
	cl_int err = CL_SUCCESS;
	*out = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, size, h->ptr, &err);
	if (err != CL_SUCCESS) {
		vg_host_free(h->ptr, h->size, h->mapped);
		free(h);
		return err;
	}
	err = clSetMemObjectDestructorCallback(*out, vg_host_destroyed, h);
	if (err != CL_SUCCESS) {
		// Without the callback the memory could be freed under the
		// runtime: leak it rather (never seen; the call cannot fail on a
		// valid buffer).
		free(h);
	}
	*host = h->ptr;
	return CL_SUCCESS;
}

// vg_caller_mem is the flag a buffer on the caller's memory
// (vg_create_buffer_on) sets when the runtime lets go of that memory.
static void CL_CALLBACK vg_caller_mem_released(cl_mem m, void *user) {
	(void)m;
	__atomic_store_n((int *)user, 1, __ATOMIC_RELEASE);
}

// vg_create_buffer_on creates a buffer of size bytes on the caller's
// memory at ptr; *released, allocated here, becomes 1 once the runtime
// has let go of that memory (and is freed by vg_caller_mem_done only
// then).
static cl_int vg_create_buffer_on(cl_context c, void *ptr, size_t size, cl_mem *out, int **released) {
	int *flag = calloc(1, sizeof *flag);
	if (flag == NULL) return CL_OUT_OF_HOST_MEMORY;
	cl_int err = CL_SUCCESS;
	*out = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, size, ptr, &err);
	if (err != CL_SUCCESS) {
		free(flag);
		return err;
	}
	err = clSetMemObjectDestructorCallback(*out, vg_caller_mem_released, flag);
	if (err != CL_SUCCESS) {
		// No word will ever come: the memory stays the runtime's.
		clReleaseMemObject(*out);
		free(flag);
		return err;
	}
	*released = flag;
	return CL_SUCCESS;
}

// vg_caller_mem_done reports whether the runtime let go of a buffer's
// caller memory, and frees the flag once it did (it is written no more).
static int vg_caller_mem_done(int *flag) {
	if (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) return 0;
	free(flag);
	return 1;
}

static int vg_all(const unsigned char *p, size_t n, unsigned char v) {
	for (size_t i = 0; i < n; i++)
		if (p[i] != v) return 0;
	return 1;
}

// vg_probe_host_backed reports whether the device works on a
// CL_MEM_USE_HOST_PTR buffer's host memory in place: bytes stored there
// without a map are what the device reads, what the device writes is
// there once its command is done, and a map returns that memory itself.
static int vg_probe_host_backed(cl_context c, cl_device_id d, size_t align) {
	enum { n = 4096 };
	unsigned char got[n];
	cl_int err = CL_SUCCESS;
	int ok = 0;
	cl_command_queue q = clCreateCommandQueue(c, d, 0, &err);
	if (err != CL_SUCCESS) return 0;
	cl_mem m = NULL, other = NULL;
	void *hp = NULL;
	if (vg_create_host_buffer(c, n, align, &m, &hp) != CL_SUCCESS) { m = NULL; goto out; }
	unsigned char *h = hp;
	other = clCreateBuffer(c, CL_MEM_READ_WRITE, n, NULL, &err);
	if (err != CL_SUCCESS) { other = NULL; goto out; }
	memset(h, 0xa5, n);
	if (clEnqueueCopyBuffer(q, m, other, 0, 0, n, 0, NULL, NULL) != CL_SUCCESS) goto out;
	if (clEnqueueReadBuffer(q, other, CL_TRUE, 0, n, got, 0, NULL, NULL) != CL_SUCCESS) goto out;
	if (!vg_all(got, n, 0xa5)) goto out;
	const unsigned char pat = 0x3c;
	if (clEnqueueFillBuffer(q, m, &pat, 1, 0, n, 0, NULL, NULL) != CL_SUCCESS) goto out;
	if (clFinish(q) != CL_SUCCESS || !vg_all(h, n, 0x3c)) goto out;
	void *p = clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ, 0, n, 0, NULL, NULL, &err);
	if (err != CL_SUCCESS) goto out;
	ok = p == (void *)h;
	if (clEnqueueUnmapMemObject(q, m, p, 0, NULL, NULL) != CL_SUCCESS || clFinish(q) != CL_SUCCESS) ok = 0;
out:
	clFinish(q);
	if (other) clReleaseMemObject(other);
	if (m) clReleaseMemObject(m);
	clReleaseCommandQueue(q);
	return ok;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Host-backed buffers (issue 42).
//
// On a CPU device that shares the host's memory (CL_DEVICE_HOST_UNIFIED_MEMORY)
// a buffer can live on host memory vgpud allocated itself
// (CL_MEM_USE_HOST_PTR), which the device's kernels use in place. A write
// or read of such a buffer is then a memory copy, not a command on the
// queue and a wait for it: on PoCL a blocking clEnqueueWriteBuffer of 4
// KiB costs ~30 µs, the copy nanoseconds. Open probes each device
// (vg_probe_host_backed) and only a device that passes gets host-backed
// buffers; every other device, a GPU's in particular, gets device memory
// as before. The host touches the memory only while no launch is
// enqueued on the queue and under the queue's lock, so it never races a
// kernel or a release: OpenCL leaves access outside a map undefined,
// which the probe replaces with what this device was seen to do.

// probeHostBacked reports whether d's buffers can be host-backed. It is
// called once, by Open.
func probeHostBacked(d *device) bool {
	var unified C.cl_bool
	if C.clGetDeviceInfo(d.id, C.CL_DEVICE_HOST_UNIFIED_MEMORY, C.size_t(unsafe.Sizeof(unified)), unsafe.Pointer(&unified), nil) != C.CL_SUCCESS {
		return false
	}
	if !d.info.CPU || unified == C.CL_FALSE {
		return false
	}
	return C.vg_probe_host_backed(d.ctx, d.id, C.size_t(d.hostAlign())) == 1
}

// hostAlign is the alignment of a host-backed buffer's memory: the
// device's base address alignment, and at least a cache line.
func (d *device) hostAlign() uint64 {
	return max(d.info.Caps.MemBaseAddrAlign/8, 64)
}

// allocHost creates b's memory as a host-backed buffer. q.mu is held.
func (q *queue) allocHost(b *buffer) error {
	var host unsafe.Pointer
	if err := clErr("clCreateBuffer", C.vg_create_host_buffer(q.dev.ctx, C.size_t(b.size), C.size_t(q.dev.hostAlign()), &b.mem, &host)); err != nil {
		return err
	}
	b.host = host
	return nil
}

// AllocOn makes a buffer on p, the caller's memory (HostAllocator).
func (q *queue) AllocOn(p []byte) (Buffer, error) {
	size := uint64(len(p))
	if !q.dev.hostBacked {
		return nil, fmt.Errorf("alloc on caller memory: %w", ErrUnsupported)
	}
	if err := q.dev.checkAllocSize(size); err != nil {
		return nil, fmt.Errorf("on caller memory: %w", err)
	}
	if uintptr(unsafe.Pointer(&p[0]))%uintptr(q.dev.hostAlign()) != 0 {
		return nil, fmt.Errorf("alloc on caller memory at %p: not aligned to %d bytes: %w", &p[0], q.dev.hostAlign(), ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return nil, q.closedErr("alloc")
	}
	b := &buffer{owner: q, size: size, host: unsafe.Pointer(&p[0])}
	if err := clErr("clCreateBuffer", C.vg_create_buffer_on(q.dev.ctx, b.host, C.size_t(size), &b.mem, &b.released)); err != nil {
		return nil, fmt.Errorf("alloc %d bytes on caller memory: %w", size, err)
	}
	q.buffers[b] = struct{}{}
	return b, nil
}

// ReleaseOn releases b, made by AllocOn, and reports whether the runtime
// let go of its memory (HostAllocator). A runtime that keeps a released
// buffer's memory only while commands use it has let go once the queue
// is finished, which ReleaseOn waits for when it must.
func (q *queue) ReleaseOn(b Buffer) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	bb, ok := b.(*buffer)
	if !ok || bb == nil || bb.owner != q || bb.released == nil {
		return false
	}
	bb.releaseLocked()
	if C.vg_caller_mem_done(bb.released) == 0 {
		if q.q != nil {
			C.clFinish(q.q)
		}
		if C.vg_caller_mem_done(bb.released) == 0 {
			return false
		}
	}
	bb.released = nil
	return true
}

var _ HostAllocator = (*queue)(nil)

// hostLocked returns n bytes of b's host memory at off, or nil when b is
// not host-backed or the queue has launches enqueued or being synced
// (whose kernels may be using it). The queue's mu must be held, and the bytes used only
// while it is.
func (b *buffer) hostLocked(off, n uint64) []byte {
	if q := b.owner; b.host == nil || b.mem == nil || len(q.enqueued) > 0 || q.syncing > 0 || q.q == nil {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(b.host, off)), n)
}

// Host calls f with n bytes of the buffer's own memory at off (HostBuffer).
func (b *buffer) Host(off, n uint64, f func(p []byte) error) (bool, error) {
	if err := span("host access", b.size, off, int(min(n, b.size+1))); err != nil {
		return false, err
	}
	b.owner.mu.Lock()
	defer b.owner.mu.Unlock()
	p := b.hostLocked(off, n)
	if p == nil {
		return false, nil
	}
	return true, f(p)
}

//go:build cgo

package gpu

/*
#cgo LDFLAGS: -lOpenCL
#define CL_TARGET_OPENCL_VERSION 120
#include <stdlib.h>
#include <CL/cl.h>

static cl_int vg_set_mem_arg(cl_kernel k, cl_uint i, cl_mem m) {
	return clSetKernelArg(k, i, sizeof(cl_mem), &m);
}

static cl_int vg_set_local_arg(cl_kernel k, cl_uint i, size_t n) {
	return clSetKernelArg(k, i, n, NULL);
}

static cl_int vg_create_context(cl_platform_id p, cl_device_id d, cl_context *out) {
	cl_context_properties props[3] = {CL_CONTEXT_PLATFORM, (cl_context_properties)p, 0};
	cl_int err = CL_SUCCESS;
	*out = clCreateContext(props, 1, &d, NULL, NULL, &err);
	return err;
}

static cl_int vg_create_queue(cl_context c, cl_device_id d, cl_command_queue *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateCommandQueue(c, d, CL_QUEUE_PROFILING_ENABLE, &err);
	return err;
}

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

static cl_int vg_create_program(cl_context c, const char *src, size_t len, cl_program *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateProgramWithSource(c, 1, &src, &len, &err);
	return err;
}

static cl_int vg_build(cl_program p, cl_device_id d, const char *opts) {
	return clBuildProgram(p, 1, &d, opts, NULL, NULL);
}

static cl_int vg_create_kernel(cl_program p, const char *name, cl_kernel *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateKernel(p, name, &err);
	return err;
}

// vg_enqueue enqueues k and returns its event (no wait).
static cl_int vg_enqueue(cl_command_queue q, cl_kernel k, cl_uint dims,
		size_t o0, size_t o1, size_t o2,
		size_t g0, size_t g1, size_t g2,
		size_t l0, size_t l1, size_t l2, int local, cl_event *ev) {
	size_t off[3] = {o0, o1, o2};
	size_t glob[3] = {g0, g1, g2};
	size_t loc[3] = {l0, l1, l2};
	return clEnqueueNDRangeKernel(q, k, dims, off, glob, local ? loc : NULL, 0, NULL, ev);
}

// vg_finish waits for ev, releases it and returns its device time in ns.
static cl_int vg_finish(cl_event ev, cl_ulong *ns, const char **op) {
	cl_int err = clWaitForEvents(1, &ev);
	if (err != CL_SUCCESS) {
		cl_int st = 0;
		*op = "kernel execution";
		if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) == CL_SUCCESS && st < 0) {
			err = st;
		}
		clReleaseEvent(ev);
		return err;
	}
	cl_ulong start = 0, end = 0;
	err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
	if (err == CL_SUCCESS) {
		err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
	}
	clReleaseEvent(ev);
	if (err != CL_SUCCESS) {
		*op = "clGetEventProfilingInfo";
		return err;
	}
	*ns = end > start ? end - start : 0;
	return CL_SUCCESS;
}
*/
import "C"

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

func clErr(op string, code C.cl_int) error {
	if code == C.CL_SUCCESS {
		return nil
	}
	return &CLError{Op: op, Code: int32(code)}
}

// entry is one enumerated device with its OpenCL handles.
type entry struct {
	info     Info
	platform C.cl_platform_id
	id       C.cl_device_id
}

// Devices lists every GPU, accelerator and CPU device of every installed
// OpenCL platform, in the order Open indexes them.
func Devices() ([]Info, error) {
	es, err := enumerate()
	if err != nil {
		return nil, err
	}
	infos := make([]Info, len(es))
	for i, e := range es {
		infos[i] = e.info
	}
	return infos, nil
}

func enumerate() ([]entry, error) {
	var n C.cl_uint
	code := C.clGetPlatformIDs(0, nil, &n)
	if code == clPlatformNotFoundKHR || (code == C.CL_SUCCESS && n == 0) {
		return nil, fmt.Errorf("%w: install an OpenCL ICD (e.g. apt-get install pocl-opencl-icd)", ErrNoPlatform)
	}
	if err := clErr("clGetPlatformIDs", code); err != nil {
		return nil, fmt.Errorf("list platforms: %w", err)
	}
	plats := make([]C.cl_platform_id, n)
	if err := clErr("clGetPlatformIDs", C.clGetPlatformIDs(n, &plats[0], &n)); err != nil {
		return nil, fmt.Errorf("list platforms: %w", err)
	}
	plats = plats[:n]
	var es []entry
	const types = C.CL_DEVICE_TYPE_GPU | C.CL_DEVICE_TYPE_ACCELERATOR | C.CL_DEVICE_TYPE_CPU
	for _, p := range plats {
		pname, err := platformString(p, C.CL_PLATFORM_NAME)
		if err != nil {
			return nil, err
		}
		var nd C.cl_uint
		code := C.clGetDeviceIDs(p, types, 0, nil, &nd)
		if code == C.CL_DEVICE_NOT_FOUND || (code == C.CL_SUCCESS && nd == 0) {
			continue
		}
		if err := clErr("clGetDeviceIDs", code); err != nil {
			return nil, fmt.Errorf("list devices of %q: %w", pname, err)
		}
		ids := make([]C.cl_device_id, nd)
		if err := clErr("clGetDeviceIDs", C.clGetDeviceIDs(p, types, nd, &ids[0], &nd)); err != nil {
			return nil, fmt.Errorf("list devices of %q: %w", pname, err)
		}
		for _, id := range ids[:nd] {
			info, err := deviceInfo(id)
			if err != nil {
				return nil, fmt.Errorf("query device of %q: %w", pname, err)
			}
			info.Index = len(es)
			info.Platform = pname
			es = append(es, entry{info: info, platform: p, id: id})
		}
	}
	if len(es) == 0 {
		return nil, fmt.Errorf("%w: no GPU, accelerator or CPU device on %d platform(s)", ErrNoDevice, len(plats))
	}
	return es, nil
}

func platformString(p C.cl_platform_id, param C.cl_platform_info) (string, error) {
	var n C.size_t
	if err := clErr("clGetPlatformInfo", C.clGetPlatformInfo(p, param, 0, nil, &n)); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	buf := make([]byte, n)
	if err := clErr("clGetPlatformInfo", C.clGetPlatformInfo(p, param, n, unsafe.Pointer(&buf[0]), nil)); err != nil {
		return "", err
	}
	return cString(buf), nil
}

func deviceString(d C.cl_device_id, param C.cl_device_info) (string, error) {
	var n C.size_t
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, param, 0, nil, &n)); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	buf := make([]byte, n)
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, param, n, unsafe.Pointer(&buf[0]), nil)); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// cString returns buf up to its first NUL.
func cString(buf []byte) string {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}

func deviceInfo(d C.cl_device_id) (Info, error) {
	var info Info
	for _, s := range []struct {
		param C.cl_device_info
		dst   *string
	}{
		{C.CL_DEVICE_NAME, &info.Name},
		{C.CL_DEVICE_VENDOR, &info.Vendor},
		{C.CL_DEVICE_VERSION, &info.Version},
		{C.CL_DRIVER_VERSION, &info.DriverVersion},
	} {
		v, err := deviceString(d, s.param)
		if err != nil {
			return Info{}, err
		}
		*s.dst = strings.TrimSpace(v)
	}
	var (
		cus   C.cl_uint
		ulong C.cl_ulong
		sz    C.size_t
		items [3]C.size_t
	)
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, C.CL_DEVICE_MAX_COMPUTE_UNITS, C.size_t(unsafe.Sizeof(cus)), unsafe.Pointer(&cus), nil)); err != nil {
		return Info{}, err
	}
	info.ComputeUnits = uint32(cus)
	var typ C.cl_device_type
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, C.CL_DEVICE_TYPE, C.size_t(unsafe.Sizeof(typ)), unsafe.Pointer(&typ), nil)); err != nil {
		return Info{}, err
	}
	info.CPU = typ&C.CL_DEVICE_TYPE_CPU != 0
	for _, u := range []struct {
		param C.cl_device_info
		dst   *uint64
	}{
		{C.CL_DEVICE_GLOBAL_MEM_SIZE, &info.GlobalMemBytes},
		{C.CL_DEVICE_MAX_MEM_ALLOC_SIZE, &info.MaxAllocBytes},
		{C.CL_DEVICE_LOCAL_MEM_SIZE, &info.LocalMemBytes},
	} {
		if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, u.param, C.size_t(unsafe.Sizeof(ulong)), unsafe.Pointer(&ulong), nil)); err != nil {
			return Info{}, err
		}
		*u.dst = uint64(ulong)
	}
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, C.CL_DEVICE_MAX_WORK_GROUP_SIZE, C.size_t(unsafe.Sizeof(sz)), unsafe.Pointer(&sz), nil)); err != nil {
		return Info{}, err
	}
	info.MaxWorkGroupSize = uint64(sz)
	var dims C.cl_uint
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, C.CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, C.size_t(unsafe.Sizeof(dims)), unsafe.Pointer(&dims), nil)); err != nil {
		return Info{}, err
	}
	if dims >= 3 {
		// Only the first three sizes fit Info; ask for exactly those when
		// the device reports exactly three, else read them all.
		all := make([]C.size_t, dims)
		if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, C.CL_DEVICE_MAX_WORK_ITEM_SIZES, C.size_t(len(all))*C.size_t(unsafe.Sizeof(sz)), unsafe.Pointer(&all[0]), nil)); err != nil {
			return Info{}, err
		}
		copy(items[:], all)
	} else if dims > 0 {
		if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(d, C.CL_DEVICE_MAX_WORK_ITEM_SIZES, C.size_t(dims)*C.size_t(unsafe.Sizeof(sz)), unsafe.Pointer(&items[0]), nil)); err != nil {
			return Info{}, err
		}
	}
	for i, v := range items {
		info.MaxWorkItemSizes[i] = uint64(v)
	}
	caps, err := deviceCaps(d)
	if err != nil {
		return Info{}, err
	}
	info.Caps = caps
	return info, nil
}

// clDeviceHalfFPConfig is CL_DEVICE_HALF_FP_CONFIG, defined in cl_ext.h.
const clDeviceHalfFPConfig = 0x1033

// deviceCaps reads the properties of Caps. The fp16 and fp64 configs and
// printf's buffer are optional: a device that refuses the query
// (CL_INVALID_VALUE) reports 0.
func deviceCaps(d C.cl_device_id) (Caps, error) {
	var c Caps
	var err error
	if c.Extensions, err = deviceString(d, C.CL_DEVICE_EXTENSIONS); err != nil {
		return Caps{}, err
	}
	type query struct {
		param    C.cl_device_info
		size     uintptr // of the value: 4 (cl_uint, cl_bool) or 8 (cl_ulong, cl_bitfield, size_t on 64-bit hosts)
		dst      *uint64
		optional bool
	}
	var endian uint64
	qs := []query{
		{C.CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, 8, &c.MaxConstantBufferSize, false},
		{C.CL_DEVICE_MAX_CONSTANT_ARGS, 4, &c.MaxConstantArgs, false},
		{C.CL_DEVICE_MAX_PARAMETER_SIZE, unsafe.Sizeof(C.size_t(0)), &c.MaxParameterSize, false},
		{C.CL_DEVICE_MEM_BASE_ADDR_ALIGN, 4, &c.MemBaseAddrAlign, false},
		{C.CL_DEVICE_MIN_DATA_TYPE_ALIGN_SIZE, 4, &c.MinDataTypeAlignSize, false},
		{C.CL_DEVICE_MAX_CLOCK_FREQUENCY, 4, &c.MaxClockFrequency, false},
		{C.CL_DEVICE_ADDRESS_BITS, 4, &c.AddressBits, false},
		{C.CL_DEVICE_SINGLE_FP_CONFIG, 8, &c.SingleFPConfig, false},
		{C.CL_DEVICE_DOUBLE_FP_CONFIG, 8, &c.DoubleFPConfig, true},
		{clDeviceHalfFPConfig, 8, &c.HalfFPConfig, true},
		{C.CL_DEVICE_PROFILING_TIMER_RESOLUTION, unsafe.Sizeof(C.size_t(0)), &c.ProfilingTimerResolution, false},
		{C.CL_DEVICE_PRINTF_BUFFER_SIZE, unsafe.Sizeof(C.size_t(0)), &c.PrintfBufferSize, true},
		{C.CL_DEVICE_ENDIAN_LITTLE, 4, &endian, false},
	}
	var pref, native [7]uint64
	for i, p := range []C.cl_device_info{C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_CHAR, C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_SHORT,
		C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_INT, C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_LONG, C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT,
		C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE, C.CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF} {
		qs = append(qs, query{p, 4, &pref[i], false})
	}
	for i, p := range []C.cl_device_info{C.CL_DEVICE_NATIVE_VECTOR_WIDTH_CHAR, C.CL_DEVICE_NATIVE_VECTOR_WIDTH_SHORT,
		C.CL_DEVICE_NATIVE_VECTOR_WIDTH_INT, C.CL_DEVICE_NATIVE_VECTOR_WIDTH_LONG, C.CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT,
		C.CL_DEVICE_NATIVE_VECTOR_WIDTH_DOUBLE, C.CL_DEVICE_NATIVE_VECTOR_WIDTH_HALF} {
		qs = append(qs, query{p, 4, &native[i], false})
	}
	for _, q := range qs {
		var (
			u32  C.cl_uint
			u64  C.cl_ulong
			code C.cl_int
		)
		if q.size == 4 {
			code = C.clGetDeviceInfo(d, q.param, C.size_t(unsafe.Sizeof(u32)), unsafe.Pointer(&u32), nil)
			u64 = C.cl_ulong(u32)
		} else {
			code = C.clGetDeviceInfo(d, q.param, C.size_t(unsafe.Sizeof(u64)), unsafe.Pointer(&u64), nil)
		}
		if q.optional && code == C.CL_INVALID_VALUE {
			continue
		}
		if err := clErr("clGetDeviceInfo", code); err != nil {
			return Caps{}, fmt.Errorf("device info %#x: %w", int(q.param), err)
		}
		*q.dst = uint64(u64)
	}
	for i := range pref {
		c.PreferredVectorWidth[i], c.NativeVectorWidth[i] = uint32(pref[i]), uint32(native[i])
	}
	c.EndianLittle = endian != 0
	return c, nil
}

// Open opens a device. selector "" picks the first device, a decimal number
// is an index into Devices(), anything else is a case-insensitive substring
// of exactly one device's name (e.g. "pthread" under PoCL).
func Open(selector string) (Device, error) {
	es, err := enumerate()
	if err != nil {
		return nil, err
	}
	infos := make([]Info, len(es))
	for i, e := range es {
		infos[i] = e.info
	}
	n, err := pick(infos, selector)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", selector, err)
	}
	e := es[n]
	d := &device{info: e.info, id: e.id, queues: make(map[*queue]struct{})}
	var typ C.cl_device_type
	if err := clErr("clGetDeviceInfo", C.clGetDeviceInfo(e.id, C.CL_DEVICE_TYPE, C.size_t(unsafe.Sizeof(typ)), unsafe.Pointer(&typ), nil)); err != nil {
		return nil, fmt.Errorf("open %s: %w", e.info.Name, err)
	}
	// Only a GPU runs kernels off the host's CPU for certain: a CPU or an
	// accelerator device (an FPGA emulator, say) may run them on it.
	d.offHost = typ&C.CL_DEVICE_TYPE_GPU != 0 && typ&(C.CL_DEVICE_TYPE_CPU|C.CL_DEVICE_TYPE_ACCELERATOR) == 0
	if err := clErr("clCreateContext", C.vg_create_context(e.platform, e.id, &d.ctx)); err != nil {
		return nil, fmt.Errorf("open %s: %w", e.info.Name, err)
	}
	return d, nil
}

// device is a Device: one cl_context on one cl_device_id.
//
// Lock order: queue.mu, then device.mu. Device.Close collects the queues
// under device.mu and closes each after unlocking it.
type device struct {
	info    Info
	id      C.cl_device_id
	offHost bool // CL_DEVICE_TYPE_GPU: kernels do not run on the host's CPU (SourceTarget)

	ctx C.cl_context // released by Close after every queue is closed

	mu     sync.Mutex
	closed bool
	queues map[*queue]struct{}
	// predefined caches the compiler's answers (queue.predefined): per
	// build options, whether it predefines a name.
	predefined map[string]map[string]bool
}

func (d *device) Info() Info { return d.info }

func (d *device) NewQueue() (Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("new queue on %s: %w", d.info.Name, ErrClosed)
	}
	q := &queue{dev: d, buffers: make(map[*buffer]struct{}), programs: make(map[*program]struct{})}
	if err := clErr("clCreateCommandQueue", C.vg_create_queue(d.ctx, d.id, &q.q)); err != nil {
		return nil, fmt.Errorf("new queue on %s: %w", d.info.Name, err)
	}
	d.queues[q] = struct{}{}
	return q, nil
}

// Close closes every queue still open on the device, waiting for work in
// progress, then releases the context. It is idempotent.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qs := make([]*queue, 0, len(d.queues))
	for q := range d.queues {
		qs = append(qs, q)
	}
	clear(d.queues)
	d.mu.Unlock()
	var first error
	for _, q := range qs {
		if err := q.Close(); err != nil && first == nil {
			first = err
		}
	}
	if err := clErr("clReleaseContext", C.clReleaseContext(d.ctx)); err != nil && first == nil {
		first = err
	}
	return first
}

// queue is a Queue. Its mutex serialises every OpenCL call on the queue and
// on the buffers, programs and kernels it created, so Close and Release are
// safe against work in progress; callers still use a queue from one
// goroutine at a time.
type queue struct {
	dev *device

	mu       sync.Mutex
	q        C.cl_command_queue // nil once closed
	buffers  map[*buffer]struct{}
	programs map[*program]struct{}
	enqueued []enqueued // launches not yet synced (Pipeliner)
}

var _ Pipeliner = (*queue)(nil)

// enqueued is a launch Enqueue started: its kernel's name and event.
type enqueued struct {
	name string
	ev   C.cl_event
}

// buffer, program and kernel fields other than the handles are immutable;
// the handles are guarded by owner.mu and nil once released.
type buffer struct {
	owner *queue
	size  uint64
	mem   C.cl_mem
}

type program struct {
	owner   *queue
	names   []string
	prog    C.cl_program
	kernels map[string]*kernel
}

// argKind is what a kernel parameter needs: a buffer, __local bytes or a
// by-value scalar; argUnknown when the implementation does not say.
type argKind uint8

const (
	argUnknown argKind = iota
	argBuffer
	argLocal
	argScalar
	argUnsupported // images, samplers, pipes: never set from bytes
)

type kernel struct {
	prog  *program
	name  string
	args  []argKind
	types []string
	k     C.cl_kernel
}

func (q *queue) closedErr(op string) error {
	return fmt.Errorf("%s: queue: %w", op, ErrClosed)
}

func (q *queue) Alloc(size uint64) (Buffer, error) {
	if size == 0 || size > q.dev.info.MaxAllocBytes {
		return nil, fmt.Errorf("alloc %d bytes: size must be 1..%d (device max allocation): %w",
			size, q.dev.info.MaxAllocBytes, &CLError{Op: "clCreateBuffer", Code: -61})
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return nil, q.closedErr("alloc")
	}
	b := &buffer{owner: q, size: size}
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

func (q *queue) Write(b Buffer, off uint64, p []byte) error { return q.transfer("write", b, off, p) }

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

func (q *queue) Build(source, options string) (Program, string, error) {
	target := SourceTarget{
		OffHost:    q.dev.offHost,
		Predefined: func(names []string) (map[string]bool, error) { return q.predefined(options, names) },
	}
	if err := CheckSourceFor(source, options, target); err != nil {
		return nil, err.Error(), err // the log says why, for the program's author
	}
	if source == "" {
		return nil, "", fmt.Errorf("build: empty source: %w", ErrBuildFailed)
	}
	// Argument info lets Launch check that each argument is of the kind
	// the kernel expects, so a scalar can never be taken for a cl_mem.
	opts := C.CString(options + " -cl-kernel-arg-info")
	defer C.free(unsafe.Pointer(opts))
	src := (*C.char)(C.CBytes([]byte(source)))
	defer C.free(unsafe.Pointer(src))

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return nil, "", q.closedErr("build")
	}
	p := &program{owner: q, kernels: make(map[string]*kernel)}
	if err := clErr("clCreateProgramWithSource", C.vg_create_program(q.dev.ctx, src, C.size_t(len(source)), &p.prog)); err != nil {
		return nil, "", fmt.Errorf("build: %w", err)
	}
	code := C.vg_build(p.prog, q.dev.id, opts)
	log := q.buildLog(p.prog)
	if err := clErr("clBuildProgram", code); err != nil {
		C.clReleaseProgram(p.prog)
		return nil, log, fmt.Errorf("build: %w", err)
	}
	names, err := kernelNames(p.prog)
	if err != nil {
		C.clReleaseProgram(p.prog)
		return nil, log, fmt.Errorf("build: %w", err)
	}
	p.names = names
	q.programs[p] = struct{}{}
	return p, log, nil
}

// Bounds of the cache of predefined names: past them it is emptied.
const (
	maxPredefinedOptions = 64
	maxPredefinedCached  = 1 << 16
)

// predefined reports which of names the device's compiler predefines as
// macros when it builds with options (SourceTarget.Predefined). It asks
// the compiler itself: it builds a program with one empty kernel under
// "#ifdef NAME" per name not yet cached, and reads which kernels it got.
// Only plain identifiers are asked (CheckSourceFor asks no other); the
// answers are cached on the device, per options.
func (q *queue) predefined(options string, names []string) (map[string]bool, error) {
	d := q.dev
	out := make(map[string]bool, len(names))
	var ask []string
	d.mu.Lock()
	cached := d.predefined[options]
	for _, n := range names {
		if v, ok := cached[n]; ok {
			out[n] = v
		} else if isPlainIdent(n) {
			ask = append(ask, n)
		}
	}
	d.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	var src strings.Builder
	for i, n := range ask {
		fmt.Fprintf(&src, "#ifdef %s\n__kernel void vgpud_predefined_%d(void) {}\n#endif\n", n, i)
	}
	// A program without kernels is valid, but some compilers reject an
	// empty translation unit.
	src.WriteString("__kernel void vgpud_predefined(void) {}\n")
	opts := C.CString(options + " -cl-kernel-arg-info")
	defer C.free(unsafe.Pointer(opts))
	text := (*C.char)(C.CBytes([]byte(src.String())))
	defer C.free(unsafe.Pointer(text))

	q.mu.Lock()
	if q.q == nil {
		q.mu.Unlock()
		return nil, q.closedErr("build")
	}
	var prog C.cl_program
	if err := clErr("clCreateProgramWithSource", C.vg_create_program(d.ctx, text, C.size_t(src.Len()), &prog)); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	code := C.vg_build(prog, d.id, opts)
	var kernels []string
	err := clErr("clBuildProgram", code)
	if err == nil {
		kernels, err = kernelNames(prog)
	}
	C.clReleaseProgram(prog)
	q.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("reading the compiler's predefined macros: %w", err)
	}
	got := make(map[string]bool, len(kernels))
	for _, k := range kernels {
		got[k] = true
	}
	if !got["vgpud_predefined"] {
		return nil, fmt.Errorf("reading the compiler's predefined macros: the probe's kernels are missing (%d names)", len(kernels))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.predefined == nil || len(d.predefined) >= maxPredefinedOptions && d.predefined[options] == nil ||
		len(d.predefined[options])+len(ask) > maxPredefinedCached {
		d.predefined = make(map[string]map[string]bool)
	}
	if d.predefined[options] == nil {
		d.predefined[options] = make(map[string]bool)
	}
	for i, n := range ask {
		v := got[fmt.Sprintf("vgpud_predefined_%d", i)]
		out[n] = v
		d.predefined[options][n] = v
	}
	return out, nil
}

// Bounds of a build log: a log larger than maxLogRead is not read at all
// (a source can make the compiler write gigabytes of warnings), and the
// log returned is cut at MaxBuildLog.
const (
	maxLogRead  = 16 << 20
	MaxBuildLog = 64 << 10
)

func (q *queue) buildLog(p C.cl_program) string {
	var n C.size_t
	if C.clGetProgramBuildInfo(p, q.dev.id, C.CL_PROGRAM_BUILD_LOG, 0, nil, &n) != C.CL_SUCCESS || n == 0 {
		return ""
	}
	if n > maxLogRead {
		return fmt.Sprintf("(a build log of %d bytes, over %d, was not read)", n, maxLogRead)
	}
	buf := make([]byte, n)
	if C.clGetProgramBuildInfo(p, q.dev.id, C.CL_PROGRAM_BUILD_LOG, n, unsafe.Pointer(&buf[0]), nil) != C.CL_SUCCESS {
		return ""
	}
	log := strings.TrimSpace(cString(buf))
	if len(log) > MaxBuildLog {
		log = log[:MaxBuildLog]
	}
	return log
}

func kernelNames(p C.cl_program) ([]string, error) {
	var n C.size_t
	if err := clErr("clGetProgramInfo", C.clGetProgramInfo(p, C.CL_PROGRAM_KERNEL_NAMES, 0, nil, &n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	buf := make([]byte, n)
	if err := clErr("clGetProgramInfo", C.clGetProgramInfo(p, C.CL_PROGRAM_KERNEL_NAMES, n, unsafe.Pointer(&buf[0]), nil)); err != nil {
		return nil, err
	}
	var names []string
	for _, s := range strings.Split(cString(buf), ";") {
		if s = strings.TrimSpace(s); s != "" {
			names = append(names, s)
		}
	}
	return names, nil
}

// Launch runs k over r and waits for it, returning its device time.
func (q *queue) Launch(k Kernel, r NDRange, args []Arg) (time.Duration, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kk, ev, err := q.startLocked(k, r, args)
	if err != nil {
		return 0, err
	}
	var (
		ns C.cl_ulong
		op *C.char
	)
	if code := C.vg_finish(ev, &ns, &op); code != C.CL_SUCCESS {
		return 0, fmt.Errorf("launch %s: %w", kk.name, &CLError{Op: C.GoString(op), Code: int32(code)})
	}
	return time.Duration(min(uint64(ns), math.MaxInt64)), nil
}

// Enqueue starts k over r with args and returns without waiting
// (gpu.Pipeliner): the launch's outcome is one of the next Sync's.
func (q *queue) Enqueue(k Kernel, r NDRange, args []Arg) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	kk, ev, err := q.startLocked(k, r, args)
	if err != nil {
		return err
	}
	q.enqueued = append(q.enqueued, enqueued{name: kk.name, ev: ev})
	return nil
}

// startLocked checks a launch, sets its arguments and enqueues it,
// returning its event. Arguments are captured when the launch is
// enqueued (OpenCL 1.2 section 5.9.2), so the next launch may set them
// anew. q.mu must be held.
func (q *queue) startLocked(k Kernel, r NDRange, args []Arg) (*kernel, C.cl_event, error) {
	kk, ok := k.(*kernel)
	if !ok || kk == nil {
		return nil, nil, fmt.Errorf("launch: kernel %T is not an OpenCL kernel of this package: %w", k, ErrForeign)
	}
	if err := checkRange(r); err != nil {
		return nil, nil, fmt.Errorf("launch %s: %w", kk.name, err)
	}
	if len(args) != len(kk.args) {
		return nil, nil, fmt.Errorf("launch %s: %d arguments, kernel takes %d: %w", kk.name, len(args), len(kk.args), ErrInvalidLaunch)
	}
	if q.q == nil {
		return nil, nil, q.closedErr("launch")
	}
	if kk.prog.owner != q {
		return nil, nil, fmt.Errorf("launch %s: kernel: %w", kk.name, ErrForeign)
	}
	if kk.k == nil {
		return nil, nil, fmt.Errorf("launch %s: kernel: %w", kk.name, ErrClosed)
	}
	for i, a := range args {
		if err := q.setArg(kk, i, a); err != nil {
			return nil, nil, fmt.Errorf("launch %s: argument %d: %w", kk.name, i, err)
		}
	}
	var local C.int
	if r.Local != ([3]uint64{}) {
		local = 1
	}
	var ev C.cl_event
	code := C.vg_enqueue(q.q, kk.k, C.cl_uint(r.Dims),
		C.size_t(r.Offset[0]), C.size_t(r.Offset[1]), C.size_t(r.Offset[2]),
		C.size_t(r.Global[0]), C.size_t(r.Global[1]), C.size_t(r.Global[2]),
		C.size_t(r.Local[0]), C.size_t(r.Local[1]), C.size_t(r.Local[2]), local, &ev)
	if code != C.CL_SUCCESS {
		return nil, nil, fmt.Errorf("launch %s: %w", kk.name, &CLError{Op: "clEnqueueNDRangeKernel", Code: int32(code)})
	}
	return kk, ev, nil
}

// Sync waits for the launches enqueued since the last Sync and returns
// their outcomes in order (gpu.Pipeliner).
func (q *queue) Sync() []LaunchResult {
	q.mu.Lock()
	pending := q.enqueued
	q.enqueued = nil
	q.mu.Unlock()
	out := make([]LaunchResult, len(pending))
	for i, e := range pending {
		var (
			ns C.cl_ulong
			op *C.char
		)
		if code := C.vg_finish(e.ev, &ns, &op); code != C.CL_SUCCESS {
			out[i].Err = fmt.Errorf("launch %s: %w", e.name, &CLError{Op: C.GoString(op), Code: int32(code)})
			continue
		}
		out[i].Device = time.Duration(min(uint64(ns), math.MaxInt64))
	}
	return out
}

// checkRange validates the index space. Entries beyond Dims may be 0 or 1
// (Offset 0); anything else there is a caller's mistake, not ignored.
func checkRange(r NDRange) error {
	if r.Dims < 1 || r.Dims > 3 {
		return fmt.Errorf("%d dimensions, want 1..3: %w", r.Dims, ErrInvalidLaunch)
	}
	hasLocal := r.Local != ([3]uint64{})
	for i := 0; i < 3; i++ {
		if i >= r.Dims {
			if r.Global[i] > 1 || r.Local[i] > 1 || r.Offset[i] != 0 {
				return fmt.Errorf("dimension %d set beyond %d dimensions: %w", i, r.Dims, ErrInvalidLaunch)
			}
			continue
		}
		if r.Global[i] == 0 {
			return fmt.Errorf("global size %d is zero: %w", i, ErrInvalidLaunch)
		}
		if hasLocal && r.Local[i] == 0 {
			return fmt.Errorf("local size %d is zero while others are set: %w", i, ErrInvalidLaunch)
		}
		if r.Offset[i] > math.MaxUint64-r.Global[i] {
			return fmt.Errorf("offset+global of dimension %d overflows: %w", i, ErrInvalidLaunch)
		}
	}
	return nil
}

// setArg sets argument i of k. q.mu must be held.
func (q *queue) setArg(k *kernel, i int, a Arg) error {
	set := 0
	if a.Buffer != nil {
		set++
	}
	if len(a.Scalar) > 0 {
		set++
	}
	if a.Local > 0 {
		set++
	}
	if set != 1 {
		return fmt.Errorf("%d of buffer, scalar and local set, want exactly one: %w", set, ErrInvalidLaunch)
	}
	want := k.args[i]
	var got argKind
	switch {
	case a.Buffer != nil:
		got = argBuffer
	case a.Local > 0:
		got = argLocal
	default:
		got = argScalar
	}
	if want == argUnsupported {
		return fmt.Errorf("parameter type %q cannot be set: %w", k.types[i], ErrInvalidLaunch)
	}
	if want != argUnknown && want != got {
		return fmt.Errorf("parameter of type %q needs a %s, got a %s: %w", k.types[i], want, got, ErrInvalidLaunch)
	}
	var code C.cl_int
	switch got {
	case argBuffer:
		b, err := q.checkBuffer("set argument", a.Buffer)
		if err != nil {
			return err
		}
		code = C.vg_set_mem_arg(k.k, C.cl_uint(i), b.mem)
	case argLocal:
		code = C.vg_set_local_arg(k.k, C.cl_uint(i), C.size_t(a.Local))
	case argScalar:
		if want == argUnknown && len(a.Scalar) == int(unsafe.Sizeof(C.cl_mem(nil))) {
			// Without argument info a pointer-sized scalar could be
			// taken for a cl_mem handle and dereferenced.
			return fmt.Errorf("pointer-sized scalar for a parameter of unknown kind: %w", ErrInvalidLaunch)
		}
		code = C.clSetKernelArg(k.k, C.cl_uint(i), C.size_t(len(a.Scalar)), unsafe.Pointer(&a.Scalar[0]))
	}
	return clErr("clSetKernelArg", code)
}

func (k argKind) String() string {
	switch k {
	case argBuffer:
		return "buffer"
	case argLocal:
		return "local size"
	case argScalar:
		return "scalar"
	case argUnsupported:
		return "unsupported object"
	}
	return "unknown"
}

// Close releases every buffer, program and kernel of the queue and the
// queue itself, after work in progress. It is idempotent.
func (q *queue) Close() error {
	q.mu.Lock()
	var first error
	if q.q != nil {
		// Launches never synced: wait for them (their buffers are about
		// to go) and drop their outcomes.
		for _, e := range q.enqueued {
			C.clWaitForEvents(1, &e.ev)
			C.clReleaseEvent(e.ev)
		}
		q.enqueued = nil
		for b := range q.buffers {
			b.releaseLocked()
		}
		for p := range q.programs {
			p.releaseLocked()
		}
		first = clErr("clReleaseCommandQueue", C.clReleaseCommandQueue(q.q))
		q.q = nil
	}
	q.mu.Unlock()
	q.dev.mu.Lock()
	delete(q.dev.queues, q)
	q.dev.mu.Unlock()
	return first
}

func (b *buffer) Size() uint64 { return b.size }

// Release frees the buffer's device memory. It is idempotent.
func (b *buffer) Release() {
	b.owner.mu.Lock()
	defer b.owner.mu.Unlock()
	b.releaseLocked()
}

func (b *buffer) releaseLocked() {
	if b.mem != nil {
		C.clReleaseMemObject(b.mem)
		b.mem = nil
	}
	delete(b.owner.buffers, b)
}

// Kernel returns the (cached) kernel named name.
func (p *program) Kernel(name string) (Kernel, error) {
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	if p.prog == nil {
		return nil, fmt.Errorf("kernel %q: program: %w", name, ErrClosed)
	}
	if k, ok := p.kernels[name]; ok {
		return k, nil
	}
	found := false
	for _, n := range p.names {
		found = found || n == name
	}
	if !found || strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("kernel %q (program has %s): %w", name, strings.Join(p.names, ", "), &CLError{Op: "clCreateKernel", Code: clInvalidKernelName})
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	k := &kernel{prog: p, name: name}
	if err := clErr("clCreateKernel", C.vg_create_kernel(p.prog, cname, &k.k)); err != nil {
		return nil, fmt.Errorf("kernel %q: %w", name, err)
	}
	if err := k.describeArgs(); err != nil {
		C.clReleaseKernel(k.k)
		return nil, fmt.Errorf("kernel %q: %w", name, err)
	}
	p.kernels[name] = k
	return k, nil
}

// describeArgs fills k.args and k.types from the kernel's argument info.
func (k *kernel) describeArgs() error {
	var n C.cl_uint
	if err := clErr("clGetKernelInfo", C.clGetKernelInfo(k.k, C.CL_KERNEL_NUM_ARGS, C.size_t(unsafe.Sizeof(n)), unsafe.Pointer(&n), nil)); err != nil {
		return err
	}
	k.args = make([]argKind, n)
	k.types = make([]string, n)
	for i := range k.args {
		var aq C.cl_kernel_arg_address_qualifier
		code := C.clGetKernelArgInfo(k.k, C.cl_uint(i), C.CL_KERNEL_ARG_ADDRESS_QUALIFIER, C.size_t(unsafe.Sizeof(aq)), unsafe.Pointer(&aq), nil)
		if code == clKernelArgInfoNotAvailable {
			continue // argUnknown: setArg is conservative
		}
		if err := clErr("clGetKernelArgInfo", code); err != nil {
			return err
		}
		typ, err := k.argString(i, C.CL_KERNEL_ARG_TYPE_NAME)
		if err != nil {
			return err
		}
		k.types[i] = typ
		switch {
		case aq == C.CL_KERNEL_ARG_ADDRESS_LOCAL:
			k.args[i] = argLocal
		case aq == C.CL_KERNEL_ARG_ADDRESS_GLOBAL || aq == C.CL_KERNEL_ARG_ADDRESS_CONSTANT:
			k.args[i] = argBuffer
			if !strings.HasSuffix(typ, "*") {
				k.args[i] = argUnsupported // images, pipes
			}
		case strings.HasSuffix(typ, "*") || strings.Contains(typ, "image") ||
			strings.Contains(typ, "sampler") || strings.Contains(typ, "pipe") ||
			strings.Contains(typ, "event") || strings.Contains(typ, "queue"):
			k.args[i] = argUnsupported
		default:
			k.args[i] = argScalar
		}
	}
	return nil
}

func (k *kernel) argString(i int, param C.cl_kernel_arg_info) (string, error) {
	var n C.size_t
	if err := clErr("clGetKernelArgInfo", C.clGetKernelArgInfo(k.k, C.cl_uint(i), param, 0, nil, &n)); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	buf := make([]byte, n)
	if err := clErr("clGetKernelArgInfo", C.clGetKernelArgInfo(k.k, C.cl_uint(i), param, n, unsafe.Pointer(&buf[0]), nil)); err != nil {
		return "", err
	}
	return strings.TrimSpace(cString(buf)), nil
}

func (p *program) KernelNames() []string { return append([]string(nil), p.names...) }

// Info describes every kernel of the program: it creates them all
// (clCreateKernelsInProgram), queries each and releases them.
func (p *program) Info() ([]KernelInfo, error) {
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	if p.prog == nil {
		return nil, fmt.Errorf("program info: program: %w", ErrClosed)
	}
	var n C.cl_uint
	if err := clErr("clCreateKernelsInProgram", C.clCreateKernelsInProgram(p.prog, 0, nil, &n)); err != nil {
		return nil, fmt.Errorf("program info: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	ks := make([]C.cl_kernel, n)
	if err := clErr("clCreateKernelsInProgram", C.clCreateKernelsInProgram(p.prog, n, &ks[0], nil)); err != nil {
		return nil, fmt.Errorf("program info: %w", err)
	}
	defer func() {
		for _, k := range ks {
			C.clReleaseKernel(k)
		}
	}()
	infos := make([]KernelInfo, 0, n)
	for _, k := range ks {
		ki, err := kernelInfo(k, p.owner.dev.id)
		if err != nil {
			return nil, fmt.Errorf("program info: %w", err)
		}
		infos = append(infos, ki)
	}
	slices.SortFunc(infos, func(a, b KernelInfo) int { return strings.Compare(a.Name, b.Name) })
	return infos, nil
}

// kernelInfo queries one kernel of a program on device dev.
func kernelInfo(k C.cl_kernel, dev C.cl_device_id) (KernelInfo, error) {
	var ki KernelInfo
	name, err := infoString(func(n C.size_t, v unsafe.Pointer, ret *C.size_t) C.cl_int {
		return C.clGetKernelInfo(k, C.CL_KERNEL_FUNCTION_NAME, n, v, ret)
	})
	if err != nil {
		return ki, fmt.Errorf("clGetKernelInfo: %w", err)
	}
	ki.Name = name
	var nargs C.cl_uint
	if err := clErr("clGetKernelInfo", C.clGetKernelInfo(k, C.CL_KERNEL_NUM_ARGS, C.size_t(unsafe.Sizeof(nargs)), unsafe.Pointer(&nargs), nil)); err != nil {
		return ki, fmt.Errorf("kernel %q: %w", name, err)
	}
	var (
		wg, mult C.size_t
		cwg      [3]C.size_t
		lmem     C.cl_ulong
		pmem     C.cl_ulong
	)
	for _, q := range []struct {
		param C.cl_kernel_work_group_info
		size  uintptr
		v     unsafe.Pointer
	}{
		{C.CL_KERNEL_WORK_GROUP_SIZE, unsafe.Sizeof(wg), unsafe.Pointer(&wg)},
		{C.CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, unsafe.Sizeof(mult), unsafe.Pointer(&mult)},
		{C.CL_KERNEL_COMPILE_WORK_GROUP_SIZE, unsafe.Sizeof(cwg), unsafe.Pointer(&cwg[0])},
		{C.CL_KERNEL_LOCAL_MEM_SIZE, unsafe.Sizeof(lmem), unsafe.Pointer(&lmem)},
		{C.CL_KERNEL_PRIVATE_MEM_SIZE, unsafe.Sizeof(pmem), unsafe.Pointer(&pmem)},
	} {
		if err := clErr("clGetKernelWorkGroupInfo", C.clGetKernelWorkGroupInfo(k, dev, q.param, C.size_t(q.size), q.v, nil)); err != nil {
			return ki, fmt.Errorf("kernel %q: %w", name, err)
		}
	}
	ki.WorkGroupSize, ki.PreferredMultiple = uint64(wg), uint64(mult)
	ki.LocalMemSize, ki.PrivateMemSize = uint64(lmem), uint64(pmem)
	for i := range cwg {
		ki.CompileWorkGroupSize[i] = uint64(cwg[i])
	}
	ki.Args = make([]ArgInfo, nargs)
	for i := range ki.Args {
		a := &ki.Args[i]
		var addr, access C.cl_uint
		var typ C.cl_bitfield
		code := C.clGetKernelArgInfo(k, C.cl_uint(i), C.CL_KERNEL_ARG_ADDRESS_QUALIFIER, C.size_t(unsafe.Sizeof(addr)), unsafe.Pointer(&addr), nil)
		if code == clKernelArgInfoNotAvailable {
			continue // reported as zero: the program was not built with argument info
		}
		if err := clErr("clGetKernelArgInfo", code); err != nil {
			return ki, fmt.Errorf("kernel %q argument %d: %w", name, i, err)
		}
		if err := clErr("clGetKernelArgInfo", C.clGetKernelArgInfo(k, C.cl_uint(i), C.CL_KERNEL_ARG_ACCESS_QUALIFIER, C.size_t(unsafe.Sizeof(access)), unsafe.Pointer(&access), nil)); err != nil {
			return ki, fmt.Errorf("kernel %q argument %d: %w", name, i, err)
		}
		if err := clErr("clGetKernelArgInfo", C.clGetKernelArgInfo(k, C.cl_uint(i), C.CL_KERNEL_ARG_TYPE_QUALIFIER, C.size_t(unsafe.Sizeof(typ)), unsafe.Pointer(&typ), nil)); err != nil {
			return ki, fmt.Errorf("kernel %q argument %d: %w", name, i, err)
		}
		a.AddressQualifier, a.AccessQualifier, a.TypeQualifier = uint32(addr), uint32(access), uint32(typ)
		for _, s := range []struct {
			param C.cl_kernel_arg_info
			dst   *string
		}{{C.CL_KERNEL_ARG_TYPE_NAME, &a.TypeName}, {C.CL_KERNEL_ARG_NAME, &a.Name}} {
			v, err := infoString(func(n C.size_t, v unsafe.Pointer, ret *C.size_t) C.cl_int {
				return C.clGetKernelArgInfo(k, C.cl_uint(i), s.param, n, v, ret)
			})
			if err != nil {
				return ki, fmt.Errorf("kernel %q argument %d: clGetKernelArgInfo: %w", name, i, err)
			}
			*s.dst = v
		}
	}
	return ki, nil
}

// maxInfoString bounds a string an info query returns: names and type
// names, which a compiler keeps short.
const maxInfoString = 64 << 10

// infoString runs an OpenCL string query (size first, then the bytes).
func infoString(get func(n C.size_t, v unsafe.Pointer, ret *C.size_t) C.cl_int) (string, error) {
	var n C.size_t
	if err := clErr("info query", get(0, nil, &n)); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	if n > maxInfoString {
		return "", fmt.Errorf("a string of %d bytes: %w", n, ErrDevice)
	}
	buf := make([]byte, n)
	if err := clErr("info query", get(n, unsafe.Pointer(&buf[0]), nil)); err != nil {
		return "", err
	}
	return strings.TrimSpace(cString(buf)), nil
}

// Size is the size of the program's built binary on its device
// (CL_PROGRAM_BINARY_SIZES), 0 if the implementation does not say: the
// part of a program's memory a quota can count.
func (p *program) Size() uint64 {
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	if p.prog == nil {
		return 0
	}
	var size C.size_t
	if C.clGetProgramInfo(p.prog, C.CL_PROGRAM_BINARY_SIZES, C.size_t(unsafe.Sizeof(size)), unsafe.Pointer(&size), nil) != C.CL_SUCCESS {
		return 0
	}
	return uint64(size)
}

// Release frees the program and its kernels. It is idempotent.
func (p *program) Release() {
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	p.releaseLocked()
}

func (p *program) releaseLocked() {
	for _, k := range p.kernels {
		k.releaseLocked()
	}
	if p.prog != nil {
		C.clReleaseProgram(p.prog)
		p.prog = nil
	}
	delete(p.owner.programs, p)
}

func (k *kernel) Name() string { return k.name }
func (k *kernel) NumArgs() int { return len(k.args) }

// Release frees the kernel; the program's next Kernel call for the same
// name creates a new one. It is idempotent.
func (k *kernel) Release() {
	k.prog.owner.mu.Lock()
	defer k.prog.owner.mu.Unlock()
	k.releaseLocked()
}

func (k *kernel) releaseLocked() {
	if k.k != nil {
		C.clReleaseKernel(k.k)
		k.k = nil
	}
	if k.prog.kernels[k.name] == k {
		delete(k.prog.kernels, k.name)
	}
}

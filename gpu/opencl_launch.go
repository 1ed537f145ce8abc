//go:build cgo

package gpu

/*
#include "opencl_cgo.h"

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

static cl_int vg_set_mem_arg(cl_kernel k, cl_uint i, cl_mem m) {
	return clSetKernelArg(k, i, sizeof(cl_mem), &m);
}

static cl_int vg_set_local_arg(cl_kernel k, cl_uint i, size_t n) {
	return clSetKernelArg(k, i, n, NULL);
}
*/
import "C"

import (
	"fmt"
	"math"
	"time"
	"unsafe"
)

// Launch runs k over r and waits for it, returning its device time.
func (q *queue) Launch(k Kernel, r NDRange, args []Arg) (time.Duration, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kk, ev, tail, err := q.startLocked(k, r, args)
	if err != nil {
		return 0, err
	}
	var (
		ns C.cl_ulong
		op *C.char
	)
	if code := C.vg_finish(ev, &ns, &op); code != C.CL_SUCCESS {
		waitTail(tail)
		return 0, fmt.Errorf("launch %s: %w", kk.name, &CLError{Op: C.GoString(op), Code: int32(code)})
	}
	if err := waitTail(tail); err != nil {
		return 0, fmt.Errorf("launch %s: %w", kk.name, err)
	}
	return time.Duration(min(uint64(ns), math.MaxInt64)), nil
}

// Enqueue starts k over r with args and returns without waiting
// (gpu.Pipeliner): the launch's outcome is one of the next Sync's.
func (q *queue) Enqueue(k Kernel, r NDRange, args []Arg) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	kk, ev, tail, err := q.startLocked(k, r, args)
	if err != nil {
		return err
	}
	q.enqueued = append(q.enqueued, enqueued{name: kk.name, ev: ev, tail: tail})
	return nil
}

// startLocked checks a launch, sets its arguments and enqueues it,
// returning its event and, where it copies images back, the event of
// the last copy (nil otherwise), which the caller waits for after the
// kernel's. Arguments are captured when the launch is
// enqueued (OpenCL 1.2 section 5.9.2), so the next launch may set them
// anew. q.mu must be held.
func (q *queue) startLocked(k Kernel, r NDRange, args []Arg) (*kernel, C.cl_event, C.cl_event, error) {
	kk, ok := k.(*kernel)
	if !ok || kk == nil {
		return nil, nil, nil, fmt.Errorf("launch: kernel %T is not an OpenCL kernel of this package: %w", k, ErrForeign)
	}
	if err := checkRange(r); err != nil {
		return nil, nil, nil, fmt.Errorf("launch %s: %w", kk.name, err)
	}
	if len(args) != len(kk.args) {
		return nil, nil, nil, fmt.Errorf("launch %s: %d arguments, kernel takes %d: %w", kk.name, len(args), len(kk.args), ErrInvalidLaunch)
	}
	if q.q == nil {
		return nil, nil, nil, q.closedErr("launch")
	}
	if kk.prog.owner != q {
		return nil, nil, nil, fmt.Errorf("launch %s: kernel: %w", kk.name, ErrForeign)
	}
	if kk.k == nil {
		return nil, nil, nil, fmt.Errorf("launch %s: kernel: %w", kk.name, ErrClosed)
	}
	var li launchImages
	defer li.release()
	for i, a := range args {
		if err := q.setArg(kk, i, a, &li); err != nil {
			return nil, nil, nil, fmt.Errorf("launch %s: argument %d: %w", kk.name, i, err)
		}
	}
	if err := li.copyIn(q); err != nil {
		return nil, nil, nil, fmt.Errorf("launch %s: %w", kk.name, err)
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
		return nil, nil, nil, fmt.Errorf("launch %s: %w", kk.name, &CLError{Op: "clEnqueueNDRangeKernel", Code: int32(code)})
	}
	if err := li.copyBack(q); err != nil {
		// The kernel is enqueued: wait for it, so that its event is not
		// left behind, and report the launch failed.
		var ns C.cl_ulong
		var op *C.char
		C.vg_finish(ev, &ns, &op)
		waitTail(li.tail)
		return nil, nil, nil, fmt.Errorf("launch %s: %w", kk.name, err)
	}
	return kk, ev, li.tail, nil
}

// Sync waits for the launches enqueued since the last Sync and returns
// their outcomes in order (gpu.Pipeliner).
func (q *queue) Sync() []LaunchResult {
	q.mu.Lock()
	pending := q.enqueued
	q.enqueued = nil
	q.syncing++ // host-backed memory is not lent until the wait is over
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.syncing--
		q.mu.Unlock()
	}()
	out := make([]LaunchResult, len(pending))
	for i, e := range pending {
		var (
			ns C.cl_ulong
			op *C.char
		)
		if code := C.vg_finish(e.ev, &ns, &op); code != C.CL_SUCCESS {
			waitTail(e.tail)
			out[i].Err = fmt.Errorf("launch %s: %w", e.name, &CLError{Op: C.GoString(op), Code: int32(code)})
			continue
		}
		if err := waitTail(e.tail); err != nil {
			out[i].Err = fmt.Errorf("launch %s: %w", e.name, err)
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

// setArg sets argument i of k; an image or sampler argument's device
// objects join li. q.mu must be held.
func (q *queue) setArg(k *kernel, i int, a Arg, li *launchImages) error {
	set := 0
	for _, isSet := range []bool{a.Buffer != nil, len(a.Scalar) > 0, a.Local > 0, a.Sampler != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 || a.Image != nil && a.Buffer == nil {
		return fmt.Errorf("%d of buffer, scalar, local and sampler set (image %t), want exactly one: %w", set, a.Image != nil, ErrInvalidLaunch)
	}
	want := k.args[i]
	var got argKind
	switch {
	case a.Image != nil && a.Image.Type == ImageType1DBuffer:
		got = argImageBuffer
	case a.Image != nil:
		got = argImage
	case a.Buffer != nil:
		got = argBuffer
	case a.Sampler != nil:
		got = argSampler
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
	case argImage, argImageBuffer:
		return q.imageArg(k, i, a, li)
	case argSampler:
		return q.samplerArg(k, i, a, li)
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

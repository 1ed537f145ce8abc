//go:build cgo

package gpu

/*
#include "opencl_cgo.h"

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
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Open opens a device. selector "" picks the first device, a decimal number
// is an index into Devices(), anything else is a case-insensitive substring
// of exactly one device's name (e.g. "pthread" under PoCL).
func Open(selector string) (Device, error) { return open(selector, true) }

// OpenPlain opens a device as an application does: every buffer in
// device memory (clCreateBuffer), every write and read a command on the
// queue, never host-backed (opencl_hostmem.go). The benchmarks' direct
// baselines use it.
func OpenPlain(selector string) (Device, error) { return open(selector, false) }

// open opens a device; hostBacked lets it have host-backed buffers where
// the probe finds the device uses them in place.
func open(selector string, hostBacked bool) (Device, error) {
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
	// The image formats, from the device's own context: enumerate made
	// none for the devices not picked.
	if d.info.Caps.Images.Supported {
		if err = imageFormats(d.ctx, &d.info.Caps.Images); err != nil {
			C.clReleaseContext(d.ctx)
			return nil, fmt.Errorf("open %s: %w", e.info.Name, err)
		}
	}
	d.hostBacked = hostBacked && probeHostBacked(d)
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
	// hostBacked: buffers live on host memory the device uses in place
	// (opencl_hostmem.go).
	hostBacked bool

	ctx C.cl_context // released by Close after every queue is closed

	mu     sync.Mutex
	closed bool
	queues map[*queue]struct{}
	// predefined caches the compiler's answers (queue.predefined): per
	// build options, whether it predefines a name.
	predefined map[string]map[string]bool
}

// Info describes the device, as Devices did when it was opened.
func (d *device) Info() Info { return d.info }

// NewQueue creates a profiling-enabled in-order command queue on the
// device's context.
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

//go:build cgo

package gpu

/*
#include "opencl_cgo.h"

static cl_int vg_create_program(cl_context c, const char *src, size_t len, cl_program *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateProgramWithSource(c, 1, &src, &len, &err);
	return err;
}

// clCreateProgramWithIL is OpenCL 2.1's; the headers declare it only for a
// target of 2.1 or later, and the ICD loader exports it.
extern cl_program clCreateProgramWithIL(cl_context, const void *, size_t, cl_int *);

static cl_int vg_create_program_il(cl_context c, const void *il, size_t len, cl_program *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateProgramWithIL(c, il, len, &err);
	return err;
}

static cl_int vg_build(cl_program p, cl_device_id d, const char *opts) {
	return clBuildProgram(p, 1, &d, opts, NULL, NULL);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// program is a Program: one built cl_program and the kernels created from
// it (fields other than the handles are immutable; prog and kernels are
// guarded by owner.mu, prog nil once released).
type program struct {
	owner   *queue
	names   []string
	prog    C.cl_program
	kernels map[string]*kernel
	il      *ILModule // the parameters a SPIR-V module declares; nil for source
}

// Build screens source (CheckSourceFor), compiles it for the queue's
// device with options and returns the program and the build log.
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
	src := (*C.char)(C.CBytes([]byte(source)))
	defer C.free(unsafe.Pointer(src))
	return q.build("clCreateProgramWithSource", options, nil, func(p *C.cl_program) C.cl_int {
		return C.vg_create_program(q.dev.ctx, src, C.size_t(len(source)), p)
	})
}

// BuildIL checks module (CheckIL, at most MaxILLen bytes) and options
// (as Build's), then compiles the module for the queue's device with
// options and returns the program and the build log. A launch's arguments
// are checked against the parameters the module declares (and, where the
// device also gives argument information, against that too). A device
// without Caps.IL returns an error for which errors.Is(err,
// ErrUnsupported).
func (q *queue) BuildIL(module []byte, options string) (Program, string, error) {
	if !q.dev.info.Caps.IL {
		return nil, "", fmt.Errorf("build: SPIR-V on %s: %w", q.dev.info.Name, ErrUnsupported)
	}
	m, err := CheckIL(module, MaxILLen)
	if err == nil {
		err = checkOptions(options)
	}
	if err != nil {
		return nil, err.Error(), err
	}
	il := C.CBytes(module)
	defer C.free(il)
	return q.build("clCreateProgramWithIL", options, m, func(p *C.cl_program) C.cl_int {
		return C.vg_create_program_il(q.dev.ctx, il, C.size_t(len(module)), p)
	})
}

// build makes a program with create (named op in errors) and builds it
// with options; il is the module's parameters for a program made from
// SPIR-V, nil for one made from source.
func (q *queue) build(op, options string, il *ILModule, create func(*C.cl_program) C.cl_int) (Program, string, error) {
	// Argument info lets Launch check that each argument is of the kind
	// the kernel expects, so a scalar can never be taken for a cl_mem.
	opts := C.CString(options + " -cl-kernel-arg-info")
	defer C.free(unsafe.Pointer(opts))

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.q == nil {
		return nil, "", q.closedErr("build")
	}
	// create writes to a variable of its own: cgo's pointer check would
	// take a pointer to a field of program, passed on, for the whole of it.
	var prog C.cl_program
	if err := clErr(op, create(&prog)); err != nil {
		return nil, "", fmt.Errorf("build: %w", err)
	}
	p := &program{owner: q, kernels: make(map[string]*kernel), il: il, prog: prog}
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

// buildLog returns p's build log on the queue's device, trimmed and cut at
// MaxBuildLog; "" if there is none or it cannot be read.
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

// kernelNames lists the kernels of built program p (CL_PROGRAM_KERNEL_NAMES).
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

// KernelNames lists the program's kernels.
func (p *program) KernelNames() []string { return append([]string(nil), p.names...) }

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

// releaseLocked frees the program and its kernels and forgets it.
// owner.mu must be held.
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

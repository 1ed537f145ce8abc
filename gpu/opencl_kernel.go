//go:build cgo

package gpu

/*
#include "opencl_cgo.h"

static cl_int vg_create_kernel(cl_program p, const char *name, cl_kernel *out) {
	cl_int err = CL_SUCCESS;
	*out = clCreateKernel(p, name, &err);
	return err;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

// argKind is what a kernel parameter needs: a buffer, __local bytes or a
// by-value scalar; argUnknown when the implementation does not say.
type argKind uint8

const (
	argUnknown argKind = iota
	argBuffer
	argLocal
	argScalar
	argImage       // an image type: set from a buffer and an Image (opencl_image.go)
	argImageBuffer // image1d_buffer_t: set from a buffer and an Image of ImageType1DBuffer
	argSampler     // sampler_t: set from a Sampler
	argUnsupported // pipes, events, queues: never set from bytes
)

// kernel is a Kernel: one cl_kernel of a program, with the kind and type
// name of each parameter (fields other than k are immutable; k is guarded
// by prog.owner.mu and nil once released).
type kernel struct {
	prog   *program
	name   string
	args   []argKind
	types  []string
	access []C.cl_kernel_arg_access_qualifier // CL_KERNEL_ARG_ACCESS_NONE where not an image
	k      C.cl_kernel
}

// String names the kind, for error messages.
func (k argKind) String() string {
	switch k {
	case argBuffer:
		return "buffer"
	case argLocal:
		return "local size"
	case argScalar:
		return "scalar"
	case argImage:
		return "image"
	case argImageBuffer:
		return "image made from a buffer"
	case argSampler:
		return "sampler"
	case argUnsupported:
		return "unsupported object"
	}
	return "unknown"
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
	k.access = make([]C.cl_kernel_arg_access_qualifier, n)
	if k.prog.il != nil {
		return k.describeILArgs()
	}
	for i := range k.args {
		k.access[i] = C.CL_KERNEL_ARG_ACCESS_NONE
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
		if kind, ok := imageKind(typ); ok {
			k.args[i] = kind
			if kind == argImage || kind == argImageBuffer {
				code := C.clGetKernelArgInfo(k.k, C.cl_uint(i), C.CL_KERNEL_ARG_ACCESS_QUALIFIER, C.size_t(unsafe.Sizeof(k.access[i])), unsafe.Pointer(&k.access[i]), nil)
				if err := clErr("clGetKernelArgInfo", code); err != nil {
					return err
				}
			}
			continue
		}
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

// describeILArgs fills k.args, k.types and k.access from the parameters
// the kernel's SPIR-V module declares (CheckIL). Where the device gives an
// argument's address qualifier too, the two must agree: a module the
// device reads otherwise than CheckIL does is refused.
func (k *kernel) describeILArgs() error {
	params, ok := k.prog.il.Kernels[k.name]
	if !ok || len(params) != len(k.args) {
		return fmt.Errorf("the SPIR-V module declares %d parameters, the device %d: %w", len(params), len(k.args), ErrInvalidLaunch)
	}
	for i, prm := range params {
		k.types[i] = prm.Type
		k.access[i] = C.CL_KERNEL_ARG_ACCESS_NONE
		switch prm.Kind {
		case ILScalar:
			k.args[i] = argScalar
		case ILBuffer:
			k.args[i] = argBuffer
		case ILLocal:
			k.args[i] = argLocal
		case ILImage, ILImageBuffer:
			k.args[i] = argImage
			if prm.Kind == ILImageBuffer {
				k.args[i] = argImageBuffer
			}
			k.access[i] = map[ILAccess]C.cl_kernel_arg_access_qualifier{
				ILReadOnly:  C.CL_KERNEL_ARG_ACCESS_READ_ONLY,
				ILWriteOnly: C.CL_KERNEL_ARG_ACCESS_WRITE_ONLY,
				ILReadWrite: C.CL_KERNEL_ARG_ACCESS_READ_WRITE,
			}[prm.Access]
		case ILSampler:
			k.args[i] = argSampler
		default:
			k.args[i] = argUnsupported
		}
		var aq C.cl_kernel_arg_address_qualifier
		code := C.clGetKernelArgInfo(k.k, C.cl_uint(i), C.CL_KERNEL_ARG_ADDRESS_QUALIFIER, C.size_t(unsafe.Sizeof(aq)), unsafe.Pointer(&aq), nil)
		if code == clKernelArgInfoNotAvailable {
			continue
		}
		if err := clErr("clGetKernelArgInfo", code); err != nil {
			return err
		}
		var want bool
		switch k.args[i] {
		case argBuffer:
			want = aq == C.CL_KERNEL_ARG_ADDRESS_GLOBAL || aq == C.CL_KERNEL_ARG_ADDRESS_CONSTANT
		case argLocal:
			want = aq == C.CL_KERNEL_ARG_ADDRESS_LOCAL
		case argImage, argImageBuffer:
			want = aq == C.CL_KERNEL_ARG_ADDRESS_GLOBAL
		case argScalar, argSampler:
			want = aq == C.CL_KERNEL_ARG_ADDRESS_PRIVATE
		default:
			want = true // never set
		}
		if !want {
			return fmt.Errorf("parameter %d of type %q: the device reads address qualifier %#x: %w", i, prm.Type, uint32(aq), ErrInvalidLaunch)
		}
	}
	return nil
}

// imageKind reports the kind of a parameter of image or sampler type
// name: argImage for the image types Image describes, argSampler for
// sampler_t, argImageBuffer for image1d_buffer_t (an image made from a
// buffer); false for other types.
func imageKind(typ string) (argKind, bool) {
	switch strings.TrimPrefix(strings.TrimPrefix(typ, "__"), "read_only ") {
	case "image1d_t", "image1d_array_t", "image2d_t", "image2d_array_t", "image3d_t":
		return argImage, true
	case "sampler_t":
		return argSampler, true
	case "image1d_buffer_t":
		return argImageBuffer, true
	}
	return 0, false
}

// argString reads a string property of argument i of k.
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
		if p.il != nil {
			ki.fromIL(p.il.Kernels[ki.Name])
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
			var ce *CLError
			if errors.As(err, &ce) && ce.Code == clKernelArgInfoNotAvailable {
				continue // a SPIR-V module's (rusticl): fromIL fills the type in
			}
			if err != nil {
				return ki, fmt.Errorf("kernel %q argument %d: clGetKernelArgInfo: %w", name, i, err)
			}
			*s.dst = v
		}
	}
	return ki, nil
}

// fromIL fills in what the device did not give of a SPIR-V kernel's
// parameters from those its module declares (CheckIL): the type names and,
// where the device gave no argument information at all, the qualifiers.
// A parameter count that differs leaves ki as the device gave it.
func (ki *KernelInfo) fromIL(params []ILParam) {
	if len(params) != len(ki.Args) {
		return
	}
	for i, prm := range params {
		a := &ki.Args[i]
		if a.TypeName == "" {
			t := strings.TrimPrefix(strings.TrimPrefix(prm.Type, "__local "), "__constant ")
			a.TypeName = t
		}
		if a.AddressQualifier != 0 {
			continue
		}
		a.AccessQualifier = C.CL_KERNEL_ARG_ACCESS_NONE
		switch prm.Kind {
		case ILBuffer:
			a.AddressQualifier = C.CL_KERNEL_ARG_ADDRESS_GLOBAL
			if strings.HasPrefix(prm.Type, "__constant ") {
				a.AddressQualifier = C.CL_KERNEL_ARG_ADDRESS_CONSTANT
			}
		case ILLocal:
			a.AddressQualifier = C.CL_KERNEL_ARG_ADDRESS_LOCAL
		case ILImage, ILImageBuffer:
			a.AddressQualifier = C.CL_KERNEL_ARG_ADDRESS_GLOBAL
			a.AccessQualifier = map[ILAccess]uint32{ILReadOnly: C.CL_KERNEL_ARG_ACCESS_READ_ONLY,
				ILWriteOnly: C.CL_KERNEL_ARG_ACCESS_WRITE_ONLY, ILReadWrite: C.CL_KERNEL_ARG_ACCESS_READ_WRITE}[prm.Access]
		default:
			a.AddressQualifier = C.CL_KERNEL_ARG_ADDRESS_PRIVATE
		}
	}
}

// Name is the kernel's function name.
func (k *kernel) Name() string { return k.name }

// NumArgs is the number of the kernel's parameters.
func (k *kernel) NumArgs() int { return len(k.args) }

// Release frees the kernel; the program's next Kernel call for the same
// name creates a new one. It is idempotent.
func (k *kernel) Release() {
	k.prog.owner.mu.Lock()
	defer k.prog.owner.mu.Unlock()
	k.releaseLocked()
}

// releaseLocked frees the kernel and drops it from its program's cache.
// prog.owner.mu must be held.
func (k *kernel) releaseLocked() {
	if k.k != nil {
		C.clReleaseKernel(k.k)
		k.k = nil
	}
	if k.prog.kernels[k.name] == k {
		delete(k.prog.kernels, k.name)
	}
}

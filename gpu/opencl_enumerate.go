//go:build cgo

package gpu

/*
#include "opencl_cgo.h"
*/
import "C"

import (
	"fmt"
	"slices"
	"strings"
	"unsafe"
)

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
		if e.info.Caps.Images.Supported {
			if err = probeFormats(e.id, &infos[i].Caps.Images); err != nil {
				return nil, fmt.Errorf("device %s: %w", e.info.Name, err)
			}
		}
	}
	return infos, nil
}

// enumerate lists the GPU, accelerator and CPU devices of every platform
// with their handles, indexed in that order.
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

// platformString reads a string property of platform p.
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

// deviceString reads a string property of device d.
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

// deviceInfo reads the properties of device d into an Info; enumerate sets
// its Index and Platform.
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
	if caps.Images, err = imageCaps(d); err != nil {
		return Info{}, err
	}
	caps.IL = takesIL(d)
	info.Caps = caps
	return info, nil
}

// clDeviceILVersion is CL_DEVICE_IL_VERSION (OpenCL 2.1).
const clDeviceILVersion = 0x105B

// takesIL reports whether d lists every version of ILVersions in
// CL_DEVICE_IL_VERSION. A device of OpenCL before 2.1 refuses the query
// (PoCL 3.1) or answers nothing: false.
func takesIL(d C.cl_device_id) bool {
	v, err := deviceString(d, clDeviceILVersion)
	if err != nil {
		return false
	}
	have := strings.Fields(v)
	for _, want := range ILVersions {
		if !slices.Contains(have, want) {
			return false
		}
	}
	return true
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

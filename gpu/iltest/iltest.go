// Package iltest checks that a gpu.Queue builds SPIR-V modules and runs
// their kernels as OpenCL does (gpu.ILBuilder): the same check for the
// OpenCL queue, an executor's queue through its protocol and whatever
// else implements gpu.Queue. It holds the test modules (testdata/NAME.spv,
// assembled from testdata/NAME.spvasm by spirv-as) and knows nothing of
// who calls.
package iltest

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/gpu"
)

// Scale is a SPIR-V 1.0 module of one kernel,
// scale(__global float *a, float s): a[i] *= s.
//
//go:embed testdata/scale.spv
var Scale []byte

// Kinds is a SPIR-V 1.0 module of one kernel with an empty body and a
// parameter of every kind gpu.CheckIL tells apart.
//
//go:embed testdata/kinds.spv
var Kinds []byte

// Check builds Scale and Kinds on q, runs scale and reads its result,
// and checks the refusals: a scalar for the buffer parameter, a module
// that is not SPIR-V, a host path in the options. Where the device does
// not take SPIR-V (caps.IL false) it checks only that BuildIL says so
// (gpu.ErrUnsupported), and logs that the rest did not run.
func Check(t *testing.T, q gpu.Queue, caps gpu.Caps) {
	t.Helper()
	ilb, ok := q.(gpu.ILBuilder)
	if !ok {
		t.Fatalf("%T does not build SPIR-V (gpu.ILBuilder)", q)
	}
	if !caps.IL {
		if _, _, err := ilb.BuildIL(Scale, ""); !errors.Is(err, gpu.ErrUnsupported) {
			t.Fatalf("BuildIL on a device without SPIR-V = %v, want ErrUnsupported", err)
		}
		// Not a skip: make test fails on skips, and the refusal is what
		// such a device must do (make test-platforms runs the rest on
		// PoCL 6 and rusticl).
		t.Log("the device builds no SPIR-V 1.0-1.2 (CL_DEVICE_IL_VERSION): only the refusal was checked")
		return
	}
	p, log, err := ilb.BuildIL(Scale, "-cl-fast-relaxed-math")
	if err != nil {
		t.Fatalf("BuildIL(scale) = %v, log:\n%s", err, log)
	}
	defer p.Release()
	k, err := p.Kernel("scale")
	if err != nil {
		t.Fatalf("Kernel(scale) = %v", err)
	}
	b, err := q.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	if err := q.Write(b, 0, f32s(1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	r := gpu.NDRange{Dims: 1, Global: [3]uint64{4}}
	if _, err := q.Launch(k, r, []gpu.Arg{{Buffer: b}, {Scalar: f32s(2.5)}}); err != nil {
		t.Fatalf("Launch(scale) = %v", err)
	}
	// The kernel's information names its parameters' types and address
	// qualifiers, from the module where the device gives none (rusticl).
	info, err := p.Info()
	if err != nil || len(info) != 1 || len(info[0].Args) != 2 {
		t.Fatalf("Info(scale) = %+v, %v; want one kernel of two parameters", info, err)
	}
	if a := info[0].Args; a[0].TypeName != "float*" || a[0].AddressQualifier != clAddressGlobal ||
		a[1].TypeName != "float" || a[1].AddressQualifier != clAddressPrivate {
		t.Errorf("Info(scale) parameters = %+v, want float* global and float private", a)
	}
	got := make([]byte, 16)
	if err := q.Read(b, 0, got); err != nil {
		t.Fatal(err)
	}
	if v := toF32s(got); !slices.Equal(v, []float32{2.5, 5, 7.5, 10}) {
		t.Errorf("scale: %v, want [2.5 5 7.5 10]", v)
	}
	// A pointer-sized scalar for the buffer parameter is refused: the
	// module says the parameter is a buffer, whatever the device tells.
	if _, err := q.Launch(k, r, []gpu.Arg{{Scalar: make([]byte, 8)}, {Scalar: f32s(1)}}); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("Launch(scale) with a scalar for a buffer = %v, want ErrInvalidLaunch", err)
	}
	// Every kind of parameter the module declares is as the device reads
	// it (where it gives argument information).
	pk, log, err := ilb.BuildIL(Kinds, "")
	if err != nil {
		t.Fatalf("BuildIL(kinds) = %v, log:\n%s", err, log)
	}
	defer pk.Release()
	kk, err := pk.Kernel("kinds")
	if err != nil {
		t.Fatalf("Kernel(kinds) = %v", err)
	}
	if n := kk.NumArgs(); n != 8 {
		t.Errorf("kinds has %d parameters, want 8", n)
	}
	for _, c := range []struct {
		name, opts string
		module     []byte
	}{
		{"not SPIR-V", "", []byte("__kernel void f(void) {}\n")},
		{"version 1.3", "", withWord(Scale, 1, 0x00010300)},
		{"host path in options", "-I/etc", Scale},
	} {
		if _, log, err := ilb.BuildIL(c.module, c.opts); !errors.Is(err, gpu.ErrSourceRejected) || !strings.Contains(log, "build:") {
			t.Errorf("BuildIL(%s) = %v, log %q; want ErrSourceRejected with the reason in the log", c.name, err, log)
		}
	}
}

// OpenCL's CL_KERNEL_ARG_ADDRESS_GLOBAL and _PRIVATE.
const (
	clAddressGlobal  = 0x119B
	clAddressPrivate = 0x119E
)

func withWord(module []byte, i int, v uint32) []byte {
	b := slices.Clone(module)
	binary.LittleEndian.PutUint32(b[4*i:], v)
	return b
}

func f32s(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

func toF32s(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

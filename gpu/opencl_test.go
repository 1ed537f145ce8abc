//go:build cgo

package gpu

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Two different PoCL devices (2 and 1 compute units). Set before the
	// first OpenCL call; PoCL reads it once.
	if os.Getenv("POCL_DEVICES") == "" {
		os.Setenv("POCL_DEVICES", "pthread basic")
	}
	goleak.VerifyTestMain(m)
}

// testSource holds every kernel the tests launch: one program, so PoCL
// compiles it once per device and then serves it from its cache.
const testSource = `
__kernel void vadd(__global const float *a, __global const float *b, __global float *c) {
	size_t i = get_global_id(0);
	c[i] = a[i] + b[i];
}

__kernel void grid(__global uint *out, uint width) {
	size_t x = get_global_id(0), y = get_global_id(1);
	out[y * width + x] = (uint)(y * 1000 + x) | ((uint)get_local_id(0) << 20) | ((uint)get_local_id(1) << 24);
}

__kernel void scalars(__global float *out, int i4, long l8, float4 f16) {
	out[0] = (float)i4;
	out[1] = (float)l8;
	out[2] = f16.x;
	out[3] = f16.y;
	out[4] = f16.z;
	out[5] = f16.w;
}

__kernel void lsum(__global const int *in, __global int *out, __local int *tmp) {
	size_t l = get_local_id(0), n = get_local_size(0);
	tmp[l] = in[get_global_id(0)];
	barrier(CLK_LOCAL_MEM_FENCE);
	if (l == 0) {
		int s = 0;
		for (size_t j = 0; j < n; j++)
			s += tmp[j];
		out[get_group_id(0)] = s;
	}
}
`

func openDevice(t *testing.T, selector string) Device {
	t.Helper()
	d, err := Open(selector)
	if err != nil {
		t.Fatalf("Open(%q) = %v", selector, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return d
}

// openPlain opens the first device with OpenPlain (buffers as an
// application has them), closed when the test ends.
func openPlain(t testing.TB) Device {
	t.Helper()
	d, err := OpenPlain("")
	if err != nil {
		t.Fatalf("OpenPlain = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newQueue(t testing.TB, d Device) Queue {
	t.Helper()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatalf("NewQueue() = %v", err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Errorf("queue Close() = %v", err)
		}
	})
	return q
}

func build(t *testing.T, q Queue, src string) Program {
	t.Helper()
	p, log, err := q.Build(src, "")
	if err != nil {
		t.Fatalf("Build() = %v, log:\n%s", err, log)
	}
	return p
}

func kernelOf(t *testing.T, p Program, name string) Kernel {
	t.Helper()
	k, err := p.Kernel(name)
	if err != nil {
		t.Fatalf("Kernel(%q) = %v", name, err)
	}
	return k
}

func alloc(t testing.TB, q Queue, size uint64) Buffer {
	t.Helper()
	b, err := q.Alloc(size)
	if err != nil {
		t.Fatalf("Alloc(%d) = %v", size, err)
	}
	return b
}

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
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

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// env is one queue with the test program built on it.
type env struct {
	d Device
	q Queue
	p Program
}

func setup(t *testing.T, selector string) env {
	t.Helper()
	d := openDevice(t, selector)
	q := newQueue(t, d)
	return env{d: d, q: q, p: build(t, q, testSource)}
}

func TestDevices(t *testing.T) {
	infos, err := Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	if len(infos) == 0 {
		t.Fatal("Devices() = none")
	}
	for i, in := range infos {
		t.Log(Describe(in))
		if in.Index != i || in.Name == "" || in.Platform == "" || in.Version == "" || in.ComputeUnits == 0 ||
			in.GlobalMemBytes == 0 || in.MaxAllocBytes == 0 || in.MaxAllocBytes > in.GlobalMemBytes ||
			in.MaxWorkGroupSize == 0 || in.MaxWorkItemSizes[0] == 0 {
			t.Errorf("Devices()[%d] = %+v, want index %d and non-zero limits", i, in, i)
		}
	}
}

func TestOpen(t *testing.T) {
	infos, err := Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	want := map[string]int{"": 0}
	for i, in := range infos {
		want[strings.Repeat("0", i%2)+strconv.Itoa(i)] = i // "0", "01", ...
		if i < 10 {
			want[strings.ToUpper(in.Name)] = i
		}
		for _, drv := range []string{"pthread", "BASIC"} {
			if strings.HasPrefix(strings.ToLower(in.Name), strings.ToLower(drv)) {
				want[drv] = i
			}
		}
	}
	for sel, idx := range want {
		d, err := Open(sel)
		if err != nil {
			t.Errorf("Open(%q) = %v, want device %d", sel, err, idx)
			continue
		}
		if got := d.Info(); !reflect.DeepEqual(got, infos[idx]) {
			t.Errorf("Open(%q).Info() = %+v, want %+v", sel, got, infos[idx])
		}
		if err := d.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}
	for _, sel := range []string{"-1", "99", "no such device"} {
		if _, err := Open(sel); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), infos[0].Name) {
			t.Errorf("Open(%q) = %v, want ErrNoDevice listing %q", sel, err, infos[0].Name)
		}
	}
}

// TestPoCLDriversPresent: POCL_DEVICES="pthread basic" gives one device
// of each driver, which the other packages' tests rely on (two different
// devices). PoCL 5 renamed the drivers (docs/platforms.md): PoCL 3.1's
// "pthread-..." and "basic-..." are PoCL 6's "cpu-..." and
// "cpu-minimal-...", and there "cpu" names both (Open("cpu") is
// ambiguous), so each is opened by its full name.
func TestPoCLDriversPresent(t *testing.T) {
	if os.Getenv("POCL_DEVICES") != "pthread basic" {
		t.Skip("POCL_DEVICES set by the caller")
	}
	infos, err := Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	if p := infos[0].Platform; p != "Portable Computing Language" {
		t.Skipf("platform %q is not PoCL: POCL_DEVICES does not apply", p)
	}
	// driverOf is the PoCL driver that made a device, by its name's prefix.
	driverOf := func(name string) string {
		for _, d := range []struct{ prefix, driver string }{
			{"pthread-", "pthread"}, {"basic-", "basic"}, // PoCL 3.1
			{"cpu-minimal-", "basic"}, {"cpu-", "pthread"}, // PoCL 5 and later
		} {
			if strings.HasPrefix(name, d.prefix) {
				return d.driver
			}
		}
		return ""
	}
	seen := map[string]int{}
	for _, in := range infos {
		drv := driverOf(in.Name)
		if drv == "" {
			t.Errorf("device %d %q is of neither the pthread nor the basic driver", in.Index, in.Name)
			continue
		}
		seen[drv]++
		d, err := Open(in.Name)
		if err != nil {
			t.Errorf("Open(%q) = %v", in.Name, err)
			continue
		}
		if got := d.Info(); !reflect.DeepEqual(got, in) {
			t.Errorf("Open(%q).Info() = %+v, want %+v", in.Name, got, in)
		}
		d.Close()
		if strings.HasPrefix(in.Name, drv+"-") { // PoCL 3.1: the driver's name selects it
			if d, err := Open(drv); err != nil || !reflect.DeepEqual(d.Info(), in) {
				t.Errorf("Open(%q) = %v, want device %d", drv, err, in.Index)
			} else {
				d.Close()
			}
		}
	}
	if seen["pthread"] != 1 || seen["basic"] != 1 {
		t.Errorf("devices per driver = %v, want one pthread and one basic: %s", seen, listNames(infos))
	}
}

// TestNoPlatform runs the test binary again with an ICD directory that
// holds no vendors.
func TestNoPlatform(t *testing.T) {
	if os.Getenv("VGPUD_GPU_NO_PLATFORM_CHILD") == "1" {
		_, err := Devices()
		if !errors.Is(err, ErrNoPlatform) || !strings.Contains(err.Error(), "pocl-opencl-icd") {
			t.Fatalf("Devices() = %v, want ErrNoPlatform naming pocl-opencl-icd", err)
		}
		if _, err := Open(""); !errors.Is(err, ErrNoPlatform) {
			t.Fatalf("Open(\"\") = %v, want ErrNoPlatform", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoPlatform$", "-test.v")
	cmd.Env = append(os.Environ(), "VGPUD_GPU_NO_PLATFORM_CHILD=1", "OCL_ICD_VENDORS="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNoPlatform") {
		t.Fatalf("child = %v, output:\n%s", err, out)
	}
}

func TestVectorAddEveryDevice(t *testing.T) {
	everyDevice(t, func(t *testing.T, _ Info, e env) { vadd(t, e, 1024) })
}

// everyDevice runs f on every device, each in a subtest with an env of
// its own.
func everyDevice(t *testing.T, f func(t *testing.T, in Info, e env)) {
	t.Helper()
	infos, err := Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	for _, in := range infos {
		t.Run(in.Name, func(t *testing.T) { f(t, in, setup(t, strconv.Itoa(in.Index))) })
	}
}

func vadd(t *testing.T, e env, n int) {
	t.Helper()
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i), float32(2*i)+0.5
	}
	size := uint64(4 * n)
	ba, bb, bc := alloc(t, e.q, size), alloc(t, e.q, size), alloc(t, e.q, size)
	defer ba.Release()
	defer bb.Release()
	defer bc.Release()
	if err := e.q.Write(ba, 0, f32s(a...)); err != nil {
		t.Fatalf("Write(a) = %v", err)
	}
	if err := e.q.Write(bb, 0, f32s(b...)); err != nil {
		t.Fatalf("Write(b) = %v", err)
	}
	k := kernelOf(t, e.p, "vadd")
	if _, err := e.q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{uint64(n)}}, []Arg{{Buffer: ba}, {Buffer: bb}, {Buffer: bc}}); err != nil {
		t.Fatalf("Launch(vadd) = %v", err)
	}
	out := make([]byte, size)
	if err := e.q.Read(bc, 0, out); err != nil {
		t.Fatalf("Read(c) = %v", err)
	}
	for i, got := range toF32s(out) {
		if want := a[i] + b[i]; got != want {
			t.Fatalf("c[%d] = %v, want %v", i, got, want)
		}
	}
}

func TestLaunch2DWithLocalSizeAndOffset(t *testing.T) {
	e := setup(t, "")
	const w, h = 8, 4
	out := alloc(t, e.q, 4*w*h)
	if err := e.q.Write(out, 0, make([]byte, 4*w*h)); err != nil {
		t.Fatalf("Write() = %v", err)
	}
	k := kernelOf(t, e.p, "grid")
	// Offset (0, 2) with global (8, 2): only rows 2 and 3 are written.
	r := NDRange{Dims: 2, Offset: [3]uint64{0, 2}, Global: [3]uint64{w, 2}, Local: [3]uint64{4, 2}}
	if _, err := e.q.Launch(k, r, []Arg{{Buffer: out}, {Scalar: u32(w)}}); err != nil {
		t.Fatalf("Launch(grid, %+v) = %v", r, err)
	}
	buf := make([]byte, 4*w*h)
	if err := e.q.Read(out, 0, buf); err != nil {
		t.Fatalf("Read() = %v", err)
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			got := binary.LittleEndian.Uint32(buf[4*(y*w+x):])
			want := uint32(0)
			if y >= 2 {
				want = uint32(y*1000+x) | uint32(x%4)<<20 | uint32(y%2)<<24
			}
			if got != want {
				t.Errorf("out[%d][%d] = %#x, want %#x", y, x, got, want)
			}
		}
	}
}

func TestScalarArgs(t *testing.T) {
	e := setup(t, "")
	out := alloc(t, e.q, 6*4)
	k := kernelOf(t, e.p, "scalars")
	i4 := binary.LittleEndian.AppendUint32(nil, 0xFFFFFFF9) // int32 -7
	l8 := binary.LittleEndian.AppendUint64(nil, uint64(1)<<40)
	f16 := f32s(1.5, -2, 3.25, 4)
	d, err := e.q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{1}}, []Arg{{Buffer: out}, {Scalar: i4}, {Scalar: l8}, {Scalar: f16}})
	if err != nil {
		t.Fatalf("Launch(scalars) = %v", err)
	}
	if d < 0 {
		t.Errorf("Launch(scalars) time = %v, want >= 0", d)
	}
	buf := make([]byte, 6*4)
	if err := e.q.Read(out, 0, buf); err != nil {
		t.Fatalf("Read() = %v", err)
	}
	want := []float32{-7, 1 << 40, 1.5, -2, 3.25, 4}
	if got := toF32s(buf); !slices.Equal(got, want) {
		t.Errorf("scalars out = %v, want %v", got, want)
	}
}

func TestLocalArg(t *testing.T) {
	e := setup(t, "")
	const n, group = 64, 16
	in := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(i))
	}
	bin, bout := alloc(t, e.q, 4*n), alloc(t, e.q, 4*n/group)
	if err := e.q.Write(bin, 0, in); err != nil {
		t.Fatalf("Write() = %v", err)
	}
	k := kernelOf(t, e.p, "lsum")
	r := NDRange{Dims: 1, Global: [3]uint64{n}, Local: [3]uint64{group}}
	if _, err := e.q.Launch(k, r, []Arg{{Buffer: bin}, {Buffer: bout}, {Local: 4 * group}}); err != nil {
		t.Fatalf("Launch(lsum) = %v", err)
	}
	buf := make([]byte, 4*n/group)
	if err := e.q.Read(bout, 0, buf); err != nil {
		t.Fatalf("Read() = %v", err)
	}
	for g := 0; g < n/group; g++ {
		want := uint32(0)
		for i := g * group; i < (g+1)*group; i++ {
			want += uint32(i)
		}
		if got := binary.LittleEndian.Uint32(buf[4*g:]); got != want {
			t.Errorf("sum of group %d = %d, want %d", g, got, want)
		}
	}
}

func TestBuildFailure(t *testing.T) {
	q := newQueue(t, openDevice(t, ""))
	p, log, err := q.Build("__kernel void broken(__global int *a) { a[0] = undefined_name; }", "")
	if p != nil || !errors.Is(err, ErrBuildFailed) {
		t.Fatalf("Build(broken) = %v, %v, want ErrBuildFailed with StatusBuildFailed", p, err)
	}
	if !strings.Contains(log, "undefined_name") {
		t.Errorf("Build(broken) log = %q, want it to name undefined_name", log)
	}
	var ce *CLError
	if !errors.As(err, &ce) || ce.Code != clBuildProgramFailure {
		t.Errorf("Build(broken) error = %v, want a CLError CL_BUILD_PROGRAM_FAILURE", err)
	}
}

// TestProgramSize: a built program tells its binary's size, what a quota
// counts of it; a released one says 0.
func TestProgramSize(t *testing.T) {
	q := newQueue(t, openDevice(t, ""))
	p, _, err := q.Build("__kernel void k(__global int *a) { a[get_global_id(0)] = 1; }", "")
	if err != nil {
		t.Fatal(err)
	}
	sz, ok := p.(interface{ Size() uint64 })
	if !ok {
		t.Fatalf("the OpenCL program has no Size")
	}
	if n := sz.Size(); n == 0 || n > 64<<20 {
		t.Errorf("Size() = %d, want a binary's size", n)
	}
	p.Release()
	if n := sz.Size(); n != 0 {
		t.Errorf("Size() after Release = %d, want 0", n)
	}
}

func TestBuildRejectsHostileSource(t *testing.T) {
	q := newQueue(t, openDevice(t, ""))
	for _, tc := range []struct{ src, opts string }{
		{"#include \"/etc/hostname\"\n__kernel void f(void) {}", ""},
		{"#pragma clang __debug llvm_fatal_error\n__kernel void f(void) {}", ""},
		{"__kernel void f(void) {}", "-I/etc"},
		{"", ""},
	} {
		p, _, err := q.Build(tc.src, tc.opts)
		if p != nil || !errors.Is(err, ErrBuildFailed) {
			t.Errorf("Build(%q, %q) = %v, %v, want ErrBuildFailed", tc.src, tc.opts, p, err)
		}
	}
}

func TestKernels(t *testing.T) {
	e := setup(t, "")
	names := e.p.KernelNames()
	slices.Sort(names)
	if want := []string{"grid", "lsum", "scalars", "vadd"}; !slices.Equal(names, want) {
		t.Errorf("KernelNames() = %v, want %v", names, want)
	}
	k1 := kernelOf(t, e.p, "vadd")
	if k2 := kernelOf(t, e.p, "vadd"); k2 != k1 {
		t.Errorf("Kernel(vadd) twice = %p, %p, want the cached kernel", k1, k2)
	}
	if k1.Name() != "vadd" || k1.NumArgs() != 3 {
		t.Errorf("Kernel(vadd) = %q with %d args, want vadd with 3", k1.Name(), k1.NumArgs())
	}
	k1.Release()
	k1.Release()
	if k3 := kernelOf(t, e.p, "vadd"); k3 == k1 {
		t.Errorf("Kernel(vadd) after Release = the released kernel, want a new one")
	}
	for _, name := range []string{"nope", "", "vadd\x00"} {
		_, err := e.p.Kernel(name)
		if !errors.Is(err, ErrNoKernel) {
			t.Errorf("Kernel(%q) = %v, want ErrNoKernel with StatusNotFound", name, err)
		}
	}
	e.p.Release()
	e.p.Release()
	if _, err := e.p.Kernel("vadd"); !errors.Is(err, ErrClosed) {
		t.Errorf("Kernel(vadd) after program Release = %v, want ErrClosed", err)
	}
}

func TestOutOfRangeRejectedBeforeOpenCL(t *testing.T) {
	d := openDevice(t, "")
	q, err := d.NewQueue()
	if err != nil {
		t.Fatalf("NewQueue() = %v", err)
	}
	b := alloc(t, q, 16)
	// With the queue closed, OpenCL cannot be reached: a range error
	// proves the check happens first.
	if err := q.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	for _, tc := range []struct {
		off uint64
		n   int
	}{{0, 17}, {16, 1}, {17, 0}, {math.MaxUint64, 1}, {math.MaxUint64 - 3, 8}, {8, 9}} {
		p := make([]byte, tc.n)
		if err := q.Write(b, tc.off, p); !errors.Is(err, ErrOutOfRange) || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Write(off %d, len %d) = %v, want ErrOutOfRange", tc.off, tc.n, err)
		}
		if err := q.Read(b, tc.off, p); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Read(off %d, len %d) = %v, want ErrOutOfRange", tc.off, tc.n, err)
		}
	}
	if err := q.Write(b, 0, make([]byte, 16)); !errors.Is(err, ErrClosed) {
		t.Errorf("Write() on closed queue = %v, want ErrClosed", err)
	}
}

func TestReadWriteEdges(t *testing.T) {
	q := newQueue(t, openDevice(t, ""))
	b := alloc(t, q, 16)
	if err := q.Write(b, 16, nil); err != nil {
		t.Errorf("Write(off 16, empty) = %v, want nil", err)
	}
	if err := q.Write(b, 12, []byte{1, 2, 3, 4}); err != nil {
		t.Fatalf("Write(off 12) = %v", err)
	}
	got := make([]byte, 2)
	if err := q.Read(b, 13, got); err != nil || !slices.Equal(got, []byte{2, 3}) {
		t.Errorf("Read(off 13) = %v, %v, want [2 3]", got, err)
	}
	b.Release()
	b.Release()
	if err := q.Read(b, 0, got); !errors.Is(err, ErrClosed) {
		t.Errorf("Read() of released buffer = %v, want ErrClosed", err)
	}
}

func TestAllocErrors(t *testing.T) {
	d := openDevice(t, "")
	q := newQueue(t, d)
	for _, size := range []uint64{0, d.Info().MaxAllocBytes + 1, math.MaxUint64} {
		if b, err := q.Alloc(size); b != nil || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Alloc(%d) = %v, %v, want StatusInvalidArgument", size, b, err)
		}
	}
}

func TestLaunchErrors(t *testing.T) {
	e := setup(t, "")
	other := newQueue(t, e.d)
	foreign := alloc(t, other, 64)
	released := alloc(t, e.q, 64)
	released.Release()
	buf := alloc(t, e.q, 64)
	vaddK := kernelOf(t, e.p, "vadd")
	scalars := kernelOf(t, e.p, "scalars")
	one := NDRange{Dims: 1, Global: [3]uint64{1}}
	bufs := []Arg{{Buffer: buf}, {Buffer: buf}, {Buffer: buf}}
	scalarArgs := func(f16 []byte) []Arg {
		return []Arg{{Buffer: buf}, {Scalar: u32(1)}, {Scalar: make([]byte, 8)}, {Scalar: f16}}
	}
	for _, tc := range []struct {
		name string
		k    Kernel
		r    NDRange
		args []Arg
		is   error
	}{
		{"too few args", vaddK, one, bufs[:2], ErrInvalidLaunch},
		{"too many args", vaddK, one, append(bufs, Arg{Buffer: buf}), ErrInvalidLaunch},
		{"empty arg", vaddK, one, []Arg{{}, {Buffer: buf}, {Buffer: buf}}, ErrInvalidLaunch},
		{"two kinds", vaddK, one, []Arg{{Buffer: buf, Local: 4}, {Buffer: buf}, {Buffer: buf}}, ErrInvalidLaunch},
		{"scalar for pointer", vaddK, one, []Arg{{Scalar: make([]byte, 8)}, {Buffer: buf}, {Buffer: buf}}, ErrInvalidLaunch},
		{"local for global pointer", vaddK, one, []Arg{{Local: 64}, {Buffer: buf}, {Buffer: buf}}, ErrInvalidLaunch},
		{"buffer for scalar", scalars, one, []Arg{{Buffer: buf}, {Buffer: buf}, {Scalar: make([]byte, 8)}, {Scalar: make([]byte, 16)}}, ErrInvalidLaunch},
		{"short float4", scalars, one, scalarArgs(make([]byte, 4)), ErrInvalidLaunch},
		{"foreign buffer", vaddK, one, []Arg{{Buffer: foreign}, {Buffer: buf}, {Buffer: buf}}, ErrForeign},
		{"released buffer", vaddK, one, []Arg{{Buffer: released}, {Buffer: buf}, {Buffer: buf}}, ErrClosed},
		{"zero dims", vaddK, NDRange{Global: [3]uint64{1}}, bufs, ErrInvalidLaunch},
		{"four dims", vaddK, NDRange{Dims: 4, Global: [3]uint64{1, 1, 1}}, bufs, ErrInvalidLaunch},
		{"zero global", vaddK, NDRange{Dims: 1}, bufs, ErrInvalidLaunch},
		{"beyond dims", vaddK, NDRange{Dims: 1, Global: [3]uint64{1, 5}}, bufs, ErrInvalidLaunch},
		{"offset overflow", vaddK, NDRange{Dims: 1, Offset: [3]uint64{math.MaxUint64}, Global: [3]uint64{2}}, bufs, ErrInvalidLaunch},
		{"local not dividing", vaddK, NDRange{Dims: 1, Global: [3]uint64{10}, Local: [3]uint64{3}}, bufs, ErrInvalidLaunch},
		{"foreign kernel type", nil, one, bufs, ErrForeign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.q.Launch(tc.k, tc.r, tc.args)
			if !errors.Is(err, tc.is) {
				t.Errorf("Launch(%s) = %v, want %v", tc.name, err, tc.is)
			}
		})
	}
	// The queue still works after every rejection.
	vadd(t, e, 4)
}

func TestCLErrorMessage(t *testing.T) {
	e := setup(t, "")
	buf := alloc(t, e.q, 64)
	k := kernelOf(t, e.p, "vadd")
	_, err := e.q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{10}, Local: [3]uint64{3}}, []Arg{{Buffer: buf}, {Buffer: buf}, {Buffer: buf}})
	if want := "clEnqueueNDRangeKernel: CL_INVALID_WORK_GROUP_SIZE (-54)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Launch(global 10, local 3) = %v, want it to contain %q", err, want)
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	d, err := Open("")
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatalf("NewQueue() = %v", err)
	}
	b := alloc(t, q, 64)
	p := build(t, q, testSource)
	k := kernelOf(t, p, "vadd")
	for i := 0; i < 2; i++ {
		if err := d.Close(); err != nil {
			t.Fatalf("Close() #%d = %v", i, err)
		}
	}
	if err := q.Close(); err != nil {
		t.Errorf("queue Close() after device Close = %v", err)
	}
	b.Release()
	k.Release()
	p.Release()
	if _, err := d.NewQueue(); !errors.Is(err, ErrClosed) {
		t.Errorf("NewQueue() after Close = %v, want ErrClosed", err)
	}
	if _, err := q.Alloc(8); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc() after Close = %v, want ErrClosed", err)
	}
	if _, err := q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{1}}, []Arg{{Buffer: b}, {Buffer: b}, {Buffer: b}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Launch() after Close = %v, want ErrClosed", err)
	}
	if _, _, err := q.Build(testSource, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("Build() after Close = %v, want ErrClosed", err)
	}
}

// TestConcurrentQueues runs two queues of one device and one of another
// device from three goroutines (meaningful under -race).
func TestConcurrentQueues(t *testing.T) {
	infos, err := Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	d0 := openDevice(t, "0")
	d1 := d0
	if len(infos) > 1 {
		d1 = openDevice(t, "1")
	}
	envs := make([]env, 3)
	for i, d := range []Device{d0, d0, d1} {
		q := newQueue(t, d)
		envs[i] = env{d: d, q: q, p: build(t, q, testSource)}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(envs))
	for _, e := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runVadd(e, 20, 256)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// runVadd is vadd for goroutines: it returns errors instead of failing.
func runVadd(e env, rounds, n int) error {
	k, err := e.p.Kernel("vadd")
	if err != nil {
		return err
	}
	size := uint64(4 * n)
	var bufs [3]Buffer
	for i := range bufs {
		if bufs[i], err = e.q.Alloc(size); err != nil {
			return err
		}
		defer bufs[i].Release()
	}
	out := make([]byte, size)
	for r := 0; r < rounds; r++ {
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = float32(i*r), float32(i+r)
		}
		if err := e.q.Write(bufs[0], 0, f32s(a...)); err != nil {
			return err
		}
		if err := e.q.Write(bufs[1], 0, f32s(b...)); err != nil {
			return err
		}
		if _, err := e.q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{uint64(n)}}, []Arg{{Buffer: bufs[0]}, {Buffer: bufs[1]}, {Buffer: bufs[2]}}); err != nil {
			return err
		}
		if err := e.q.Read(bufs[2], 0, out); err != nil {
			return err
		}
		for i, got := range toF32s(out) {
			if want := a[i] + b[i]; got != want {
				return errors.New("vadd mismatch under concurrency")
			}
		}
	}
	return nil
}

// BenchmarkLaunch measures a one-work-item launch plus wait, the fixed cost
// each command pays on the device.
func BenchmarkLaunch(b *testing.B) {
	d, err := Open("")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	q, err := d.NewQueue()
	if err != nil {
		b.Fatal(err)
	}
	p, _, err := q.Build(testSource, "")
	if err != nil {
		b.Fatal(err)
	}
	k, err := p.Kernel("vadd")
	if err != nil {
		b.Fatal(err)
	}
	buf, err := q.Alloc(64)
	if err != nil {
		b.Fatal(err)
	}
	args := []Arg{{Buffer: buf}, {Buffer: buf}, {Buffer: buf}}
	var dev time.Duration
	for b.Loop() {
		t, err := q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{1}}, args)
		if err != nil {
			b.Fatal(err)
		}
		dev += t
	}
	b.ReportMetric(float64(dev.Nanoseconds())/float64(b.N), "device-ns/op")
}

// TestDeviceCaps checks the properties read for the guest's device-info
// against what PoCL's CPU devices report (clinfo on this host): a
// little-endian 64-bit device with fp64 and no fp16, the OpenCL 1.2
// minimums, and an fp64 kernel that builds and runs.
func TestDeviceCaps(t *testing.T) {
	infos, err := Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	for _, in := range infos {
		c := in.Caps
		t.Logf("%s: %+v", in.Name, c)
		if !c.EndianLittle || c.AddressBits != 64 || c.MaxParameterSize < 1024 || c.MaxConstantBufferSize < 64<<10 ||
			c.MaxConstantArgs < 8 || c.MemBaseAddrAlign == 0 || c.MaxClockFrequency == 0 || c.SingleFPConfig == 0 ||
			c.ProfilingTimerResolution == 0 {
			t.Errorf("%s: Caps = %+v, want OpenCL 1.2 minimums", in.Name, c)
		}
		if c.PreferredVectorWidth[4] == 0 || c.NativeVectorWidth[2] == 0 {
			t.Errorf("%s: vector widths %v, %v", in.Name, c.PreferredVectorWidth, c.NativeVectorWidth)
		}
		exts := c.ExtensionList()
		hasFP64 := slices.Contains(exts, "cl_khr_fp64")
		if hasFP64 != (c.DoubleFPConfig != 0) || hasFP64 != (c.PreferredVectorWidth[5] != 0) {
			t.Errorf("%s: cl_khr_fp64 listed %v, double config %#x, double width %d", in.Name, hasFP64, c.DoubleFPConfig, c.PreferredVectorWidth[5])
		}
		if slices.Contains(exts, "cl_khr_fp16") != (c.HalfFPConfig != 0) {
			t.Errorf("%s: cl_khr_fp16 listed %v, half config %#x", in.Name, slices.Contains(exts, "cl_khr_fp16"), c.HalfFPConfig)
		}
		if !hasFP64 {
			continue
		}
		d := openDevice(t, strconv.Itoa(in.Index))
		q := newQueue(t, d)
		p := build(t, q, `#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void half_of(__global double *x) { x[get_global_id(0)] *= 0.5; }`)
		k := kernelOf(t, p, "half_of")
		b := alloc(t, q, 16)
		if err := q.Write(b, 0, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, math.Float64bits(3)), math.Float64bits(-1))); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{2}}, []Arg{{Buffer: b}}); err != nil {
			t.Fatalf("%s: fp64 launch = %v", in.Name, err)
		}
		out := make([]byte, 16)
		if err := q.Read(b, 0, out); err != nil {
			t.Fatal(err)
		}
		if x, y := math.Float64frombits(binary.LittleEndian.Uint64(out)), math.Float64frombits(binary.LittleEndian.Uint64(out[8:])); x != 1.5 || y != -0.5 {
			t.Errorf("%s: fp64 kernel gave %v, %v, want 1.5, -0.5", in.Name, x, y)
		}
	}
}

// TestBuildRefusesAsm builds each program of asmAndClockSources on a
// real device: Build fails with ErrSourceRejected (StatusBuildFailed for
// the guest) and a log that says why, before the compiler sees it; on a
// device whose kernels run off the host (a GPU) the screen lets inline
// assembly through to the compiler (issue 40, item 7; the test failed on
// an H200 before it knew) and still refuses the clock macros.
func TestBuildRefusesAsm(t *testing.T) {
	if _, err := Devices(); err != nil {
		t.Skipf("no OpenCL device: %v", err)
	}
	q := newQueue(t, openDevice(t, "0"))
	offHost := q.(*queue).dev.offHost
	for _, tt := range asmAndClockSources {
		t.Run(tt.name, func(t *testing.T) {
			_, log, err := q.Build(tt.src, tt.opts)
			clock := strings.Contains(tt.want, "__DATE__") || strings.Contains(tt.want, "__TIME")
			if offHost && !clock {
				// A GPU's kernels run off the host: the screen leaves
				// its assembly (PTX on NVIDIA's) to its compiler; the
				// clock macros are refused everywhere (reuse).
				if errors.Is(err, ErrSourceRejected) {
					t.Errorf("Build(%q, %q) on a device off the host = %v; the screen is for the host's CPU only", tt.src, tt.opts, err)
				}
				return
			}
			if !errors.Is(err, ErrSourceRejected) || !strings.Contains(log, tt.want) {
				t.Errorf("Build(%q, %q) = %v, log %q; want ErrSourceRejected, a log naming %s", tt.src, tt.opts, err, log, tt.want)
			}
		})
	}
}

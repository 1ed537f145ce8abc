package suite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// Source holds every kernel of the suite.
const Source = `
__kernel void vadd(__global const float *a, __global const float *b, __global float *c, uint n) {
	size_t i = get_global_id(0);
	if (i < n) c[i] = a[i] + b[i];
}

__kernel void saxpy(float alpha, __global const float *x, __global float *y, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = alpha * x[i] + y[i];
}

__kernel void matmul(__global const float *A, __global const float *B, __global float *C, uint n) {
	size_t col = get_global_id(0), row = get_global_id(1);
	float acc = 0.0f;
	for (uint k = 0; k < n; k++) acc += A[row * n + k] * B[k * n + col];
	C[row * n + col] = acc;
}

__kernel void reduce(__global const float *in, __global float *partial, __local float *scratch, uint n) {
	size_t gid = get_global_id(0), lid = get_local_id(0), lsz = get_local_size(0);
	scratch[lid] = gid < n ? in[gid] : 0.0f;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (size_t s = lsz / 2; s > 0; s >>= 1) {
		if (lid < s) scratch[lid] += scratch[lid + s];
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	if (lid == 0) partial[get_group_id(0)] = scratch[0];
}
`

// BrokenSource does not compile; its log must contain BrokenMarker.
const (
	BrokenMarker = "vgpu-suite intentional build failure"
	BrokenSource = "#error " + BrokenMarker + "\n__kernel void broken(__global float *a) { a[0] = 1.0f }\n"
)

func build(d *driver.Device) (driver.Program, error) {
	p, log, err := d.Build(Source, "-cl-std=CL1.2")
	if err != nil {
		return p, fmt.Errorf("build suite kernels: %w (log: %q)", err, log)
	}
	return p, nil
}

func buildFailure(d *driver.Device) error {
	p, log, err := d.Build(BrokenSource, "")
	if err == nil {
		_ = d.FreeProgram(p)
		return fmt.Errorf("build of broken source succeeded (program %d)", p.Handle)
	}
	if s := abi.StatusOf(err); s != abi.StatusBuildFailed {
		return fmt.Errorf("build of broken source: status %v (%v), want %v", s, err, abi.StatusBuildFailed)
	}
	if !strings.Contains(log, BrokenMarker) {
		return fmt.Errorf("build log %q does not contain %q", log, BrokenMarker)
	}
	return nil
}

// --- inputs and CPU references ---

// Floats returns n deterministic floats in [lo, hi).
func Floats(seed uint64, n int, lo, hi float32) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*r.Float32()
	}
	return v
}

// Bytes encodes floats little-endian, as the device stores them.
func Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// FromBytes decodes little-endian floats.
func FromBytes(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// VectorAdd is the CPU reference of vadd.
func VectorAdd(a, b []float32) []float32 {
	c := make([]float32, len(a))
	for i := range a {
		c[i] = a[i] + b[i]
	}
	return c
}

// SAXPY is the CPU reference of saxpy: alpha*x + y.
func SAXPY(alpha float32, x, y []float32) []float32 {
	out := make([]float32, len(x))
	for i := range x {
		out[i] = alpha*x[i] + y[i]
	}
	return out
}

// MatMul is the CPU reference of matmul (row-major n x n), in float64.
func MatMul(a, b []float32, n int) []float64 {
	c := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for k := 0; k < n; k++ {
			aik := float64(a[i*n+k])
			for j := 0; j < n; j++ {
				c[i*n+j] += aik * float64(b[k*n+j])
			}
		}
	}
	return c
}

// Sum is the CPU reference of the reduction, in float64.
func Sum(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x)
	}
	return s
}

// Close reports whether got is within atol + rtol*|want| of want.
func Close(got, want, atol, rtol float64) bool {
	return math.Abs(got-want) <= atol+rtol*math.Abs(want)
}

// compare checks got against want element by element.
func compare(name string, got []float32, want func(i int) float64, atol, rtol float64) error {
	for i, g := range got {
		if w := want(i); !Close(float64(g), w, atol, rtol) || math.IsNaN(float64(g)) {
			return fmt.Errorf("%s[%d] = %g, want %g", name, i, g, w)
		}
	}
	return nil
}

// --- jobs ---

// upload creates buffers holding each input, batched.
func upload(d *driver.Device, ins ...[]float32) ([]driver.Buffer, error) {
	var bs []driver.Buffer
	for _, in := range ins {
		b, err := d.CreateBuffer(uint64(4 * len(in)))
		if err != nil {
			return bs, err
		}
		bs = append(bs, b)
		if err := d.Write(b, 0, Bytes(in)); err != nil {
			return bs, err
		}
	}
	return bs, nil
}

// output creates a buffer of n floats that the job's kernel writes
// whole: never written by the guest, as an OpenCL application's output
// buffer is not (a new buffer holds zeros, docs/ABI.md).
func output(d *driver.Device, bs []driver.Buffer, n int) ([]driver.Buffer, error) {
	b, err := d.CreateBuffer(uint64(4 * n))
	if err != nil {
		return bs, err
	}
	return append(bs, b), nil
}

func freeAll(d *driver.Device, bs []driver.Buffer, err error) error {
	for _, b := range bs {
		if b.Handle != 0 {
			err = errors.Join(err, d.Free(b))
		}
	}
	if ferr := d.Finish(); err == nil {
		err = ferr
	}
	return err
}

func readFloats(d *driver.Device, b driver.Buffer, n int) ([]float32, error) {
	out := make([]byte, 4*n)
	if err := d.Read(b, 0, out); err != nil {
		return nil, err
	}
	return FromBytes(out), nil
}

func vectorAdd(d *driver.Device, p driver.Program, n int, seed uint64) (err error) {
	a, b := Floats(seed, n, -1, 1), Floats(seed+100, n, -1, 1)
	bs, err := upload(d, a, b)
	if err == nil {
		bs, err = output(d, bs, n)
	}
	defer func() { err = freeAll(d, bs, err) }()
	if err != nil {
		return err
	}
	if err := d.Launch(p, "vadd", driver.Range1(uint64(n), 0),
		driver.BufferArg(bs[0]), driver.BufferArg(bs[1]), driver.BufferArg(bs[2]), driver.Uint32Arg(uint32(n))); err != nil {
		return err
	}
	got, err := readFloats(d, bs[2], n)
	if err != nil {
		return err
	}
	want := VectorAdd(a, b)
	return compare("c", got, func(i int) float64 { return float64(want[i]) }, 0, 0)
}

func saxpy(d *driver.Device, p driver.Program, n int, seed uint64) (err error) {
	const alpha = 2.5
	x, y := Floats(seed, n, -1, 1), Floats(seed+100, n, -1, 1)
	bs, err := upload(d, x, y)
	defer func() { err = freeAll(d, bs, err) }()
	if err != nil {
		return err
	}
	if err := d.Launch(p, "saxpy", driver.Range1(uint64(n), 0),
		driver.Float32Arg(alpha), driver.BufferArg(bs[0]), driver.BufferArg(bs[1]), driver.Uint32Arg(uint32(n))); err != nil {
		return err
	}
	got, err := readFloats(d, bs[1], n)
	if err != nil {
		return err
	}
	want := SAXPY(alpha, x, y)
	// A compiler may contract alpha*x+y into one fma: allow an ulp or two.
	return compare("y", got, func(i int) float64 { return float64(want[i]) }, 1e-6, 1e-6)
}

// localSize is the largest power of two <= want the device allows.
func localSize(d *driver.Device, want uint32) uint32 {
	m := d.Info().MaxWorkGroup
	if m == 0 || m > want {
		m = want
	}
	l := uint32(1)
	for l*2 <= m {
		l *= 2
	}
	return l
}

func matmul(d *driver.Device, p driver.Program, n int, seed uint64) (err error) {
	if n%16 != 0 {
		return fmt.Errorf("matrix side %d is not a multiple of 16", n)
	}
	a, b := Floats(seed, n*n, -1, 1), Floats(seed+100, n*n, -1, 1)
	bs, err := upload(d, a, b)
	if err == nil {
		bs, err = output(d, bs, n*n)
	}
	defer func() { err = freeAll(d, bs, err) }()
	if err != nil {
		return err
	}
	l := uint64(16)
	if localSize(d, 256) < 256 {
		l = 8
	}
	if err := d.Launch(p, "matmul", driver.Range2(uint64(n), uint64(n), l, l),
		driver.BufferArg(bs[0]), driver.BufferArg(bs[1]), driver.BufferArg(bs[2]), driver.Uint32Arg(uint32(n))); err != nil {
		return err
	}
	got, err := readFloats(d, bs[2], n*n)
	if err != nil {
		return err
	}
	want := MatMul(a, b, n)
	// n products of magnitude < 1, summed in float32.
	return compare("C", got, func(i int) float64 { return want[i] }, float64(n)*1e-5, 1e-5)
}

func reduce(d *driver.Device, p driver.Program, n int, seed uint64) (err error) {
	in := Floats(seed, n, 0, 1)
	l := uint64(localSize(d, 256))
	g1 := (uint64(n) + l - 1) / l // groups of pass 1
	g2 := (g1 + l - 1) / l        // groups of pass 2
	bs, err := upload(d, in)
	defer func() { err = freeAll(d, bs, err) }()
	if err != nil {
		return err
	}
	for _, size := range []uint64{g1, g2} {
		b, err := d.CreateBuffer(4 * size)
		if err != nil {
			return err
		}
		bs = append(bs, b)
	}
	if err := d.Launch(p, "reduce", driver.Range1(g1*l, l),
		driver.BufferArg(bs[0]), driver.BufferArg(bs[1]), driver.LocalArg(uint32(4*l)), driver.Uint32Arg(uint32(n))); err != nil {
		return err
	}
	if err := d.Launch(p, "reduce", driver.Range1(g2*l, l),
		driver.BufferArg(bs[1]), driver.BufferArg(bs[2]), driver.LocalArg(uint32(4*l)), driver.Uint32Arg(uint32(g1))); err != nil {
		return err
	}
	partial, err := readFloats(d, bs[2], int(g2))
	if err != nil {
		return err
	}
	got := Sum(partial)
	if want := Sum(in); !Close(got, want, 1e-3, 1e-5) {
		return fmt.Errorf("sum of %d floats = %g, want %g", n, got, want)
	}
	return nil
}

package gputest_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
)

func newQueue(t *testing.T, d gpu.Device) gpu.Queue {
	t.Helper()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatalf("NewQueue() = %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// wantErr fails the test unless err matches want (nil: no error).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Errorf("%s = %v, want %v", what, err, want)
	}
}

func TestAlloc(t *testing.T) {
	tests := []struct {
		name string
		held uint64 // allocated first
		size uint64
		want error
	}{
		{"one byte", 0, 1, nil},
		{"largest buffer", 0, 600, nil},
		{"zero", 0, 0, gpu.ErrInvalidArgument},
		{"over the largest buffer", 0, 601, gpu.ErrInvalidArgument},
		{"huge", 0, math.MaxUint64, gpu.ErrInvalidArgument},
		{"fills the memory", 500, 500, nil},
		{"past the memory", 500, 501, gpu.ErrOutOfMemory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := gputest.New(gputest.Config{Info: gpu.Info{MaxAllocBytes: 600}, MemLimit: 1000})
			q := newQueue(t, d)
			if tt.held > 0 {
				if _, err := q.Alloc(tt.held); err != nil {
					t.Fatal(err)
				}
			}
			b, err := q.Alloc(tt.size)
			wantErr(t, fmt.Sprintf("Alloc(%d)", tt.size), err, tt.want)
			held := tt.held
			if err == nil {
				held += tt.size
				if b.Size() != tt.size {
					t.Errorf("Size() = %d, want %d", b.Size(), tt.size)
				}
				got := make([]byte, tt.size)
				got[0] = 1
				if err := q.Read(b, 0, got); err != nil || !bytes.Equal(got, make([]byte, tt.size)) {
					t.Errorf("a new buffer reads %v, %v; want zeros", err, got[:1])
				}
				b.Release()
				b.Release() // idempotent
				held -= tt.size
			}
			if s := d.Stats(); s.Bytes != held {
				t.Errorf("Stats().Bytes = %d, want %d", s.Bytes, held)
			}
		})
	}
}

func TestTransfer(t *testing.T) {
	tests := []struct {
		op   string
		off  uint64
		n    int
		want error
	}{
		{"write", 0, 16, nil},
		{"write", 15, 1, nil},
		{"write", 16, 0, nil},
		{"write", 8, 9, gpu.ErrOutOfRange},
		{"write", 17, 0, gpu.ErrOutOfRange},
		{"write", math.MaxUint64, 2, gpu.ErrOutOfRange},
		{"read", 0, 16, nil},
		{"read", 4, 12, nil},
		{"read", 1, 16, gpu.ErrInvalidArgument}, // ErrOutOfRange is one
		{"read", math.MaxUint64 - 1, 4, gpu.ErrOutOfRange},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %d+%d", tt.op, tt.off, tt.n), func(t *testing.T) {
			q := newQueue(t, gputest.New(gputest.Config{}))
			b, err := q.Alloc(16)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 16)
			p := make([]byte, tt.n)
			for i := range p {
				p[i] = byte(i + 1)
			}
			if tt.op == "write" {
				err = q.Write(b, tt.off, p)
				if err == nil {
					copy(want[tt.off:], p)
				}
			} else {
				if err := q.Write(b, 0, []byte("0123456789abcdef")); err != nil {
					t.Fatal(err)
				}
				copy(want, "0123456789abcdef")
				err = q.Read(b, tt.off, p)
				if err == nil && !bytes.Equal(p, want[tt.off:tt.off+uint64(tt.n)]) {
					t.Errorf("read %q, want %q", p, want[tt.off:tt.off+uint64(tt.n)])
				}
			}
			wantErr(t, tt.op, err, tt.want)
			got := make([]byte, 16)
			if err := q.Read(b, 0, got); err != nil || !bytes.Equal(got, want) {
				t.Errorf("buffer holds %q (%v), want %q", got, err, want)
			}
		})
	}
}

// buildCase is one Build and what it must give. fakeOnly marks the cases
// that depend on the fake's own bounds (fakeConfig).
type buildCase struct {
	name     string
	src      string
	opts     string
	want     error
	names    []string
	fakeOnly bool
}

// fakeConfig bounds sources and kernels low enough for buildCases.
var fakeConfig = gputest.Config{MaxKernels: 4, MaxSource: 1000}

var buildCases = []buildCase{
	{name: "two kernels", src: "__kernel void a(__global int *p) { p[0] = 1; }\nkernel void b(void) {}", names: []string{"a", "b"}},
	{name: "no kernel", src: "int twice(int x) { return 2 * x; }"},
	{name: "attributes", src: "__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void a() {}", names: []string{"a"}},
	{name: "prototype then definition", src: "kernel void a(int);\nkernel void a(int x) {}", opts: "-D N=1 -cl-std=CL1.2", names: []string{"a"}},
	{name: "comments and literals", src: "// kernel void x(\n/* kernel void y( */ __constant char s[] = \"kernel void z(\";\nkernel void a() {}", names: []string{"a"}},
	{name: "directives skipped", src: "#define N 4 \\\n  + 1\n#pragma OPENCL EXTENSION all : disable\nkernel void a(global int *p) { p[0] = N; }", names: []string{"a"}},
	{name: "empty", want: gpu.ErrBuildFailed},
	{name: "include", src: "#include \"/etc/passwd\"\nkernel void a() {}", want: gpu.ErrSourceRejected},
	{name: "bad option", src: "kernel void a() {}", opts: "-I/etc", want: gpu.ErrSourceRejected},
	{name: "unbalanced", src: "kernel void a() { if (1) { }", want: gpu.ErrBuildFailed},
	{name: "mismatched", src: "kernel void a() { int x[2); }", want: gpu.ErrBuildFailed},
	{name: "unterminated comment", src: "kernel void a() {} /*", want: gpu.ErrBuildFailed},
	{name: "unterminated string", src: "kernel void a() { char *s = \"x; }", want: gpu.ErrBuildFailed},
	{name: "stray byte", src: "kernel void a() { @ }", want: gpu.ErrBuildFailed},
	{name: "not ascii", src: "kernel void a() { \xff }", want: gpu.ErrBuildFailed},
	{name: "random bytes", src: "\x01\x02garbage\x7f", want: gpu.ErrBuildFailed},
	{name: "returns int", src: "kernel int a() { return 0; }", want: gpu.ErrBuildFailed},
	{name: "no name", src: "kernel void (int x) {}", want: gpu.ErrBuildFailed},
	{name: "no body", src: "kernel void a(int x) x", want: gpu.ErrBuildFailed},
	{name: "nested", src: "void f() { kernel void a() {} }", want: gpu.ErrBuildFailed},
	{name: "redefined", src: "kernel void a() {} kernel void a() {}", want: gpu.ErrBuildFailed},
	{name: "private pointer", src: "kernel void a(int *p) {}", want: gpu.ErrBuildFailed},
	{name: "global scalar", src: "kernel void a(global int x) {}", want: gpu.ErrBuildFailed},
	{name: "bool parameter", src: "kernel void a(bool b) {}", want: gpu.ErrBuildFailed},
	{name: "empty parameter", src: "kernel void a(int x, , int y) {}", want: gpu.ErrBuildFailed},
	{name: "variadic", src: "kernel void a(int x, ...) {}", want: gpu.ErrBuildFailed},
	{name: "too deep", src: "kernel void a() " + strings.Repeat("{", 300) + strings.Repeat("}", 300), want: gpu.ErrBuildFailed},
	{name: "too many kernels", src: "kernel void a0() {} kernel void a1() {} kernel void a2() {} kernel void a3() {} kernel void a4() {}", want: gpu.ErrBuildFailed, fakeOnly: true},
	{name: "too long", src: "kernel void a() {}" + strings.Repeat(" ", 1000), want: gpu.ErrBuildFailed, fakeOnly: true},
}

func TestBuild(t *testing.T) {
	d := gputest.New(fakeConfig)
	for _, tt := range buildCases {
		t.Run(tt.name, func(t *testing.T) { checkBuild(t, d, tt) })
	}
}

// checkBuild builds tt's source on a new queue of d.
func checkBuild(t *testing.T, d gpu.Device, tt buildCase) {
	q := newQueue(t, d)
	p, log, err := q.Build(tt.src, tt.opts)
	wantErr(t, "Build", err, tt.want)
	if err != nil {
		if log == "" && tt.src != "" {
			t.Errorf("Build failed (%v) with an empty log", err)
		}
		return
	}
	if got := p.KernelNames(); !slices.Equal(got, tt.names) {
		t.Errorf("KernelNames() = %q, want %q", got, tt.names)
	}
	for _, n := range tt.names {
		k, err := p.Kernel(n)
		if err != nil || k.Name() != n {
			t.Errorf("Kernel(%q) = %v, %v", n, k, err)
		}
	}
	_, err = p.Kernel("missing")
	wantErr(t, "Kernel(missing)", err, gpu.ErrNoKernel)
}

// paramSource declares one kernel per parameter kind, named after it.
const paramSource = `
typedef struct { int a, b; } pair;
kernel void buf(__global float *p) {}
kernel void cbuf(__constant const uchar *restrict p) {}
kernel void loc(__local int *p) {}
kernel void i32(int x) {}
kernel void u32(unsigned int x) {}
kernel void u8(unsigned char x) {}
kernel void f3(float3 x) {}
kernel void l16(long2 x) {}
kernel void typedefd(pair x) {}
kernel void img(__read_only image2d_t x) {}
kernel void smp(sampler_t x) {}
kernel void two(__global int *p, uint n) {}
`

// launchCase is one launch of a paramSource kernel and what it must give.
type launchCase struct {
	name     string
	kernel   string
	r        gpu.NDRange
	args     []gpu.Arg
	want     error
	fakeOnly bool // the real device cannot know it
}

// launchCases are the launch cases for a device described by info, with b
// a buffer of the launching queue, foreign one of another queue and
// released one released.
func launchCases(info gpu.Info, b, foreign, released gpu.Buffer) []launchCase {
	one := gpu.NDRange{Dims: 1, Global: [3]uint64{1}}
	n := func(size int) []byte { return make([]byte, size) }
	wg, item1 := info.MaxWorkGroupSize, info.MaxWorkItemSizes[1]
	return []launchCase{
		{name: "buffer", kernel: "buf", r: one, args: []gpu.Arg{{Buffer: b}}},
		{name: "constant buffer", kernel: "cbuf", r: one, args: []gpu.Arg{{Buffer: b}}},
		{name: "local", kernel: "loc", r: one, args: []gpu.Arg{{Local: 1024}}},
		{name: "int", kernel: "i32", r: one, args: []gpu.Arg{{Scalar: n(4)}}},
		{name: "unsigned int", kernel: "u32", r: one, args: []gpu.Arg{{Scalar: n(4)}}},
		{name: "unsigned char", kernel: "u8", r: one, args: []gpu.Arg{{Scalar: n(1)}}},
		{name: "float3", kernel: "f3", r: one, args: []gpu.Arg{{Scalar: n(16)}}},
		{name: "long2", kernel: "l16", r: one, args: []gpu.Arg{{Scalar: n(16)}}},
		{name: "struct of its size", kernel: "typedefd", r: one, args: []gpu.Arg{{Scalar: n(8)}}},
		{name: "struct of any size", kernel: "typedefd", r: one, args: []gpu.Arg{{Scalar: n(3)}}, fakeOnly: true},
		{name: "two", kernel: "two", r: one, args: []gpu.Arg{{Buffer: b}, {Scalar: n(4)}}},
		{name: "3-D with local", kernel: "buf", r: gpu.NDRange{Dims: 3, Offset: [3]uint64{1, 2, 3}, Global: [3]uint64{16, 8, 4}, Local: [3]uint64{4, 4, 2}}, args: []gpu.Arg{{Buffer: b}}},
		{name: "unused dimensions 1", kernel: "buf", r: gpu.NDRange{Dims: 1, Global: [3]uint64{8, 1, 1}, Local: [3]uint64{8, 1, 1}}, args: []gpu.Arg{{Buffer: b}}},

		{name: "too few arguments", kernel: "two", r: one, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "too many arguments", kernel: "buf", r: one, args: []gpu.Arg{{Buffer: b}, {Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "scalar for buffer", kernel: "buf", r: one, args: []gpu.Arg{{Scalar: n(8)}}, want: gpu.ErrInvalidLaunch},
		{name: "buffer for scalar", kernel: "i32", r: one, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "local for buffer", kernel: "buf", r: one, args: []gpu.Arg{{Local: 4}}, want: gpu.ErrInvalidLaunch},
		{name: "buffer for local", kernel: "loc", r: one, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "nothing set", kernel: "i32", r: one, args: []gpu.Arg{{}}, want: gpu.ErrInvalidLaunch},
		{name: "two set", kernel: "buf", r: one, args: []gpu.Arg{{Buffer: b, Scalar: n(4)}}, want: gpu.ErrInvalidLaunch},
		{name: "int of 8 bytes", kernel: "i32", r: one, args: []gpu.Arg{{Scalar: n(8)}}, want: gpu.ErrInvalidLaunch},
		// OpenCL C sizes a 3-vector as a 4-vector; PoCL 3.1 takes 12 bytes too.
		{name: "float3 of 12 bytes", kernel: "f3", r: one, args: []gpu.Arg{{Scalar: n(12)}}, want: gpu.ErrInvalidLaunch, fakeOnly: true},
		{name: "image", kernel: "img", r: one, args: []gpu.Arg{{Scalar: n(8)}}, want: gpu.ErrInvalidLaunch},
		{name: "sampler", kernel: "smp", r: one, args: []gpu.Arg{{Scalar: n(4)}}, want: gpu.ErrInvalidLaunch},
		{name: "foreign buffer", kernel: "buf", r: one, args: []gpu.Arg{{Buffer: foreign}}, want: gpu.ErrForeign},
		{name: "released buffer", kernel: "buf", r: one, args: []gpu.Arg{{Buffer: released}}, want: gpu.ErrClosed},
		// PoCL's CPU devices do not enforce their __local memory size.
		{name: "too much local memory", kernel: "loc", r: one, args: []gpu.Arg{{Local: info.LocalMemBytes + 1}}, want: gpu.ErrOutOfMemory, fakeOnly: true},

		{name: "0 dimensions", kernel: "buf", r: gpu.NDRange{Global: [3]uint64{1}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "4 dimensions", kernel: "buf", r: gpu.NDRange{Dims: 4, Global: [3]uint64{1, 1, 1}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "zero global", kernel: "buf", r: gpu.NDRange{Dims: 2, Global: [3]uint64{1, 0}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "set beyond dims", kernel: "buf", r: gpu.NDRange{Dims: 1, Global: [3]uint64{1, 2}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "offset beyond dims", kernel: "buf", r: gpu.NDRange{Dims: 1, Global: [3]uint64{1}, Offset: [3]uint64{0, 0, 1}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "overflow", kernel: "buf", r: gpu.NDRange{Dims: 1, Global: [3]uint64{2}, Offset: [3]uint64{math.MaxUint64 - 1}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "local partly zero", kernel: "buf", r: gpu.NDRange{Dims: 2, Global: [3]uint64{4, 4}, Local: [3]uint64{2, 0}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "local does not divide", kernel: "buf", r: gpu.NDRange{Dims: 1, Global: [3]uint64{10}, Local: [3]uint64{4}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "local over item size", kernel: "buf", r: gpu.NDRange{Dims: 2, Global: [3]uint64{1, 2 * item1}, Local: [3]uint64{1, 2 * item1}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "group too large", kernel: "buf", r: gpu.NDRange{Dims: 2, Global: [3]uint64{wg, 2}, Local: [3]uint64{wg, 2}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
		{name: "huge local", kernel: "buf", r: gpu.NDRange{Dims: 3, Global: [3]uint64{1 << 62, 1 << 62, 1 << 62}, Local: [3]uint64{1 << 62, 1 << 62, 1 << 62}}, args: []gpu.Arg{{Buffer: b}}, want: gpu.ErrInvalidLaunch},
	}
}

func TestLaunch(t *testing.T) {
	d := gputest.New(gputest.Config{Info: gpu.Info{LocalMemBytes: 2048, MaxWorkGroupSize: 64, MaxWorkItemSizes: [3]uint64{64, 8, 4}}})
	checkLaunches(t, d, true)
}

// checkLaunches runs launchCases on d; the fake's own cases only if fake.
func checkLaunches(t *testing.T, d gpu.Device, fake bool) {
	q, other := newQueue(t, d), newQueue(t, d)
	p, log, err := q.Build(paramSource, "")
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	var bufs [3]gpu.Buffer
	for i, bq := range []gpu.Queue{q, other, q} {
		if bufs[i], err = bq.Alloc(64); err != nil {
			t.Fatal(err)
		}
	}
	bufs[2].Release()
	fd, _ := d.(*gputest.Device)
	for _, tt := range launchCases(d.Info(), bufs[0], bufs[1], bufs[2]) {
		if tt.fakeOnly && !fake {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			k, err := p.Kernel(tt.kernel)
			if err != nil {
				t.Fatal(err)
			}
			var before uint64
			if fd != nil {
				before = fd.Stats().Launches
			}
			dt, err := q.Launch(k, tt.r, tt.args)
			wantErr(t, "Launch", err, tt.want)
			if fd == nil {
				return
			}
			ran := fd.Stats().Launches - before
			switch {
			case err == nil && (dt != gputest.DefaultLaunchTime || ran != 1):
				t.Errorf("Launch took %v and counted %d launches, want %v and 1", dt, ran, gputest.DefaultLaunchTime)
			case err != nil && ran != 0:
				t.Errorf("a failed launch counted %d launches", ran)
			}
		})
	}
}

// TestLifecycle: closed queues and devices, released and foreign objects
// are refused with the sentinels of the real device.
func TestLifecycle(t *testing.T) {
	checkLifecycle(t, func(*testing.T) gpu.Device { return gputest.New(gputest.Config{}) })
}

// checkLifecycle runs the lifecycle cases, each on a new device from open.
func checkLifecycle(t *testing.T, open func(t *testing.T) gpu.Device) {
	const src = "kernel void k(global int *p) {}"
	one := gpu.NDRange{Dims: 1, Global: [3]uint64{1}}
	type objs struct {
		d     gpu.Device
		q     gpu.Queue
		b     gpu.Buffer
		p     gpu.Program
		k     gpu.Kernel
		other gpu.Queue // another queue of d
	}
	tests := []struct {
		name string
		op   func(o objs) error
		want error
	}{
		{"closed queue alloc", func(o objs) error { o.q.Close(); _, err := o.q.Alloc(1); return err }, gpu.ErrClosed},
		{"closed queue write", func(o objs) error { o.q.Close(); return o.q.Write(o.b, 0, []byte{1}) }, gpu.ErrClosed},
		{"closed queue build", func(o objs) error { o.q.Close(); _, _, err := o.q.Build(src, ""); return err }, gpu.ErrClosed},
		{"closed queue launch", func(o objs) error {
			o.q.Close()
			_, err := o.q.Launch(o.k, one, []gpu.Arg{{Buffer: o.b}})
			return err
		}, gpu.ErrClosed},
		{"closed device", func(o objs) error { o.d.Close(); _, err := o.d.NewQueue(); return err }, gpu.ErrClosed},
		{"closed device closes queues", func(o objs) error { o.d.Close(); return o.q.Read(o.b, 0, []byte{1}) }, gpu.ErrClosed},
		{"released buffer", func(o objs) error { o.b.Release(); return o.q.Write(o.b, 0, []byte{1}) }, gpu.ErrClosed},
		{"released program", func(o objs) error { o.p.Release(); _, err := o.p.Kernel("k"); return err }, gpu.ErrClosed},
		{"released program's kernel", func(o objs) error {
			o.p.Release()
			_, err := o.q.Launch(o.k, one, []gpu.Arg{{Buffer: o.b}})
			return err
		}, gpu.ErrClosed},
		{"released kernel", func(o objs) error {
			o.k.Release()
			_, err := o.q.Launch(o.k, one, []gpu.Arg{{Buffer: o.b}})
			return err
		}, gpu.ErrClosed},
		{"kernel again after release", func(o objs) error {
			o.k.Release()
			k, err := o.p.Kernel("k")
			if err != nil {
				return err
			}
			_, err = o.q.Launch(k, one, []gpu.Arg{{Buffer: o.b}})
			return err
		}, nil},
		{"foreign buffer", func(o objs) error { return o.other.Write(o.b, 0, []byte{1}) }, gpu.ErrForeign},
		{"foreign kernel", func(o objs) error {
			nb, err := o.other.Alloc(4)
			if err != nil {
				return err
			}
			_, err = o.other.Launch(o.k, one, []gpu.Arg{{Buffer: nb}})
			return err
		}, gpu.ErrForeign},
		{"nil buffer", func(o objs) error { return o.q.Write(nil, 0, nil) }, gpu.ErrForeign},
		{"nil kernel", func(o objs) error { _, err := o.q.Launch(nil, one, nil); return err }, gpu.ErrForeign},
		{"typed nil buffer argument", func(o objs) error {
			var nb gpu.Buffer = (*struct{ gpu.Buffer })(nil)
			_, err := o.q.Launch(o.k, one, []gpu.Arg{{Buffer: nb}})
			return err
		}, gpu.ErrForeign},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o objs
			var err error
			o.d = open(t)
			o.q, o.other = newQueue(t, o.d), newQueue(t, o.d)
			if o.b, err = o.q.Alloc(4); err != nil {
				t.Fatal(err)
			}
			if o.p, _, err = o.q.Build(src, ""); err != nil {
				t.Fatal(err)
			}
			if o.k, err = o.p.Kernel("k"); err != nil {
				t.Fatal(err)
			}
			wantErr(t, tt.name, tt.op(o), tt.want)
			// Everything is idempotent and leaves nothing behind.
			o.b.Release()
			o.k.Release()
			o.p.Release()
			for _, q := range []gpu.Queue{o.q, o.other, o.q} {
				if err := q.Close(); err != nil {
					t.Errorf("Close() = %v", err)
				}
			}
			o.d.Close()
			if fd, ok := o.d.(*gputest.Device); ok {
				if s := fd.Stats(); s.Bytes != 0 || s.Buffers != 0 || s.Programs != 0 {
					t.Errorf("after Close, Stats() = %+v", s)
				}
			}
		})
	}
}

// TestFault: an injected fault fails the operation it names, with the
// hook's error, and leaves nothing behind.
func TestFault(t *testing.T) {
	for _, op := range []string{gputest.OpAlloc, gputest.OpWrite, gputest.OpRead, gputest.OpBuild, gputest.OpLaunch} {
		t.Run(op, func(t *testing.T) {
			failing := false
			d := gputest.New(gputest.Config{Fault: func(o string) error {
				if failing && o == op {
					return gpu.ErrDevice
				}
				return nil
			}})
			q := newQueue(t, d)
			b, err := q.Alloc(4)
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := q.Build("kernel void k(global int *p) {}", "")
			if err != nil {
				t.Fatal(err)
			}
			k, err := p.Kernel("k")
			if err != nil {
				t.Fatal(err)
			}
			before := d.Stats()
			failing = true
			ops := map[string]func() error{
				gputest.OpAlloc: func() error { _, err := q.Alloc(4); return err },
				gputest.OpWrite: func() error { return q.Write(b, 0, []byte{1}) },
				gputest.OpRead:  func() error { return q.Read(b, 0, []byte{1}) },
				gputest.OpBuild: func() error { _, _, err := q.Build("kernel void j() {}", ""); return err },
				gputest.OpLaunch: func() error {
					_, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{1}}, []gpu.Arg{{Buffer: b}})
					return err
				},
			}
			for o, f := range ops {
				want := error(nil)
				if o == op {
					want = gpu.ErrDevice
				}
				wantErr(t, o, f(), want)
			}
			after := d.Stats()
			if op == gputest.OpAlloc && after.Buffers != before.Buffers ||
				op == gputest.OpBuild && after.Programs != before.Programs ||
				op == gputest.OpLaunch && after.Launches != before.Launches {
				t.Errorf("Stats() = %+v after the fault, %+v before", after, before)
			}
		})
	}
}

// TestConcurrent uses one device from many goroutines, each with its own
// queue, while another closes the device: run with -race.
func TestConcurrent(t *testing.T) {
	d := gputest.New(gputest.Config{MemLimit: 1 << 16})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := d.NewQueue()
			if err != nil {
				return // the device closed first
			}
			defer q.Close()
			p, _, err := q.Build("kernel void k(global int *p, int x) {}", "")
			if err != nil {
				return
			}
			for i := 0; i < 100; i++ {
				b, err := q.Alloc(1024)
				if err != nil {
					continue // out of memory or closed
				}
				q.Write(b, 0, []byte{byte(g)})
				if k, err := p.Kernel("k"); err == nil {
					q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{4}}, []gpu.Arg{{Buffer: b}, {Scalar: make([]byte, 4)}})
				}
				b.Release()
			}
		}()
	}
	d.Close()
	wg.Wait()
	if s := d.Stats(); s.Bytes != 0 || s.Buffers != 0 || s.Programs != 0 {
		t.Errorf("after Close, Stats() = %+v", s)
	}
}

// FuzzBuild: no source or options make Build panic; a failure is a build
// failure with a log; each kernel of a built program can be launched or
// is refused as an invalid launch.
func FuzzBuild(f *testing.F) {
	f.Add(paramSource, "")
	f.Add("kernel void a(global int *p, local float *l, int n) { p[0] = n; }", "-D X=1")
	f.Add("__kernel __attribute__((x)) void a(void) { /* } */ \"{\" }", "")
	f.Add("kernel void a(__global", "")
	f.Fuzz(func(t *testing.T, src, opts string) {
		d := gputest.New(gputest.Config{MaxSource: 4096})
		defer d.Close()
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		p, log, err := q.Build(src, opts)
		if err != nil {
			if !errors.Is(err, gpu.ErrBuildFailed) {
				t.Fatalf("Build = %v, want a build failure", err)
			}
			if log == "" && src != "" {
				t.Fatalf("Build failed (%v) with an empty log", err)
			}
			return
		}
		b, err := q.Alloc(16)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range p.KernelNames() {
			k, err := p.Kernel(n)
			if err != nil {
				t.Fatalf("Kernel(%q) = %v", n, err)
			}
			args := make([]gpu.Arg, k.NumArgs())
			for i := range args {
				args[i] = gpu.Arg{Buffer: b}
			}
			if _, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{1}}, args); err != nil && !errors.Is(err, gpu.ErrInvalidLaunch) {
				t.Fatalf("Launch(%q) = %v", n, err)
			}
		}
	})
}

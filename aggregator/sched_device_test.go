package aggregator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/sched"
)

// spinSource holds kernels whose device time grows with iters; spin2 is
// two-dimensional and uses local ids, which slicing keeps intact.
const spinSource = `
__kernel void spin(__global float *out, uint iters) {
	size_t i = get_global_id(0);
	float x = (float)i * 0.001f;
	for (uint k = 0; k < iters; k++) x = x * 0.999f + sin(x);
	out[i] = x;
}
__kernel void spin2(__global float *out, uint iters) {
	size_t x = get_global_id(0), y = get_global_id(1);
	float v = (float)(x * 7 + y) * 0.01f + (float)get_local_id(1);
	for (uint k = 0; k < iters; k++) v = v * 0.999f + cos(v);
	out[y * 256 + x] = v;
}
`

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// spinSetup builds spinSource as program 1 and a buffer 1 of n floats.
func spinSetup(t *testing.T, g *testGuest, n int) {
	t.Helper()
	b, _ := g.build(1, spinSource, 0)
	g.mustOK(g.run(b, abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: uint64(4 * n)}, 0, 0))...)
}

func (g *testGuest) spin(n, local int, iters uint32) abi.Command {
	return g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{uint64(n)}, LocalSize: [3]uint64{uint64(local)}, Kernel: "spin",
		Args: []abi.KernelArg{{Kind: abi.ArgBuffer, Handle: 1}, {Kind: abi.ArgScalar, Bytes: u32(iters)}}})
}

// TestSlicedLaunchBitIdentical: a launch cut into slices along its
// outermost dimension writes exactly the bytes of the uncut launch, in one
// and two dimensions, with explicit and device-chosen local sizes.
func TestSlicedLaunchBitIdentical(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	const n = 256 * 64
	spinSetup(t, g, n)
	in := g.in
	// The worker is idle (every command completed): the test may use the
	// instance's queue and tables directly.
	pr := in.state.programs[1]
	buf := in.state.buffers[1].mem
	tests := []struct {
		kernel string
		r      gpu.NDRange
		rows   uint64
	}{
		{"spin", gpu.NDRange{Dims: 1, Global: [3]uint64{n}, Local: [3]uint64{64}}, 64 * 5},
		{"spin", gpu.NDRange{Dims: 1, Global: [3]uint64{n}}, 1000},
		{"spin", gpu.NDRange{Dims: 1, Offset: [3]uint64{128}, Global: [3]uint64{n - 256}, Local: [3]uint64{32}}, 32},
		{"spin2", gpu.NDRange{Dims: 2, Global: [3]uint64{256, 64}, Local: [3]uint64{16, 4}}, 12},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%v", tt.kernel, tt.r), func(t *testing.T) {
			k, err := pr.prog.Kernel(tt.kernel)
			if err != nil {
				t.Fatal(err)
			}
			args := []gpu.Arg{{Buffer: buf}, {Scalar: u32(50)}}
			read := func() []byte {
				b := make([]byte, 4*n)
				if err := in.queue.Read(buf, 0, b); err != nil {
					t.Fatal(err)
				}
				return b
			}
			clear := func() {
				if err := in.queue.Write(buf, 0, make([]byte, 4*n)); err != nil {
					t.Fatal(err)
				}
			}
			dim, unit, ok := sliceDim(tt.r, args)
			if !ok || tt.rows%unit != 0 || !sliceable(pr.source, pr.options) {
				t.Fatalf("sliceDim(%v) = %d, %d, %v; sliceable = %v", tt.r, dim, unit, ok, sliceable(pr.source, pr.options))
			}
			clear()
			if _, err := in.queue.Launch(k, tt.r, args); err != nil {
				t.Fatal(err)
			}
			whole := read()
			clear()
			slices := 0
			for done := uint64(0); done < tt.r.Global[dim]; done += tt.rows {
				if _, err := in.queue.Launch(k, sliceOf(tt.r, dim, done, min(tt.rows, tt.r.Global[dim]-done)), args); err != nil {
					t.Fatal(err)
				}
				slices++
			}
			if want := int((tt.r.Global[dim] + tt.rows - 1) / tt.rows); slices != want {
				t.Errorf("made %d slices, want %d", slices, want)
			}
			if cut := read(); !bytes.Equal(cut, whole) {
				t.Errorf("sliced launch differs from the whole launch")
			}
			if bytes.Equal(whole, make([]byte, 4*n)) {
				t.Errorf("the launch wrote nothing")
			}
		})
	}
}

// fixedBudget is an Arbiter that grants at once with a fixed slice
// budget and counts the turns and slices it was told of.
type fixedBudget struct {
	mu            sync.Mutex // the instance's loop calls it, the test reads it
	budget        time.Duration
	turns, slices int
}

func (f *fixedBudget) Acquire(context.Context, string, time.Duration) (time.Duration, func(time.Duration, int), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.turns++
	return f.budget, func(_ time.Duration, n int) { f.mu.Lock(); f.slices += n; f.mu.Unlock() }, nil
}

// counts returns the turns and slices counted.
func (f *fixedBudget) counts() (turns, slices int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.turns, f.slices
}

// TestLaunchKernelCuts: launchKernel cuts a long launch as the turn's
// slice budget says, in power-of-two pieces, and the result is the whole
// launch's.
func TestLaunchKernelCuts(t *testing.T) {
	arb := &fixedBudget{}
	d := NewDevice(openGPU(t), arb, nil)
	t.Cleanup(func() { d.Close() })
	g := newTestGuest(t, d, "vm0", 64<<20)
	const n = 256 * 64
	spinSetup(t, g, n)
	in := g.in
	pr := in.state.programs[1]
	buf := in.state.buffers[1].mem
	k, err := pr.prog.Kernel("spin")
	if err != nil {
		t.Fatal(err)
	}
	key := kernelKey{program: 1, name: "spin"}
	args := []gpu.Arg{{Buffer: buf}, {Scalar: u32(50)}}
	r := gpu.NDRange{Dims: 1, Global: [3]uint64{n}, Local: [3]uint64{64}}
	results := map[time.Duration][]byte{}
	for _, budget := range []time.Duration{0, time.Millisecond} {
		b := make([]byte, 4*n)
		var err error
		// On the instance's goroutine: its loop gives turns back (and
		// counts them in arb) between commands.
		werr := in.onWorker(context.Background(), func() {
			arb.mu.Lock()
			arb.budget, arb.turns, arb.slices = budget, 0, 0
			arb.mu.Unlock()
			// 1 us per item: a 16 ms launch, cut at 1 ms into 512-item
			// slices (1000 items rounded down to 64 times a power of two).
			*in.lengths.of(key) = kernelAvg{nanos: float64(n * time.Microsecond), nsPerItem: float64(time.Microsecond)}
			if err = in.queue.Write(buf, 0, make([]byte, 4*n)); err != nil {
				return
			}
			if _, err = in.launchKernel(key, pr, k, r, args, nil); err != nil {
				return
			}
			err = in.queue.Read(buf, 0, b)
		})
		if err := cmp.Or(werr, err); err != nil {
			t.Fatal(err)
		}
		results[budget] = b
		want := 1
		if budget > 0 {
			want = n / 512
		}
		turns, slices := arb.counts()
		if turns != want {
			t.Errorf("budget %v: %d turns, want %d", budget, turns, want)
		}
		if budget > 0 && slices != want {
			t.Errorf("budget %v: %d slices counted, want %d", budget, slices, want)
		}
	}
	if !bytes.Equal(results[0], results[time.Millisecond]) {
		t.Errorf("the cut launch differs from the whole one")
	}
}

func TestSliceDim(t *testing.T) {
	tests := []struct {
		r        gpu.NDRange
		local    bool // a __local argument
		dim      int
		unit     uint64
		wantOK   bool
		describe string
	}{
		{gpu.NDRange{Dims: 1, Global: [3]uint64{1024}, Local: [3]uint64{64}}, false, 0, 64, true, "1d explicit"},
		{gpu.NDRange{Dims: 2, Global: [3]uint64{64, 32}, Local: [3]uint64{8, 4}}, false, 1, 4, true, "2d cuts rows"},
		{gpu.NDRange{Dims: 3, Global: [3]uint64{4, 4, 8}}, false, 2, 1, true, "3d device-chosen"},
		{gpu.NDRange{Dims: 1, Global: [3]uint64{1024}}, true, 0, 0, false, "local memory, device-chosen size"},
		{gpu.NDRange{Dims: 2, Global: [3]uint64{64, 32}, Local: [3]uint64{8, 0}}, false, 0, 0, false, "half-given local"},
		{gpu.NDRange{Dims: 1, Global: [3]uint64{64}, Local: [3]uint64{64}}, false, 0, 0, false, "one group"},
		{gpu.NDRange{Dims: 0}, false, 0, 0, false, "no dims"},
	}
	for _, tt := range tests {
		var args []gpu.Arg
		if tt.local {
			args = []gpu.Arg{{Local: 256}}
		}
		dim, unit, ok := sliceDim(tt.r, args)
		if ok != tt.wantOK || (ok && (dim != tt.dim || unit != tt.unit)) {
			t.Errorf("%s: sliceDim(%v) = %d, %d, %v, want %d, %d, %v", tt.describe, tt.r, dim, unit, ok, tt.dim, tt.unit, tt.wantOK)
		}
	}
}

// TestSliceRows: slice sizes are unit times a power of two, so a device
// that compiles per launch shape sees few shapes.
func TestSliceRows(t *testing.T) {
	tests := []struct{ want, unit, got uint64 }{
		{0, 1, 1}, {1, 1, 1}, {2, 1, 2}, {3, 1, 2}, {66, 1, 64}, {1023, 1, 512},
		{0, 16, 16}, {31, 16, 16}, {48, 16, 32}, {1000, 16, 512},
	}
	for _, tt := range tests {
		if got := sliceRows(tt.want, tt.unit); got != tt.got {
			t.Errorf("sliceRows(%d, %d) = %d, want %d", tt.want, tt.unit, got, tt.got)
		}
	}
}

// TestFloodingGuestCannotStarve: one guest fills its ring with long
// launches; another guest's short work, submitted after the flood began,
// completes while most of the flood is still queued, and the flood's
// launches are cut into slices for it.
func TestFloodingGuestCannotStarve(t *testing.T) {
	d, sc := newDevice(t)
	flood := newTestGuest(t, d, "flood", 64<<20)
	light := newTestGuest(t, d, "light", 64<<20)
	const n = 4096
	spinSetup(t, flood, n)
	spinSetup(t, light, 64)
	// Teach the scheduler the flood kernel's length, and the light one's.
	flood.mustOK(flood.run(flood.spin(n, 64, 300))...)
	light.mustOK(light.run(light.spin(64, 64, 10))...)

	const floods = slots - 4
	cmds := make([]abi.Command, floods)
	for i := range cmds {
		cmds[i] = flood.spin(n, 64, 300)
	}
	first := flood.submit(cmds...)
	flood.wait(first) // the flood is running
	for range 5 {
		light.mustOK(light.run(light.spin(64, 64, 10))...)
	}
	done := flood.in.Done() - first
	for i := range uint32(floods) {
		flood.mustOK(flood.wait(first + i))
	}
	if done >= floods/2 {
		t.Errorf("light guest finished after %d of %d flood launches, want fewer than half", done, floods)
	}
	if s := sc.Client("flood"); s.Slices == 0 {
		t.Errorf("flood launches were never sliced: %+v", s)
	}
	if s := sc.Client("light"); s.Turns == 0 || s.DeviceNanos == 0 {
		t.Errorf("light guest's scheduler counters = %+v", s)
	}
}

// TestFixedShareDeviceTime: two always-busy guests with shares 1 and 3
// under fixed-share; when the heavier one finishes, it has had more
// device time than the lighter one, which has fewer launches done.
func TestFixedShareDeviceTime(t *testing.T) {
	d, sc := newDevice(t)
	if err := sc.SetPolicy(sched.PolicyFixedShare); err != nil {
		t.Fatal(err)
	}
	lo := newTestGuest(t, d, "lo", 64<<20)
	hi := newTestGuest(t, d, "hi", 64<<20)
	if err := sc.SetShare("hi", 3); err != nil {
		t.Fatal(err)
	}
	const n, launches = 1024, 40
	for _, g := range []*testGuest{lo, hi} {
		spinSetup(t, g, n)
		g.mustOK(g.run(g.spin(n, 64, 1000))...)
	}
	base := map[string]sched.ClientStats{"lo": sc.Client("lo"), "hi": sc.Client("hi")}
	loDone0 := lo.in.Done()
	submit := func(g *testGuest) uint32 {
		cmds := make([]abi.Command, launches)
		for i := range cmds {
			cmds[i] = g.spin(n, 64, 1000)
		}
		return g.submit(cmds...)
	}
	lf, hf := submit(lo), submit(hi)
	for i := range uint32(launches) {
		hi.mustOK(hi.wait(hf + i))
	}
	loDone := lo.in.Done() - loDone0
	hs, ls := sc.Client("hi"), sc.Client("lo")
	hiDev, loDev := hs.DeviceNanos-base["hi"].DeviceNanos, ls.DeviceNanos-base["lo"].DeviceNanos
	for i := range uint32(launches) {
		lo.mustOK(lo.wait(lf + i))
	}
	if hiDev <= loDev*3/2 {
		t.Errorf("device time at the heavy guest's end: share 3 got %d ns, share 1 got %d ns; want the heavy one well ahead", hiDev, loDev)
	}
	if loDone >= launches {
		t.Errorf("light guest finished %d of %d launches before the heavy one", loDone, launches)
	}
	if got := sc.Stats(); got.Policy != sched.PolicyFixedShare || len(got.Clients) != 2 || got.HeldNanos == 0 {
		t.Errorf("Stats() = %+v", got)
	}
}

// TestSetPolicy switches the scheduler's policy while a guest runs.
func TestSetPolicy(t *testing.T) {
	d, sc := newDevice(t)
	g := newTestGuest(t, d, "vm0", 64<<20)
	spinSetup(t, g, 256)
	for _, p := range sched.Policies {
		if err := sc.SetPolicy(p); err != nil {
			t.Fatalf("SetPolicy(%s) = %v", p, err)
		}
		g.mustOK(g.run(g.spin(256, 64, 10), g.spin(256, 64, 10))...)
		if got := sc.Policy(); got != p {
			t.Errorf("Policy() = %s, want %s", got, p)
		}
	}
}

func TestSliceable(t *testing.T) {
	tests := []struct {
		src, opts string
		want      bool
	}{
		{"__kernel void k(__global float *a) { a[get_global_id(0)] = 1; }", "", true},
		{"__kernel void k(__global float *a) { a[get_global_id(1) * 4 + get_local_id(0)] = get_local_size(0); }", "", true},
		{"__kernel void k(__global float *a) { a[get_group_id(0)] = 1; }", "", false},
		{"__kernel void k(__global float *a) { a[get_global_id(0)] = get_global_size(0); }", "", false},
		{"__kernel void k(__global float *a) { a[0] = get_num_groups(0); }", "", false},
		{"__kernel void k(__global float *a) { a[0] = get_global_offset(0); }", "", false},
		{"__kernel void k(__global float *a) { a[0] = get_enqueued_local_size(0); }", "", false},
		{"__kernel void k(__global float *a) { a[get_global_linear_id()] = 1; }", "", false},
		{"__kernel void k(__global float *a) { printf(\"x\"); }", "", false},
		{"// get_group_id in a comment\n__kernel void k(__global float *a) { a[0] = 1; }", "", false},
		{"#define G(x) get_group_\\\nid(x)\n__kernel void k(__global float *a) { a[G(0)] = 1; }", "", false},
		{"#define P(a, b) a ## b\n__kernel void k(__global float *a) { a[P(get_group, _id)(0)] = 1; }", "", false},
		{"__kernel void k(__global float *a) { a[X(0)] = 1; }", "-DX=get_group_id", false},
		{"__kernel void k(__global float *a) { a[0] = 1 ??/\n; }", "", false},
	}
	for _, tt := range tests {
		if got := sliceable(tt.src, tt.opts); got != tt.want {
			t.Errorf("sliceable(%q, %q) = %v, want %v", tt.src, tt.opts, got, tt.want)
		}
	}
}

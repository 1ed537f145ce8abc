// Package imagetest checks that a gpu.Queue runs kernels with image and
// sampler arguments as OpenCL does (gpu.Image, gpu.Sampler): the same
// check for the OpenCL queue, an executor's queue through its protocol
// and whatever else implements gpu.Queue on a device with images. It
// knows OpenCL C and the packed layout of gpu.Image, nothing of who calls.
package imagetest

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/vgpud/vgpud/gpu"
)

// Source has one kernel per feature Check covers.
const Source = `
__kernel void brighten(__read_only image2d_t in, __write_only image2d_t out, sampler_t s, float k) {
	int2 p = (int2)(get_global_id(0), get_global_id(1));
	write_imagef(out, p, read_imagef(in, s, p) * k);
}
__kernel void edge(__read_only image2d_t in, sampler_t s, __global uint4 *o) {
	o[0] = read_imageui(in, s, (int2)(-1, 0));
	o[1] = read_imageui(in, s, (int2)(1, 0));
}
__kernel void layers(__read_only image2d_array_t in, __global float *o) {
	const sampler_t s = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
	int z = get_global_id(0);
	o[z] = read_imagef(in, s, (int4)(1, 1, z, 0)).x;
}
__kernel void fill3d(__write_only image3d_t out) {
	int4 p = (int4)(get_global_id(0), get_global_id(1), get_global_id(2), 0);
	write_imageui(out, p, (uint4)(p.x + 10 * p.y + 100 * p.z, 0, 0, 0));
}
__kernel void twice1db(__read_only image1d_buffer_t in, __write_only image1d_buffer_t out) {
	int x = get_global_id(0);
	write_imagef(out, x, read_imagef(in, x) * 2.0f);
}
`

// OpenCL's values used below.
const (
	clR             = 0x10B0
	clRGBA          = 0x10B5
	clUnormInt8     = 0x10D2
	clUnsignedInt8  = 0x10DA
	clUnsignedInt16 = 0x10DB
	clFloat         = 0x10DE
)

// launch runs k through q, enqueued and synced where pipelined and q is
// a gpu.Pipeliner, else with Launch.
func launch(t testing.TB, q gpu.Queue, pipelined bool, k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) {
	t.Helper()
	if p, ok := q.(gpu.Pipeliner); ok && pipelined {
		if err := p.Enqueue(k, r, args); err != nil {
			t.Fatalf("Enqueue %s: %v", k.Name(), err)
		}
		for _, res := range p.Sync() {
			if res.Err != nil {
				t.Fatalf("Sync %s: %v", k.Name(), res.Err)
			}
		}
		return
	}
	if _, err := q.Launch(k, r, args); err != nil {
		t.Fatalf("Launch %s: %v", k.Name(), err)
	}
}

// Check runs Source's kernels on q, a queue of a device with caps, and
// compares what they wrote with what OpenCL defines, and that an image
// too large for its buffer, an unknown type or sampler mode, an image
// where a buffer is wanted and an image made from a buffer where another
// image is wanted (and the other way round) are refused. Images made
// from buffers are checked where caps offers them in CL_R CL_FLOAT.
func Check(t *testing.T, q gpu.Queue, caps gpu.ImageCaps, pipelined bool) {
	t.Helper()
	p, log, err := q.Build(Source, "")
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, log)
	}
	defer p.Release()
	kernel := func(name string) gpu.Kernel {
		k, err := p.Kernel(name)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	alloc := func(n uint64) gpu.Buffer {
		b, err := q.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// brighten: a 4x3 RGBA8 image doubled into another.
	const w, h = 4, 3
	in, out := alloc(w*h*4), alloc(w*h*4)
	defer in.Release()
	defer out.Release()
	px := make([]byte, w*h*4)
	for i := range px {
		px[i] = byte(i * 5)
	}
	if err := q.Write(in, 0, px); err != nil {
		t.Fatal(err)
	}
	rgba8 := gpu.Image{Type: gpu.ImageType2D, Order: clRGBA, DataType: clUnormInt8, Width: w, Height: h}
	nearest := &gpu.Sampler{Addressing: gpu.AddressClampToEdge, Filter: gpu.FilterNearest}
	k := binary.LittleEndian.AppendUint32(nil, math.Float32bits(2))
	launch(t, q, pipelined, kernel("brighten"), gpu.NDRange{Dims: 2, Global: [3]uint64{w, h, 1}},
		[]gpu.Arg{{Buffer: in, Image: &rgba8}, {Buffer: out, Image: &rgba8}, {Sampler: nearest}, {Scalar: k}})
	got := make([]byte, len(px))
	if err := q.Read(out, 0, got); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, len(px))
	for i, v := range px {
		want[i] = byte(min(2*int(v), 255))
	}
	if !bytes.Equal(got, want) {
		t.Errorf("brighten: got %v, want %v", got, want)
	}
	back := make([]byte, len(px))
	if err := q.Read(in, 0, back); err != nil || !bytes.Equal(back, px) {
		t.Errorf("brighten's read-only input changed: %v, %v", back, err)
	}

	// edge: the sampler's addressing mode reaches the device.
	u8 := gpu.Image{Type: gpu.ImageType2D, Order: clRGBA, DataType: clUnsignedInt8, Width: w, Height: h}
	o := alloc(32)
	defer o.Release()
	for _, c := range []struct {
		addr uint32
		x0   uint32 // the x of (-1, 0)
	}{{gpu.AddressClampToEdge, uint32(px[0])}, {gpu.AddressClamp, 0}} {
		launch(t, q, pipelined, kernel("edge"), gpu.NDRange{Dims: 1, Global: [3]uint64{1, 1, 1}},
			[]gpu.Arg{{Buffer: in, Image: &u8}, {Sampler: &gpu.Sampler{Addressing: c.addr, Filter: gpu.FilterNearest}}, {Buffer: o}})
		res := make([]byte, 32)
		if err := q.Read(o, 0, res); err != nil {
			t.Fatal(err)
		}
		if x0, x1 := binary.LittleEndian.Uint32(res), binary.LittleEndian.Uint32(res[16:]); x0 != c.x0 || x1 != uint32(px[4]) {
			t.Errorf("edge, addressing %#x: x(-1,0) %d, x(1,0) %d, want %d, %d", c.addr, x0, x1, c.x0, px[4])
		}
	}

	// layers: a 2D image array of 3 float layers, 2x2 each.
	arr := gpu.Image{Type: gpu.ImageType2DArray, Order: clR, DataType: clFloat, Width: 2, Height: 2, ArraySize: 3}
	ab := alloc(2 * 2 * 3 * 4)
	defer ab.Release()
	var fl []byte
	for i := range 12 {
		fl = binary.LittleEndian.AppendUint32(fl, math.Float32bits(float32(i)))
	}
	if err := q.Write(ab, 0, fl); err != nil {
		t.Fatal(err)
	}
	lo := alloc(12)
	defer lo.Release()
	launch(t, q, pipelined, kernel("layers"), gpu.NDRange{Dims: 1, Global: [3]uint64{3, 1, 1}}, []gpu.Arg{{Buffer: ab, Image: &arr}, {Buffer: lo}})
	res := make([]byte, 12)
	if err := q.Read(lo, 0, res); err != nil {
		t.Fatal(err)
	}
	for z := range 3 {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(res[4*z:])); v != float32(4*z+3) {
			t.Errorf("layers: layer %d pixel (1,1) = %v, want %d", z, v, 4*z+3)
		}
	}

	// fill3d: a kernel's writes to a 3D image reach its buffer.
	vol := gpu.Image{Type: gpu.ImageType3D, Order: clR, DataType: clUnsignedInt16, Width: 3, Height: 2, Depth: 2}
	vb := alloc(3 * 2 * 2 * 2)
	defer vb.Release()
	launch(t, q, pipelined, kernel("fill3d"), gpu.NDRange{Dims: 3, Global: [3]uint64{3, 2, 2}}, []gpu.Arg{{Buffer: vb, Image: &vol}})
	vres := make([]byte, 24)
	if err := q.Read(vb, 0, vres); err != nil {
		t.Fatal(err)
	}
	for z := range 2 {
		for y := range 2 {
			for x := range 3 {
				i := 2 * (x + 3*y + 6*z)
				if v := binary.LittleEndian.Uint16(vres[i:]); int(v) != x+10*y+100*z {
					t.Errorf("fill3d: (%d,%d,%d) = %d, want %d", x, y, z, v, x+10*y+100*z)
				}
			}
		}
	}

	// Refusals.
	big := rgba8
	big.Height = h + 1
	bad := map[string][]gpu.Arg{
		"image beyond its buffer": {{Buffer: in, Image: &big}, {Buffer: out, Image: &rgba8}, {Sampler: nearest}, {Scalar: k}},
		"unknown image type":      {{Buffer: in, Image: &gpu.Image{Type: 0x10F7, Order: clRGBA, DataType: clUnormInt8, Width: 4}}, {Buffer: out, Image: &rgba8}, {Sampler: nearest}, {Scalar: k}},
		"image made from a buffer": {{Buffer: in, Image: &gpu.Image{Type: gpu.ImageType1DBuffer, Order: clRGBA, DataType: clUnormInt8, Width: 4}},
			{Buffer: out, Image: &rgba8}, {Sampler: nearest}, {Scalar: k}},
		"unknown addressing mode": {{Buffer: in, Image: &rgba8}, {Buffer: out, Image: &rgba8}, {Sampler: &gpu.Sampler{Addressing: 0x1135, Filter: gpu.FilterNearest}}, {Scalar: k}},
		"buffer for an image":     {{Buffer: in}, {Buffer: out, Image: &rgba8}, {Sampler: nearest}, {Scalar: k}},
		"image for a sampler":     {{Buffer: in, Image: &rgba8}, {Buffer: out, Image: &rgba8}, {Buffer: in, Image: &rgba8}, {Scalar: k}},
	}
	for what, args := range bad {
		if _, err := q.Launch(kernel("brighten"), gpu.NDRange{Dims: 2, Global: [3]uint64{w, h, 1}}, args); err == nil {
			t.Errorf("launch with %s: no error", what)
		}
	}
	if err := q.Read(out, 0, got); err != nil || !bytes.Equal(got, want) {
		t.Errorf("a refused launch changed its output image: %v, %v", got, err)
	}
	if caps.MaxBufferSize >= 64 && slices.Contains(caps.BufferFormats, gpu.ImageFormat{Order: clR, DataType: clFloat}) {
		checkImageBuffers(t, q, pipelined, kernel("twice1db"))
	} else {
		t.Logf("no images made from buffers in CL_R CL_FLOAT (%d pixels, formats %v): not checked", caps.MaxBufferSize, caps.BufferFormats)
	}
}

// checkImageBuffers runs twice1db on images made from buffers: the
// kernel reads and writes the buffers themselves, so a write to the input
// buffer between launches is what the next launch reads.
func checkImageBuffers(t *testing.T, q gpu.Queue, pipelined bool, k gpu.Kernel) {
	t.Helper()
	const n = 64
	in, err := q.Alloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Release()
	out, err := q.Alloc(4*n + 16) // larger than the image: the rest stays
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	if err := q.Write(out, 4*n, []byte("0123456789abcdef")); err != nil {
		t.Fatal(err)
	}
	im := gpu.Image{Type: gpu.ImageType1DBuffer, Order: clR, DataType: clFloat, Width: n}
	for round := range 2 {
		var fl []byte
		for i := range n {
			fl = binary.LittleEndian.AppendUint32(fl, math.Float32bits(float32(i+100*round)))
		}
		if err := q.Write(in, 0, fl); err != nil {
			t.Fatal(err)
		}
		launch(t, q, pipelined, k, gpu.NDRange{Dims: 1, Global: [3]uint64{n, 1, 1}}, []gpu.Arg{{Buffer: in, Image: &im}, {Buffer: out, Image: &im}})
		res := make([]byte, 4*n+16)
		if err := q.Read(out, 0, res); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(res[4*i:])); v != float32(2*(i+100*round)) {
				t.Fatalf("twice1db, round %d: pixel %d = %v, want %d", round, i, v, 2*(i+100*round))
			}
		}
		if string(res[4*n:]) != "0123456789abcdef" {
			t.Errorf("twice1db wrote past its image: %q", res[4*n:])
		}
	}
	plane := gpu.Image{Type: gpu.ImageType1D, Order: clR, DataType: clFloat, Width: n}
	small := im
	small.Width = n + 1
	for what, args := range map[string][]gpu.Arg{
		"a 1D image for image1d_buffer_t": {{Buffer: in, Image: &plane}, {Buffer: out, Image: &im}},
		"an image beyond its buffer":      {{Buffer: in, Image: &small}, {Buffer: out, Image: &im}},
	} {
		if _, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{n, 1, 1}}, args); err == nil {
			t.Errorf("launch with %s: no error", what)
		}
	}
}

package aggregator

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/imagetest"
)

// TestImageLaunch: a kernel with image and sampler arguments runs through
// the ring on the real device and writes its output image's buffer; the
// image section of device-info says what it may use; a bad image (a
// format not offered, an extent over the device's, more bytes than its
// buffer, a buffer that does not exist) fails only its own launch.
func TestImageLaunch(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "images", 1<<20)

	cmd, read := g.deviceInfoCmd(abi.PageSize)
	le := binary.LittleEndian
	cmd.Payload[4] = abi.DeviceInfoVersionImages
	g.mustOK(g.run(cmd)...)
	info, err := abi.UnmarshalDeviceInfo(read())
	if err != nil {
		t.Fatal(err)
	}
	rgba8 := abi.ImageFormat{Order: abi.OrderRGBA, DataType: abi.UnormInt8}
	if info.Version != abi.DeviceInfoVersionImages || !info.Images.Supported || !slices.Contains(info.Images.Formats, rgba8) {
		t.Fatalf("device-info's image section = %+v (version %d), want images with RGBA UNORM_INT8", info.Images, info.Version)
	}
	for _, f := range info.Images.Formats {
		if !abi.PortableImageFormat(f) {
			t.Errorf("format %#x/%#x offered, not portable", f.Order, f.DataType)
		}
	}

	const w, h = 8, 4
	px := make([]byte, w*h*4)
	for i := range px {
		px[i] = byte(i)
	}
	build, _ := g.build(1, imagetest.Source, 0)
	g.mustOK(g.run(
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: w * h * 4}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: w * h * 4}, 0, 0),
		g.upload(1, px), build)...)
	img := func(buf uint32, f abi.ImageFormat, width, height uint64) abi.KernelArg {
		return abi.KernelArg{Kind: abi.ArgImage, Handle: buf, Image: abi.ImageDesc{Buffer: buf, Type: abi.ImageType2D,
			Order: f.Order, DataType: f.DataType, Width: width, Height: height}}
	}
	sampler := abi.KernelArg{Kind: abi.ArgSampler, Sampler: abi.SamplerDesc{Addressing: abi.AddressClampToEdge, Filter: abi.FilterNearest}}
	k := abi.KernelArg{Kind: abi.ArgScalar, Bytes: le.AppendUint32(nil, math.Float32bits(2))}
	brighten := func(in, out abi.KernelArg) abi.LaunchDesc {
		return abi.LaunchDesc{WorkDim: 2, GlobalSize: [3]uint64{w, h}, Kernel: "brighten", Args: []abi.KernelArg{in, out, sampler, k}}
	}
	good := brighten(img(1, rgba8, w, h), img(2, rgba8, w, h))
	dl, got := g.download(2, len(px))
	g.mustOK(g.run(g.launch(1, good), dl)...)
	want := make([]byte, len(px))
	for i, v := range px {
		want[i] = byte(min(2*int(v), 255))
	}
	if !bytes.Equal(got(), want) {
		t.Errorf("brighten through the ring: %v, want %v", got(), want)
	}

	wide := uint64(abi.MaxImageExtent)
	if info.Images.MaxPlane[0] < abi.MaxImageExtent {
		wide = info.Images.MaxPlane[0] + 1
	}
	argb := abi.ImageFormat{Order: abi.OrderARGB, DataType: abi.UnormInt8}
	for _, c := range []struct {
		name string
		d    abi.LaunchDesc
		want abi.Status
	}{
		{"format not offered", brighten(img(1, argb, w, h), img(2, rgba8, w, h)), abi.StatusInvalidArgument},
		{"wider than the device's", brighten(img(1, rgba8, wide, 1), img(2, rgba8, w, h)), abi.StatusInvalidArgument},
		{"more bytes than its buffer", brighten(img(1, rgba8, w, h+1), img(2, rgba8, w, h)), abi.StatusInvalidArgument},
		{"no such buffer", brighten(img(1, rgba8, w, h), img(9, rgba8, w, h)), abi.StatusNotFound},
		{"a sampler for an image", brighten(sampler, img(2, rgba8, w, h)), abi.StatusLaunchFailed},
	} {
		if rec := g.run(g.launch(1, c.d))[0]; rec.Status != c.want {
			t.Errorf("%s: status %v, want %v", c.name, rec.Status, c.want)
		}
	}
	// The failures changed nothing and the instance goes on.
	px2 := slices.Clone(px)
	px2[0] = 100
	dl, got = g.download(2, len(px))
	g.mustOK(g.run(g.upload(1, px2), g.launch(1, good), dl)...)
	want[0] = 200
	if !bytes.Equal(got(), want) {
		t.Errorf("brighten after the refusals: %v, want %v", got(), want)
	}
}

// TestImageBufferLaunch: device-info version 4 offers images made from
// buffers (the buffer part; versions 2 and 3 keep it out); a kernel
// with image1d_buffer_t parameters reads and writes the buffers
// themselves through the ring; a bad one (a format not offered there,
// wider than max_buffer_size or its buffer, for an image2d_t parameter)
// fails only its own launch.
func TestImageBufferLaunch(t *testing.T) {
	d, _ := newDevice(t)
	g := newTestGuest(t, d, "imbuf", 1<<20)
	cmd, read := g.deviceInfoCmd(abi.PageSize)
	cmd.Payload[4] = abi.DeviceInfoVersionImageBuffers
	g.mustOK(g.run(cmd)...)
	info, err := abi.UnmarshalDeviceInfo(read())
	if err != nil {
		t.Fatal(err)
	}
	rf := abi.ImageFormat{Order: abi.OrderR, DataType: abi.Float}
	caps := d.Info().Caps.Images
	if caps.MaxBufferSize == 0 || !slices.Contains(caps.BufferFormats, gpu.ImageFormat{Order: rf.Order, DataType: rf.DataType}) {
		// A physical device without them (or without R FLOAT): the part
		// says what it has, and such an image is refused.
		t.Logf("%s: images from buffers of %d pixels in %v", d.Info().Name, caps.MaxBufferSize, caps.BufferFormats)
		if caps.MaxBufferSize == 0 && (info.Images.MaxBufferSize != 0 || len(info.Images.BufferFormats) != 0) {
			t.Errorf("device-info offers images from buffers the device has not: %+v", info.Images)
		}
		build, _ := g.build(1, imagetest.Source, 0)
		g.mustOK(g.run(abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 64}, 0, 0), build)...)
		im := abi.KernelArg{Kind: abi.ArgImage, Handle: 1, Image: abi.ImageDesc{Buffer: 1, Type: abi.ImageType1DBuffer, Order: rf.Order, DataType: rf.DataType, Width: 16}}
		d := abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{16}, Kernel: "twice1db", Args: []abi.KernelArg{im, im}}
		if rec := g.run(g.launch(1, d))[0]; rec.Status != abi.StatusInvalidArgument {
			t.Errorf("an image from a buffer the device does not offer: status %v, want invalid argument", rec.Status)
		}
		return
	}
	if info.Version != abi.DeviceInfoVersionImageBuffers || info.Images.MaxBufferSize < 65536 || !slices.Contains(info.Images.BufferFormats, rf) {
		t.Fatalf("device-info version %d: images from buffers of %d pixels in %v, want at least OpenCL's 65536 with R FLOAT",
			info.Version, info.Images.MaxBufferSize, info.Images.BufferFormats)
	}
	cmd, read = g.deviceInfoCmd(abi.PageSize)
	cmd.Payload[4] = abi.DeviceInfoVersionIL
	g.mustOK(g.run(cmd)...)
	if v3, err := abi.UnmarshalDeviceInfo(read()); err != nil || v3.Images.MaxBufferSize != 0 || v3.Images.BufferFormats != nil {
		t.Errorf("device-info version 3: %+v, %v; want no buffer part", v3.Images, err)
	}

	const n = 32
	le := binary.LittleEndian
	var fl []byte
	for i := range n {
		fl = le.AppendUint32(fl, math.Float32bits(float32(i)))
	}
	build, _ := g.build(1, imagetest.Source, 0)
	g.mustOK(g.run(
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 4 * n}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 4 * n}, 0, 0),
		g.upload(1, fl), build)...)
	img := func(buf uint32, typ uint32, f abi.ImageFormat, width uint64) abi.KernelArg {
		return abi.KernelArg{Kind: abi.ArgImage, Handle: buf, Image: abi.ImageDesc{Buffer: buf, Type: typ,
			Order: f.Order, DataType: f.DataType, Width: width}}
	}
	twice := func(in, out abi.KernelArg) abi.LaunchDesc {
		return abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{n}, Kernel: "twice1db", Args: []abi.KernelArg{in, out}}
	}
	good := twice(img(1, abi.ImageType1DBuffer, rf, n), img(2, abi.ImageType1DBuffer, rf, n))
	dl, got := g.download(2, 4*n)
	g.mustOK(g.run(g.launch(1, good), dl)...)
	for i := range n {
		if v := math.Float32frombits(le.Uint32(got()[4*i:])); v != float32(2*i) {
			t.Fatalf("twice1db through the ring: pixel %d = %v, want %d", i, v, 2*i)
		}
	}
	var other abi.ImageFormat
	for _, f := range abi.PortableImageFormats {
		if !slices.Contains(info.Images.BufferFormats, f) {
			other = f
		}
	}
	for _, c := range []struct {
		name string
		d    abi.LaunchDesc
		want abi.Status
	}{
		{"wider than its buffer", twice(img(1, abi.ImageType1DBuffer, rf, n+1), img(2, abi.ImageType1DBuffer, rf, n)), abi.StatusInvalidArgument},
		{"wider than max_buffer_size", twice(img(1, abi.ImageType1DBuffer, rf, info.Images.MaxBufferSize+1), img(2, abi.ImageType1DBuffer, rf, n)), abi.StatusInvalidArgument},
		{"a 1D image for image1d_buffer_t", twice(img(1, abi.ImageType1D, rf, n), img(2, abi.ImageType1DBuffer, rf, n)), abi.StatusLaunchFailed},
	} {
		if rec := g.run(g.launch(1, c.d))[0]; rec.Status != c.want {
			t.Errorf("%s: status %v, want %v", c.name, rec.Status, c.want)
		}
	}
	if other != (abi.ImageFormat{}) {
		if rec := g.run(g.launch(1, twice(img(1, abi.ImageType1DBuffer, other, 4), img(2, abi.ImageType1DBuffer, rf, n))))[0]; rec.Status != abi.StatusInvalidArgument {
			t.Errorf("format %v not offered for images from buffers: status %v", other, rec.Status)
		}
	}
	// The failures changed nothing and the instance goes on.
	dl, got = g.download(2, 4*n)
	g.mustOK(g.run(g.launch(1, good), dl)...)
	if v := math.Float32frombits(le.Uint32(got()[4*(n-1):])); v != 2*(n-1) {
		t.Errorf("twice1db after the refusals: last pixel %v", v)
	}
}

// TestImageMigratesAcrossDevices: an image a kernel wrote on one device
// moves with a live migration to an instance on another device (PoCL with
// host-backed buffers to PoCL with plain ones, two device models to the
// aggregator) as the buffer it is, and the destination's kernels read it
// and write images on: images need no migration code of their own.
func TestImageMigratesAcrossDevices(t *testing.T) {
	d, _ := newDevice(t)
	plain, err := gpu.OpenPlain("")
	if err != nil {
		t.Fatal(err)
	}
	d2 := newDeviceOn(t, plain)
	g := newTestGuest(t, d, "src", 1<<20)

	const w, h = 8, 4
	px := make([]byte, w*h*4)
	for i := range px {
		px[i] = byte(i)
	}
	rgba8 := abi.ImageFormat{Order: abi.OrderRGBA, DataType: abi.UnormInt8}
	img := func(buf uint32) abi.KernelArg {
		return abi.KernelArg{Kind: abi.ArgImage, Handle: buf, Image: abi.ImageDesc{Buffer: buf, Type: abi.ImageType2D,
			Order: rgba8.Order, DataType: rgba8.DataType, Width: w, Height: h}}
	}
	le := binary.LittleEndian
	brighten := func(in, out uint32) abi.LaunchDesc {
		return abi.LaunchDesc{WorkDim: 2, GlobalSize: [3]uint64{w, h}, Kernel: "brighten", Args: []abi.KernelArg{img(in), img(out),
			{Kind: abi.ArgSampler, Sampler: abi.SamplerDesc{Addressing: abi.AddressClampToEdge, Filter: abi.FilterNearest}},
			{Kind: abi.ArgScalar, Bytes: le.AppendUint32(nil, math.Float32bits(2))}}}
	}
	build, _ := g.build(1, imagetest.Source, 0)
	g.mustOK(g.run(build,
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: w * h * 4}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: w * h * 4}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 3, Size: w * h * 4}, 0, 0),
		g.upload(1, px), g.launch(1, brighten(1, 2)))...)

	// The next launch reads the image the source wrote: it runs on the
	// destination.
	dl, read := g.download(3, len(px))
	migratePending(t, g, d2, g.launch(1, brighten(2, 3)), dl)
	want := make([]byte, len(px))
	for i, v := range px {
		want[i] = byte(min(4*int(v), 255))
	}
	if got := read(); !bytes.Equal(got, want) {
		t.Errorf("after the migration: %v, want %v", got, want)
	}
}

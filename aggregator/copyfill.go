package aggregator

import (
	"fmt"
	"slices"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
)

// The ABI 1.4 commands (docs/ABI.md "program-info", "buffer-copy",
// "buffer-fill"). buffer-copy and buffer-fill write a buffer on the device
// without the bytes passing through the aggregator: to result reuse,
// migration's dirty tracking and host-held content they are a write of the
// destination whose bytes are unknown (deviceWrite); the source of a copy
// must be current on the device first. program-info changes nothing;
// device-info neither, and answers from the blob made with the instance.

// programInfo writes the program-information blob of a program through
// the guest's scatter-gather list when it fits; detail is its size.
func (in *Instance) programInfo(_ *abi.Command, q *abi.ProgramInfoQuery) (uint64, error) {
	pr, ok := in.state.programs[q.Handle]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "program %d", q.Handle)
	}
	segs, err := walkSG(in.mem, q.SGAddr, q.SGCount, q.Length)
	if err != nil {
		return 0, err
	}
	// Creating and querying the kernels is host work on the program's
	// objects, as creating a kernel for a launch is: no device turn.
	kernels, err := pr.prog.Info()
	if err != nil {
		return 0, fmt.Errorf("program %d info: %w", q.Handle, err)
	}
	info := programInfoOf(kernels)
	blob, err := info.Marshal()
	if err != nil {
		return 0, abi.Errorf(abi.StatusInternal, "program %d info: %v", q.Handle, err)
	}
	size := uint64(len(blob))
	if size > q.Length {
		return size, nil
	}
	if in.stale() {
		return 0, errStale
	}
	if err := scatterPrefix(in.mem, segs, blob); err != nil {
		return 0, fmt.Errorf("program %d info: %w", q.Handle, err)
	}
	return size, nil
}

// deviceInfo writes the instance's device-information blob through the
// guest's scatter-gather list when it fits; detail is its size. The blob
// was made with the instance: no device turn.
func (in *Instance) deviceInfo(_ *abi.Command, q *abi.DeviceInfoQuery) (uint64, error) {
	segs, err := walkSG(in.mem, q.SGAddr, q.SGCount, q.Length)
	if err != nil {
		return 0, err
	}
	blob := in.devInfo.of(q.BlobVersion())
	size := uint64(len(blob))
	if size > q.Length {
		return size, nil
	}
	if in.stale() {
		return 0, errStale
	}
	if err := scatterPrefix(in.mem, segs, blob); err != nil {
		return 0, fmt.Errorf("device info: %w", err)
	}
	return size, nil
}

// deviceInfoBlobs are an instance's device-information blobs, one per
// version a guest may ask for (abi.DeviceInfoQuery.BlobVersion), fixed
// at creation (the device and MaxWorkGroup do not change under an
// instance).
type deviceInfoBlobs struct {
	// byVersion[v] is the blob of version v, abi.DeviceInfoVersion to
	// abi.DeviceInfoVersionImageBuffers.
	byVersion [abi.DeviceInfoVersionImageBuffers + 1][]byte
	// imageInfo is the image section with its buffer part: what the
	// instance's launches may use.
	imageInfo abi.ImageInfo
}

// of returns the blob of version v (checked by the query's decoding).
func (b *deviceInfoBlobs) of(v uint32) []byte { return b.byVersion[v] }

// makeDeviceInfo encodes the blobs of an instance on a device: the newest
// version's information, as each version carries it.
func makeDeviceInfo(info gpu.Info, maxWorkGroup uint32) (deviceInfoBlobs, error) {
	var b deviceInfoBlobs
	d := deviceInfoOf(info, maxWorkGroup)
	b.imageInfo = imageInfoOf(info.Caps.Images)
	d.Images = b.imageInfo
	if info.Caps.IL {
		d.IL = abi.DeviceILSPIRV
	}
	for v := uint32(abi.DeviceInfoVersion); v <= abi.DeviceInfoVersionImageBuffers; v++ {
		var err error
		dv := d.As(v)
		if b.byVersion[v], err = dv.Marshal(); err != nil {
			return b, err
		}
	}
	return b, nil
}

// imageInfoOf is the image section of a device with caps (docs/ABI.md
// "Images"): of its formats those in abi.PortableImageFormats, in that
// list's order (so a migration to another device model finds them
// there), its sizes at most abi.MaxImageExtent; images made from
// buffers likewise, of at most abi.MaxImageBufferExtent pixels. A device
// without images, or without one portable format, has none.
func imageInfoOf(c gpu.ImageCaps) abi.ImageInfo {
	var im abi.ImageInfo
	for _, f := range abi.PortableImageFormats {
		if slices.Contains(c.Formats, gpu.ImageFormat{Order: f.Order, DataType: f.DataType}) {
			im.Formats = append(im.Formats, f)
		}
	}
	if !c.Supported || len(im.Formats) == 0 {
		return abi.ImageInfo{}
	}
	ext := func(v uint64) uint64 { return min(v, abi.MaxImageExtent) }
	im.Supported = true
	im.MaxPlane = [2]uint64{ext(c.Max2D[0]), ext(c.Max2D[1])}
	im.MaxVolume = [3]uint64{ext(c.Max3D[0]), ext(c.Max3D[1]), ext(c.Max3D[2])}
	im.MaxArraySize = ext(c.MaxArraySize)
	im.MaxReadArgs, im.MaxWriteArgs, im.MaxSamplers = c.MaxReadArgs, c.MaxWriteArgs, c.MaxSamplers
	for _, f := range abi.PortableImageFormats {
		if c.MaxBufferSize > 0 && slices.Contains(c.BufferFormats, gpu.ImageFormat{Order: f.Order, DataType: f.DataType}) {
			im.BufferFormats = append(im.BufferFormats, f)
		}
	}
	if len(im.BufferFormats) > 0 {
		im.MaxBufferSize = min(c.MaxBufferSize, abi.MaxImageBufferExtent)
	}
	return im
}

// deviceInfoOf makes the device-information blob of an instance on a
// device from what the device reported (docs/ABI.md "Device-information
// blob"): work-item sizes at most the instance's largest work-group,
// parameter bytes at most what a launch descriptor carries, and of the
// device's extensions only abi.PassThroughExtensions, in that list's
// order.
func deviceInfoOf(info gpu.Info, maxWorkGroup uint32) abi.DeviceInfo {
	c := info.Caps
	d := abi.DeviceInfo{LocalMemSize: info.LocalMemBytes,
		MaxConstantBufferSize: c.MaxConstantBufferSize, MaxConstantArgs: c.MaxConstantArgs,
		MaxParameterSize: min(c.MaxParameterSize, abi.MaxLaunchParamBytes), MemBaseAddrAlign: c.MemBaseAddrAlign,
		MinDataTypeAlignSize: c.MinDataTypeAlignSize, MaxClockFrequency: c.MaxClockFrequency, AddressBits: c.AddressBits,
		SingleFPConfig: c.SingleFPConfig, DoubleFPConfig: c.DoubleFPConfig, HalfFPConfig: c.HalfFPConfig,
		ProfilingTimerResolution: c.ProfilingTimerResolution, PrintfBufferSize: c.PrintfBufferSize,
		PreferredVectorWidth: c.PreferredVectorWidth, NativeVectorWidth: c.NativeVectorWidth, EndianLittle: c.EndianLittle}
	for i, v := range info.MaxWorkItemSizes {
		d.MaxWorkItemSizes[i] = min(v, uint64(maxWorkGroup))
	}
	have := c.ExtensionList()
	for _, e := range abi.PassThroughExtensions {
		if slices.Contains(have, e) {
			d.Extensions = append(d.Extensions, e)
		}
	}
	return d
}

// programInfoOf turns what the device reports into the blob's terms: a
// kernel whose name does not fit abi.KernelNameLen (no launch can name it)
// is left out, argument strings are cut to abi.ArgInfoNameLen-1 bytes, and
// the kernels are sorted by name (the device sorted them; a duplicate name,
// which OpenCL does not allow, is dropped).
func programInfoOf(kernels []gpu.KernelInfo) abi.ProgramInfo {
	var p abi.ProgramInfo
	for _, k := range kernels {
		if len(k.Name) >= abi.KernelNameLen || !validKernelName(k.Name) {
			continue
		}
		if n := len(p.Kernels); n > 0 && p.Kernels[n-1].Name >= k.Name {
			continue
		}
		ki := abi.KernelInfo{Name: k.Name, WorkGroupSize: k.WorkGroupSize, PreferredMultiple: k.PreferredMultiple,
			LocalMemSize: k.LocalMemSize, PrivateMemSize: k.PrivateMemSize, CompileWorkGroupSize: k.CompileWorkGroupSize}
		for _, a := range k.Args {
			ki.Args = append(ki.Args, abi.KernelArgInfo{AddressQualifier: a.AddressQualifier, AccessQualifier: a.AccessQualifier,
				TypeQualifier: a.TypeQualifier, TypeName: abi.TruncInfoString(a.TypeName), Name: abi.TruncInfoString(a.Name)})
		}
		p.Kernels = append(p.Kernels, ki)
	}
	return p
}

// validKernelName reports whether s is an identifier, as a launch
// descriptor's kernel name must be.
func validKernelName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// scatterPrefix copies buf into the first len(buf) bytes the segments
// describe (len(buf) at most their total).
func scatterPrefix(mem GuestMemory, segs []segment, buf []byte) error {
	for _, s := range segs {
		if len(buf) == 0 {
			break
		}
		n := min(s.len, uint64(len(buf)))
		if err := mem.WriteAt(buf[:n], s.gpa); err != nil {
			return err
		}
		buf = buf[n:]
	}
	return nil
}

func (in *Instance) bufferCopy(_ *abi.Command, bc *abi.BufferCopy) (uint64, error) {
	src, ok := in.state.buffers[bc.Src]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "source buffer %d", bc.Src)
	}
	dst, ok := in.state.buffers[bc.Dst]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "destination buffer %d", bc.Dst)
	}
	switch {
	case bc.SrcOffset > src.size || bc.Length > src.size-bc.SrcOffset:
		return 0, abi.Errorf(abi.StatusInvalidArgument, "copy from %d+%d outside buffer %d of %d bytes", bc.SrcOffset, bc.Length, bc.Src, src.size)
	case bc.DstOffset > dst.size || bc.Length > dst.size-bc.DstOffset:
		return 0, abi.Errorf(abi.StatusInvalidArgument, "copy to %d+%d outside buffer %d of %d bytes", bc.DstOffset, bc.Length, bc.Dst, dst.size)
	case bc.Overlaps(): // the decoder refused it already; the device must never see it
		return 0, abi.Errorf(abi.StatusInvalidArgument, "copy within buffer %d between overlapping ranges", bc.Src)
	}
	// Content held in host memory (a pending upload, a shadow result, an
	// unfinished fill) must be on the device before the device reads it.
	in.reuseDomain()
	if err := in.materialise(src); err != nil {
		return 0, err
	}
	if err := in.deviceWrite(dst, bc.DstOffset, bc.Length); err != nil {
		return 0, err
	}
	if err := in.run(in.copyWork(bc.Length), func() (time.Duration, error) {
		return 0, in.queue.Copy(src.mem, dst.mem, bc.SrcOffset, bc.DstOffset, bc.Length)
	}); err != nil {
		return 0, fmt.Errorf("copy buffer %d to %d: %w", bc.Src, bc.Dst, err)
	}
	return bc.Length, nil
}

func (in *Instance) bufferFill(_ *abi.Command, bf *abi.BufferFill) (uint64, error) {
	b, ok := in.state.buffers[bf.Handle]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", bf.Handle)
	}
	if bf.Offset > b.size || bf.Length > b.size-bf.Offset {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "fill %d+%d outside buffer %d of %d bytes", bf.Offset, bf.Length, bf.Handle, b.size)
	}
	var buf [abi.MaxFillPattern]byte
	pattern := buf[:bf.PatternLen] // PatternLen <= MaxFillPattern: checked by the decoder
	if err := in.mem.ReadAt(pattern, bf.PatternAddr); err != nil {
		return 0, fmt.Errorf("fill pattern: %w", err)
	}
	in.reuseDomain()
	if err := in.deviceWrite(b, bf.Offset, bf.Length); err != nil {
		return 0, err
	}
	if err := in.run(in.copyWork(bf.Length), func() (time.Duration, error) {
		return 0, in.queue.Fill(b.mem, bf.Offset, bf.Length, pattern)
	}); err != nil {
		return 0, fmt.Errorf("fill buffer %d: %w", bf.Handle, err)
	}
	return bf.Length, nil
}

// deviceWrite prepares b for n bytes at off to be written on the device
// with content the aggregator does not see: an uncaptured result it holds
// is captured or given up, host-held content reaches the device unless
// the write replaces all of it, result reuse forgets what b holds, and the
// next migration round sends b again. The caller has called reuseDomain.
func (in *Instance) deviceWrite(b *buffer, off, n uint64) error {
	in.settle(b, true)
	if off == 0 && n == b.size {
		in.dropHost(b) // replaced as a whole: never uploaded
	} else if err := in.materialise(b); err != nil {
		return err
	}
	b.known, b.lazy, b.repeat = false, nil, false
	in.touch(b)
	return nil
}

package gputest

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vgpud/vgpud/gpu"
)

// Defaults of Config's zero fields.
const (
	DefaultMaxSource  = 1 << 20
	DefaultMaxKernels = 64
	DefaultLaunchTime = time.Microsecond
)

// defaultInfo fills the zero fields of Config.Info: a small device, so that
// a test's allocations stay cheap.
var defaultInfo = gpu.Info{
	Platform:         "gputest",
	Name:             "gputest fake device",
	Vendor:           "vgpud",
	Version:          "OpenCL 1.2 gputest",
	DriverVersion:    "gputest",
	ComputeUnits:     4,
	GlobalMemBytes:   256 << 20,
	MaxAllocBytes:    64 << 20,
	MaxWorkGroupSize: 256,
	MaxWorkItemSizes: [3]uint64{256, 256, 256},
	LocalMemBytes:    32 << 10,
	Caps: gpu.Caps{
		MaxConstantBufferSize: 64 << 10, MaxConstantArgs: 8, MaxParameterSize: 1024, MemBaseAddrAlign: 1024,
		MinDataTypeAlignSize: 128, MaxClockFrequency: 1000, AddressBits: 64, SingleFPConfig: 0xbf, DoubleFPConfig: 0xbf,
		ProfilingTimerResolution: 1, PrintfBufferSize: 1 << 20,
		PreferredVectorWidth: [7]uint32{16, 8, 4, 2, 4, 2, 0}, NativeVectorWidth: [7]uint32{16, 8, 4, 2, 4, 2, 0},
		EndianLittle: true,
		// What PoCL lists, images and SPIR included: device-info must
		// pass on only the kernel-language extensions.
		Extensions: "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics  cl_khr_3d_image_writes cl_khr_spir cl_khr_int64_base_atomics cl_khr_fp64",
		// PoCL 3.1's images: its limits, and its read-write 2D formats
		// (CL_R and CL_RGBA with every channel type, CL_BGRA and CL_ARGB
		// with some; no CL_RG).
		Images: pocl31Images(),
	},
}

// pocl31Images is what PoCL 3.1 reports of images on this project's
// machines (gpu.TestImages' device).
func pocl31Images() gpu.ImageCaps {
	c := gpu.ImageCaps{Supported: true, Max2D: [2]uint64{16384, 16384}, Max3D: [3]uint64{2048, 2048, 2048},
		MaxArraySize: 2048, MaxReadArgs: 128, MaxWriteArgs: 128, MaxSamplers: 16}
	types := []uint32{0x10D0, 0x10D1, 0x10D2, 0x10D3, 0x10D7, 0x10D8, 0x10D9, 0x10DA, 0x10DB, 0x10DC, 0x10DD, 0x10DE}
	for _, order := range []uint32{0x10B1, 0x10B0, 0x10B5} { // CL_A, CL_R, CL_RGBA
		for _, t := range types {
			c.Formats = append(c.Formats, gpu.ImageFormat{Order: order, DataType: t})
		}
	}
	for _, order := range []uint32{0x10B7, 0x10B6} { // CL_ARGB, CL_BGRA
		for _, t := range []uint32{0x10D0, 0x10D2, 0x10D7, 0x10DA} {
			c.Formats = append(c.Formats, gpu.ImageFormat{Order: order, DataType: t})
		}
	}
	// Images made from buffers: the same formats, up to 2^28 pixels.
	c.MaxBufferSize, c.BufferFormats = 1<<28, slices.Clone(c.Formats)
	return c
}

// Operations a Config.Fault hook is asked about.
const (
	OpAlloc  = "alloc"
	OpWrite  = "write"
	OpRead   = "read"
	OpBuild  = "build"
	OpLaunch = "launch"
	OpCopy   = "copy"
	OpFill   = "fill"
	OpInfo   = "info"
)

// Config describes a fake device. Zero fields take defaults.
type Config struct {
	// Info is what Device.Info reports; its zero fields are filled in
	// (256 MiB of memory, 64 MiB per buffer, work-groups of 256 items,
	// 32 KiB of __local memory; Caps as a whole, when zero: a 64-bit
	// device with fp64 listing some extensions that are not kernel
	// language).
	Info gpu.Info
	// MemLimit bounds the bytes of all live buffers of the device; an
	// Alloc past it fails with gpu.ErrOutOfMemory. 0: Info.GlobalMemBytes.
	// The fake holds that memory for real: keep it modest.
	MemLimit uint64
	// MaxSource bounds a program's source in bytes and MaxKernels its
	// kernels; beyond them Build fails with gpu.ErrBuildFailed.
	MaxSource  int
	MaxKernels int
	// LaunchTime is the device time every launch reports.
	LaunchTime time.Duration
	// Fault, if set, is called with one of the Op names once an Alloc,
	// Write, Read, Copy, Fill, Build, Launch or Program.Info has passed
	// every check, before it takes
	// effect; an error fails the operation with it (wrapped), as a device
	// failure would. It is called with the queue's lock held and must not
	// call the fake; it must be deterministic for the fake to be.
	Fault func(op string) error
	// HostBacked makes buffers gpu.HostBuffers whose Host lends their
	// bytes, as a CPU device's host-backed buffers do.
	HostBacked bool
	// Stream makes queues gpu.Streamers that move pieces of
	// gpu.StreamPiece bytes, as a GPU's queue does through its pinned
	// staging memory; without it they refuse (gpu.ErrUnsupported).
	Stream bool
}

// Stats is what a fake device holds and has done.
type Stats struct {
	Bytes     uint64 // held by live buffers
	Buffers   int    // live buffers
	Programs  int    // live programs
	Launches  uint64 // launches that ran, ever
	Transfers uint64 // Writes and Reads that moved bytes, ever
	Streams   uint64 // StreamWrites and StreamReads that began, ever
	Pieces    uint64 // pieces they moved, ever
}

// Device is a fake gpu.Device.
type Device struct {
	cfg Config // defaults applied; immutable

	mu     sync.Mutex
	closed bool
	queues map[*queue]struct{}
	stats  Stats
}

var _ gpu.Device = (*Device)(nil)

// New returns a fake device.
func New(cfg Config) *Device {
	in, def := &cfg.Info, defaultInfo
	for _, s := range []struct{ dst, def *string }{
		{&in.Platform, &def.Platform}, {&in.Name, &def.Name}, {&in.Vendor, &def.Vendor},
		{&in.Version, &def.Version}, {&in.DriverVersion, &def.DriverVersion},
	} {
		if *s.dst == "" {
			*s.dst = *s.def
		}
	}
	for _, u := range []struct{ dst, def *uint64 }{
		{&in.GlobalMemBytes, &def.GlobalMemBytes}, {&in.MaxAllocBytes, &def.MaxAllocBytes},
		{&in.MaxWorkGroupSize, &def.MaxWorkGroupSize}, {&in.LocalMemBytes, &def.LocalMemBytes},
		{&in.MaxWorkItemSizes[0], &def.MaxWorkItemSizes[0]}, {&in.MaxWorkItemSizes[1], &def.MaxWorkItemSizes[1]},
		{&in.MaxWorkItemSizes[2], &def.MaxWorkItemSizes[2]},
	} {
		if *u.dst == 0 {
			*u.dst = *u.def
		}
	}
	if in.ComputeUnits == 0 {
		in.ComputeUnits = def.ComputeUnits
	}
	if reflect.ValueOf(in.Caps).IsZero() {
		in.Caps = def.Caps
	}
	if cfg.MemLimit == 0 {
		cfg.MemLimit = in.GlobalMemBytes
	}
	if cfg.MaxSource <= 0 {
		cfg.MaxSource = DefaultMaxSource
	}
	if cfg.MaxKernels <= 0 {
		cfg.MaxKernels = DefaultMaxKernels
	}
	if cfg.LaunchTime <= 0 {
		cfg.LaunchTime = DefaultLaunchTime
	}
	return &Device{cfg: cfg, queues: make(map[*queue]struct{})}
}

// Info describes the fake device.
func (d *Device) Info() gpu.Info { return d.cfg.Info }

// Stats returns what the device holds now (a test's leak check) and the
// launches it ran.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// NewQueue returns a new queue on d.
func (d *Device) NewQueue() (gpu.Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("new queue on %s: %w", d.cfg.Info.Name, gpu.ErrClosed)
	}
	q := &queue{dev: d, buffers: make(map[*buffer]struct{}), programs: make(map[*program]struct{})}
	d.queues[q] = struct{}{}
	return q, nil
}

// Close closes every queue of d. It is idempotent.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	qs := make([]*queue, 0, len(d.queues))
	for q := range d.queues {
		qs = append(qs, q)
	}
	d.mu.Unlock()
	for _, q := range qs { // not under d.mu: the lock order is queue, then device
		q.Close()
	}
	return nil
}

// account adds delta to one of the device's counts under its lock.
func (d *Device) account(f func(s *Stats)) {
	d.mu.Lock()
	f(&d.stats)
	d.mu.Unlock()
}

// queue is a fake gpu.Queue. Its mutex guards its own fields and those of
// everything it created, so Close and Release are safe from any goroutine.
type queue struct {
	dev *Device

	mu       sync.Mutex
	closed   bool
	buffers  map[*buffer]struct{}
	programs map[*program]struct{}
}

// buffer's data is nil once released (a buffer is never empty).
type buffer struct {
	owner *queue
	size  uint64
	data  []byte
}

type program struct {
	owner    *queue
	sigs     []signature // immutable
	names    []string    // immutable
	kernels  map[string]*kernel
	released bool
}

type kernel struct {
	prog     *program
	sig      *signature
	released bool
}

// fault asks the Fault hook about op. q.mu is held.
func (q *queue) fault(op string) error {
	if f := q.dev.cfg.Fault; f != nil {
		if err := f(op); err != nil {
			return fmt.Errorf("%s: injected fault: %w", op, err)
		}
	}
	return nil
}

func (q *queue) Alloc(size uint64) (gpu.Buffer, error) { return q.alloc(size, nil) }

// AllocOn makes a buffer on p (gpu.HostAllocator) when the device is
// Config.HostBacked: the buffer's bytes are p's.
func (q *queue) AllocOn(p []byte) (gpu.Buffer, error) {
	if !q.dev.cfg.HostBacked {
		return nil, fmt.Errorf("alloc on caller memory: %w", gpu.ErrUnsupported)
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("alloc on 0 bytes of caller memory: %w", gpu.ErrInvalidArgument)
	}
	return q.alloc(uint64(len(p)), p)
}

// ReleaseOn releases b (gpu.HostAllocator): the fake lets go of its
// memory at once.
func (q *queue) ReleaseOn(b gpu.Buffer) bool {
	bb, ok := b.(*buffer)
	if !ok || bb.owner != q {
		return false
	}
	bb.Release()
	return true
}

var _ gpu.HostAllocator = (*queue)(nil)

// alloc makes a buffer of size bytes on data, or on new memory when data
// is nil.
func (q *queue) alloc(size uint64, data []byte) (gpu.Buffer, error) {
	if max := q.dev.cfg.Info.MaxAllocBytes; size == 0 || size > max {
		return nil, fmt.Errorf("alloc %d bytes: size must be 1..%d: %w", size, max, gpu.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, fmt.Errorf("alloc: queue: %w", gpu.ErrClosed)
	}
	if err := q.fault(OpAlloc); err != nil {
		return nil, err
	}
	d := q.dev
	d.mu.Lock()
	if size > d.cfg.MemLimit-min(d.stats.Bytes, d.cfg.MemLimit) {
		held := d.stats.Bytes
		d.mu.Unlock()
		return nil, fmt.Errorf("alloc %d bytes with %d of %d held: %w", size, held, d.cfg.MemLimit, gpu.ErrOutOfMemory)
	}
	d.stats.Bytes += size
	d.stats.Buffers++
	d.mu.Unlock()
	if data == nil {
		data = make([]byte, size) // zeroed, as the real device's
	}
	b := &buffer{owner: q, size: size, data: data}
	q.buffers[b] = struct{}{}
	return b, nil
}

// checkBuffer returns b as a live buffer of q. q.mu is held.
func (q *queue) checkBuffer(op string, b gpu.Buffer) (*buffer, error) {
	bb, ok := b.(*buffer)
	if !ok || bb == nil {
		return nil, fmt.Errorf("%s: buffer %T is not of this fake: %w", op, b, gpu.ErrForeign)
	}
	if bb.owner != q {
		return nil, fmt.Errorf("%s: buffer: %w", op, gpu.ErrForeign)
	}
	if bb.data == nil {
		return nil, fmt.Errorf("%s: buffer: %w", op, gpu.ErrClosed)
	}
	return bb, nil
}

func (q *queue) Write(b gpu.Buffer, off uint64, p []byte) error {
	return q.transfer(OpWrite, b, off, p)
}

func (q *queue) Read(b gpu.Buffer, off uint64, p []byte) error {
	return q.transfer(OpRead, b, off, p)
}

func (q *queue) Streams() bool { return q.dev.cfg.Stream }

func (q *queue) StreamWrite(b gpu.Buffer, off, n uint64, fill func(p []byte) error) error {
	return q.stream(OpWrite, b, off, n, fill)
}

func (q *queue) StreamRead(b gpu.Buffer, off, n uint64, drain func(p []byte) error) error {
	return q.stream(OpRead, b, off, n, drain)
}

// stream moves n bytes at off piece by piece through f (Config.Stream); a
// Fault hook is asked about op before each piece.
func (q *queue) stream(op string, b gpu.Buffer, off, n uint64, f func(p []byte) error) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("stream %s: queue: %w", op, gpu.ErrClosed)
	}
	if !q.dev.cfg.Stream {
		return fmt.Errorf("stream %s: %w", op, gpu.ErrUnsupported)
	}
	bb, err := q.checkBuffer(op, b)
	if err != nil {
		return err
	}
	if off > bb.size || n > bb.size-off {
		return fmt.Errorf("stream %s %d bytes at %d of a %d-byte buffer: %w", op, n, off, bb.size, gpu.ErrOutOfRange)
	}
	q.dev.account(func(s *Stats) { s.Streams++ })
	piece := make([]byte, gpu.StreamPiece)
	for n > 0 {
		p := piece[:min(n, gpu.StreamPiece)]
		if err := q.fault(op); err != nil {
			return err
		}
		q.dev.account(func(s *Stats) { s.Pieces++ })
		if op == OpWrite {
			if err := f(p); err != nil {
				return err
			}
			copy(bb.data[off:], p)
		} else {
			copy(p, bb.data[off:])
			if err := f(p); err != nil {
				return err
			}
		}
		off, n = off+uint64(len(p)), n-uint64(len(p))
	}
	return nil
}

func (q *queue) transfer(op string, b gpu.Buffer, off uint64, p []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("%s: queue: %w", op, gpu.ErrClosed)
	}
	bb, err := q.checkBuffer(op, b)
	if err != nil {
		return err
	}
	if off > bb.size || uint64(len(p)) > bb.size-off {
		return fmt.Errorf("%s %d bytes at %d of a %d-byte buffer: %w", op, len(p), off, bb.size, gpu.ErrOutOfRange)
	}
	if err := q.fault(op); err != nil {
		return err
	}
	q.dev.account(func(s *Stats) { s.Transfers++ })
	if op == OpWrite {
		copy(bb.data[off:], p)
	} else {
		copy(p, bb.data[off:])
	}
	return nil
}

// Copy copies between buffers of q as the real device does.
func (q *queue) Copy(src, dst gpu.Buffer, srcOff, dstOff, n uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("copy: queue: %w", gpu.ErrClosed)
	}
	sb, err := q.checkBuffer(OpCopy, src)
	if err != nil {
		return err
	}
	db, err := q.checkBuffer(OpCopy, dst)
	if err != nil {
		return err
	}
	switch {
	case n == 0:
		return fmt.Errorf("copy of 0 bytes: %w", gpu.ErrInvalidArgument)
	case srcOff > sb.size || n > sb.size-srcOff:
		return fmt.Errorf("copy %d bytes from %d of a %d-byte buffer: %w", n, srcOff, sb.size, gpu.ErrOutOfRange)
	case dstOff > db.size || n > db.size-dstOff:
		return fmt.Errorf("copy %d bytes to %d of a %d-byte buffer: %w", n, dstOff, db.size, gpu.ErrOutOfRange)
	case sb == db && srcOff < dstOff+n && dstOff < srcOff+n:
		return fmt.Errorf("copy within one buffer: ranges overlap: %w", gpu.ErrInvalidArgument)
	}
	if err := q.fault(OpCopy); err != nil {
		return err
	}
	copy(db.data[dstOff:dstOff+n], sb.data[srcOff:srcOff+n])
	return nil
}

// Fill fills a range of a buffer of q with a pattern as the real device does.
func (q *queue) Fill(b gpu.Buffer, off, n uint64, pattern []byte) error {
	pl := uint64(len(pattern))
	if pl == 0 || pl > gpu.MaxFillPattern || pl&(pl-1) != 0 || off%pl != 0 || n%pl != 0 || n == 0 {
		return fmt.Errorf("fill %d bytes at %d with a %d-byte pattern: %w", n, off, pl, gpu.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("fill: queue: %w", gpu.ErrClosed)
	}
	bb, err := q.checkBuffer(OpFill, b)
	if err != nil {
		return err
	}
	if off > bb.size || n > bb.size-off {
		return fmt.Errorf("fill %d bytes at %d of a %d-byte buffer: %w", n, off, bb.size, gpu.ErrOutOfRange)
	}
	if err := q.fault(OpFill); err != nil {
		return err
	}
	for o := off; o < off+n; o += pl {
		copy(bb.data[o:], pattern)
	}
	return nil
}

// Build screens the source as the real device does, then parses its
// kernel signatures; a failure's log is the error's text.
func (q *queue) Build(source, options string) (gpu.Program, string, error) {
	if len(source) > q.dev.cfg.MaxSource {
		// Before the screen: the fake bounds its own work on any input.
		err := fmt.Errorf("build: source of %d bytes, at most %d: %w", len(source), q.dev.cfg.MaxSource, gpu.ErrBuildFailed)
		return nil, err.Error(), err
	}
	c := compile(source, options, q.dev.cfg.MaxKernels)
	if c.screen != nil {
		return nil, c.screen.Error(), c.screen
	}
	if source == "" {
		return nil, "", fmt.Errorf("build: empty source: %w", gpu.ErrBuildFailed)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, "", fmt.Errorf("build: queue: %w", gpu.ErrClosed)
	}
	if c.parse != nil {
		return nil, c.parse.Error(), fmt.Errorf("build: %w: %w", c.parse, gpu.ErrBuildFailed)
	}
	if err := q.fault(OpBuild); err != nil {
		return nil, "", err
	}
	p := &program{owner: q, sigs: c.sigs, kernels: make(map[string]*kernel)}
	for _, s := range c.sigs {
		p.names = append(p.names, s.name)
	}
	q.programs[p] = struct{}{}
	q.dev.account(func(s *Stats) { s.Programs++ })
	return p, "", nil
}

func (q *queue) Launch(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) (time.Duration, error) {
	kk, ok := k.(*kernel)
	if !ok || kk == nil {
		return 0, fmt.Errorf("launch: kernel %T is not of this fake: %w", k, gpu.ErrForeign)
	}
	name := kk.sig.name
	if err := q.checkRange(r); err != nil {
		return 0, fmt.Errorf("launch %s: %w", name, err)
	}
	params := kk.sig.params
	if len(args) != len(params) {
		return 0, fmt.Errorf("launch %s: %d arguments, kernel takes %d: %w", name, len(args), len(params), gpu.ErrInvalidLaunch)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, fmt.Errorf("launch %s: queue: %w", name, gpu.ErrClosed)
	}
	if kk.prog.owner != q {
		return 0, fmt.Errorf("launch %s: kernel: %w", name, gpu.ErrForeign)
	}
	if kk.released {
		return 0, fmt.Errorf("launch %s: kernel: %w", name, gpu.ErrClosed)
	}
	local := uint64(0)
	for i, a := range args {
		if err := q.checkArg(params[i], a); err != nil {
			return 0, fmt.Errorf("launch %s: argument %d: %w", name, i, err)
		}
		local += min(a.Local, math.MaxUint64-local) // saturates
	}
	if lim := q.dev.cfg.Info.LocalMemBytes; local > lim {
		return 0, fmt.Errorf("launch %s: %d bytes of __local memory, device has %d: %w", name, local, lim, gpu.ErrOutOfMemory)
	}
	if err := q.fault(OpLaunch); err != nil {
		return 0, fmt.Errorf("launch %s: %w", name, err)
	}
	q.dev.account(func(s *Stats) { s.Launches++ })
	return q.dev.cfg.LaunchTime, nil
}

// checkRange validates the index space as the real device does, and as
// OpenCL's enqueue does against the device's work-group limits.
func (q *queue) checkRange(r gpu.NDRange) error {
	if r.Dims < 1 || r.Dims > 3 {
		return fmt.Errorf("%d dimensions, want 1..3: %w", r.Dims, gpu.ErrInvalidLaunch)
	}
	info := q.dev.cfg.Info
	hasLocal := r.Local != ([3]uint64{})
	group := uint64(1)
	for i := 0; i < 3; i++ {
		if i >= r.Dims {
			if r.Global[i] > 1 || r.Local[i] > 1 || r.Offset[i] != 0 {
				return fmt.Errorf("dimension %d set beyond %d dimensions: %w", i, r.Dims, gpu.ErrInvalidLaunch)
			}
			continue
		}
		switch {
		case r.Global[i] == 0:
			return fmt.Errorf("global size %d is zero: %w", i, gpu.ErrInvalidLaunch)
		case r.Offset[i] > math.MaxUint64-r.Global[i]:
			return fmt.Errorf("offset+global of dimension %d overflows: %w", i, gpu.ErrInvalidLaunch)
		case !hasLocal:
			continue
		case r.Local[i] == 0:
			return fmt.Errorf("local size %d is zero while others are set: %w", i, gpu.ErrInvalidLaunch)
		case r.Global[i]%r.Local[i] != 0:
			return fmt.Errorf("local size %d does not divide global size %d: %w", r.Local[i], r.Global[i], gpu.ErrInvalidLaunch)
		case r.Local[i] > info.MaxWorkItemSizes[i]:
			return fmt.Errorf("local size %d of dimension %d over the device's %d: %w", r.Local[i], i, info.MaxWorkItemSizes[i], gpu.ErrInvalidLaunch)
		}
		if r.Local[i] > info.MaxWorkGroupSize/group { // group*Local[i] > max, without overflow
			return fmt.Errorf("work-group over the device's %d items: %w", info.MaxWorkGroupSize, gpu.ErrInvalidLaunch)
		}
		group *= r.Local[i]
	}
	return nil
}

// checkArg checks that a sets exactly what parameter p needs. q.mu is held.
func (q *queue) checkArg(p param, a gpu.Arg) error {
	set := 0
	got := kindScalar
	if a.Buffer != nil {
		set++
		got = kindBuffer
	}
	if len(a.Scalar) > 0 {
		set++
	}
	if a.Local > 0 {
		set++
		got = kindLocal
	}
	if a.Sampler != nil {
		set++
		got = kindSampler
	}
	if a.Image != nil {
		got = kindImage
	}
	switch {
	case set != 1 || a.Image != nil && a.Buffer == nil:
		return fmt.Errorf("%d of buffer, scalar, local and sampler set (image %t), want exactly one: %w", set, a.Image != nil, gpu.ErrInvalidLaunch)
	case p.kind == kindUnsupported:
		return fmt.Errorf("parameter type %q cannot be set: %w", p.typ, gpu.ErrInvalidLaunch)
	case p.kind != got:
		return fmt.Errorf("parameter of type %q needs a %s, got a %s: %w", p.typ, p.kind, got, gpu.ErrInvalidLaunch)
	case got == kindBuffer:
		_, err := q.checkBuffer("set argument", a.Buffer)
		return err
	case got == kindImage:
		if _, err := a.Image.Region(); err != nil {
			return err
		}
		_, err := q.checkBuffer("set argument", a.Buffer)
		return err
	case got == kindSampler:
		return a.Sampler.Check()
	case got == kindScalar && p.size != 0 && len(a.Scalar) != p.size:
		return fmt.Errorf("scalar of %d bytes for a %q of %d: %w", len(a.Scalar), p.typ, p.size, gpu.ErrInvalidLaunch)
	}
	return nil
}

// Close releases everything the queue created. It is idempotent.
func (q *queue) Close() error {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		for b := range q.buffers {
			b.releaseLocked()
		}
		for p := range q.programs {
			p.releaseLocked()
		}
	}
	q.mu.Unlock()
	q.dev.mu.Lock()
	delete(q.dev.queues, q)
	q.dev.mu.Unlock()
	return nil
}

func (b *buffer) Size() uint64 { return b.size }

var _ gpu.HostBuffer = (*buffer)(nil)

// Host lends n bytes of the buffer at off to f when the device is
// Config.HostBacked (gpu.HostBuffer).
func (b *buffer) Host(off, n uint64, f func(p []byte) error) (bool, error) {
	if off > b.size || n > b.size-off {
		return false, fmt.Errorf("host access %d bytes at %d of a %d-byte buffer: %w", n, off, b.size, gpu.ErrOutOfRange)
	}
	b.owner.mu.Lock()
	defer b.owner.mu.Unlock()
	if !b.owner.dev.cfg.HostBacked || b.data == nil || b.owner.closed {
		return false, nil
	}
	return true, f(b.data[off : off+n])
}

// Release frees the buffer. It is idempotent.
func (b *buffer) Release() {
	b.owner.mu.Lock()
	defer b.owner.mu.Unlock()
	b.releaseLocked()
}

func (b *buffer) releaseLocked() {
	if b.data == nil {
		return
	}
	b.data = nil
	delete(b.owner.buffers, b)
	b.owner.dev.account(func(s *Stats) { s.Bytes -= b.size; s.Buffers-- })
}

// Kernel returns the program's (cached) kernel named name.
func (p *program) Kernel(name string) (gpu.Kernel, error) {
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	if p.released {
		return nil, fmt.Errorf("kernel %q: program: %w", name, gpu.ErrClosed)
	}
	if k, ok := p.kernels[name]; ok {
		return k, nil
	}
	for i := range p.sigs {
		if p.sigs[i].name == name {
			k := &kernel{prog: p, sig: &p.sigs[i]}
			p.kernels[name] = k
			return k, nil
		}
	}
	return nil, fmt.Errorf("kernel %q (program has %s): %w", name, strings.Join(p.names, ", "), gpu.ErrNoKernel)
}

func (p *program) KernelNames() []string { return append([]string(nil), p.names...) }

// Info describes the parsed kernels, sorted by name, with the device's
// work-group size and plausible qualifiers (gpu.ArgInfo).
func (p *program) Info() ([]gpu.KernelInfo, error) {
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	if p.released {
		return nil, fmt.Errorf("program info: program: %w", gpu.ErrClosed)
	}
	if err := p.owner.fault(OpInfo); err != nil {
		return nil, err
	}
	var out []gpu.KernelInfo
	for _, s := range p.sigs {
		k := gpu.KernelInfo{Name: s.name, WorkGroupSize: p.owner.dev.cfg.Info.MaxWorkGroupSize, PreferredMultiple: 1}
		for _, prm := range s.params {
			a := gpu.ArgInfo{AddressQualifier: gpu.ArgAddressPrivate, AccessQualifier: gpu.ArgAccessNone,
				TypeQualifier: prm.quals, TypeName: prm.typ, Name: prm.name}
			switch prm.space {
			case "global":
				a.AddressQualifier = gpu.ArgAddressGlobal
			case "constant":
				a.AddressQualifier = gpu.ArgAddressConstant
			case "local":
				a.AddressQualifier = gpu.ArgAddressLocal
			}
			k.Args = append(k.Args, a)
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b gpu.KernelInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Release frees the program and its kernels. It is idempotent.
func (p *program) Release() {
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	p.releaseLocked()
}

func (p *program) releaseLocked() {
	for _, k := range p.kernels {
		k.releaseLocked()
	}
	if p.released {
		return
	}
	p.released = true
	delete(p.owner.programs, p)
	p.owner.dev.account(func(s *Stats) { s.Programs-- })
}

func (k *kernel) Name() string { return k.sig.name }
func (k *kernel) NumArgs() int { return len(k.sig.params) }

// Release frees the kernel; the program's next Kernel call for its name
// returns a new one. It is idempotent.
func (k *kernel) Release() {
	k.prog.owner.mu.Lock()
	defer k.prog.owner.mu.Unlock()
	k.releaseLocked()
}

func (k *kernel) releaseLocked() {
	k.released = true
	if k.prog.kernels[k.sig.name] == k {
		delete(k.prog.kernels, k.sig.name)
	}
}

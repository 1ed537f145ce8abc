package driver

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/vgpud/vgpud/abi"
)

// Buffer is device memory created by CreateBuffer.
type Buffer struct {
	Handle uint32
	Size   uint64
	gen    uint64 // the device's generation (Reopen) it was made in
}

// Program is a built OpenCL program.
type Program struct {
	Handle uint32
	gen    uint64
}

// NDRange is the index space of a launch.
type NDRange struct {
	Dims   uint32 // 1..3
	Offset [3]uint64
	Global [3]uint64
	Local  [3]uint64 // all zero: the device chooses
}

// Range1 is a one-dimensional range; local 0 lets the device choose.
func Range1(global, local uint64) NDRange {
	return NDRange{Dims: 1, Global: [3]uint64{global}, Local: [3]uint64{local}}
}

// Range2 is a two-dimensional range; lx = ly = 0 lets the device choose.
func Range2(gx, gy, lx, ly uint64) NDRange {
	return NDRange{Dims: 2, Global: [3]uint64{gx, gy}, Local: [3]uint64{lx, ly}}
}

// Arg is one kernel argument.
type Arg struct {
	a   abi.KernelArg
	gen uint64 // a buffer's generation
}

// BufferArg passes a buffer (a __global pointer).
func BufferArg(b Buffer) Arg {
	return Arg{a: abi.KernelArg{Kind: abi.ArgBuffer, Handle: b.Handle}, gen: b.gen}
}

// BytesArg passes a scalar or struct by value (1..abi.MaxScalarSize bytes).
func BytesArg(v []byte) Arg {
	return Arg{a: abi.KernelArg{Kind: abi.ArgScalar, Bytes: append([]byte(nil), v...)}}
}

// Uint32Arg passes a uint (or int, as its two's complement bits).
func Uint32Arg(v uint32) Arg {
	b := make([]byte, 4)
	le.PutUint32(b, v)
	return Arg{a: abi.KernelArg{Kind: abi.ArgScalar, Bytes: b}}
}

// Int32Arg passes an int.
func Int32Arg(v int32) Arg { return Uint32Arg(uint32(v)) }

// Uint64Arg passes a ulong.
func Uint64Arg(v uint64) Arg {
	b := make([]byte, 8)
	le.PutUint64(b, v)
	return Arg{a: abi.KernelArg{Kind: abi.ArgScalar, Bytes: b}}
}

// Float32Arg passes a float.
func Float32Arg(v float32) Arg { return Uint32Arg(math.Float32bits(v)) }

// LocalArg passes n bytes of __local memory.
func LocalArg(n uint32) Arg { return Arg{a: abi.KernelArg{Kind: abi.ArgLocal, Local: n}} }

// ImageArg passes buffer b as an image (an image1d_t ... image3d_t
// parameter) of the type, format and extent im gives; b holds the
// image's pixels packed (docs/ABI.md "Images"), and im.Buffer is set to
// b. The device must announce abi.FeatureImages and offer the format
// (Device.ImageInfo); for an image made from a buffer
// (abi.ImageType1DBuffer, an image1d_buffer_t parameter)
// abi.FeatureImageBuffers and the format among the buffer part's.
func ImageArg(b Buffer, im abi.ImageDesc) Arg {
	im.Buffer = b.Handle
	return Arg{a: abi.KernelArg{Kind: abi.ArgImage, Handle: b.Handle, Image: im}, gen: b.gen}
}

// SamplerArg passes a sampler (a sampler_t parameter).
func SamplerArg(s abi.SamplerDesc) Arg {
	return Arg{a: abi.KernelArg{Kind: abi.ArgSampler, Sampler: s}}
}

// tablesFor is the number of scatter-gather table pages n entries need:
// every table but the last holds 255 entries and a chain entry.
func tablesFor(n int) int {
	const per = abi.PageSize / abi.SGEntrySize
	if n <= per {
		return 1
	}
	return 1 + (n-per+per-2)/(per-1)
}

// sgBuild describes the first length bytes of data (in page order) with
// scatter-gather tables written into tables, merging physically contiguous
// pages. It returns the tables used (a prefix of tables), the first table's
// address and entry count.
func sgBuild(data []page, length int, tables []page) (used []page, addr uint64, count uint32, err error) {
	const per = abi.PageSize / abi.SGEntrySize
	var ents []abi.SGEntry
	for _, p := range data {
		if length <= 0 {
			break
		}
		n := min(length, abi.PageSize)
		length -= n
		ents = appendRun(ents, p.gpa, n)
	}
	if length > 0 || len(ents) == 0 {
		return nil, 0, 0, fmt.Errorf("scatter-gather: %d bytes not covered by %d pages: %w", length, len(data), ErrInvalid)
	}
	return sgTables(ents, tables)
}

// appendRun appends n bytes at gpa to ents, merged into the last entry
// when they follow it in guest-physical memory (and it stays under 1 GiB).
func appendRun(ents []abi.SGEntry, gpa uint64, n int) []abi.SGEntry {
	if merges(ents, gpa) {
		ents[len(ents)-1].Len += uint32(n)
		return ents
	}
	return append(ents, abi.SGEntry{Addr: gpa, Len: uint32(n)})
}

// merges reports whether appendRun merges bytes at gpa into ents' last
// entry.
func merges(ents []abi.SGEntry, gpa uint64) bool {
	k := len(ents) - 1
	return k >= 0 && ents[k].Addr+uint64(ents[k].Len) == gpa && ents[k].Len <= 1<<30
}

// sgTables writes the scatter-gather list ents into tables, chained. It
// returns the tables used (a prefix of tables), the first table's address
// and entry count.
func sgTables(ents []abi.SGEntry, tables []page) (used []page, addr uint64, count uint32, err error) {
	const per = abi.PageSize / abi.SGEntrySize
	nt := tablesFor(len(ents))
	if nt > len(tables) {
		return nil, 0, 0, fmt.Errorf("scatter-gather: %d entries need %d tables, have %d: %w", len(ents), nt, len(tables), ErrInvalid)
	}
	// Split into groups: per-1 entries per chained table, up to per in the last.
	groups := make([][]abi.SGEntry, 0, nt)
	for len(ents) > per {
		groups = append(groups, ents[:per-1])
		ents = ents[per-1:]
	}
	groups = append(groups, ents)
	sizes := make([]uint32, len(groups)) // entries in each table, chain included
	for i, g := range groups {
		sizes[i] = uint32(len(g))
		if i < len(groups)-1 {
			sizes[i]++
		}
	}
	for i, g := range groups {
		t := tables[i].buf
		for j := range g {
			g[j].Marshal(t[j*abi.SGEntrySize:])
		}
		if i < len(groups)-1 {
			ch := abi.SGEntry{Addr: tables[i+1].gpa, Len: sizes[i+1], Flags: abi.SGChain}
			ch.Marshal(t[len(g)*abi.SGEntrySize:])
		}
	}
	return tables[:len(groups)], tables[0].gpa, sizes[0], nil
}

// chunkBytes is the largest copy sent as one command: half the pool, so two
// chunks can be in flight.
func (d *Device) chunkBytes() int {
	np := d.poolSize / 2
	np -= tablesFor(np)
	return max(np, 1) * abi.PageSize
}

// CreateBuffer allocates size bytes of device memory. The command is batched:
// a device failure (e.g. abi.StatusQuotaExceeded) is reported by the next
// Finish, and commands using the buffer fail with abi.StatusNotFound.
func (d *Device) CreateBuffer(size uint64) (Buffer, error) {
	return d.CreateBufferFlags(size, 0)
}

// CreateBufferFlags is CreateBuffer with abi.Buffer* flags.
func (d *Device) CreateBufferFlags(size uint64, flags uint32) (Buffer, error) {
	return d.createBuffer(size, flags, entry{})
}

func (d *Device) createBuffer(size uint64, flags uint32, e entry) (Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return Buffer{}, err
	}
	if size == 0 || flags&^abi.BufferFlagsMask != 0 || flags == abi.BufferFlagsMask {
		return Buffer{}, fmt.Errorf("create buffer of %d bytes, flags %#x: %w", size, flags, ErrInvalid)
	}
	d.nextBuf++
	if d.nextBuf == 0 {
		d.nextBuf++
	}
	b := Buffer{Handle: d.nextBuf, Size: size, gen: d.gen}
	c := abi.NewCommand(&abi.BufferCreate{Handle: b.Handle, Flags: flags, Size: size}, 0, d.next)
	if _, err := d.submit(c, e); err != nil {
		return Buffer{}, fmt.Errorf("create buffer: %w", err)
	}
	return b, nil
}

// Free releases a buffer (batched).
func (d *Device) Free(b Buffer) error { return d.free1(b, entry{}) }

func (d *Device) free1(b Buffer, e entry) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if b.Handle == 0 {
		return fmt.Errorf("free buffer 0: %w", ErrInvalid)
	}
	if err := d.stale("buffer", b.Handle, b.gen); err != nil {
		return fmt.Errorf("free: %w", err)
	}
	if _, err := d.submit(abi.NewCommand(&abi.BufferFree{Handle: b.Handle}, 0, d.next), e); err != nil {
		return fmt.Errorf("free buffer %d: %w", b.Handle, err)
	}
	return nil
}

func checkRange(b Buffer, off uint64, n int) error {
	if b.Handle == 0 || n == 0 || off+uint64(n) < off || (b.Size != 0 && off+uint64(n) > b.Size) {
		return fmt.Errorf("buffer %d of %d bytes: range %d+%d: %w", b.Handle, b.Size, off, n, ErrInvalid)
	}
	return nil
}

// copyChunk stages one chunk and submits its copy command. For a copy to the
// device, data is copied into the staging pages now; for a copy from the
// device, onDone receives the filled pages.
func (d *Device) copyChunk(toDev bool, h uint32, off uint64, data []byte, sync bool, onDone func(abi.Completion, []page)) (uint64, error) {
	np := (len(data) + abi.PageSize - 1) / abi.PageSize
	nt := tablesFor(np)
	ps, err := d.pages(np + nt)
	if err != nil {
		return 0, err
	}
	dataPages, tables := ps[:np], ps[np:]
	if toDev {
		for i, p := range dataPages {
			copy(p.buf, data[i*abi.PageSize:])
		}
	}
	d.stats.StagedBytes += uint64(len(data))
	used, sgAddr, count, err := sgBuild(dataPages, len(data), tables)
	if err != nil {
		d.free = append(d.free, ps...)
		return 0, err
	}
	d.free = append(d.free, tables[len(used):]...)
	held := ps[:np+len(used)]
	cmd := abi.NewCommand(&abi.Copy{ToDevice: toDev, Handle: h, SGCount: count, Offset: off, Length: uint64(len(data)), SGAddr: sgAddr}, 0, d.next)
	e := entry{sync: sync, pages: held}
	if onDone != nil {
		e.onDone = func(c abi.Completion) { onDone(c, dataPages) }
	}
	return d.submit(cmd, e)
}

// Write copies data into b at off (batched). data is staged before Write
// returns, so the caller may reuse it. Copies larger than half the staging
// pool are split into several copy commands.
func (d *Device) Write(b Buffer, off uint64, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if err := checkRange(b, off, len(data)); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := d.stale("buffer", b.Handle, b.gen); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	chunk := d.chunkBytes()
	for pos := 0; pos < len(data); pos += chunk {
		part := data[pos:min(pos+chunk, len(data))]
		if _, err := d.copyChunk(true, b.Handle, off+uint64(pos), part, false, nil); err != nil {
			return fmt.Errorf("write buffer %d at %d: %w", b.Handle, off+uint64(pos), err)
		}
	}
	return nil
}

// Read copies len(dst) bytes of b at off into dst, waiting for every earlier
// command and the copy itself.
func (d *Device) Read(b Buffer, off uint64, dst []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if err := checkRange(b, off, len(dst)); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if err := d.stale("buffer", b.Handle, b.gen); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	chunk := d.chunkBytes()
	return d.readChunks(b.Handle, off, len(dst), func(pos int) (int, uint64, error) {
		part := dst[pos:min(pos+chunk, len(dst))]
		idx, err := d.copyChunk(false, b.Handle, off+uint64(pos), part, true, func(c abi.Completion, ps []page) {
			if c.Status != abi.StatusOK {
				return
			}
			for i, p := range ps {
				copy(part[i*abi.PageSize:], p.buf)
			}
		})
		return len(part), idx, err
	})
}

// readChunks submits a read of n bytes of buffer h at off in chunks, each
// by chunk (given the chunk's position, it returns the bytes the chunk
// covers and its command's index), then rings and waits for every chunk
// it submitted; it returns the first failure. d.mu is held.
func (d *Device) readChunks(h uint32, off uint64, n int, chunk func(pos int) (int, uint64, error)) error {
	var (
		idxs  []uint64
		first error
	)
	for pos := 0; pos < n; {
		sent, idx, err := chunk(pos)
		if err != nil {
			first = fmt.Errorf("read buffer %d at %d: %w", h, off+uint64(pos), err)
			break
		}
		idxs = append(idxs, idx)
		pos += sent
	}
	d.flush()
	for _, idx := range idxs {
		if _, err := d.waitOK(idx); err != nil && first == nil {
			first = fmt.Errorf("read buffer %d: %w", h, err)
		}
	}
	return first
}

// Build compiles OpenCL C source with options and waits for the result. The
// log (at most one page, abi.PageSize bytes) is returned in both cases; a
// compile error is a *CommandError with abi.StatusBuildFailed.
func (d *Device) Build(source, options string) (Program, string, error) {
	return d.BuildFlags(source, options, 0)
}

// BuildIL builds a SPIR-V module (abi.FlagIL, docs/ABI.md "SPIR-V")
// with options and waits for the result, as Build. The device must
// announce abi.FeatureIL; whether its physical device takes SPIR-V is
// DeviceInfo's IL (abi.DeviceILSPIRV): where it does not, the build fails
// with abi.StatusBuildFailed.
func (d *Device) BuildIL(module []byte, options string) (Program, string, error) {
	return d.BuildFlags(string(module), options, abi.FlagIL)
}

// BuildFlags is Build with command flags (abi.FlagNondeterministic,
// abi.FlagIL).
func (d *Device) BuildFlags(source, options string, flags uint16) (Program, string, error) {
	if flags&^abi.FlagsMask != 0 {
		return Program{}, "", fmt.Errorf("build: flags %#x: %w", flags, ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return Program{}, "", err
	}
	if flags&abi.FlagIL != 0 && d.info.Features&abi.FeatureIL == 0 {
		return Program{}, "", fmt.Errorf("build: a SPIR-V module on a device without abi.FeatureIL: %w", ErrInvalid)
	}
	if len(source) == 0 || len(source) > abi.MaxSourceLen || len(options) > abi.MaxOptionsLen {
		return Program{}, "", fmt.Errorf("build: source of %d bytes, options of %d: %w", len(source), len(options), ErrInvalid)
	}
	np := (len(source) + abi.PageSize - 1) / abi.PageSize
	nt := tablesFor(np)
	ps, err := d.pages(np + nt + 2)
	if err != nil {
		return Program{}, "", fmt.Errorf("build: %w", err)
	}
	src, tables, optsPage, logPage := ps[:np], ps[np:np+nt], ps[np+nt], ps[np+nt+1]
	for i, p := range src {
		copy(p.buf, source[i*abi.PageSize:])
	}
	_, sgAddr, count, err := sgBuild(src, len(source), tables)
	if err != nil {
		d.free = append(d.free, ps...)
		return Program{}, "", fmt.Errorf("build: %w", err)
	}
	copy(optsPage.buf, options)
	clear(logPage.buf)
	d.nextProg++
	if d.nextProg == 0 {
		d.nextProg++
	}
	pb := &abi.ProgramBuild{Handle: d.nextProg, SrcCount: count, SrcLen: uint64(len(source)), SrcSGAddr: sgAddr,
		LogLen: abi.PageSize, LogAddr: logPage.gpa}
	if len(options) > 0 {
		pb.OptsAddr, pb.OptsLen = optsPage.gpa, uint32(len(options))
	}
	var log string
	e := entry{sync: true, pages: ps, onDone: func(c abi.Completion) {
		b := logPage.buf
		if c.Status == abi.StatusBuildFailed && c.Detail > 0 && c.Detail < uint64(len(b)) {
			b = b[:c.Detail]
		}
		s, _, _ := strings.Cut(string(b), "\x00")
		log = s
	}}
	idx, err := d.submit(abi.NewCommand(pb, flags, d.next), e)
	if err != nil {
		return Program{}, "", fmt.Errorf("build: %w", err)
	}
	d.flush()
	if _, err := d.waitOK(idx); err != nil {
		return Program{}, log, fmt.Errorf("build: %w", err)
	}
	return Program{Handle: pb.Handle, gen: d.gen}, log, nil
}

// FreeProgram releases a program (batched).
func (d *Device) FreeProgram(p Program) error { return d.freeProgram(p, entry{}) }

func (d *Device) freeProgram(p Program, e entry) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if p.Handle == 0 {
		return fmt.Errorf("free program 0: %w", ErrInvalid)
	}
	if err := d.stale("program", p.Handle, p.gen); err != nil {
		return fmt.Errorf("free: %w", err)
	}
	if _, err := d.submit(abi.NewCommand(&abi.ProgramFree{Handle: p.Handle}, 0, d.next), e); err != nil {
		return fmt.Errorf("free program %d: %w", p.Handle, err)
	}
	return nil
}

// Launch runs kernel of p over r (batched).
func (d *Device) Launch(p Program, kernel string, r NDRange, args ...Arg) error {
	return d.LaunchFlags(p, kernel, r, 0, args...)
}

// LaunchFlags is Launch with command flags (abi.FlagNondeterministic).
func (d *Device) LaunchFlags(p Program, kernel string, r NDRange, flags uint16, args ...Arg) error {
	return d.launch(p, kernel, r, flags, Buffer{}, args, entry{})
}

// launch submits a launch; printf, if not the zero Buffer, is its printf
// buffer (printf.go).
func (d *Device) launch(p Program, kernel string, r NDRange, flags uint16, printf Buffer, args []Arg, e entry) error {
	desc := abi.LaunchDesc{WorkDim: r.Dims, GlobalOffset: r.Offset, GlobalSize: r.Global, LocalSize: r.Local, Kernel: kernel}
	for _, a := range args {
		desc.Args = append(desc.Args, a.a)
	}
	b, err := desc.Marshal()
	if err != nil {
		return fmt.Errorf("launch %s: %w", kernel, err)
	}
	if r.Dims < 1 || r.Dims > 3 || p.Handle == 0 || flags&^abi.FlagNondeterministic != 0 {
		return fmt.Errorf("launch %s: %d dimensions, program %d, flags %#x: %w", kernel, r.Dims, p.Handle, flags, ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	if err := d.stale("program", p.Handle, p.gen); err != nil {
		return fmt.Errorf("launch %s: %w", kernel, err)
	}
	for i, a := range args {
		if h, ok := a.a.BufferHandle(); ok {
			if err := d.stale("buffer", h, a.gen); err != nil {
				return fmt.Errorf("launch %s: argument %d: %w", kernel, i, err)
			}
		}
		if (a.a.Kind == abi.ArgImage || a.a.Kind == abi.ArgSampler) && d.info.Features&abi.FeatureImages == 0 {
			return fmt.Errorf("launch %s: argument %d: an image or sampler on a device without abi.FeatureImages: %w", kernel, i, ErrInvalid)
		}
		if a.a.Kind == abi.ArgImage && a.a.Image.Type == abi.ImageType1DBuffer && d.info.Features&abi.FeatureImageBuffers == 0 {
			return fmt.Errorf("launch %s: argument %d: an image made from a buffer on a device without abi.FeatureImageBuffers: %w", kernel, i, ErrInvalid)
		}
	}
	if printf.Handle != 0 {
		if d.info.Features&abi.FeaturePrintf == 0 {
			return fmt.Errorf("launch %s: a printf buffer on a device without abi.FeaturePrintf: %w", kernel, ErrInvalid)
		}
		if err := d.stale("buffer", printf.Handle, printf.gen); err != nil {
			return fmt.Errorf("launch %s: printf buffer: %w", kernel, err)
		}
	}
	ps, err := d.pages(1)
	if err != nil {
		return fmt.Errorf("launch %s: %w", kernel, err)
	}
	copy(ps[0].buf, b)
	c := abi.NewCommand(&abi.Launch{Program: p.Handle, DescLen: uint32(len(b)), DescAddr: ps[0].gpa, Printf: printf.Handle}, flags, d.next)
	e.pages = ps
	if _, err := d.submit(c, e); err != nil {
		return fmt.Errorf("launch %s: %w", kernel, err)
	}
	return nil
}

// Flush rings the doorbell for every command written since the last one.
func (d *Device) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	d.flush()
	return nil
}

// Fence submits a fence and returns its value; WaitFence(v) returns once the
// device has completed every command submitted before it.
func (d *Device) Fence() (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return 0, err
	}
	return d.fenceLocked()
}

func (d *Device) fenceLocked() (uint64, error) {
	v := d.fenceVal + 1
	if _, err := d.submit(abi.NewCommand(&abi.Fence{Addr: d.fence.gpa, Value: v}, 0, d.next), entry{}); err != nil {
		return 0, fmt.Errorf("fence: %w", err)
	}
	d.fenceVal = v
	return v, nil
}

// WaitFence rings the doorbell and waits until the fence value v has landed.
func (d *Device) WaitFence(v uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	return d.waitFenceLocked(v)
}

func (d *Device) waitFenceLocked(v uint64) error {
	if v == 0 || v > d.fenceVal {
		return fmt.Errorf("wait for fence %d: last fence is %d: %w", v, d.fenceVal, ErrInvalid)
	}
	d.flush()
	err := d.poll(fmt.Sprintf("fence %d", v), func() bool {
		if load64(d.fence.buf, 0) >= v {
			return true
		}
		// A device context's loss comes in its completion records, not
		// in RegError: a fence it completed StatusDeviceLost writes no
		// value, so reap what has completed and see.
		return d.ctxID != 0 && d.reapCompleted() && d.lost
	})
	if err == nil && d.lost && load64(d.fence.buf, 0) < v {
		return fmt.Errorf("wait for fence %d: %w: reopen the context to continue", v, ErrDeviceLost)
	}
	return err
}

// reapCompleted reaps the commands whose records have landed, without
// waiting, and reports whether it reaped any. Caller holds mu.
func (d *Device) reapCompleted() bool {
	any := false
	for d.reaped < d.next && d.complSeq(d.reaped) == abi.SeqOf(d.reaped) {
		if d.reapOne() != nil {
			break
		}
		any = true
	}
	return any
}

// Finish submits a fence, waits for it and returns (and clears) the first
// failure of a batched command since the last Finish.
func (d *Device) Finish() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	v, err := d.fenceLocked()
	if err != nil {
		return err
	}
	if err := d.waitFenceLocked(v); err != nil {
		return err
	}
	return d.drain()
}

// --- raw access, for tests that play a hostile guest ---

// SubmitRaw writes c into the next ring slot as is, without ringing the
// doorbell, and returns its ring index (the low 32 bits, as the doorbell
// counts). Collect its completion with WaitIndex or Completion.
func (d *Device) SubmitRaw(c abi.Command) (uint32, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return 0, err
	}
	idx, err := d.submitRaw(c)
	return uint32(idx), err
}

func (d *Device) submitRaw(c abi.Command) (uint64, error) {
	for d.next-d.reaped >= d.slots {
		if err := d.reapOne(); err != nil {
			return 0, err
		}
	}
	idx := d.next
	b := d.ring.buf[(idx%d.slots)*abi.CommandSize:]
	c.Marshal(b)
	d.inflight[idx%d.slots] = entry{sync: true, raw: true}
	d.next++
	d.stats.Commands++
	return idx, nil
}

// RingDoorbell writes tail to abi.RegRingTail as is. A tail within the
// submitted commands counts as rung; any other value is the caller's
// experiment. While the device is suspended it waits for Resume like every
// call, and writes nothing if that wait fails.
func (d *Device) RingDoorbell(tail uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil && !errors.Is(err, ErrClosed) {
		return
	}
	d.regs.Write32(abi.RegRingTail, tail)
	d.stats.Doorbells++
	if delta := tail - uint32(d.rung); uint64(delta) <= d.next-d.rung {
		d.rung += uint64(delta)
	}
}

// Tail returns the index the next command will get (the doorbell value once
// everything is submitted).
func (d *Device) Tail() uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return uint32(d.next)
}

func (d *Device) resolve(index uint32) (uint64, error) {
	delta := uint32(d.next) - index
	if delta == 0 || uint64(delta) > d.next {
		return 0, fmt.Errorf("command index %d not submitted (next %d): %w", index, d.next, ErrInvalid)
	}
	return d.next - uint64(delta), nil
}

// Completion returns the completion record of command index if it has
// landed, without waiting or ringing the doorbell.
func (d *Device) Completion(index uint32) (abi.Completion, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	idx, err := d.resolve(index)
	if err != nil {
		return abi.Completion{}, false
	}
	if rec, ok := d.results[idx]; ok {
		return rec, true
	}
	if idx >= d.reaped && d.complSeq(idx) == abi.SeqOf(idx) {
		return d.complRecord(idx), true
	}
	return abi.Completion{}, false
}

// WaitIndex rings the doorbell if needed, waits for command index (submitted
// with SubmitRaw) and returns its completion record, whatever its status.
func (d *Device) WaitIndex(index uint32) (abi.Completion, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil {
		return abi.Completion{}, err
	}
	idx, err := d.resolve(index)
	if err != nil {
		return abi.Completion{}, err
	}
	return d.waitIndex(idx)
}

// AckError reads abi.RegError, clears it with abi.RegErrorAck and returns it.
// It reads registers: not for the hot path. While the device is suspended it
// waits for Resume like every call; if that wait fails it returns
// abi.StatusDeviceError without touching the device.
func (d *Device) AckError() abi.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.check(); err != nil && !errors.Is(err, ErrClosed) {
		return abi.StatusDeviceError
	}
	s := abi.Status(d.regs.Read32(abi.RegError))
	d.regs.Write32(abi.RegErrorAck, 1)
	return s
}

// HandleUsed reports whether this driver has ever handed out h as a buffer
// handle since Open.
func (d *Device) HandleUsed(h uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return h != 0 && h <= d.nextBuf
}

// Slots returns the number of ring slots in use.
func (d *Device) Slots() int { return int(d.slots) }

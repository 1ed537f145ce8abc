package aggregator

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator/bulkcopy"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

// maxWorkItems bounds one launch's index space. OpenCL cannot preempt a
// running kernel, so this is the only bound on how long one launch holds
// the device; slicing long launches is the scheduler's business.
const maxWorkItems = 1 << 32

// stagingChunk is the most host memory one copy holds at a time.
const stagingChunk = 1 << 20

// directMin is the shortest contiguous run of guest RAM a copy moves in
// a device transfer of its own; shorter ones are gathered (a guest's
// scattered pages): a transfer costs more than staging a few pages, and
// on an executor's queue a round trip each (measured: runs of 64 KiB
// moved one transfer each were no faster there than staged MiBs).
const directMin = 256 << 10

// directChunk is the most one device transfer of a copy moves straight
// from or to guest RAM (GuestViews): a contiguous run longer than this is
// cut, so that the scheduler sees a long copy as several turns' work.
const directChunk = 4 << 20

// streamChunk is the most one batch of a copy moves on a queue that
// streams (gpu.Streamer): a stream ends with its batch, so a batch of
// many pieces keeps the copy engine busy while the next piece is
// gathered (on an H200 a 4 MiB batch of two pieces ran at half the speed
// of a long stream, BenchmarkStream in docs/gpu-check.md). It is still a
// turn's work of about a millisecond at the copy engine's speed.
const streamChunk = 16 << 20

// errStale ends a command whose ring was reset while it ran; its
// completion record is dropped.
var errStale = abi.Errorf(abi.StatusDeviceError, "ring reset while the command ran")

// handler executes one command of a guest's ring.
type handler func(in *Instance, c *abi.Command) (detail uint64, err error)

// bind makes the handler of an opcode whose payload is a P: the payload is
// decoded as exactly that type (abi.DecodeAs) before h sees it, so no
// handler asserts a payload's type on the guest path.
func bind[P abi.Payload](h func(in *Instance, c *abi.Command, p P) (uint64, error)) handler {
	return func(in *Instance, c *abi.Command) (uint64, error) {
		p, err := abi.DecodeAs[P](c)
		if err != nil {
			return 0, err
		}
		return h(in, c, p)
	}
}

// handlers dispatches by opcode, each entry binding the opcode's payload
// type to its handler; every defined opcode has one (tested).
var handlers = [abi.NumOpcodes]handler{
	abi.OpNop:          bind(func(*Instance, *abi.Command, *abi.Nop) (uint64, error) { return 0, nil }),
	abi.OpBufferCreate: bind((*Instance).bufferCreate),
	abi.OpBufferFree:   bind((*Instance).bufferFree),
	abi.OpCopyToDev:    bind((*Instance).copy),
	abi.OpCopyFromDev:  bind((*Instance).copy),
	abi.OpProgramBuild: bind((*Instance).programBuild),
	abi.OpProgramFree:  bind((*Instance).programFree),
	abi.OpLaunch:       bind((*Instance).launch),
	abi.OpFence:        bind((*Instance).fence),
	abi.OpProgramInfo:  bind((*Instance).programInfo),
	abi.OpBufferCopy:   bind((*Instance).bufferCopy),
	abi.OpBufferFill:   bind((*Instance).bufferFill),
	abi.OpDeviceInfo:   bind((*Instance).deviceInfo),
}

// The context commands start and stop workers, which execute commands
// through handlers: they join the table at init, out of its initializer.
func init() {
	handlers[abi.OpContextCreate] = bind((*Instance).contextCreate)
	handlers[abi.OpContextDestroy] = bind((*Instance).contextDestroy)
}

// execute runs one command; the returned error carries the status.
func (in *Instance) execute(c *abi.Command) (uint64, error) {
	if !c.Opcode.Valid() {
		return 0, abi.Errorf(abi.StatusInvalidOpcode, "opcode %d", uint16(c.Opcode))
	}
	if c.Flags&abi.FlagNondeterministic != 0 && c.Opcode != abi.OpLaunch && c.Opcode != abi.OpProgramBuild {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "flag nondeterministic on %v", c.Opcode)
	}
	if c.Flags&abi.FlagIL != 0 && c.Opcode != abi.OpProgramBuild {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "flag il on %v", c.Opcode)
	}
	if in.lost.Load() {
		return 0, abi.Errorf(abi.StatusDeviceLost, "context %d lost its device state", in.ctxID)
	}
	if c.Opcode != abi.OpLaunch {
		// Every launch before it in the ring completes first.
		in.syncLaunches()
	}
	detail, err := handlers[c.Opcode](in, c)
	return detail, in.execErr(err)
}

// execErr is a command's error as the guest gets it: a device context
// whose device state is gone is lost from then on.
func (in *Instance) execErr(err error) error {
	if in.parent != nil && errors.Is(err, gpu.ErrContextLost) {
		return in.contextLost(err)
	}
	return err
}

func (in *Instance) bufferCreate(_ *abi.Command, bc *abi.BufferCreate) (uint64, error) {
	s := in.state
	if _, ok := s.buffers[bc.Handle]; ok {
		return 0, abi.Errorf(abi.StatusExists, "buffer %d", bc.Handle)
	}
	if len(s.buffers) >= maxBuffers {
		return 0, abi.Errorf(abi.StatusQuotaExceeded, "%d buffers", len(s.buffers))
	}
	lim := in.Limits()
	if bc.Size > lim.MaxAlloc {
		return 0, abi.Errorf(abi.StatusQuotaExceeded, "buffer of %d bytes over the %d byte limit", bc.Size, lim.MaxAlloc)
	}
	// Charge first, then check: SetProfile may lower the quota meanwhile.
	if err := in.charge(bc.Size); err != nil {
		return 0, err
	}
	if err := in.reserve(bc.Size); err != nil {
		in.uncharge(bc.Size)
		return 0, err
	}
	var mem gpu.Buffer
	err := in.run(work{}, func() (_ time.Duration, err error) {
		mem, err = in.queue.Alloc(bc.Size)
		return 0, err
	})
	if err != nil {
		in.uncharge(bc.Size)
		in.unreserve(bc.Size)
		return 0, fmt.Errorf("allocate %d bytes: %w", bc.Size, err)
	}
	nb := &buffer{mem: mem, size: bc.Size, flags: bc.Flags}
	in.touch(nb)
	in.reuseCreated(nb)
	s.buffers[bc.Handle] = nb
	s.objects.Add(1)
	return 0, nil
}

func (in *Instance) bufferFree(_ *abi.Command, bf *abi.BufferFree) (uint64, error) {
	b, ok := in.state.buffers[bf.Handle]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", bf.Handle)
	}
	in.dropBuffer(bf.Handle, b)
	return 0, nil
}

func (in *Instance) copy(_ *abi.Command, cp *abi.Copy) (uint64, error) {
	b, ok := in.state.buffers[cp.Handle]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "buffer %d", cp.Handle)
	}
	if cp.Offset > b.size || cp.Length > b.size-cp.Offset {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "copy %d+%d outside buffer of %d bytes", cp.Offset, cp.Length, b.size)
	}
	segs, err := walkSG(in.mem, cp.SGAddr, cp.SGCount, cp.Length)
	if err != nil {
		return 0, err
	}
	if cp.ToDevice {
		in.touch(b)
	}
	if done, err := in.reuseCopy(cp, b, segs); done {
		return in.copied(cp, err)
	}
	return in.copied(cp, in.move(cp, b, segs))
}

// copied completes a copy, moved or served by reuse (reuseCopy).
func (in *Instance) copied(cp *abi.Copy, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	if cp.ToDevice {
		in.sh.Stats.BytesToDev.Add(cp.Length)
	} else {
		in.sh.Stats.BytesFromDev.Add(cp.Length)
	}
	return cp.Length, nil
}

// move moves a copy's bytes between its guest segments and buffer b, in
// batches of at most directChunk bytes. A batch into or out of a
// host-backed buffer is memory copies in this process (moveInPlace),
// which use no device and take no device turn: on a free device the
// copy then costs no turn's request and grant, and on a busy one it
// waits for nobody (it runs only between the queue's launches, which the
// ring has synced before any copy). Any other batch runs under one
// device turn: each contiguous run of guest RAM of directMin bytes or
// more straight to or from the device where the guest memory lends its
// mapping (GuestViews), the rest gathered through the staging buffer, as
// much as it holds per transfer.
func (in *Instance) move(cp *abi.Copy, b *buffer, segs []segment) error {
	views, _ := in.mem.(GuestViews)
	off := cp.Offset
	batchMax := uint64(directChunk)
	if in.streamer() != nil {
		batchMax = streamChunk
	}
	for _, batch := range batches(runs(segs, directChunk), batchMax) {
		n := batchBytes(batch)
		moved, err := in.moveInPlace(cp, b, batch, off, n)
		if moved {
			in.sh.InPlace.Add(1)
		} else if err == nil {
			err = in.run(in.chunkWork(n, cp.Length), func() (time.Duration, error) {
				return 0, in.moveBatch(views, cp, b, batch, off)
			})
		}
		if errors.Is(err, errStale) {
			return err
		}
		if err != nil {
			if cp.ToDevice {
				return fmt.Errorf("write buffer %d: %w", cp.Handle, err)
			}
			return fmt.Errorf("read buffer %d: %w", cp.Handle, err)
		}
		off += n
	}
	return nil
}

// runs merges adjacent segments into contiguous runs of at most max
// bytes.
func runs(segs []segment, max uint64) []segment {
	var out []segment
	for _, s := range segs {
		if n := len(out); n > 0 && out[n-1].gpa+out[n-1].len == s.gpa && out[n-1].len < max {
			take := min(s.len, max-out[n-1].len)
			out[n-1].len += take
			s = segment{gpa: s.gpa + take, len: s.len - take}
		}
		for s.len > 0 {
			take := min(s.len, max)
			out = append(out, segment{gpa: s.gpa, len: take})
			s = segment{gpa: s.gpa + take, len: s.len - take}
		}
	}
	return out
}

// batches groups runs (each at most max bytes) into consecutive batches
// of at most max bytes.
func batches(rs []segment, max uint64) [][]segment {
	var out [][]segment
	var total uint64
	for i, r := range rs {
		if i == 0 || total+r.len > max {
			out = append(out, nil)
			total = 0
		}
		out[len(out)-1] = append(out[len(out)-1], r)
		total += r.len
	}
	return out
}

// moveBatch moves one batch of a copy's runs, starting at offset
// off of b, under the caller's device turn.
func (in *Instance) moveBatch(views GuestViews, cp *abi.Copy, b *buffer, batch []segment, off uint64) error {
	st := stager{in: in, cp: cp, b: b, stream: in.streamer()}
	for _, r := range batch {
		if views != nil && r.len >= directMin {
			if err := st.flush(); err != nil {
				return err
			}
			if !cp.ToDevice && in.stale() {
				return errStale
			}
			lent, err := views.View(r.gpa, r.len, !cp.ToDevice, func(p []byte) error {
				if cp.ToDevice {
					return in.queue.Write(b.mem, off, p)
				}
				return in.queue.Read(b.mem, off, p)
			})
			if err != nil {
				return err
			}
			if lent {
				in.sh.Transfers.Add(1)
				off += r.len
				continue
			}
		}
		for r.len > 0 {
			take, err := st.add(segment{gpa: r.gpa, len: r.len}, off)
			if err != nil {
				return err
			}
			r = segment{gpa: r.gpa + take, len: r.len - take}
			off += take
		}
	}
	return st.flush()
}

// streamer is the instance's queue as a gpu.Streamer where it streams
// copies, else nil.
func (in *Instance) streamer() gpu.Streamer {
	if sq, ok := in.queue.(gpu.Streamer); ok && !in.noStream && sq.Streams() {
		return sq
	}
	return nil
}

// batchBytes is the length of a batch's runs together.
func batchBytes(batch []segment) uint64 {
	var n uint64
	for _, r := range batch {
		n += r.len
	}
	return n
}

// streamFlush moves what is staged through the queue's own staging memory
// (gpu.Streamer: pinned host memory on a GPU): the guest's runs are
// gathered into or scattered out of one piece while the device transfers
// the others, where staged MiBs used to wait for each other and for a
// blocking transfer from ordinary memory (a 256 MiB download at 18 % of
// direct on an H200, docs/gpu-check.md). It reports false, having moved
// nothing, where the queue cannot stream; the instance then stops trying.
func (st *stager) streamFlush(segs []segment) (bool, error) {
	in := st.in
	c := segCursor{segs: segs}
	pieces := uint64(0)
	var err error
	if st.cp.ToDevice {
		err = st.stream.StreamWrite(st.b.mem, st.off, st.n, func(p []byte) error {
			pieces++
			return inHalves(&c, p, func(segs []segment, part []byte) error { return gather(in.mem, segs, part) })
		})
	} else {
		err = st.stream.StreamRead(st.b.mem, st.off, st.n, func(p []byte) error {
			pieces++
			if in.stale() {
				return errStale
			}
			return inHalves(&c, p, func(segs []segment, part []byte) error { return scatter(in.mem, segs, part) })
		})
	}
	if pieces == 0 && errors.Is(err, gpu.ErrUnsupported) {
		in.log.Warn("copies do not stream: each MiB is staged and moved on its own", "err", err)
		in.noStream = true
		st.stream = nil
		return false, nil
	}
	in.sh.Transfers.Add(pieces)
	in.sh.Staged.Add(st.n)
	return true, err
}

// halvesMin is the piece from which inHalves copies with two goroutines.
const halvesMin = 1 << 20

// inHalves takes the segments of p's bytes from c and runs f over them,
// in two halves at once for a piece of halvesMin or more: one goroutine
// copies a few GB/s, and a piece's transfer to or from pinned memory
// runs at the copy engine's tens, so a second halves the time the
// engine waits (on an H200, streams of 2 MiB pieces gathered by two ran
// at 1.4x and 1.1x of the application's own transfers up and down, by one
// at 1.1x and 0.8x: BenchmarkStream, docs/gpu-check.md).
func inHalves(c *segCursor, p []byte, f func(segs []segment, part []byte) error) error {
	if len(p) < halvesMin {
		return f(c.take(uint64(len(p))), p)
	}
	half := len(p) / 2
	first := slices.Clone(c.take(uint64(half)))
	var firstErr error
	var wg sync.WaitGroup
	wg.Go(func() { firstErr = f(first, p[:half]) })
	err := f(c.take(uint64(len(p)-half)), p[half:])
	wg.Wait()
	return errors.Join(firstErr, err)
}

// segCursor hands out a run of segments piece by piece; it does not
// change them.
type segCursor struct {
	segs []segment
	used uint64    // bytes of segs[0] handed out
	buf  []segment // take's result, reused
}

// take returns the segments of the next n bytes (fewer where the
// segments end).
func (c *segCursor) take(n uint64) []segment {
	c.buf = c.buf[:0]
	for n > 0 && len(c.segs) > 0 {
		s := c.segs[0]
		k := min(n, s.len-c.used)
		c.buf = append(c.buf, segment{gpa: s.gpa + c.used, len: k})
		n -= k
		if c.used += k; c.used == s.len {
			c.segs, c.used = c.segs[1:], 0
		}
	}
	return c.buf
}

// rest is the segments not yet handed out.
func (c *segCursor) rest() []segment {
	if len(c.segs) == 0 {
		return nil
	}
	out := append([]segment{{gpa: c.segs[0].gpa + c.used, len: c.segs[0].len - c.used}}, c.segs[1:]...)
	return out
}

// moveInPlace moves a batch (n bytes) straight between its guest segments and b's
// own memory when b is host-backed (gpu.HostBuffer: a CPU device's
// buffers, docs/architecture.md "Host-backed buffers"): one memory copy
// per segment, no device transfer, nothing staged. It reports false when
// b's memory cannot be lent.
func (in *Instance) moveInPlace(cp *abi.Copy, b *buffer, batch []segment, off, n uint64) (bool, error) {
	hb, ok := b.mem.(gpu.HostBuffer)
	if !ok {
		return false, nil
	}
	return hb.Host(off, n, func(p []byte) error {
		if !cp.ToDevice && in.stale() {
			return errStale
		}
		if n >= streamMin {
			if views, ok := in.mem.(GuestViews); ok {
				return streamSegments(in.mem, views, batch, p, cp.ToDevice)
			}
		}
		if cp.ToDevice {
			return gather(in.mem, batch, p)
		}
		return scatter(in.mem, batch, p)
	})
}

// streamMin is the batch from which an in-place copy stores past the
// caches (bulkcopy): a batch of half a directChunk or more is part of a
// transfer of at least that size (the guest driver cuts a large one in
// commands of a little under 4 MiB), whose stores are better not read
// first (7 GB/s against 13 in aggregator/bulkcopy's benchmark, 256 MiB
// in 64 KiB pieces). A smaller one may fit in the caches, where
// ordinary stores win (a 1 MiB download to a hot destination ran at 53 %
// of direct with streaming stores, at 99 % without; bench/README.md
// "Issue 42, third round").
const streamMin = directChunk / 2

// streamSegments copies between the segments of guest RAM, on the
// guest's own mapping, and p (toDevice: into p) with bulkcopy.Stream; a
// segment the guest memory does not lend is read or written as gather
// and scatter do.
func streamSegments(mem GuestMemory, views GuestViews, segs []segment, p []byte, toDevice bool) error {
	for _, s := range segs {
		part := p[:s.len]
		lent, err := views.View(s.gpa, s.len, !toDevice, func(g []byte) error {
			if toDevice {
				bulkcopy.Stream(part, g)
			} else {
				bulkcopy.Stream(g, part)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !lent {
			if toDevice {
				err = mem.ReadAt(part, s.gpa)
			} else {
				err = mem.WriteAt(part, s.gpa)
			}
			if err != nil {
				return err
			}
		}
		p = p[s.len:]
	}
	return nil
}

// stager gathers a batch's short runs and moves them: through the
// queue's own staging memory where it streams (streamFlush), the whole
// batch in one stream, else through the instance's staging buffer, one
// transfer per bufferful.
type stager struct {
	in     *Instance
	cp     *abi.Copy
	b      *buffer
	stream gpu.Streamer // nil: the queue does not stream
	segs   []segment
	off    uint64 // b's offset of the first byte staged
	n      uint64 // bytes staged
}

// add stages up to s.len bytes of s, whose bytes go at offset off of the
// buffer, flushing when the staging buffer is full; it returns how many.
func (st *stager) add(s segment, off uint64) (uint64, error) {
	limit := uint64(streamChunk) // a batch's most: streamed, nothing is held here
	if st.stream == nil {
		limit = stagingChunk
	}
	if st.n == 0 {
		st.off = off
	}
	take := min(s.len, limit-st.n)
	st.segs = append(st.segs, segment{gpa: s.gpa, len: take})
	st.n += take
	if st.n == limit {
		return take, st.flush()
	}
	return take, nil
}

// flush moves what is staged.
func (st *stager) flush() error {
	if st.n == 0 {
		return nil
	}
	segs := st.segs
	defer func() { st.segs, st.n = st.segs[:0], 0 }()
	if st.stream != nil {
		if streamed, err := st.streamFlush(segs); streamed {
			return err
		}
	}
	for st.n > 0 {
		// Without a stream (or where the queue turned out unable),
		// a bufferful at a time.
		if err := st.flushChunk(&segs); err != nil {
			return err
		}
	}
	return nil
}

// flushChunk moves the first bufferful of segs (at most stagingChunk
// bytes) through the instance's staging buffer and takes it off segs.
func (st *stager) flushChunk(segs *[]segment) error {
	in := st.in
	if in.staging == nil {
		in.staging = make([]byte, stagingChunk) // kept: copies are the hot path
	}
	c := segCursor{segs: *segs}
	k := min(st.n, stagingChunk)
	chunk := c.take(k)
	buf := in.staging[:k]
	off := st.off
	*segs = c.rest()
	st.off, st.n = st.off+k, st.n-k
	in.sh.Transfers.Add(1)
	in.sh.Staged.Add(k)
	if st.cp.ToDevice {
		if err := gather(in.mem, chunk, buf); err != nil {
			return err
		}
		return in.queue.Write(st.b.mem, off, buf)
	}
	if err := in.queue.Read(st.b.mem, off, buf); err != nil {
		return err
	}
	if in.stale() {
		return errStale
	}
	return scatter(in.mem, chunk, buf)
}

func (in *Instance) programBuild(c *abi.Command, pb *abi.ProgramBuild) (uint64, error) {
	s := in.state
	if _, ok := s.programs[pb.Handle]; ok {
		return 0, abi.Errorf(abi.StatusExists, "program %d", pb.Handle)
	}
	if len(s.programs) >= maxPrograms {
		return 0, abi.Errorf(abi.StatusQuotaExceeded, "%d programs", len(s.programs))
	}
	segs, err := walkSG(in.mem, pb.SrcSGAddr, pb.SrcCount, pb.SrcLen)
	if err != nil {
		return 0, fmt.Errorf("source: %w", err)
	}
	src := make([]byte, pb.SrcLen)
	if err := gather(in.mem, segs, src); err != nil {
		return 0, fmt.Errorf("source: %w", err)
	}
	opts := make([]byte, pb.OptsLen)
	if err := in.mem.ReadAt(opts, pb.OptsAddr); err != nil {
		return 0, fmt.Errorf("options: %w", err)
	}
	if pb.LogLen > 0 {
		// Check the log range now: a build is expensive to waste.
		if err := in.mem.ReadAt(make([]byte, pb.LogLen), pb.LogAddr); err != nil {
			return 0, fmt.Errorf("build log: %w", err)
		}
	}
	blog, err := in.buildProgram(pb.Handle, c.Flags, src, opts)
	if err != nil {
		n := 0
		if pb.LogLen > 0 && blog != "" && !in.stale() {
			l := []byte(blog)[:min(len(blog), int(pb.LogLen))]
			if werr := in.mem.WriteAt(l, pb.LogAddr); werr == nil {
				n = len(l)
			}
		}
		return uint64(n), err
	}
	return 0, nil
}

// buildProgram compiles a program under handle h (free) and charges it to
// the program quota. On failure it returns the compiler's log, or why the
// source was refused.
func (in *Instance) buildProgram(h uint32, flags uint16, src, opts []byte) (string, error) {
	s := in.state
	if _, ok := s.programs[h]; ok {
		return "", abi.Errorf(abi.StatusExists, "program %d", h)
	}
	if len(s.programs) >= maxPrograms {
		return "", abi.Errorf(abi.StatusQuotaExceeded, "%d programs", len(s.programs))
	}
	// The source and options count against the program quota from now
	// on, the binary once built (reserve first, then check: the quota may
	// be lowered meanwhile).
	charged := uint64(len(src) + len(opts))
	if err := in.chargeProgram(charged); err != nil {
		return "", err
	}
	built := false
	defer func() {
		if !built {
			in.sh.ProgramBytes.Add(^(charged - 1))
		}
	}()
	// Compiling does not occupy the device: no turn is taken. The gpu
	// package screens source and options (gpu.CheckSource) first. The
	// compiler runs guest-supplied source: an arbiter that watches builds
	// (a worker's: its main process bounds how long one may take) is told
	// when it starts and ends.
	in.dropTurn() // a build may take long: no turn kept across it
	if w, ok := in.dev.arb.(CompileWatcher); ok {
		done, err := w.Compiling(in.ctx, in.schedID)
		if err != nil {
			return "", fmt.Errorf("build program %d: %w", h, err)
		}
		defer done()
	}
	prog, log, err := in.compile(flags, src, opts)
	if err != nil {
		if log == "" {
			log = err.Error() // a rejected source has no compiler log: say why
		}
		return log, fmt.Errorf("build program %d: %w", h, err)
	}
	if sz, ok := prog.(interface{ Size() uint64 }); ok {
		bin := sz.Size()
		if err := in.chargeProgram(bin); err != nil {
			prog.Release()
			return "", fmt.Errorf("build program %d: its binary: %w", h, err)
		}
		charged += bin
	}
	built = true
	s.objects.Add(1)
	s.programs[h] = &program{
		charged: charged,
		prog:    prog,
		source:  string(src),
		options: string(opts),
		flags:   flags,
		// A warning can hide a write through a const pointer (an
		// implicit const-discarding conversion, e.g. vstore on a const
		// input): such a program's signatures cannot be trusted.
		warned: strings.Contains(strings.ToLower(log), "warning"),
	}
	return "", nil
}

// compile builds src as OpenCL C, or as a SPIR-V module where flags has
// abi.FlagIL (docs/ABI.md "SPIR-V"): the queue's device checks the module
// (gpu.CheckIL) before its compiler sees it. A device that builds no
// SPIR-V fails the build, the log saying so.
func (in *Instance) compile(flags uint16, src, opts []byte) (gpu.Program, string, error) {
	if flags&abi.FlagIL == 0 {
		return in.queue.Build(string(src), string(opts))
	}
	ilb, ok := in.queue.(gpu.ILBuilder)
	if !ok || !in.dev.info.Caps.IL {
		err := fmt.Errorf("%s builds no SPIR-V: %w", in.dev.info.Name, gpu.ErrBuildFailed)
		return nil, err.Error(), err
	}
	return ilb.BuildIL(src, string(opts))
}

// chargeProgram counts n bytes of programs against the instance's program
// quota (reserve, then check).
func (in *Instance) chargeProgram(n uint64) error {
	quota := in.progBytes.Load()
	if used := in.sh.ProgramBytes.Add(n); quota != 0 && (used < n || used > quota) {
		in.sh.ProgramBytes.Add(^(n - 1))
		return abi.Errorf(abi.StatusQuotaExceeded, "programs of %d more bytes with %d of %d in use", n, used-n, quota)
	}
	return nil
}

func (in *Instance) programFree(_ *abi.Command, pf *abi.ProgramFree) (uint64, error) {
	pr, ok := in.state.programs[pf.Handle]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "program %d", pf.Handle)
	}
	in.dropProgram(pf.Handle, pr)
	return 0, nil
}

func (in *Instance) launch(c *abi.Command, l *abi.Launch) (uint64, error) {
	pr, ok := in.state.programs[l.Program]
	if !ok {
		return 0, abi.Errorf(abi.StatusNotFound, "program %d", l.Program)
	}
	raw := make([]byte, l.DescLen)
	if err := in.mem.ReadAt(raw, l.DescAddr); err != nil {
		return 0, fmt.Errorf("launch descriptor: %w", err)
	}
	d, err := abi.UnmarshalLaunchDesc(raw)
	if err != nil {
		return 0, err
	}
	r := gpu.NDRange{Dims: int(d.WorkDim), Offset: d.GlobalOffset, Global: d.GlobalSize, Local: d.LocalSize}
	items := uint64(1)
	for i := 0; i < r.Dims; i++ {
		if r.Global[i] > maxWorkItems/items {
			return 0, abi.Errorf(abi.StatusInvalidArgument, "launch of more than %d work items", uint64(maxWorkItems))
		}
		items *= r.Global[i]
	}
	k, err := pr.prog.Kernel(d.Kernel) // the program caches its kernels
	if err != nil {
		return 0, fmt.Errorf("kernel %q: %w", d.Kernel, err)
	}
	if k.NumArgs() != len(d.Args) {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "kernel %q takes %d arguments, got %d", d.Kernel, k.NumArgs(), len(d.Args))
	}
	args, err := in.launchArgs(d.Args)
	if err != nil {
		return 0, err
	}
	var pt *printing
	if l.Printf != 0 {
		if pt, err = in.printfBuffer(l.Printf); err != nil {
			return 0, err
		}
	}
	in.touchWritten(pr, &d)
	key := kernelKey{program: l.Program, name: d.Kernel}
	quiet := pt == nil && in.pipelines() && in.reuseQuiet(&d) && !in.mayCut(key, pr, r, args)
	if !quiet {
		// reuseBefore may read or write the device (captures, host-held
		// content), and this launch runs on its own: the launches
		// enqueued before it go first.
		in.syncLaunches()
	}
	rc := c
	if pt != nil {
		// What a launch prints is a side effect no reuse entry holds:
		// it is neither answered from the table nor recorded.
		nd := *c
		nd.Flags |= abi.FlagNondeterministic
		rc = &nd
	}
	rl, hit, err := in.reuseBefore(rc, pr, &d, r)
	if err != nil || hit {
		return in.reuseServed(d.Kernel, err)
	}
	if quiet && !rl.record {
		ok, err := in.enqueueLaunch(key, k, r, args, items, rl)
		if ok {
			return 0, errPipelined
		}
		if err != nil {
			in.reuseAfter(rl, 0, err)
			return 0, fmt.Errorf("launch %q: %w", d.Kernel, err)
		}
	}
	in.syncLaunches()
	t, err := in.launchKernel(key, pr, k, r, args, pt)
	in.reuseAfter(rl, t, err)
	dur := uint64(max(t.Nanoseconds(), 0))
	if err != nil {
		return 0, fmt.Errorf("launch %q: %w", d.Kernel, err)
	}
	if pt != nil {
		if err := in.writePrintout(pt); err != nil {
			return 0, fmt.Errorf("launch %q: printf output: %w", d.Kernel, err)
		}
	}
	in.sh.Stats.Launches.Add(1)
	in.sh.Stats.KernelNanos.Add(dur)
	in.sh.Kernels.Observe(dur, items)
	return dur, nil
}

// launchArgs turns a launch descriptor's arguments into the device's,
// checking every buffer handle and image (docs/ABI.md "Images").
func (in *Instance) launchArgs(desc []abi.KernelArg) ([]gpu.Arg, error) {
	args := make([]gpu.Arg, len(desc))
	for i, a := range desc {
		switch a.Kind {
		case abi.ArgBuffer, abi.ArgImage:
			b, ok := in.state.buffers[a.Handle]
			if !ok {
				return nil, abi.Errorf(abi.StatusNotFound, "argument %d: buffer %d", i, a.Handle)
			}
			args[i].Buffer = b.mem
			if a.Kind == abi.ArgImage {
				im, err := in.imageArg(&a.Image, b)
				if err != nil {
					return nil, fmt.Errorf("argument %d: %w", i, err)
				}
				args[i].Image = im
			}
		case abi.ArgScalar:
			args[i].Scalar = a.Bytes
		case abi.ArgLocal:
			args[i].Local = uint64(a.Local)
		case abi.ArgSampler:
			if !in.devInfo.imageInfo.Supported {
				return nil, abi.Errorf(abi.StatusInvalidArgument, "argument %d: a sampler on a device without images", i)
			}
			args[i].Sampler = &gpu.Sampler{Normalized: a.Sampler.Normalized, Addressing: a.Sampler.Addressing, Filter: a.Sampler.Filter}
		}
	}
	return args, nil
}

// imageArg checks an image argument against the device's image section
// (its format offered, its extent within the limits) and against the
// buffer that holds it, and returns the device's description of it.
func (in *Instance) imageArg(d *abi.ImageDesc, b *buffer) (*gpu.Image, error) {
	lim := &in.devInfo.imageInfo
	if !lim.Supported {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "an image on a device without images")
	}
	formats := lim.Formats
	if d.Type == abi.ImageType1DBuffer {
		formats = lim.BufferFormats
	}
	if !slices.Contains(formats, d.Format()) {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "image format %#x/%#x not offered for images of type %#x", d.Order, d.DataType, d.Type)
	}
	r := d.Region()
	var max [3]uint64
	switch d.Type {
	case abi.ImageType1DBuffer:
		max = [3]uint64{lim.MaxBufferSize, 1, 1}
	case abi.ImageType1D, abi.ImageType2D:
		max = [3]uint64{lim.MaxPlane[0], lim.MaxPlane[1], 1}
	case abi.ImageType1DArray:
		max = [3]uint64{lim.MaxPlane[0], lim.MaxArraySize, 1}
	case abi.ImageType2DArray:
		max = [3]uint64{lim.MaxPlane[0], lim.MaxPlane[1], lim.MaxArraySize}
	case abi.ImageType3D:
		max = lim.MaxVolume
	}
	for i := range r {
		if r[i] > max[i] {
			return nil, abi.Errorf(abi.StatusInvalidArgument, "image of %dx%dx%d over the device's %dx%dx%d", r[0], r[1], r[2], max[0], max[1], max[2])
		}
	}
	if n := d.Bytes(); n > b.size {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "image of %d bytes in buffer %d of %d", n, d.Buffer, b.size)
	}
	return &gpu.Image{Type: d.Type, Order: d.Order, DataType: d.DataType, Width: d.Width, Height: d.Height, Depth: d.Depth, ArraySize: d.ArraySize}, nil
}

func (in *Instance) fence(_ *abi.Command, f *abi.Fence) (uint64, error) {
	// Commands run in ring order, so all earlier work is done here.
	if in.stale() {
		return 0, errStale
	}
	if err := in.mem.Store64(f.Addr, f.Value); err != nil {
		return 0, fmt.Errorf("fence: %w", err)
	}
	return 0, nil
}

// touchWritten marks the buffers a launch may write: those its kernel's
// signature does not declare const (every buffer argument when the
// signature is not known for certain), and every image's.
func (in *Instance) touchWritten(pr *program, d *abi.LaunchDesc) {
	kern, known := pr.reuseInfo().Kernel(d.Kernel)
	known = known && len(kern.Args) == len(d.Args)
	for i, a := range d.Args {
		// An image's kernel may write it whatever the signature says
		// of its access: the device copies it back.
		if a.Kind == abi.ArgImage || a.Kind == abi.ArgBuffer && (!known || kern.Args[i] == reuse.ArgOut) {
			in.touch(in.state.buffers[a.Handle])
		}
	}
}

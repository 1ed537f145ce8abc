package aggregator

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

// maxWorkItems bounds one launch's index space. OpenCL cannot preempt a
// running kernel, so this is the only bound on how long one launch holds
// the device; slicing long launches is the scheduler's business.
const maxWorkItems = 1 << 32

// stagingChunk is the most host memory one copy holds at a time.
const stagingChunk = 1 << 20

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
		return in.reuseCopied(cp, err)
	}
	if in.staging == nil {
		in.staging = make([]byte, stagingChunk) // kept: copies are the hot path
	}
	staging := in.staging[:min(cp.Length, stagingChunk)]
	off := cp.Offset
	for len(segs) > 0 {
		// Fill one chunk from as many segments (or parts of one) as fit.
		var chunk []segment
		n := uint64(0)
		for len(segs) > 0 && n < uint64(len(staging)) {
			s := segs[0]
			take := min(s.len, uint64(len(staging))-n)
			chunk = append(chunk, segment{gpa: s.gpa, len: take})
			n += take
			if take == s.len {
				segs = segs[1:]
			} else {
				segs[0] = segment{gpa: s.gpa + take, len: s.len - take}
			}
		}
		buf := staging[:n]
		if cp.ToDevice {
			if err := gather(in.mem, chunk, buf); err != nil {
				return 0, err
			}
			if err := in.run(in.chunkWork(n, cp.Length), func() (time.Duration, error) { return 0, in.queue.Write(b.mem, off, buf) }); err != nil {
				return 0, fmt.Errorf("write buffer %d: %w", cp.Handle, err)
			}
		} else {
			if err := in.run(in.chunkWork(n, cp.Length), func() (time.Duration, error) { return 0, in.queue.Read(b.mem, off, buf) }); err != nil {
				return 0, fmt.Errorf("read buffer %d: %w", cp.Handle, err)
			}
			if in.stale() {
				return 0, errStale
			}
			if err := scatter(in.mem, chunk, buf); err != nil {
				return 0, err
			}
		}
		off += n
	}
	if cp.ToDevice {
		in.sh.Stats.BytesToDev.Add(cp.Length)
	} else {
		in.sh.Stats.BytesFromDev.Add(cp.Length)
	}
	return cp.Length, nil
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
	prog, log, err := in.queue.Build(string(src), string(opts))
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
	args := make([]gpu.Arg, len(d.Args))
	for i, a := range d.Args {
		switch a.Kind {
		case abi.ArgBuffer:
			b, ok := in.state.buffers[a.Handle]
			if !ok {
				return 0, abi.Errorf(abi.StatusNotFound, "argument %d: buffer %d", i, a.Handle)
			}
			args[i].Buffer = b.mem
		case abi.ArgScalar:
			args[i].Scalar = a.Bytes
		case abi.ArgLocal:
			args[i].Local = uint64(a.Local)
		}
	}
	in.touchWritten(pr, &d)
	key := kernelKey{program: l.Program, name: d.Kernel}
	quiet := in.pipelines() && in.reuseQuiet(&d) && !in.mayCut(key, pr, r, args)
	if !quiet {
		// reuseBefore may read or write the device (captures, host-held
		// content), and this launch runs on its own: the launches
		// enqueued before it go first.
		in.syncLaunches()
	}
	rl, hit, err := in.reuseBefore(c, pr, &d, r)
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
	t, err := in.launchKernel(key, pr, k, r, args)
	in.reuseAfter(rl, t, err)
	dur := uint64(max(t.Nanoseconds(), 0))
	if err != nil {
		return 0, fmt.Errorf("launch %q: %w", d.Kernel, err)
	}
	in.sh.Stats.Launches.Add(1)
	in.sh.Stats.KernelNanos.Add(dur)
	in.sh.Kernels.Observe(dur, items)
	return dur, nil
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
// signature is not known for certain).
func (in *Instance) touchWritten(pr *program, d *abi.LaunchDesc) {
	kern, known := pr.reuseInfo().Kernel(d.Kernel)
	known = known && len(kern.Args) == len(d.Args)
	for i, a := range d.Args {
		if a.Kind == abi.ArgBuffer && (!known || kern.Args[i] == reuse.ArgOut) {
			in.touch(in.state.buffers[a.Handle])
		}
	}
}

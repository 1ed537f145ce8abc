package aggregator

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

// Result reuse (package reuse, docs/reuse.md). With a domain attached, an
// instance's buffers carry content digests; whole-buffer uploads stay in
// host memory until a launch misses; a launch whose key is in the domain's
// table is answered by pointing its written buffers at the recorded
// results, and the kernel never runs. Without a domain nothing here runs
// and every buffer's device copy is current.
//
// A buffer's content is, in order of precedence: host (immutable bytes not
// yet on the device: a pending upload or a shadow result), fill over the
// device copy (sequential partial uploads from offset 0, the way a guest
// driver splits a large upload, assembled until they cover the buffer and
// become a pending upload), or the device copy. producer, if set, is a
// recorded launch whose output the device copy still is and that has not
// been captured into the table yet.

// reuseState is an instance's reuse bookkeeping. dom is set from any
// goroutine; the rest belongs to the worker.
type reuseState struct {
	dom atomic.Pointer[reuse.Domain]
	cur *reuse.Domain // the domain the buffer digests were made under
}

// captureNsPerByte decides when a result is read back from the device
// only to capture it (right after its launch, or before its buffer is
// overwritten or freed): when the launch took at least this long per
// output byte. A read costs about 0.2 ns per byte here, so such a capture
// adds at most about 1% to the launch; cheaper results are captured only
// when the guest downloads them, and otherwise recomputed.
const captureNsPerByte = 20

// SetReuseDomain attaches the instance to a reuse domain; nil turns reuse
// off for it. Digests made under the previous domain are forgotten by the
// worker before its next command. It may be called at any time.
func (in *Instance) SetReuseDomain(d *reuse.Domain) {
	if old := in.state.rs.dom.Swap(d); old != d {
		if old != nil {
			old.Detach()
		}
		if d != nil {
			d.Attach()
		}
	}
}

// ReuseDomain returns the attached domain (nil: reuse off).
func (in *Instance) ReuseDomain() *reuse.Domain { return in.state.rs.dom.Load() }

// ReuseStats returns the instance's reuse counters (the domain's are in
// Domain.Stats).
func (in *Instance) ReuseStats() *reuse.Stats { return &in.sh.Reuse }

// reuseDomain returns the domain for the current command, forgetting
// digests if it changed.
func (in *Instance) reuseDomain() *reuse.Domain {
	rs := &in.state.rs
	d := rs.dom.Load()
	if d != rs.cur {
		for _, b := range in.state.buffers {
			b.known, b.lazy, b.repeat = false, nil, false
			b.producer = nil
		}
		rs.cur = d
	}
	return d
}

// materialise writes host-held content (a pending upload, a shadow
// result or an unfinished fill) to the device.
func (in *Instance) materialise(b *buffer) error {
	data, hostContent := b.host, true
	if data == nil {
		data, hostContent = b.fill[:b.filled], false
	}
	for off := uint64(0); off < uint64(len(data)); {
		n := min(uint64(len(data))-off, stagingChunk*16)
		chunk := data[off : off+n]
		at := off
		if err := in.run(in.copyWork(n), func() (time.Duration, error) {
			return 0, in.queue.Write(b.mem, at, chunk)
		}); err != nil {
			return fmt.Errorf("materialise buffer: %w", err)
		}
		off += n
	}
	if hostContent {
		b.keepSpare()
		b.host, b.hostUpload = nil, false
	} else if b.fill != nil {
		b.spare, b.fill, b.filled = b.fill, nil, 0
	}
	return nil
}

// keepSpare keeps a pending upload's bytes, which nothing else references,
// for the buffer's next whole upload: uploads then do not fault in fresh
// host memory each time.
func (b *buffer) keepSpare() {
	if b.host != nil && b.hostUpload {
		b.spare = b.host
	}
}

// dropHost forgets host-held content that is about to be replaced as a
// whole.
func (in *Instance) dropHost(b *buffer) {
	if b.host != nil && b.hostUpload {
		in.sh.Reuse.BytesSaved.Add(b.size)
		if d := in.state.rs.cur; d != nil {
			d.Stats.BytesSaved.Add(b.size)
		}
	}
	b.keepSpare()
	b.host, b.hostUpload = nil, false
	if b.fill != nil {
		b.spare, b.fill, b.filled = b.fill, nil, 0
	}
}

// takeSpare returns b.size bytes for new host content: the spare bytes of
// a former upload if they fit. The caller overwrites them, so nothing may
// still name them as content: b.lazy is forgotten.
func (b *buffer) takeSpare() []byte {
	data := b.spare
	b.spare, b.lazy = nil, nil
	if uint64(len(data)) != b.size {
		data = make([]byte, b.size)
	}
	return data
}

// settle is called before the device copy of b changes or goes away
// (and after an expensive launch): an uncaptured output it holds is
// captured if that is cheap next to recomputing it, else its entry is
// abandoned. After a capture b is named by its content digest.
func (in *Instance) settle(b *buffer, capture bool) {
	e, d := b.producer, b.prodDom
	b.producer, b.prodDom = nil, nil
	if e == nil || !d.Live(e) {
		return
	}
	if capture && e.DeviceTime >= time.Duration(b.size*captureNsPerByte) {
		data := make([]byte, b.size)
		err := in.run(in.copyWork(b.size), func() (time.Duration, error) {
			return 0, in.queue.Read(b.mem, 0, data)
		})
		if err == nil {
			if c, ok := d.Capture(e, b.outIdx, data); ok {
				b.digest = c
			}
			return
		}
	}
	d.Abandon(e)
}

// reuseCreated sets up a new buffer's reuse state. A fresh buffer holds
// zeros (gpu.Queue.Alloc clears it), so its digest is known in every
// domain without hashing anything: launches on fresh outputs (the GRU job
// pattern) can be keyed. What keeps launches that touch only fresh buffers
// cheap is the gate in reuseBefore: they are recorded only when their key
// repeats.
func (in *Instance) reuseCreated(b *buffer) {
	if d := in.reuseDomain(); d != nil {
		b.known, b.digest = true, reuse.Fresh(b.size)
	}
}

// contentDigest returns b's digest, hashing a whole upload's bytes the
// first time it is needed.
func (in *Instance) contentDigest(d *reuse.Domain, b *buffer) reuse.Digest {
	if b.lazy != nil {
		b.digest, b.lazy = d.Content(b.lazy), nil
	}
	return b.digest
}

// reuseFreed is called before b is released.
func (in *Instance) reuseFreed(b *buffer) {
	in.reuseDomain()
	in.settle(b, true)
	in.dropHost(b)
}

// fillSequential takes part of a partial upload into b's fill when it
// continues one from offset 0 (or starts one there) and reuse is on. It
// reports whether it took the bytes: then nothing is written to the
// device; when the fill covers the buffer it becomes a pending whole
// upload, named and reused like one.
func (in *Instance) fillSequential(dom *reuse.Domain, cp *abi.Copy, b *buffer, segs []segment) (bool, error) {
	if dom == nil || !(cp.Offset == 0 || b.fill != nil && cp.Offset == b.filled) {
		return false, nil
	}
	if cp.Offset == 0 {
		// A new fill: whatever the buffer holds stays below it on the
		// device until the fill covers it.
		in.settle(b, true)
		if err := in.materialise(b); err != nil { // also an earlier, unfinished fill
			return true, err
		}
		b.known, b.repeat = false, false
		b.fill, b.filled = b.takeSpare(), 0
	}
	if err := gather(in.mem, segs, b.fill[b.filled:b.filled+cp.Length]); err != nil {
		// The bytes of this part are unknown: what came before stays.
		return true, err
	}
	b.filled += cp.Length
	if b.filled == b.size {
		b.host, b.hostUpload = b.fill, true
		b.known, b.lazy = true, b.fill
		b.fill, b.filled = nil, 0
	}
	return true, nil
}

// reuseCopy serves a copy from or into host-held state when it can. It
// reports whether it did; otherwise the caller copies to or from the
// device, which reuseCopy has made current.
func (in *Instance) reuseCopy(cp *abi.Copy, b *buffer, segs []segment) (bool, error) {
	dom := in.reuseDomain()
	whole := cp.Offset == 0 && cp.Length == b.size
	if cp.ToDevice {
		if dom != nil && whole {
			in.settle(b, true)
			in.dropHost(b)
			data := b.takeSpare()
			b.repeat = false
			if err := gather(in.mem, segs, data); err != nil {
				// The device copy is older than the digest says.
				b.known = false
				return true, err
			}
			b.host, b.hostUpload = data, true
			// Hashed only if a launch gets past the sample filter
			// (reuseBefore); data stays unmodified until the next whole
			// upload takes it back from spare.
			b.known, b.lazy = true, data
			return true, nil
		}
		if took, err := in.fillSequential(dom, cp, b, segs); took {
			return true, err
		}
		// A partial write: the device copy must be whole first, and the
		// digest is unknown from now on.
		in.settle(b, true)
		if err := in.materialise(b); err != nil {
			return true, err
		}
		b.known, b.lazy, b.repeat = false, nil, false
		return false, nil
	}
	if b.fill != nil {
		// A read of a buffer being filled: the device copy must be whole.
		if err := in.materialise(b); err != nil {
			return true, err
		}
	}
	if data := b.host; data != nil {
		if in.stale() {
			return true, errStale
		}
		return true, scatter(in.mem, segs, data[cp.Offset:cp.Offset+cp.Length])
	}
	// A read of a recorded, uncaptured output from its start (whole, or
	// the first part of a download the guest driver splits) captures the
	// whole buffer: the guest reads it all, as a rule, and the table needs
	// all of it.
	if b.producer != nil && cp.Offset == 0 && b.prodDom.Live(b.producer) {
		data := make([]byte, b.size)
		if err := in.run(in.copyWork(b.size), func() (time.Duration, error) {
			return 0, in.queue.Read(b.mem, 0, data)
		}); err != nil {
			return true, fmt.Errorf("read buffer %d: %w", cp.Handle, err)
		}
		if in.stale() {
			return true, errStale
		}
		if c, ok := b.prodDom.Capture(b.producer, b.outIdx, data); ok {
			b.digest = c
		}
		b.producer, b.prodDom = nil, nil
		return true, scatter(in.mem, segs, data[:cp.Length])
	}
	return false, nil
}

// reuseLaunch is one launch's reuse decision.
type reuseLaunch struct {
	dom      *reuse.Domain
	eligible bool // key is set; the outputs will be named after it
	record   bool // the launch repeats: record it if it runs
	key      reuse.Key
	written  []int // indices of the first argument naming each written buffer
	bufs     []*buffer
}

// programInfo parses the program's signatures once.
func (p *program) reuseInfo() *reuse.Program {
	if p.info == nil {
		switch {
		case p.flags&abi.FlagIL != 0:
			p.info = &reuse.Program{Uncertain: "a SPIR-V module: no OpenCL C to read its signatures from"}
		case p.warned:
			p.info = &reuse.Program{Uncertain: "the build log has warnings"}
		default:
			p.info = reuse.ParseProgram(p.source, p.options)
		}
		p.digest = reuse.ProgramDigest(p.source, p.options)
	}
	return p.info
}

// reuseBefore runs before a launch executes. On a hit it has applied the
// recorded results and the caller must not run the kernel.
func (in *Instance) reuseBefore(c *abi.Command, pr *program, d *abi.LaunchDesc, r gpu.NDRange) (rl reuseLaunch, hit bool, err error) {
	rl.dom = in.reuseDomain()
	rl.bufs = make([]*buffer, len(d.Args))
	for i, a := range d.Args {
		if h, ok := a.BufferHandle(); ok {
			rl.bufs[i] = in.state.buffers[h] // checked by the caller
		}
	}
	if rl.dom == nil {
		// Reuse is off, but content held in host memory from before it
		// was turned off must reach the device.
		return rl, false, in.prepareRun(rl)
	}
	// Fast path (e.g. an in-place chain after its first step): no buffer
	// argument has a digest or host-held content, so the launch is no
	// candidate and there is nothing to settle, write or forget.
	idle := true
	for _, b := range rl.bufs {
		if b != nil && (b.known || b.host != nil || b.fill != nil || b.producer != nil) {
			idle = false
			break
		}
	}
	if idle {
		in.sh.Reuse.Skipped.Add(1)
		rl.dom.Stats.Skipped.Add(1)
		return rl, false, nil
	}
	info := pr.reuseInfo()
	kern, known := info.Kernel(d.Kernel)
	known = known && len(kern.Args) == len(d.Args)
	for i, b := range rl.bufs {
		if b == nil {
			continue
		}
		if !known || kern.Args[i] == reuse.ArgOut || d.Args[i].Kind == abi.ArgImage {
			if f := firstArg(rl.bufs, b); f == i || !containsArg(rl.written, rl.bufs, b) {
				rl.written = append(rl.written, f)
			}
		}
	}
	rl.eligible = known && kern.NoReuse == "" && c.Flags&abi.FlagNondeterministic == 0 &&
		pr.flags&abi.FlagNondeterministic == 0
	lazy := false
	for i, a := range d.Args {
		switch a.Kind {
		case abi.ArgScalar:
			rl.eligible = rl.eligible && kern.Args[i] == reuse.ArgScalar
		case abi.ArgLocal:
			rl.eligible = rl.eligible && kern.Args[i] == reuse.ArgLocal
		case abi.ArgBuffer:
			b := rl.bufs[i]
			rl.eligible = rl.eligible && b.known && kern.Args[i] != reuse.ArgScalar && kern.Args[i] != reuse.ArgLocal
			lazy = lazy || b.lazy != nil
			rl.record = rl.record || b.repeat
		default:
			// Images and samplers: reuse declines the launch (docs/reuse.md).
			rl.eligible = false
		}
	}
	if !rl.eligible {
		in.sh.Reuse.Skipped.Add(1)
		rl.dom.Stats.Skipped.Add(1)
		return rl, false, in.prepareRun(rl)
	}
	// The sample filter: while some input's digest would cost a pass over
	// its bytes, hash only if the launch's sample key (the key with
	// samples in place of those digests) was seen before. A launch whose
	// sample key is new has a new key too, so it can neither hit nor have
	// been seen: it runs unrecorded and its outputs' digests are unknown.
	// A repeated sample key is taken as the launch repeating: it is
	// recorded when it misses (the second occurrence pays, the third
	// hits). Launches whose digests are all known (chained, or fresh
	// buffers) skip the filter: their key costs no pass over data. They
	// are recorded only when the key itself repeats (Seen), or when an
	// input came from a launch that repeated (a chain whose first step
	// passed the filter): a stream of launches that never repeat (a new
	// scalar each time) then pays a key and a probe, never a record and
	// the capture or abandon that follows it.
	if lazy {
		sk := in.launchKey(rl.dom, pr, d, r, rl.bufs, func(b *buffer) reuse.Digest {
			if b.lazy != nil {
				return rl.dom.Sample(b.lazy)
			}
			return b.digest
		})
		if !rl.dom.Seen(sk) {
			rl.eligible = false
			in.sh.Reuse.Misses.Add(1)
			rl.dom.Stats.Misses.Add(1)
			return rl, false, in.prepareRun(rl)
		}
		rl.record = true
	}
	rl.key = in.launchKey(rl.dom, pr, d, r, rl.bufs, func(b *buffer) reuse.Digest { return in.contentDigest(rl.dom, b) })
	if e, ok := rl.dom.Probe(rl.key); ok {
		in.sh.Reuse.Hits.Add(1)
		in.sh.Reuse.DeviceNanos.Add(uint64(e.DeviceTime))
		for i := range e.Outputs {
			o := &e.Outputs[i]
			b := rl.bufs[o.Arg]
			b.producer, b.prodDom = nil, nil // its device copy keeps an older output; not captured
			in.dropHost(b)
			b.host, b.digest, b.known, b.lazy, b.repeat = o.Data(), o.Digest, true, nil, true
		}
		return rl, true, nil
	}
	in.sh.Reuse.Misses.Add(1)
	rl.record = rl.record || rl.dom.Seen(rl.key)
	return rl, false, in.prepareRun(rl)
}

// launchKey forms the key of launch d of pr over r, naming each buffer
// argument by digest(buffer).
func (in *Instance) launchKey(dom *reuse.Domain, pr *program, d *abi.LaunchDesc, r gpu.NDRange, bufs []*buffer, digest func(*buffer) reuse.Digest) reuse.Key {
	kb := reuse.NewKey(in.limits.DeviceName, pr.digest, d.Kernel)
	kb.Range(r.Dims, r.Offset, r.Global, r.Local)
	for i, a := range d.Args {
		switch a.Kind {
		case abi.ArgScalar:
			kb.Scalar(a.Bytes)
		case abi.ArgLocal:
			kb.Local(uint64(a.Local))
		case abi.ArgBuffer:
			b := bufs[i]
			kb.Buffer(b.size, b.flags, digest(b), firstArg(bufs, b))
		}
	}
	return dom.Key(kb)
}

// prepareRun makes the device ready for a launch that runs: the outputs
// about to be overwritten are captured or given up, and every argument's
// device copy is made current.
func (in *Instance) prepareRun(rl reuseLaunch) error {
	for _, i := range rl.written {
		in.settle(rl.bufs[i], true)
	}
	for _, b := range rl.bufs {
		if b != nil {
			if err := in.materialise(b); err != nil {
				return err
			}
		}
	}
	return nil
}

// firstArg is the index of the first argument naming b (launches have
// few arguments: a scan costs less than a map).
func firstArg(bufs []*buffer, b *buffer) int {
	for i, x := range bufs {
		if x == b {
			return i
		}
	}
	return -1
}

func containsArg(idx []int, bufs []*buffer, b *buffer) bool {
	for _, i := range idx {
		if bufs[i] == b {
			return true
		}
	}
	return false
}

// reuseAfter runs after a launch executed on the device.
func (in *Instance) reuseAfter(rl reuseLaunch, t time.Duration, err error) {
	if rl.dom == nil {
		return
	}
	if err != nil || !rl.eligible {
		for _, i := range rl.written {
			rl.bufs[i].known, rl.bufs[i].lazy, rl.bufs[i].repeat = false, nil, false
		}
		return
	}
	// The outputs are named after the key whether or not the launch is
	// recorded (the name is a function of the key), so that chains stay
	// keyed without hashing device data.
	var e *reuse.Entry
	if rl.record {
		outs := make([]reuse.Output, len(rl.written))
		for j, i := range rl.written {
			outs[j] = reuse.Output{Arg: i, Size: rl.bufs[i].size}
		}
		if e = rl.dom.Record(rl.key, t, outs); e != nil {
			in.sh.Reuse.Recorded.Add(1)
		}
	}
	for j, i := range rl.written {
		b := rl.bufs[i]
		b.digest, b.known, b.lazy, b.repeat = rl.dom.Output(rl.key, i), true, nil, rl.record
		if e != nil {
			b.producer, b.prodDom, b.outIdx = e, rl.dom, j
			in.settleEarly(b)
		}
	}
}

// settleEarly captures an expensive launch's output at once, so that
// chains of expensive kernels hit even where the guest never downloads
// the intermediate buffers.
func (in *Instance) settleEarly(b *buffer) {
	if e := b.producer; e.DeviceTime >= time.Duration(b.size*captureNsPerByte) {
		in.settle(b, true)
	}
}

// reuseServed completes a launch answered from the table (err nil) or one
// whose preparation failed. A hit reports zero device time.
func (in *Instance) reuseServed(kernel string, err error) (uint64, error) {
	if err != nil {
		return 0, fmt.Errorf("launch %q: %w", kernel, err)
	}
	in.sh.Stats.Launches.Add(1)
	return 0, nil
}

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
// yet on the device: a pending upload or a shadow result), zero (defined
// as zeros, not yet written to the device), or the device copy. producer,
// if set, is a recorded launch whose output the device copy still is and
// that has not been captured into the table yet.

// reuseState is an instance's reuse bookkeeping. dom is set from any
// goroutine; the rest belongs to the worker.
type reuseState struct {
	dom   atomic.Pointer[reuse.Domain]
	cur   *reuse.Domain // the domain the buffer digests were made under
	stats reuse.Stats
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
func (in *Instance) ReuseStats() *reuse.Stats { return &in.state.rs.stats }

// reuseDomain returns the domain for the current command, forgetting
// digests if it changed.
func (in *Instance) reuseDomain() *reuse.Domain {
	rs := &in.state.rs
	d := rs.dom.Load()
	if d != rs.cur {
		for _, b := range in.state.buffers {
			b.known, b.lazy = false, nil
			b.producer = nil
		}
		rs.cur = d
	}
	return d
}

// materialise writes host-held content to the device.
func (in *Instance) materialise(b *buffer) error {
	data := b.host
	if data == nil {
		return nil
	}
	for off := uint64(0); off < b.size; {
		n := min(b.size-off, stagingChunk*16)
		chunk := data[off : off+n]
		at := off
		if err := in.dev.run(in.ctx, in, in.copyWork(n), func() (time.Duration, error) {
			return 0, in.queue.Write(b.mem, at, chunk)
		}); err != nil {
			return fmt.Errorf("materialise buffer: %w", err)
		}
		off += n
	}
	b.keepSpare()
	b.host, b.hostUpload = nil, false
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

// dropHost forgets host-held content that is about to be replaced.
func (in *Instance) dropHost(b *buffer) {
	if b.host != nil && b.hostUpload {
		in.state.rs.stats.BytesSaved.Add(b.size)
		if d := in.state.rs.cur; d != nil {
			d.Stats.BytesSaved.Add(b.size)
		}
	}
	b.keepSpare()
	b.host, b.hostUpload = nil, false
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
		err := in.dev.run(in.ctx, in, in.copyWork(b.size), func() (time.Duration, error) {
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
// zeros (gpu.Queue.Alloc clears it). In a shared domain its digest is
// known from the start, so launches on fresh outputs can hit across
// instances; in a private domain it stays unknown, which keeps launches
// that touch only fresh and unhashed buffers on the cheap path.
func (in *Instance) reuseCreated(b *buffer) {
	if d := in.reuseDomain(); d != nil && d.Shared() {
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
			data := b.spare
			b.spare = nil
			if uint64(len(data)) != b.size {
				data = make([]byte, b.size)
			}
			b.lazy = nil // data may be its bytes
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
		// A partial write: the device copy must be whole first, and the
		// digest is unknown from now on.
		in.settle(b, true)
		if err := in.materialise(b); err != nil {
			return true, err
		}
		b.known, b.lazy = false, nil
		return false, nil
	}
	if data := b.host; data != nil {
		if in.stale() {
			return true, errStale
		}
		return true, scatter(in.mem, segs, data[cp.Offset:cp.Offset+cp.Length])
	}
	if b.producer != nil && whole && b.prodDom.Live(b.producer) {
		data := make([]byte, b.size)
		if err := in.dev.run(in.ctx, in, in.copyWork(b.size), func() (time.Duration, error) {
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
		return true, scatter(in.mem, segs, data)
	}
	return false, nil
}

// reuseLaunch is one launch's reuse decision.
type reuseLaunch struct {
	dom      *reuse.Domain
	eligible bool
	key      reuse.Key
	written  []int // indices of the first argument naming each written buffer
	bufs     []*buffer
}

// programInfo parses the program's signatures once.
func (p *program) reuseInfo() *reuse.Program {
	if p.info == nil {
		p.info = reuse.ParseProgram(p.source, p.options)
		if p.warned {
			p.info = &reuse.Program{Uncertain: "the build log has warnings"}
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
		if a.Kind == abi.ArgBuffer {
			rl.bufs[i] = in.state.buffers[a.Handle] // checked by the caller
		}
	}
	if rl.dom == nil {
		return rl, false, nil
	}
	// Fast path (e.g. an in-place chain after its first step): no buffer
	// argument has a digest or host-held content, so the launch is no
	// candidate and there is nothing to settle, write or forget.
	idle := true
	for _, b := range rl.bufs {
		if b != nil && (b.known || b.host != nil || b.producer != nil) {
			idle = false
			break
		}
	}
	if idle {
		in.state.rs.stats.Skipped.Add(1)
		rl.dom.Stats.Skipped.Add(1)
		return rl, false, nil
	}
	info := pr.reuseInfo()
	kern, known := info.Kernel(d.Kernel)
	known = known && len(kern.Args) == len(d.Args)
	first := make(map[*buffer]int)
	for i, b := range rl.bufs {
		if b == nil {
			continue
		}
		if _, seen := first[b]; !seen {
			first[b] = i
		}
		if !known || kern.Args[i] == reuse.ArgOut {
			if first[b] == i || !containsArg(rl.written, rl.bufs, b) {
				rl.written = append(rl.written, first[b])
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
		}
	}
	if !rl.eligible {
		in.state.rs.stats.Skipped.Add(1)
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
	// buffers) skip the filter: their key costs no pass over data.
	if lazy {
		sk := in.launchKey(pr, d, r, rl.bufs, first, func(b *buffer) reuse.Digest {
			if b.lazy != nil {
				return rl.dom.Sample(b.lazy)
			}
			return b.digest
		})
		if !rl.dom.Seen(sk) {
			rl.eligible = false
			in.state.rs.stats.Misses.Add(1)
			rl.dom.Stats.Misses.Add(1)
			return rl, false, in.prepareRun(rl)
		}
	}
	rl.key = in.launchKey(pr, d, r, rl.bufs, first, func(b *buffer) reuse.Digest { return in.contentDigest(rl.dom, b) })
	if e, ok := rl.dom.Probe(rl.key); ok {
		in.state.rs.stats.Hits.Add(1)
		in.state.rs.stats.DeviceNanos.Add(uint64(e.DeviceTime))
		for i := range e.Outputs {
			o := &e.Outputs[i]
			b := rl.bufs[o.Arg]
			b.producer, b.prodDom = nil, nil // its device copy keeps an older output; not captured
			in.dropHost(b)
			b.host, b.digest, b.known, b.lazy = o.Data(), o.Digest, true, nil
		}
		return rl, true, nil
	}
	in.state.rs.stats.Misses.Add(1)
	return rl, false, in.prepareRun(rl)
}

// launchKey forms the key of launch d of pr over r, naming each buffer
// argument by digest(buffer).
func (in *Instance) launchKey(pr *program, d *abi.LaunchDesc, r gpu.NDRange, bufs []*buffer, first map[*buffer]int, digest func(*buffer) reuse.Digest) reuse.Key {
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
			kb.Buffer(b.size, b.flags, digest(b), first[b])
		}
	}
	return kb.Sum()
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
			rl.bufs[i].known, rl.bufs[i].lazy = false, nil
		}
		return
	}
	outs := make([]reuse.Output, len(rl.written))
	for j, i := range rl.written {
		outs[j] = reuse.Output{Arg: i, Size: rl.bufs[i].size}
	}
	e := rl.dom.Record(rl.key, t, outs)
	if e != nil {
		in.state.rs.stats.Recorded.Add(1)
	}
	for j, i := range rl.written {
		b := rl.bufs[i]
		b.digest, b.known, b.lazy = reuse.OutputDigest(rl.key, i), true, nil
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

// reuseCopied completes a copy that reuseCopy served.
func (in *Instance) reuseCopied(cp *abi.Copy, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	if cp.ToDevice {
		in.stats.BytesToDev.Add(cp.Length)
	} else {
		in.stats.BytesFromDev.Add(cp.Length)
	}
	return cp.Length, nil
}

// reuseServed completes a launch answered from the table (err nil) or one
// whose preparation failed. A hit reports zero device time.
func (in *Instance) reuseServed(kernel string, err error) (uint64, error) {
	if err != nil {
		return 0, fmt.Errorf("launch %q: %w", kernel, err)
	}
	in.stats.Launches.Add(1)
	return 0, nil
}

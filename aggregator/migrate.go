package aggregator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/reuse"
)

// Live migration (docs/migration.md). Extraction and reinjection run as
// tasks on the instance's worker goroutine, between two commands, so they
// see the handle tables exactly as the ring left them and never race a
// command. Nothing here knows the migration stream's bytes: the caller
// (a worker process) turns what a StateSink receives into stream records
// and stream records into Inject calls.

// migrateChunk is the most device memory one extraction task reads: the
// guest's commands run between two chunks during pre-copy.
const migrateChunk = 4 << 20

// ProgramState is one program as the migration carries it: source and
// options, rebuilt on the destination's device.
type ProgramState struct {
	Handle  uint32
	Flags   uint16
	Source  string
	Options string
}

// BufferState is one buffer's identity; its content follows as data.
type BufferState struct {
	Handle uint32
	Flags  uint32
	Size   uint64
}

// RingState is the ring's programming and positions, and the latched
// error: what the guest's driver relies on across a migration.
type RingState struct {
	Enabled         bool
	Base, ComplBase uint64
	Slots           uint32
	Head, Tail      uint32
	Completed       uint32
	ErrStatus       uint32
	ErrCount        uint32
}

// StateSink receives an instance's state during one extraction round.
type StateSink interface {
	Program(p ProgramState) error
	ProgramFree(handle uint32) error
	Buffer(b BufferState) error
	// BufferData is a chunk of a buffer's content; data is valid only
	// during the call.
	BufferData(handle uint32, offset uint64, data []byte) error
	BufferFree(handle uint32) error
	Ring(r RingState) error
	// Context switches what follows to device context c.ID (ABI 1.5)
	// of the instance, or back to the default ring with ID 0; with
	// Destroyed, the context is gone and nothing of it follows.
	Context(c ContextState) error
}

// ContextState is a device context as a migration carries it: its id,
// its ring's geometry, tail shadow and memory limit, or that it is gone.
type ContextState struct {
	ID        uint32
	Destroyed bool
	Slots     uint32
	Ring      uint64
	Compl     uint64
	Shadow    uint64
	MemLimit  uint64
}

// RoundStats says what one extraction round sent.
type RoundStats struct {
	Programs, ProgramsFreed int
	Buffers, BuffersFreed   int
	BufferBytes             uint64 // bytes of buffer content sent
	Redirty                 int    // buffers written while they were being sent (sent again next round)
	Frozen                  time.Time
}

// migState is what the last rounds sent, to send only what changed since.
type migState struct {
	progs map[uint32]*program
	bufs  map[uint32]sentBuffer
}

type sentBuffer struct {
	b   *buffer
	gen uint64 // the buffer's generation when its content was sent
}

// touch marks b's content as changed (dirty for the next migration round).
func (in *Instance) touch(b *buffer) {
	in.gen++
	b.gen = in.gen
}

// onWorker runs f on the instance's worker goroutine between two commands
// and waits for it.
func (in *Instance) onWorker(ctx context.Context, f func()) error {
	done := make(chan struct{})
	t := func() { f(); close(done) }
	select {
	case in.tasks <- t:
	case <-in.done:
		return fmt.Errorf("instance %s: %w", in.id, ErrClosed)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-in.done:
		return fmt.Errorf("instance %s: %w", in.id, ErrClosed)
	}
}

// Freeze stops the ring from fetching; doorbells are still taken (the
// tail moves on, and the commands wait in guest RAM). The command being
// executed, if any, completes first: Freeze returns after it.
func (in *Instance) Freeze(ctx context.Context) error {
	in.mu.Lock()
	in.frozen = true
	in.idlePollWordLocked() // before guest RAM is copied (notify.go)
	in.mu.Unlock()
	return in.onWorker(ctx, func() {})
}

// Thaw lets a frozen ring fetch again (after a migration was rolled back,
// or on the destination once the guest's memory is attached).
func (in *Instance) Thaw() {
	in.mu.Lock()
	in.frozen = false
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
	in.ctxMu.Lock()
	for _, c := range in.contexts {
		c.Thaw()
	}
	in.ctxMu.Unlock()
}

// Frozen reports whether the ring is frozen.
func (in *Instance) Frozen() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.frozen
}

// ExtractRound sends to sink the state that changed since the previous
// round (everything, the first time). Buffer content is read one chunk per
// task, so the guest keeps computing between chunks; a buffer written
// while it was being read is sent again next round. With final the ring
// is frozen first and its state sent last: the round is then exact.
//
// An instance's device contexts follow its default ring's records, each
// after a Context record that names it, then a Context record of id 0;
// contexts gone since the previous round are sent as destroyed. With
// final the default ring is frozen first, so no context is made or
// destroyed meanwhile, and each context is frozen before its own round.
func (in *Instance) ExtractRound(ctx context.Context, sink StateSink, final bool) (RoundStats, error) {
	st, err := in.extractRound(ctx, sink, final)
	if err != nil || in.parent != nil {
		return st, err
	}
	in.ctxMu.Lock()
	live := make(map[uint32]*Instance, len(in.contexts))
	for id, c := range in.contexts {
		live[id] = c
	}
	in.ctxMu.Unlock()
	if len(live) == 0 && len(in.ctxSent) == 0 {
		return st, nil
	}
	if in.ctxSent == nil {
		in.ctxSent = map[uint32]*Instance{}
	}
	for id, c := range in.ctxSent {
		if live[id] != c {
			if err := sink.Context(ContextState{ID: id, Destroyed: true}); err != nil {
				return st, fmt.Errorf("migrate %s: %w", in.id, err)
			}
			delete(in.ctxSent, id)
		}
	}
	ids := slices.Sorted(maps.Keys(live))
	for _, id := range ids {
		c := live[id]
		c.mu.Lock()
		ring := c.ring
		c.mu.Unlock()
		if err := sink.Context(ContextState{ID: id, Slots: ring.Slots, Ring: ring.Base, Compl: ring.ComplBase,
			Shadow: c.ctxShadow, MemLimit: c.memLimit}); err != nil {
			return st, fmt.Errorf("migrate %s: %w", in.id, err)
		}
		cst, err := c.extractRound(ctx, sink, final)
		st.add(cst)
		if err != nil {
			return st, fmt.Errorf("context %d: %w", id, err)
		}
		in.ctxSent[id] = c
	}
	if err := sink.Context(ContextState{}); err != nil {
		return st, fmt.Errorf("migrate %s: %w", in.id, err)
	}
	return st, nil
}

// add counts what a context's round sent into the instance's.
func (st *RoundStats) add(o RoundStats) {
	st.Programs += o.Programs
	st.ProgramsFreed += o.ProgramsFreed
	st.Buffers += o.Buffers
	st.BuffersFreed += o.BuffersFreed
	st.BufferBytes += o.BufferBytes
	st.Redirty += o.Redirty
}

// extractRound is one ring's round of ExtractRound.
func (in *Instance) extractRound(ctx context.Context, sink StateSink, final bool) (RoundStats, error) {
	var st RoundStats
	if final {
		if err := in.Freeze(ctx); err != nil {
			return st, err
		}
		st.Frozen = time.Now()
	}
	type pending struct {
		b   *buffer
		h   uint32
		gen uint64
	}
	var todo []pending
	var err error
	// One task: the handle tables, programs, frees and buffer identities.
	if werr := in.onWorker(ctx, func() {
		ms := in.mig
		if ms == nil {
			ms = &migState{progs: map[uint32]*program{}, bufs: map[uint32]sentBuffer{}}
			in.mig = ms
		}
		for h, p := range ms.progs {
			if in.state.programs[h] != p {
				if err = sink.ProgramFree(h); err != nil {
					return
				}
				delete(ms.progs, h)
				st.ProgramsFreed++
			}
		}
		for h, p := range in.state.programs {
			if ms.progs[h] == p {
				continue
			}
			if err = sink.Program(ProgramState{Handle: h, Flags: p.flags, Source: p.source, Options: p.options}); err != nil {
				return
			}
			ms.progs[h] = p
			st.Programs++
		}
		for h, s := range ms.bufs {
			if in.state.buffers[h] != s.b {
				if err = sink.BufferFree(h); err != nil {
					return
				}
				delete(ms.bufs, h)
				st.BuffersFreed++
			}
		}
		for h, b := range in.state.buffers {
			s, sent := ms.bufs[h]
			if sent && s.gen == b.gen {
				continue
			}
			if !sent {
				if err = sink.Buffer(BufferState{Handle: h, Flags: b.flags, Size: b.size}); err != nil {
					return
				}
				ms.bufs[h] = sentBuffer{b: b}
			}
			todo = append(todo, pending{b: b, h: h, gen: b.gen})
		}
	}); werr != nil {
		return st, werr
	}
	if err != nil {
		return st, fmt.Errorf("migrate %s: %w", in.id, err)
	}
	chunk := make([]byte, min(migrateChunk, maxSize(todo, func(p pending) uint64 { return p.b.size })))
	for _, p := range todo {
		whole := true
		for off := uint64(0); off < p.b.size; {
			n := min(p.b.size-off, migrateChunk)
			gone := false
			if werr := in.onWorker(ctx, func() {
				if in.state.buffers[p.h] != p.b {
					gone = true // freed meanwhile: the next round says so
					return
				}
				if p.b.gen != p.gen {
					whole = false
				}
				if err = in.materialise(p.b); err != nil {
					return
				}
				data := chunk[:n]
				at := off
				if err = in.run(in.copyWork(n), func() (time.Duration, error) { return 0, in.queue.Read(p.b.mem, at, data) }); err != nil {
					err = fmt.Errorf("read buffer %d: %w", p.h, err)
					return
				}
				err = sink.BufferData(p.h, off, data)
			}); werr != nil {
				return st, werr
			}
			if err != nil {
				return st, fmt.Errorf("migrate %s: %w", in.id, err)
			}
			if gone {
				whole = false
				break
			}
			st.BufferBytes += n
			off += n
		}
		if err := in.onWorker(ctx, func() {
			if in.state.buffers[p.h] == p.b {
				if whole && p.b.gen == p.gen {
					in.mig.bufs[p.h] = sentBuffer{b: p.b, gen: p.gen}
					st.Buffers++
				} else {
					st.Redirty++
				}
			}
		}); err != nil {
			return st, err
		}
	}
	if final {
		if st.Redirty != 0 {
			return st, fmt.Errorf("migrate %s: %d buffers changed in a frozen round", in.id, st.Redirty)
		}
		in.mu.Lock()
		r := RingState{Enabled: in.enabled, Base: in.ring.Base, ComplBase: in.ring.ComplBase, Slots: in.ring.Slots,
			Head: in.head, Tail: in.tail, Completed: in.completed}
		in.mu.Unlock()
		r.ErrStatus, r.ErrCount = in.sh.ErrStatus.Load(), in.sh.ErrCount.Load()
		if err := sink.Ring(r); err != nil {
			return st, fmt.Errorf("migrate %s: %w", in.id, err)
		}
	}
	return st, nil
}

// ResetMigration forgets what earlier rounds sent (a migration ended or
// was abandoned): the next round sends everything.
func (in *Instance) ResetMigration(ctx context.Context) error {
	in.ctxMu.Lock()
	ctxs := slices.Collect(maps.Values(in.contexts))
	in.ctxMu.Unlock()
	for _, c := range ctxs {
		if err := c.ResetMigration(ctx); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	}
	in.ctxSent = nil
	return in.onWorker(ctx, func() { in.mig = nil })
}

func maxSize[T any](xs []T, f func(T) uint64) uint64 {
	m := uint64(0)
	for _, x := range xs {
		m = max(m, f(x))
	}
	return m
}

// Reinjection. The instance must be frozen (a fresh instance is, once
// PrepareInject has run) so the guest cannot run commands against a half
// built state; every value is checked as if a guest had sent it.

// PrepareInject freezes a fresh instance that is to receive migrated state.
func (in *Instance) PrepareInject(ctx context.Context) error {
	return in.Freeze(ctx)
}

// InjectProgram builds a program from its source on this device, under
// the instance's program quota.
func (in *Instance) InjectProgram(ctx context.Context, p ProgramState) error {
	var err error
	werr := in.onWorker(ctx, func() {
		if old, ok := in.state.programs[p.Handle]; ok {
			in.dropProgram(p.Handle, old)
		}
		if p.Flags&^abi.FlagsMask != 0 {
			err = abi.Errorf(abi.StatusInvalidArgument, "program %d: flags %#x", p.Handle, p.Flags)
			return
		}
		var blog string
		if blog, err = in.buildProgram(p.Handle, p.Flags, []byte(p.Source), []byte(p.Options)); err != nil && blog != "" {
			err = fmt.Errorf("%w; log: %.512s", err, blog)
		}
	})
	if werr != nil {
		return werr
	}
	return err
}

// InjectProgramFree frees a program.
func (in *Instance) InjectProgramFree(ctx context.Context, handle uint32) error {
	var err error
	werr := in.onWorker(ctx, func() {
		p, ok := in.state.programs[handle]
		if !ok {
			err = abi.Errorf(abi.StatusNotFound, "program %d", handle)
			return
		}
		in.dropProgram(handle, p)
	})
	if werr != nil {
		return werr
	}
	return err
}

// InjectBuffer creates a buffer (replacing one of the same handle), under
// the instance's memory quota.
func (in *Instance) InjectBuffer(ctx context.Context, b BufferState) error {
	var err error
	werr := in.onWorker(ctx, func() {
		if old, ok := in.state.buffers[b.Handle]; ok {
			in.dropBuffer(b.Handle, old)
		}
		if b.Flags&^abi.BufferFlagsMask != 0 {
			err = abi.Errorf(abi.StatusInvalidArgument, "buffer %d: flags %#x", b.Handle, b.Flags)
			return
		}
		_, err = in.bufferCreate(nil, &abi.BufferCreate{Handle: b.Handle, Flags: b.Flags, Size: b.Size})
	})
	if werr != nil {
		return werr
	}
	return err
}

// InjectBufferData writes a chunk of a buffer's content.
func (in *Instance) InjectBufferData(ctx context.Context, handle uint32, offset uint64, data []byte) error {
	var err error
	werr := in.onWorker(ctx, func() {
		b, ok := in.state.buffers[handle]
		switch {
		case !ok:
			err = abi.Errorf(abi.StatusNotFound, "buffer %d", handle)
		case offset > b.size || uint64(len(data)) > b.size-offset:
			err = abi.Errorf(abi.StatusInvalidArgument, "data %d+%d outside buffer %d of %d bytes", offset, len(data), handle, b.size)
		default:
			in.forgetContent(b)
			err = in.run(in.copyWork(uint64(len(data))), func() (time.Duration, error) { return 0, in.queue.Write(b.mem, offset, data) })
		}
	})
	if werr != nil {
		return werr
	}
	return err
}

// InjectBufferFree frees a buffer.
func (in *Instance) InjectBufferFree(ctx context.Context, handle uint32) error {
	var err error
	werr := in.onWorker(ctx, func() {
		b, ok := in.state.buffers[handle]
		if !ok {
			err = abi.Errorf(abi.StatusNotFound, "buffer %d", handle)
			return
		}
		in.dropBuffer(handle, b)
	})
	if werr != nil {
		return werr
	}
	return err
}

// InjectRing restores the ring's programming and positions. The ring stays
// frozen until Thaw; its memory is checked then, when the guest's RAM is
// attached.
func (in *Instance) InjectRing(ctx context.Context, r RingState) error {
	if r.Enabled {
		if r.Slots == 0 || r.Slots > abi.MaxRingSlots || r.Slots&(r.Slots-1) != 0 {
			return abi.Errorf(abi.StatusRingConfig, "ring of %d slots", r.Slots)
		}
		if r.Base%abi.CommandSize != 0 || r.ComplBase%abi.ComplSize != 0 ||
			overlaps(r.Base, uint64(r.Slots)*abi.CommandSize, r.ComplBase, uint64(r.Slots)*abi.ComplSize) {
			return abi.Errorf(abi.StatusRingConfig, "ring %#x, completions %#x", r.Base, r.ComplBase)
		}
		// Extraction happens between commands: every fetched command has
		// completed, and at most Slots are published.
		if r.Head != r.Completed || r.Tail-r.Completed > r.Slots {
			return abi.Errorf(abi.StatusRingConfig, "ring positions head %d tail %d completed %d of %d slots", r.Head, r.Tail, r.Completed, r.Slots)
		}
	}
	st := abi.Status(r.ErrStatus)
	if int(st) >= abi.NumStatus {
		return abi.Errorf(abi.StatusInvalidArgument, "latched status %d", r.ErrStatus)
	}
	return in.onWorker(ctx, func() {
		in.mu.Lock()
		in.epoch++
		in.enabled = r.Enabled
		if r.Enabled {
			in.ring = RingConfig{Base: r.Base, ComplBase: r.ComplBase, Slots: r.Slots}
			in.head, in.tail, in.completed = r.Head, r.Tail, r.Completed
		} else {
			in.ring = RingConfig{}
			in.head, in.tail, in.completed = 0, 0, 0
		}
		in.sh.Tail.Store(in.tail)
		in.publishLocked()
		in.mu.Unlock()
		in.sh.ErrStatus.Store(uint32(st))
		in.sh.ErrCount.Store(r.ErrCount)
	})
}

// InjectContext applies a Context record to an instance receiving
// migrated state: it makes device context c.ID (frozen, its ring set by
// the Ring record that follows), finds it when an earlier round made it,
// or with Destroyed ends it. It returns the instance the records that
// follow go to: the context, or for ID 0 and Destroyed the instance.
// Every value is checked as a context-create's.
func (in *Instance) InjectContext(ctx context.Context, c ContextState) (*Instance, error) {
	if in.parent != nil {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "context record inside context %d's records", in.ctxID)
	}
	if c.ID == 0 {
		return in, nil
	}
	if c.ID > in.maxContexts {
		return nil, abi.Errorf(abi.StatusInvalidArgument, "context %d, the instance offers %d", c.ID, in.maxContexts)
	}
	in.ctxMu.Lock()
	cur := in.contexts[c.ID]
	if c.Destroyed && cur != nil {
		delete(in.contexts, c.ID)
		in.publishContextsLocked()
	}
	in.ctxMu.Unlock()
	if c.Destroyed {
		if cur != nil {
			cur.Reset()
			cur.closeContext()
		}
		return in, nil
	}
	if cur != nil {
		return cur, nil
	}
	// The geometry as a context-create's payload checks it.
	cc := abi.ContextCreate{ID: c.ID, Slots: c.Slots, Ring: c.Ring, Compl: c.Compl, Shadow: c.Shadow, MemLimit: c.MemLimit}
	if err := cc.Check(); err != nil {
		return nil, fmt.Errorf("migrated context: %w", err)
	}
	return in.newContext(&cc, false)
}

// dropBuffer frees a buffer (reinjection replaces or frees it).
func (in *Instance) dropBuffer(h uint32, b *buffer) {
	in.reuseFreed(b)
	delete(in.state.buffers, h)
	in.state.objects.Add(-1)
	b.mem.Release()
	in.uncharge(b.size)
	in.unreserve(b.size)
}

// dropProgram frees a program.
func (in *Instance) dropProgram(h uint32, p *program) {
	delete(in.state.programs, h)
	in.state.objects.Add(-1)
	in.sh.ProgramBytes.Add(^(p.charged - 1))
	p.release()
}

// forgetContent drops what result reuse knew of b's content: it is being
// replaced by bytes reuse has not seen.
func (in *Instance) forgetContent(b *buffer) {
	in.reuseDomain()
	in.settle(b, false)
	in.dropHost(b)
	b.known, b.lazy, b.repeat = false, nil, false
	b.digest = reuse.Digest{}
}

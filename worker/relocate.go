package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/worker/wire"
)

// ErrRelocating is returned when an instance is already being relocated.
var ErrRelocating = errors.New("instance is already being relocated")

// Relocation says where Relocate moves an instance's device state.
type Relocation struct {
	// Device is the physical device the state goes to: another one (a
	// move), or the same one (a suspension: out to host memory and back).
	Device int
	// Limits, when set, replace the instance's quotas on the new device
	// (a reallocation to another profile).
	Limits *Limits
	// Hold, when set, is called once the state is out of the old worker,
	// in this process's memory, with its size in bytes: it returns when
	// the new device may take it (a suspension: when room appears), or
	// an error to put the state back where it was.
	Hold func(ctx context.Context, stateBytes uint64) error
}

// RelocateStats says what a relocation did.
type RelocateStats struct {
	From, To   int
	StateBytes uint64        // the state's streams, in bytes: pre-copy and final round
	FinalBytes uint64        // of which the final round (ring frozen)
	Stopped    time.Duration // ring frozen: from the freeze to the thaw
	Held       time.Duration // of Stopped, spent in Hold
	RolledBack bool          // the state went back to From
}

// Relocator is implemented by a Backend whose device state can move to
// another device of this daemon while the VM runs (docs/overcommit.md).
type Relocator interface {
	Relocate(ctx context.Context, r Relocation) (RelocateStats, error)
}

var _ Relocator = (*procInstance)(nil)

// AsRelocator returns b's Relocator, or ErrNotMigratable (an instance in
// vgpud's own process).
func AsRelocator(b Backend) (Relocator, error) {
	r, ok := b.(Relocator)
	if !ok {
		return nil, ErrNotMigratable
	}
	return r, nil
}

// ringView is what the guest reads of the ring while its state is between
// two workers.
type ringView struct {
	enabled   bool
	head      uint32
	done      uint32
	err       abi.Status
	errCount  uint32
	relocated bool
}

// viewing returns the ring view while the instance is between workers.
func (in *procInstance) viewing() (ringView, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.view, in.moving != nil && in.view.relocated
}

// Relocate moves the instance's device state to r.Device while the VM
// runs: a pre-copy round reads the whole state (buffers, programs as
// source) while the guest computes, and the programs are built ahead on
// r.Device's worker; then the ring is frozen between two commands (a
// command the guest publishes meanwhile waits in guest RAM), a final
// round takes what changed and the ring positions, the old worker frees
// the state, and a worker of the instance's domain on r.Device rebuilds
// it from both rounds; then the ring thaws and the last doorbell is
// replayed. The
// register file keeps answering throughout. If the new device refuses
// the state (a program that does not build there, no room), it goes back
// to the old device; if that fails too the instance is lost (its guest
// reads StatusDeviceLost and may reset).
func (in *procInstance) Relocate(ctx context.Context, r Relocation) (st RelocateStats, err error) {
	if r.Device < 0 || r.Device >= len(in.pool.cfg.Devices) {
		return st, fmt.Errorf("relocate %s: device %d of %d", in.cfg.ID, r.Device, len(in.pool.cfg.Devices))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in.mu.Lock()
	switch {
	case in.closed:
		in.mu.Unlock()
		return st, aggregator.ErrClosed
	case in.moving != nil:
		in.mu.Unlock()
		return st, fmt.Errorf("relocate %s: %w", in.cfg.ID, ErrRelocating)
	case in.proc == nil:
		in.mu.Unlock()
		return st, abi.Errorf(abi.StatusDeviceLost, "relocate %s: %v: %s", in.cfg.ID, ErrLost, in.why)
	}
	moving := make(chan struct{})
	in.moving, in.stopMove = moving, cancel
	pr, slot, from := in.proc, in.slot, in.cfg.Device
	oldLimits := in.limits
	in.mu.Unlock()
	st.From, st.To = from, r.Device
	// The worker on the new device starts (a process, an OpenCL context)
	// before the ring freezes, not while the guest waits.
	in.mu.Lock()
	domain := in.cfg.Domain
	in.mu.Unlock()
	target, err := in.pool.processFor(key{domain, r.Device})
	if err != nil {
		return st, fmt.Errorf("relocate %s: start a worker on device %d: %w", in.cfg.ID, r.Device, err)
	}
	target.mu.Lock()
	target.pinned++
	target.mu.Unlock()
	defer func() {
		target.mu.Lock()
		target.pinned--
		target.mu.Unlock()
		in.pool.retire(target) // if nothing landed there
	}()
	defer func() {
		in.mu.Lock()
		in.moving, in.stopMove, in.view, in.bellsLive = nil, nil, ringView{}, false
		in.mu.Unlock()
		close(moving)
	}()
	log := in.pool.log.With("instance", in.cfg.ID, "from", from, "to", r.Device)

	// Pre-copy: the whole state, read while the guest computes; its
	// programs are built on the new device's worker at once, so that
	// their rebuild during the move hits that worker's compiler cache.
	in.mu.Lock()
	in.bellsLive = true // doorbells reach the old worker until the freeze
	in.mu.Unlock()
	var pre bytes.Buffer
	pre.Grow(int(min(in.pool.mem[from].Held(in.cfg.ID)+in.sh.ProgramBytes.Load(), 1<<34)) + 1<<20)
	if _, err := in.extractFrom(ctx, pr, slot, false, &pre); err != nil {
		return st, fmt.Errorf("relocate %s: pre-copy: %w", in.cfg.ID, err)
	}
	if err := in.prebuild(ctx, r.Device, pre.Bytes()); err != nil {
		log.Warn("relocation: programs not built ahead on the new device (they are built during the move)", "err", err)
	}

	// Out of the old worker: the ring frozen, what changed since.
	in.bellMu.Lock()
	in.mu.Lock()
	in.bellsLive = false
	in.mu.Unlock()
	in.bellMu.Unlock()
	if err := in.freezeOn(ctx, pr, slot); err != nil {
		in.liveBells()
		return st, fmt.Errorf("relocate %s: freeze: %w", in.cfg.ID, err)
	}
	frozen := time.Now()
	var final bytes.Buffer
	if _, err := in.extractFrom(ctx, pr, slot, true, &final); err != nil {
		in.liveBells()
		in.thawOn(pr, slot)
		return st, fmt.Errorf("relocate %s: %w", in.cfg.ID, err)
	}
	st.FinalBytes = uint64(final.Len())
	st.StateBytes = uint64(pre.Len() + final.Len())
	stats := in.sh.Stats.Copy()
	errSt, errCount := in.sh.Error()
	in.mu.Lock()
	in.view = ringView{enabled: in.sh.Enabled.Load() == 1, head: in.sh.Head.Load(), done: in.sh.Done.Load(),
		err: errSt, errCount: errCount, relocated: true}
	in.mu.Unlock()
	if err := in.leave(pr, slot, pr == target); err != nil {
		// The old worker still holds the state: go on there.
		in.liveBells()
		in.thawOn(pr, slot)
		return st, fmt.Errorf("relocate %s: leave device %d: %w", in.cfg.ID, from, err)
	}

	// Into the new one.
	land := func(dev int, lim Limits) error {
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			return aggregator.ErrClosed
		}
		in.cfg.Device, in.limits = dev, lim
		in.mu.Unlock()
		in.pool.schedLimits(dev, in.cfg.ID, in.cfg.Domain, lim)
		if err := in.attach(); err != nil {
			return err
		}
		npr, nslot, err := in.current()
		if err != nil {
			return err
		}
		err = in.freezeOn(ctx, npr, nslot)
		if err == nil {
			err = in.injectInto(ctx, npr, nslot, bytes.NewReader(pre.Bytes()))
		}
		if err == nil {
			err = in.injectInto(ctx, npr, nslot, bytes.NewReader(final.Bytes()))
		}
		if err == nil {
			return nil
		}
		in.leave(npr, nslot, false) // refused: nothing of it stays there
		return err
	}
	lim := oldLimits
	if r.Limits != nil {
		lim = *r.Limits
	}
	var landErr error
	if r.Hold != nil {
		held := time.Now()
		landErr = r.Hold(ctx, st.StateBytes)
		st.Held = time.Since(held)
	}
	if landErr == nil {
		landErr = land(r.Device, lim)
	}
	if landErr != nil {
		in.mu.Lock()
		closed := in.closed
		in.mu.Unlock()
		if closed { // Close ended it: nothing to go back to
			return st, fmt.Errorf("relocate %s: %w (%w)", in.cfg.ID, aggregator.ErrClosed, landErr)
		}
	}
	if landErr != nil {
		log.Warn("relocation refused where it was going: back to the old device", "err", landErr)
		st.RolledBack, st.To = true, from
		// Going back must not be cut short by the caller's context
		// (it may be what ended), only by the instance's Close.
		ctx = context.WithoutCancel(ctx)
		if err := land(from, oldLimits); err != nil {
			in.mu.Lock()
			in.proc, in.lost, in.why = nil, true, "relocation failed: "+err.Error()
			in.mu.Unlock()
			in.sh.Enabled.Store(0)
			in.sh.Latch(abi.StatusDeviceLost)
			log.Error("relocation: the state could not go back: the instance lost its device context", "err", err)
			if in.cfg.Notify != nil {
				in.cfg.Notify(in.sh.Done.Load() - 1)
			}
			return st, fmt.Errorf("relocate %s: %w; back to device %d: %w", in.cfg.ID, landErr, from, err)
		}
	}
	if from != st.To {
		in.pool.scheds[from].Remove(in.cfg.ID)
	}
	// Counters go on from where they were; the guest's last doorbell is
	// rung again (those rung meanwhile reached nobody).
	in.sh.Stats.Add(stats)
	npr, nslot, err := in.current()
	if err == nil {
		err = in.liveBells()
	}
	if err == nil {
		err = in.thawOn(npr, nslot)
	}
	st.Stopped = time.Since(frozen)
	if err != nil {
		return st, fmt.Errorf("relocate %s: thaw: %w", in.cfg.ID, err)
	}
	log.Info("instance relocated", "to", st.To, "state_bytes", st.StateBytes, "stopped", st.Stopped, "held", st.Held, "rolled_back", st.RolledBack)
	if st.RolledBack {
		return st, fmt.Errorf("relocate %s to device %d: %w", in.cfg.ID, r.Device, landErr)
	}
	return st, nil
}

// current returns the instance's worker and slot, not waiting for a
// relocation (Relocate's own use).
func (in *procInstance) current() (*process, uint32, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, 0, aggregator.ErrClosed
	}
	if in.proc == nil {
		return nil, 0, abi.Errorf(abi.StatusDeviceLost, "instance %s: %v: %s", in.cfg.ID, ErrLost, in.why)
	}
	return in.proc, in.slot, nil
}

// leave removes the instance from worker pr (freeing its device state
// there) and forgets what it held on that device; the worker stops if it
// serves no one else, unless keep.
func (in *procInstance) leave(pr *process, slot uint32, keep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
	_, err := pr.call(ctx, &wire.Remove{Slot: slot})
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		pr.kill(CauseWatchdog, fmt.Sprintf("did not remove instance %s within %v", in.cfg.ID, stopGrace))
		err = nil
	}
	if errors.Is(err, ErrLost) {
		err = nil
	}
	if err != nil {
		return err
	}
	pr.mu.Lock()
	delete(pr.slots, slot)
	pr.mu.Unlock()
	in.mu.Lock()
	if in.proc == pr && in.slot == slot {
		in.proc = nil
	}
	in.mu.Unlock()
	if !keep {
		in.pool.retire(pr)
	}
	in.pool.mem[pr.key.device].Forget(in.cfg.ID)
	return nil
}

// liveBells lets doorbells reach the instance's worker again (the one it
// landed on, or the old one after a failure), the register file reads its
// page again, and rings the last doorbell recorded meanwhile.
func (in *procInstance) liveBells() error {
	in.bellMu.Lock()
	defer in.bellMu.Unlock()
	in.mu.Lock()
	in.bellsLive, in.view = true, ringView{}
	in.mu.Unlock()
	return in.replayBell()
}

// replayBell rings the guest's last doorbell again on the instance's new
// worker, if it may be one the old worker never applied: a kick always
// (the worker reads the tail from guest RAM), a tail only when it lies
// ahead of the restored ring's tail within a ring's reach (a stale one
// would read as an overflow).
func (in *procInstance) replayBell() error {
	if p := in.ctxPending.Swap(0); p != 0 {
		in.sh.CtxKicks.Or(p)
		in.bell.Signal()
	}
	b := in.lastBell.Load()
	switch {
	case b&bellBit == 0:
		return nil
	case b&kickBit != 0:
		return in.ring(true, b&^(kickBit|bellBit))
	}
	t, done, tail := uint32(b), in.sh.Done.Load(), in.sh.Tail.Load()
	if in.sh.Enabled.Load() != 1 || t-done > abi.MaxRingSlots || t-done <= tail-done {
		return nil
	}
	return in.ring(false, uint64(t))
}

// prebuild builds the programs of a pre-copy stream on device dev's
// worker of the instance's domain, in a scratch instance that is removed
// at once: the worker's compiler cache then holds them when the move
// builds them again. Best effort.
func (in *procInstance) prebuild(ctx context.Context, dev int, pre []byte) error {
	var progs bytes.Buffer
	w := stream.NewWriter(&progs)
	r := stream.NewReader(bytes.NewReader(pre))
	n := 0
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("pre-copy stream: %w", err)
		}
		if p, ok := rec.(*stream.Program); ok {
			if err := w.Write(p); err != nil {
				return err
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := w.Close(); err != nil {
		return err
	}
	in.mu.Lock()
	cfg := InstanceConfig{ID: in.cfg.ID + "~prebuild", Device: dev, Domain: in.cfg.Domain, Shared: in.cfg.Shared, Limits: in.limits}
	in.mu.Unlock()
	scratch, err := newProcInstance(in.pool, cfg)
	if err != nil {
		return err
	}
	defer scratch.Close()
	if err := scratch.attach(); err != nil {
		return err
	}
	if err := scratch.Freeze(ctx); err != nil {
		return err
	}
	return scratch.Inject(ctx, &progs)
}

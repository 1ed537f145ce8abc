package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/worker/wire"
)

// ErrReallocating is returned when an instance is already being reallocated.
var ErrReallocating = errors.New("instance is already being reallocated")

// ReallocTarget says where Realloc moves an instance's device state.
type ReallocTarget struct {
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

// ReallocStats says what a reallocation did.
type ReallocStats struct {
	From, To   int
	StateBytes uint64        // the state's streams, in bytes: pre-copy and final round
	FinalBytes uint64        // of which the final round (ring frozen)
	Stopped    time.Duration // ring frozen: from the freeze to the thaw
	Held       time.Duration // of Stopped, spent in Hold
	RolledBack bool          // the state went back to From
}

// Reallocator is implemented by a Backend whose device state can move to
// another device of this daemon while the VM runs (docs/overcommit.md).
type Reallocator interface {
	Realloc(ctx context.Context, r ReallocTarget) (ReallocStats, error)
}

var _ Reallocator = (*procInstance)(nil)

// AsReallocator returns b's Reallocator, or ErrNotMigratable (an instance in
// vgpud's own process).
func AsReallocator(b Backend) (Reallocator, error) {
	r, ok := b.(Reallocator)
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

// Realloc moves the instance's device state to r.Device while the VM
// runs: a pre-copy round reads the whole state (buffers, programs as
// source) while the guest computes, and the programs are built ahead on
// r.Device's worker; then the ring is frozen between two commands (a
// command the guest publishes meanwhile waits in guest RAM), a final
// round takes what changed and the ring positions, the old worker frees
// the state, and a worker of the instance's domain on r.Device rebuilds
// it from both rounds; then the ring thaws and the last doorbell is
// replayed. The register file keeps answering throughout. If the new
// device refuses the state (a program that does not build there, no
// room), it goes back to the old device; if that fails too the instance
// is lost (its guest reads StatusDeviceLost and may reset).
//
// It runs as steps (reallocation), each of which pushes its undo when it
// succeeds: a failure unwinds in one place, in reverse.
func (in *procInstance) Realloc(ctx context.Context, r ReallocTarget) (ReallocStats, error) {
	if r.Device < 0 || r.Device >= len(in.pool.cfg.Devices) {
		return ReallocStats{}, fmt.Errorf("relocate %s: device %d of %d", in.cfg.ID, r.Device, len(in.pool.cfg.Devices))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := &reallocation{in: in, r: r}
	defer m.undo.run() // whatever a failure left to unwind
	if err := m.begin(cancel); err != nil {
		return m.st, err
	}
	m.log = in.pool.log.With("instance", in.cfg.ID, "from", m.from, "to", r.Device)
	for _, step := range []func(context.Context) error{m.startTarget, m.precopy, m.freeze, m.extractFinal, m.leaveOld} {
		if err := step(ctx); err != nil {
			return m.st, fmt.Errorf("relocate %s: %w", in.cfg.ID, err)
		}
	}
	// The state has left the old worker: from here a failure puts it
	// back there (land), not the steps' undo.
	landErr, err := m.land(ctx)
	if err != nil {
		return m.st, fmt.Errorf("relocate %s: %w", in.cfg.ID, err)
	}
	if err := m.thaw(); err != nil {
		return m.st, fmt.Errorf("relocate %s: thaw: %w", in.cfg.ID, err)
	}
	// The message is the operator's event instance.relocated (eventlog).
	m.log.Info("instance relocated", "to", m.st.To, "state_bytes", m.st.StateBytes, "stopped", m.st.Stopped, "held", m.st.Held, "rolled_back", m.st.RolledBack)
	if m.st.RolledBack {
		return m.st, fmt.Errorf("relocate %s to device %d: %w", in.cfg.ID, r.Device, landErr)
	}
	return m.st, nil
}

// undoStack is what a reallocation's steps leave to unwind, run in
// reverse when Realloc returns: the end of the reallocation itself
// (begin's, startTarget's), whatever its outcome, and the undo of a step
// that a later one did not make final (freeze's, until the state left
// the old worker).
type undoStack []func()

// push adds f and returns its index, for drop.
func (u *undoStack) push(f func()) int {
	*u = append(*u, f)
	return len(*u) - 1
}

// drop forgets the undo at index i: its step became final.
func (u *undoStack) drop(i int) { (*u)[i] = nil }

// run runs every undo pushed and not dropped, last first, and forgets
// them.
func (u *undoStack) run() {
	for i := len(*u) - 1; i >= 0; i-- {
		if f := (*u)[i]; f != nil {
			f()
		}
	}
	*u = nil
}

// reallocation is one run of Realloc: what its steps found and made.
type reallocation struct {
	in   *procInstance
	r    ReallocTarget
	log  *slog.Logger
	st   ReallocStats
	undo undoStack

	pr        *process // the old worker and the instance's slot there
	slot      uint32
	from      int
	oldLimits Limits
	target    *process // the new device's worker, pinned while the state moves

	thawOld    int // the undo of the freeze on the old worker
	pre, final bytes.Buffer
	stats      aggregator.StatsCopy // the counters when the ring froze
	frozen     time.Time
}

// begin marks the instance as moving (undo: not moving, and Realloc's
// waiters released), or says why it cannot move.
func (m *reallocation) begin(cancel context.CancelFunc) error {
	in := m.in
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.closed:
		return aggregator.ErrClosed
	case in.moving != nil:
		return fmt.Errorf("relocate %s: %w", in.cfg.ID, ErrReallocating)
	case in.proc == nil:
		return abi.Errorf(abi.StatusDeviceLost, "relocate %s: %v: %s", in.cfg.ID, ErrLost, in.why)
	}
	moving := make(chan struct{})
	in.moving, in.stopMove = moving, cancel
	m.pr, m.slot, m.from, m.oldLimits = in.proc, in.slot, in.cfg.Device, in.limits
	m.st.From, m.st.To = m.from, m.r.Device
	m.undo.push(func() {
		in.mu.Lock()
		in.moving, in.stopMove, in.view, in.bellsLive = nil, nil, ringView{}, false
		in.mu.Unlock()
		in.routeKicks()
		close(moving)
	})
	return nil
}

// startTarget starts the worker on the new device (a process, an OpenCL
// context) before the ring freezes, not while the guest waits, and pins
// it (undo: unpinned, and retired if nothing landed there).
func (m *reallocation) startTarget(context.Context) error {
	in := m.in
	target, err := in.pool.processFor(key{in.domain(), m.r.Device})
	if err != nil {
		return fmt.Errorf("start a worker on device %d: %w", m.r.Device, err)
	}
	m.target = target
	target.pin(1)
	m.undo.push(func() {
		target.pin(-1)
		in.pool.retire(target)
	})
	return nil
}

// precopy reads the whole state while the guest computes; its programs
// are built on the new device's worker at once, so that their rebuild
// during the move hits that worker's compiler cache. Doorbells reach the
// old worker until the freeze.
func (m *reallocation) precopy(ctx context.Context) error {
	in := m.in
	in.setBellsLive(true)
	in.routeKicks()
	m.pre.Grow(int(min(in.pool.mem[m.from].Held(in.cfg.ID)+in.sh.ProgramBytes.Load(), 1<<34)) + 1<<20)
	if _, err := in.extractFrom(ctx, m.pr, m.slot, false, &m.pre); err != nil {
		return fmt.Errorf("pre-copy: %w", err)
	}
	if err := in.prebuild(ctx, m.r.Device, m.pre.Bytes()); err != nil {
		m.log.Warn("reallocation: programs not built ahead on the new device (they are built during the move)", "err", err)
	}
	return nil
}

// freeze stops doorbells and freezes the ring on the old worker (undo:
// doorbells live again, the old worker thawed: it still holds the
// state).
func (m *reallocation) freeze(ctx context.Context) error {
	in := m.in
	in.bellMu.Lock()
	in.setBellsLive(false)
	in.bellMu.Unlock()
	in.routeKicks() // this process takes the kicks the worker took: recorded, replayed where the state lands
	if err := in.freezeOn(ctx, m.pr, m.slot); err != nil {
		in.liveBells()
		return fmt.Errorf("freeze: %w", err)
	}
	m.frozen = time.Now()
	m.thawOld = m.undo.push(func() {
		in.liveBells()
		in.thawOn(m.pr, m.slot)
	})
	return nil
}

// extractFinal takes what changed since the pre-copy and the ring's
// positions, and shows the guest the ring as it was while the state is
// between workers.
func (m *reallocation) extractFinal(ctx context.Context) error {
	in := m.in
	if _, err := in.extractFrom(ctx, m.pr, m.slot, true, &m.final); err != nil {
		return err
	}
	m.st.FinalBytes = uint64(m.final.Len())
	m.st.StateBytes = uint64(m.pre.Len() + m.final.Len())
	m.stats = in.sh.Stats.Copy()
	errSt, errCount := in.sh.Error()
	in.setView(ringView{enabled: in.sh.Enabled.Load() == 1, head: in.sh.Head.Load(), done: in.sh.Done.Load(),
		err: errSt, errCount: errCount, relocated: true})
	return nil
}

// leaveOld frees the state on the old worker. On success the freeze's
// undo no longer applies: the old worker holds nothing to thaw.
func (m *reallocation) leaveOld(context.Context) error {
	if err := m.in.leave(m.pr, m.slot, m.pr == m.target); err != nil {
		// The old worker still holds the state: go on there.
		return fmt.Errorf("leave device %d: %w", m.from, err)
	}
	m.undo.drop(m.thawOld)
	return nil
}

// land puts the state on the new device (after Hold, if any), or, if it
// is refused there, back on the old one. It returns the refusal (nil:
// landed where it was going) and, when the reallocation cannot go on to
// thaw, why: the instance was closed meanwhile (aggregator.ErrClosed),
// or the state could not go back either and the instance is lost.
func (m *reallocation) land(ctx context.Context) (refused, err error) {
	in := m.in
	lim := m.oldLimits
	if m.r.Limits != nil {
		lim = *m.r.Limits
	}
	var landErr error
	if m.r.Hold != nil {
		held := time.Now()
		landErr = m.r.Hold(ctx, m.st.StateBytes)
		m.st.Held = time.Since(held)
	}
	if landErr == nil {
		landErr = m.landOn(ctx, m.r.Device, lim)
	}
	if landErr == nil {
		return nil, nil
	}
	if in.isClosed() { // Close ended it: nothing to go back to
		return landErr, fmt.Errorf("%w (%w)", aggregator.ErrClosed, landErr)
	}
	m.log.Warn("reallocation refused where it was going: back to the old device", "err", landErr)
	m.st.RolledBack, m.st.To = true, m.from
	// Going back must not be cut short by the caller's context (it may be
	// what ended), only by the instance's Close.
	if err := m.landOn(context.WithoutCancel(ctx), m.from, m.oldLimits); err != nil {
		in.loseDevice("reallocation failed: " + err.Error())
		m.log.Error("reallocation: the state could not go back: the instance lost its device context", "err", err)
		return landErr, fmt.Errorf("%w; back to device %d: %w", landErr, m.from, err)
	}
	return landErr, nil
}

// landOn attaches the instance to its domain's worker on dev with lim and
// rebuilds the state there from both rounds, frozen; a worker that
// refuses it keeps nothing of it.
func (m *reallocation) landOn(ctx context.Context, dev int, lim Limits) error {
	in := m.in
	if err := in.moveTo(dev, lim); err != nil {
		return err
	}
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
		err = in.injectInto(ctx, npr, nslot, bytes.NewReader(m.pre.Bytes()))
	}
	if err == nil {
		err = in.injectInto(ctx, npr, nslot, bytes.NewReader(m.final.Bytes()))
	}
	if err != nil {
		in.leave(npr, nslot, false) // refused: nothing of it stays there
	}
	return err
}

// thaw lets the ring run where the state landed: the old device's
// scheduler forgets the instance, counters go on from where they were,
// and the guest's last doorbell is rung again (those rung meanwhile
// reached nobody).
func (m *reallocation) thaw() error {
	in := m.in
	if m.from != m.st.To {
		in.pool.scheds[m.from].Remove(in.cfg.ID)
	}
	in.sh.Stats.Add(m.stats)
	npr, nslot, err := in.current()
	if err == nil {
		err = in.liveBells()
	}
	if err == nil {
		err = in.thawOn(npr, nslot)
	}
	m.st.Stopped = time.Since(m.frozen)
	return err
}

// domain is the instance's trust domain.
func (in *procInstance) domain() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cfg.Domain
}

// isClosed reports whether Close has run.
func (in *procInstance) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}

// setBellsLive says whether doorbells go to the instance's worker.
func (in *procInstance) setBellsLive(v bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.bellsLive = v
}

// setView sets what the guest reads of the ring while the state moves.
func (in *procInstance) setView(v ringView) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.view = v
}

// moveTo makes dev and lim the instance's device and limits, unless it
// was closed.
func (in *procInstance) moveTo(dev int, lim Limits) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return aggregator.ErrClosed
	}
	in.cfg.Device, in.limits = dev, lim
	return nil
}

// loseDevice marks the instance lost for why: its guest reads
// StatusDeviceLost and is woken to look.
func (in *procInstance) loseDevice(why string) {
	in.mu.Lock()
	in.proc, in.lost, in.why = nil, true, why
	in.mu.Unlock()
	in.sh.Enabled.Store(0)
	in.sh.Latch(abi.StatusDeviceLost)
	in.routeKicks()
	if in.cfg.Notify != nil {
		in.cfg.Notify(in.sh.Done.Load() - 1)
	}
}

// pin counts a reallocation that holds the worker (delta +1 or -1): a
// pinned worker is not retired.
func (pr *process) pin(delta int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.pinned += delta
}

// current returns the instance's worker and slot, not waiting for a
// reallocation (Realloc's own use).
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
	in.mu.Lock()
	in.bellsLive, in.view = true, ringView{}
	in.mu.Unlock()
	err := in.replayBell()
	in.bellMu.Unlock()
	in.routeKicks() // outside bellMu: this process's watcher, which routeKicks stops, takes it
	return err
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
		return in.replay(true, b&^(kickBit|bellBit))
	}
	t, done, tail := uint32(b), in.sh.Done.Load(), in.sh.Tail.Load()
	if in.sh.Enabled.Load() != 1 || t-done > abi.MaxRingSlots || t-done <= tail-done {
		return nil
	}
	return in.replay(false, uint64(t))
}

// replay rings a replayed doorbell with a signal whatever the page's
// PollUntil says: it may be the old worker's, still ahead of the clock,
// while the new worker's loop does not poll.
func (in *procInstance) replay(kick bool, v uint64) error {
	err := in.ring(kick, v)
	in.sh.Signals.Add(1)
	in.bell.Signal()
	return err
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

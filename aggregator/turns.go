package aggregator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// Arbiter grants device turns: the physical device's scheduler
// (sched.Scheduler), in this process or across the boundary of a worker
// process. Acquire waits for a turn of instance id whose expected device
// time is cost (0: unknown) and returns the turn's slice budget (how long
// a slice of a long launch may hold the device now; 0: run it whole) and
// release, to be called exactly once when the turn ends, with the device
// time measured during it and the number of launch slices to count.
type Arbiter interface {
	Acquire(ctx context.Context, id string, cost time.Duration) (sliceBudget time.Duration, release func(dev time.Duration, slices int), err error)
}

// CompileWatcher is implemented by an Arbiter that also watches program
// builds (a worker process's arbiter: its main process bounds how long a
// build may take, the compiler running guest-supplied source). Compiling
// is called before a build; done, after it.
type CompileWatcher interface {
	Compiling(ctx context.Context, id string) (done func(), err error)
}

// MemoryArbiter is implemented by an Arbiter that also accounts for the
// physical device's memory across instances (a worker process's arbiter:
// its main process keeps the device's ledger, docs/overcommit.md). The
// instance's quota is checked first; Reserve is then asked before every
// allocation, and Unreserve told after every free.
type MemoryArbiter interface {
	// Reserve waits for n bytes of the device's memory for instance id.
	// It returns nil when granted, an error wrapping ErrRelocate when the
	// instance is about to be moved instead (the command must be left
	// unfetched), or an error carrying abi.StatusOutOfResources.
	Reserve(ctx context.Context, id string, n uint64) error
	// Unreserve gives n bytes back.
	Unreserve(id string, n uint64)
}

// TurnTaker is implemented by an Arbiter whose scheduler parks free
// turns in the instance page (a worker process's arbiter: the main
// process's scheduler, sched/offer.go). Took tells it that the instance
// took parked turn gen from its page (Shared.TakeTurn), without waiting,
// and returns the function that gives the turn back (as Acquire's
// release). The turn has no slice budget: one is parked only at an
// instance that runs alone on its device.
type TurnTaker interface {
	Took(id string, gen uint64) (release func(dev time.Duration, slices int))
}

// ErrRelocate is wrapped by a MemoryArbiter's Reserve when the instance is
// being moved (to another device, or out to host memory until its device
// has room): the ring leaves the command that asked unfetched and
// freezes, and the command runs again where the instance lands.
var ErrRelocate = errors.New("the instance is being moved: the command waits in the ring")

// reserve asks the device's memory arbiter, if any, for n bytes.
func (in *Instance) reserve(n uint64) error {
	ma, ok := in.dev.arb.(MemoryArbiter)
	if !ok {
		return nil
	}
	// A reservation may wait for other instances to free memory, which
	// they do in turns of their own.
	in.dropTurn()
	if err := ma.Reserve(in.ctx, in.schedID, n); err != nil {
		// A context's command cannot wait in its ring for a move: the
		// move is the instance's, asked by its default ring's commands.
		if errors.Is(err, ErrRelocate) && in.parent == nil {
			return err
		}
		return abi.Errorf(abi.StatusOutOfResources, "device memory for %d bytes: %v", n, err)
	}
	return nil
}

// unreserve gives n bytes back to the device's memory arbiter, if any.
func (in *Instance) unreserve(n uint64) {
	if ma, ok := in.dev.arb.(MemoryArbiter); ok && n > 0 {
		ma.Unreserve(in.schedID, n)
	}
}

// work describes a request for a turn.
type work struct {
	cost  time.Duration // expected device time; 0: unknown
	bytes uint64        // bytes copied, for a copy (its speed is learnt)
}

// run executes f while holding a device turn. f returns the device time
// it measured; 0 stands for the wall time f took (copies, allocations).
func (in *Instance) run(w work, f func() (time.Duration, error)) error {
	_, release, err := in.acquire(w.cost)
	if err != nil {
		return fmt.Errorf("wait for device turn: %w", err)
	}
	start := time.Now()
	dev, err := f()
	if dev <= 0 {
		dev = time.Since(start)
	}
	release(dev, 0)
	if err == nil && w.bytes > 0 {
		in.lengths.copied(w.bytes, dev)
	}
	return err
}

// Many commands per turn.
//
// A turn costs a request and a grant: in a worker process a round trip to
// the main process, two cross-process wake-ups (docs/worker.md). When the
// guest has queued several commands, the instance keeps the turn it was
// granted for the first and runs the next ones under it, for at most
// hold of wall time from the grant (DefaultTurnHold, or the slice budget
// of the grant when that is shorter), and gives it back as soon as its
// ring has nothing more to fetch, before anything that may wait on other
// instances (a memory reservation, a build), before a launch it cuts in
// slices, and before the worker's tasks. The scheduler is told the device
// time of every command run under the turn when it ends, so shares are
// charged as before; hold is below the scheduler's shortest run before
// preemption (sched's minRun, 2 ms), so a waiting instance is never
// preempted-for by a kept turn, it waits at most hold more.

// DefaultTurnHold is how long a turn is kept across commands by default.
const DefaultTurnHold = 500 * time.Microsecond

// Renewing a kept turn (issue 42).
//
// A lone command on a free device still paid a turn's round trip each
// time the hold ran out. Where the main process says when another
// instance waits (the instance page's TurnWanted, in a worker: SetPoll's
// instances), a kept turn whose hold ran out is renewed for another hold
// while nobody waits and the turn has been kept for less than DefaultMaxKeep
// (and a quarter of the instance's kernel limit, so that the watchdog
// never mistakes a kept turn for a hung kernel): an instance working
// alone on its device asks for a turn once per DefaultMaxKeep, not per command,
// and gives the turn back within a command (or a poll) of another
// instance asking. The scheduler is told the device time of every
// command and poll as before.

// DefaultMaxKeep bounds how long a turn is kept across renewals.
const DefaultMaxKeep = 20 * time.Millisecond

// heldTurn is a device turn kept across commands.
type heldTurn struct {
	release func(dev time.Duration, slices int)
	budget  time.Duration // the grant's slice budget
	granted time.Time     // when the arbiter granted it
	until   time.Time     // no command starts under it after this
	dev     time.Duration // device time of the commands run under it
	slices  int
}

// acquire returns a device turn for work of expected cost: the kept turn
// while it lasts, else a new one from the arbiter. done ends the
// caller's use of it with the device time measured and the launch slices
// to count; the turn itself goes back to the arbiter when dropTurn is
// called or when done finds its time spent.
func (in *Instance) acquire(cost time.Duration) (budget time.Duration, done func(dev time.Duration, slices int), err error) {
	if h := in.held; h != nil {
		now := time.Now()
		if !now.Before(h.until) || cost >= h.until.Sub(now) {
			in.renew(h, now, cost)
		}
		if now.Before(h.until) && cost < h.until.Sub(now) {
			return h.budget, in.usedTurn(h), nil
		}
		in.dropTurn()
	}
	budget, release, err := in.newTurn(cost)
	if err != nil {
		return 0, nil, err
	}
	in.sh.Turns.Add(1)
	if in.hold <= 0 {
		return budget, release, nil
	}
	hold := in.hold
	if budget > 0 {
		hold = min(hold, budget)
	}
	now := time.Now()
	h := &heldTurn{release: release, budget: budget, granted: now, until: now.Add(hold)}
	in.held = h
	return budget, in.usedTurn(h), nil
}

// newTurn takes the free turn parked in the instance page, if there is
// one and the arbiter parks them, else asks the arbiter for a turn.
func (in *Instance) newTurn(cost time.Duration) (time.Duration, func(time.Duration, int), error) {
	if !in.renews() {
		return in.dev.arb.Acquire(in.ctx, in.schedID, cost)
	}
	sh := in.page().sh
	sh.TurnWanted.Store(0)
	if t, ok := in.dev.arb.(TurnTaker); ok {
		if gen, ok := sh.TakeTurn(); ok {
			return 0, t.Took(in.schedID, gen), nil
		}
	}
	return in.dev.arb.Acquire(in.ctx, in.schedID, cost)
}

// usedTurn is the done of one use of h: it adds the use's device time and
// slices, and gives the turn back once its time is spent.
func (in *Instance) usedTurn(h *heldTurn) func(time.Duration, int) {
	var once bool
	return func(dev time.Duration, slices int) {
		if once {
			return
		}
		once = true
		h.dev += max(dev, 0)
		h.slices += slices
		if in.held == h && !in.keep(h, time.Now()) {
			in.dropTurn()
		}
	}
}

// renews reports whether the instance's kept turns may be renewed: its
// main process tells it when others wait (SetPoll's instances).
func (in *Instance) renews() bool {
	p := in.page()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.poll != nil
}

// renew extends h, whose hold has run out (or is about to), by another
// hold from now, or past the expected cost of the work about to run
// under it, if nobody waits for the device and h has been kept for less
// than its maxKeep and a quarter of the kernel limit.
func (in *Instance) renew(h *heldTurn, now time.Time, cost time.Duration) {
	if !in.renews() {
		return
	}
	sh := in.page().sh
	limit := in.maxKeep
	if k, _ := sh.TimeLimits(); k > 0 {
		limit = min(limit, k/4)
	}
	hold := in.hold
	if h.budget > 0 {
		hold = min(hold, h.budget)
	}
	hold = max(hold, cost+1)
	if sh.TurnWanted.Load() != 0 || now.Add(hold).Sub(h.granted) > limit {
		return
	}
	h.until = now.Add(hold)
	sh.Renewals.Add(1)
}

// keep reports whether h may still be kept at now, renewing it when its
// hold has run out.
func (in *Instance) keep(h *heldTurn, now time.Time) bool {
	if now.Before(h.until) {
		return true
	}
	in.renew(h, now, 0)
	return now.Before(h.until)
}

// dropTurn completes the launches enqueued under the kept turn, if any,
// and gives it back.
func (in *Instance) dropTurn() {
	in.syncLaunches()
	h := in.held
	if h == nil {
		return
	}
	in.held = nil
	h.release(h.dev, h.slices)
}

// kernelKey names a kernel of one instance; the zero key stands for the
// instance's copies (no kernel has an empty name).
type kernelKey struct {
	program uint32
	name    string
}

// copyKey keeps the copy speed among an instance's kernel averages.
var copyKey = kernelKey{}

// kernelAvg is the moving average of one kernel's launches.
type kernelAvg struct {
	nanos     float64 // whole launch
	nsPerItem float64
}

// maxKernelAverages bounds the kernel-length table of one instance.
const maxKernelAverages = 256

// ewmaShift: averages move by 1/2^ewmaShift of each new sample.
const ewmaShift = 2

func ewma(avg, x float64) float64 {
	if avg == 0 {
		return x
	}
	return avg + (x-avg)/(1<<ewmaShift)
}

// lengths is an instance's knowledge of how long its work takes: per
// kernel, and the speed of its copies. The scheduler sees it as each
// request's expected cost; the worker goroutine alone uses it.
type lengths struct {
	kernels map[kernelKey]*kernelAvg
}

// of returns the average for k, creating it.
func (l *lengths) of(k kernelKey) *kernelAvg {
	if a, ok := l.kernels[k]; ok {
		return a
	}
	if l.kernels == nil || len(l.kernels) >= maxKernelAverages {
		l.kernels = make(map[kernelKey]*kernelAvg)
	}
	a := &kernelAvg{}
	l.kernels[k] = a
	return a
}

// launched records a launch of k over items work-items that took total.
func (l *lengths) launched(k kernelKey, items uint64, total time.Duration) {
	a := l.of(k)
	a.nanos = ewma(a.nanos, float64(total))
	a.nsPerItem = ewma(a.nsPerItem, float64(total)/float64(max(items, 1)))
}

// copied records a copy of n bytes that took d.
func (l *lengths) copied(n uint64, d time.Duration) {
	a := l.of(copyKey)
	a.nsPerItem = ewma(a.nsPerItem, float64(d)/float64(n))
}

// copyWork is the scheduler's view of a copy of n bytes.
func (in *Instance) copyWork(n uint64) work { return in.chunkWork(n, n) }

// chunkWork is the scheduler's view of a chunk of n bytes of a copy of
// total bytes: its cost is the whole copy's expected device time (from
// the instance's recent copies), so that a long copy moved in many chunks
// counts as long work.
func (in *Instance) chunkWork(n, total uint64) work {
	return work{cost: time.Duration(in.lengths.of(copyKey).nsPerItem * float64(total)), bytes: n}
}

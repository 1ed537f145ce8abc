package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/handover"
)

// upgradeTestHook is a TEST HOOK, nil in vgpud: a test that runs its
// own binary as vgpud (upgrade_test.go) sets it to make a new process
// crash or fail at a point of its side of the exchange: "ready" (right
// after it sent Ready), "serving" (once it serves on probation, before
// its health report), "health" (its health check: an error fails it).
// Nothing outside tests sets it; no flag or environment variable of
// vgpud reaches it.
var upgradeTestHook func(point string) error

// testHook runs upgradeTestHook at point, if a test set it.
func testHook(point string) error {
	if upgradeTestHook == nil {
		return nil
	}
	return upgradeTestHook(point)
}

// inheritState is where a vgpud started by an upgrade in place stands in
// taking the daemon over (the new side of docs/upgrade.md). incoming.to
// makes every change of it, along inheritMoves.
type inheritState int32

const (
	// inheritAdopting: the old vgpud's state was received and is being
	// adopted; nothing is committed. A failure is reported to the old
	// vgpud, which goes on serving, and this one exits (fail).
	inheritAdopting inheritState = iota
	// inheritProbation: committed with a probation (protocol 2): this
	// vgpud serves, its control requests and incoming migrations held;
	// its death, or a failed health check, rolls the upgrade back (the
	// old vgpud serves again), and nothing but a stop may end its run
	// (guard).
	inheritProbation
	// inheritServing: committed for good (no probation, or the old vgpud
	// released this one or hung up): this vgpud is the daemon.
	inheritServing
	// inheritStopped: stopped on probation (SIGTERM): the old vgpud was
	// told, nothing rolls back, and this vgpud shuts down as the daemon.
	inheritStopped
)

// String names the state, for logs.
func (s inheritState) String() string {
	switch s {
	case inheritAdopting:
		return "adopting"
	case inheritProbation:
		return "probation"
	case inheritServing:
		return "serving"
	case inheritStopped:
		return "stopped on probation"
	}
	return "inheritState(" + strconv.Itoa(int(s)) + ")"
}

// inheritMoves are the changes of inheritState that incoming.to makes;
// any other is refused.
var inheritMoves = map[inheritState][]inheritState{
	inheritAdopting:  {inheritProbation, inheritServing},
	inheritProbation: {inheritServing, inheritStopped},
}

// incoming is the new side of an upgrade: the State it was handed and
// the channel to the old process.
type incoming struct {
	ch  *handover.Channel
	st  handover.State
	tab *handover.Table
	log *slog.Logger

	mu    sync.Mutex   // serializes to
	state atomic.Int32 // an inheritState; read without mu

	// probation is how long the probation lasts (protocol 2,
	// docs/upgrade.md): from the commit until the old process releases
	// this one (KindRelease) or hangs up, or this one stops (stopping).
	// Meanwhile its death rolls the upgrade back.
	probation time.Duration
	over      chan struct{} // closed when the probation ends, or at a commit without one
}

// current is the state in (inheritServing for nil: a plain start).
func (in *incoming) current() inheritState {
	if in == nil {
		return inheritServing
	}
	return inheritState(in.state.Load())
}

// to moves in to next if inheritMoves allow it and reports whether it
// did. Leaving inheritAdopting closes the descriptors of the state not
// taken; ending the probation (or committing without one) closes over
// and the channel to the old process.
func (in *incoming) to(next inheritState) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	from := in.current()
	allowed := false
	for _, s := range inheritMoves[from] {
		allowed = allowed || s == next
	}
	if !allowed {
		return false
	}
	in.state.Store(int32(next))
	if from == inheritAdopting && in.tab != nil {
		in.tab.Close()
	}
	if next == inheritServing || next == inheritStopped {
		close(in.over)
		if in.ch != nil {
			in.ch.Close()
		}
	}
	return true
}

// onProbation reports whether this process (nil: not started by an
// upgrade) is on probation.
func (in *incoming) onProbation() bool { return in.current() == inheritProbation }

// probationOver is closed when the probation ends (nil: none).
func (in *incoming) probationOver() <-chan struct{} {
	if in == nil {
		return nil
	}
	return in.over
}

// ignorePipeIfInheriting makes a write to a closed pipe fail rather than
// kill this process when it was started by an upgrade in place: the old
// process's standard output may be a pipe whose reader went with it.
func ignorePipeIfInheriting() {
	if os.Getenv(EnvHandover) != "" {
		signal.Ignore(syscall.SIGPIPE)
	}
}

// receiveHandover greets the old process on the channel named by
// EnvHandover and receives its State.
func receiveHandover(log *slog.Logger) (*incoming, error) {
	v := os.Getenv(EnvHandover)
	if v == "" {
		return nil, nil
	}
	os.Unsetenv(EnvHandover) // build ignored SIGPIPE while it was set
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a descriptor", EnvHandover, v)
	}
	f := os.NewFile(uintptr(fd), "handover")
	ch, err := handover.FileChannel(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	in := &incoming{ch: ch, log: log, over: make(chan struct{})}
	ch.SetDeadline(time.Now().Add(pauseWait + readyWait))
	if err := ch.Send(handover.KindHello, handover.Hello{PID: os.Getpid(), Version: handover.Version, Protocols: handover.Speaks()}, nil); err != nil {
		in.fail(err)
	}
	k, body, fds, err := ch.Recv()
	if err != nil {
		in.fail(fmt.Errorf("receive the state: %w", err))
	}
	in.tab = handover.NewTable(fds)
	if k == handover.KindAbort {
		in.tab.Close()
		in.exit("the old vgpud abandoned the upgrade")
	}
	if k != handover.KindState {
		in.fail(fmt.Errorf("%w: got %q, want the state", handover.ErrChannel, k))
	}
	if in.st, err = handover.Decode(body, len(fds)); err != nil {
		in.fail(err)
	}
	log.Info("upgrade: state received", "from_pid", in.st.From, "instances", len(in.st.Instances), "workers", len(in.st.Workers),
		"descriptors", len(fds))
	return in, nil
}

// listener returns the listener the old process handed over as name, or
// nil.
func (in *incoming) listener(name string) (net.Listener, error) {
	if in == nil {
		return nil, nil
	}
	for _, h := range in.st.Listeners {
		if h.Name != name {
			continue
		}
		f := os.NewFile(uintptr(in.tab.Take(h.FD)), name)
		defer f.Close()
		l, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("%s listener handed over: %w", name, err)
		}
		if ul, ok := l.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		return l, nil
	}
	return nil, nil
}

// handedListener is listener, a failure of which ends the upgrade
// (fail): nil when nothing was handed over as name.
func (in *incoming) handedListener(name string) net.Listener {
	l, err := in.listener(name)
	if err != nil {
		in.fail(err)
	}
	return l
}

// ready tells the old process everything is built and waits for its
// commit (or its exit, which commits too: it can no longer serve). A
// commit of protocol 2 with a probation leaves the channel open: this
// process is on probation until the old one releases it.
func (in *incoming) ready() {
	if err := in.ch.Send(handover.KindReady, nil, nil); err != nil {
		in.fail(err)
	}
	if err := testHook("ready"); err != nil {
		in.fail(err)
	}
	in.ch.SetDeadline(time.Time{})
	k, body, fds, err := in.ch.Recv()
	for _, fd := range fds {
		syscall.Close(fd)
	}
	switch {
	case err == nil && k == handover.KindCommit:
		c, err := handover.DecodeCommit(body, handover.Speaks())
		if err != nil {
			// On probation or not, the old process still holds
			// everything: it serves again when this one is gone.
			in.fail(err)
		}
		if c.Protocol >= handover.Protocol2 && c.Probation > 0 {
			in.probation = c.Probation
			in.to(inheritProbation)
			in.log.Info("upgrade: committed; serving on probation (the old vgpud serves again if this one dies)", "probation", c.Probation)
			return
		}
	case errors.Is(err, io.EOF):
		in.log.Warn("upgrade: the old vgpud hung up without a commit; taking over", "err", err)
	case k == handover.KindAbort:
		in.exit("the old vgpud abandoned the upgrade")
	default:
		in.exit(fmt.Sprintf("upgrade: no commit (%q, %v); the old vgpud goes on", k, err))
	}
	in.to(inheritServing)
}

// serving is the health check of a new process on probation, once it
// serves: start is what starting the adopted instances and workers
// returned (mdev.Manager.Start): an instance or worker not served is a
// failure. It reports the outcome to the old process; on a failure it
// exits at once (the old process serves again). Then it waits, in the
// background, for the probation's end (awaitRelease).
func (in *incoming) serving(start error) {
	if !in.onProbation() {
		return
	}
	err := testHook("serving")
	if err == nil {
		err = start
	}
	if err == nil {
		err = testHook("health")
	}
	if err != nil {
		in.log.Error("upgrade: health check failed on probation; exiting: the old vgpud serves again", "err", err)
		_ = in.ch.Send(handover.KindFail, handover.Failure{Error: err.Error()}, nil)
		os.Exit(1)
	}
	if err := in.ch.Send(handover.KindHealthy, nil, nil); err != nil {
		in.log.Warn("upgrade: health report not sent", "err", err)
	}
	go in.awaitRelease()
}

// awaitRelease, serving's goroutine, ends the probation when the old
// process releases this one or hangs up; stopping ends it first by
// closing the channel.
func (in *incoming) awaitRelease() {
	k, _, fds, err := in.ch.Recv()
	for _, fd := range fds {
		syscall.Close(fd)
	}
	switch {
	case err == nil && k == handover.KindRelease:
		in.log.Info("upgrade: probation over; serving alone")
	case !in.onProbation(): // stopping closed the channel
	default:
		in.log.Warn("upgrade: the old vgpud hung up on probation; serving alone", "got", k, "err", err)
	}
	in.to(inheritServing)
}

// stopping tells the old process, on probation, that this one stops
// because it was asked to (SIGTERM): the probation ends without a
// rollback, before this process's shutdown closes, unlinks or stops
// anything.
func (in *incoming) stopping() {
	if !in.onProbation() {
		return
	}
	in.log.Info("upgrade: stopping on probation; the old vgpud is told (nothing rolls back)")
	if err := in.ch.Send(handover.KindStopping, nil, nil); err != nil {
		in.log.Warn("upgrade: the old vgpud was not told this one stops", "err", err)
	}
	in.to(inheritStopped)
}

// guard ends a process on probation that panics (recovered: what
// recover returned in run's deferred call) or leaves run for any reason
// but stopping: os.Exit, before the daemon's close could close, unlink or
// stop what the old process serves again. Not on probation it does
// nothing; its caller calls recover only on probation.
func (in *incoming) guard(recovered any) {
	if !in.onProbation() {
		return
	}
	if recovered != nil {
		in.log.Error("upgrade: panic on probation; exiting without cleanup: the old vgpud serves again", "panic", recovered, "stack", string(debug.Stack()))
		os.Exit(2)
	}
	in.log.Error("upgrade: stopped serving on probation; exiting without cleanup: the old vgpud serves again")
	os.Exit(1)
}

// fail reports err to the old process, which goes on serving, and exits
// at once: nothing here may close what the old process still serves.
// After the commit it does nothing.
func (in *incoming) fail(err error) {
	if in.current() != inheritAdopting {
		return
	}
	in.log.Error("upgrade: cannot take over; the old vgpud goes on serving", "err", err)
	_ = in.ch.Send(handover.KindFail, handover.Failure{Error: err.Error()}, nil)
	os.Exit(1)
}

// exit ends a new process whose upgrade the old one abandoned (or never
// committed): it logs why and exits 1, touching nothing.
func (in *incoming) exit(why string) {
	in.log.Warn(why)
	os.Exit(1)
}

// failIf is fail for a new process (nothing for a plain start).
func (in *incoming) failIf(err error) {
	if in != nil {
		in.fail(err)
	}
}

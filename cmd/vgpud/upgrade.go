package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/internal/sdnotify"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/runstate"
)

// EnvHandover names the descriptor of the handover channel in a vgpud
// started by an upgrade in place (docs/upgrade.md).
const EnvHandover = "VGPUD_HANDOVER_FD"

// Bounds of an upgrade's steps.
const (
	// helloWait bounds the new process's start: its runtime, flags and
	// OpenCL devices, before anything is paused.
	helloWait = 2 * time.Minute
	// pauseWait bounds the pause: control requests and device turns in
	// progress (a turn is bounded by the watchdog), calls to workers.
	pauseWait = 30 * time.Second
	// readyWait bounds the new process's adoption of the state.
	readyWait = 30 * time.Second
	// answerWait bounds, after the commit, the answer to the upgrade
	// request: the old process exits when it went out or after this long.
	answerWait = 10 * time.Second
	// mainPIDWait bounds the service manager's processing of MAINPID
	// (sdnotify.MainPID's barrier) after the commit.
	mainPIDWait = 5 * time.Second
	// probationDefault is -upgrade-probation's default: how long, after
	// the commit, the old process keeps what it handed over, ready to
	// serve it again if the new one dies (docs/upgrade.md, "Probation").
	probationDefault = 10 * time.Second
	// healthWait bounds, past the probation's time, the wait for the new
	// process's health report; without one it is killed and the upgrade
	// rolls back.
	healthWait = 30 * time.Second
	// exitWait bounds the wait for a new process that hung up or failed
	// on probation to exit; then it is killed.
	exitWait = 10 * time.Second
	// stopWait bounds the shutdown of a new process stopped on probation
	// (its drain, its workers): the old one exits after it.
	stopWait = 2 * time.Minute
	// abandonWait bounds the wait for a new process told that its
	// upgrade was abandoned (Abort) to exit; then it is killed.
	abandonWait = 10 * time.Second
)

// upgradeState is where the old side of an upgrade in place stands
// (docs/upgrade.md). upgrader.to makes every change of it, along
// upgradeMoves.
type upgradeState int32

const (
	// upgradeIdle: no upgrade in progress; this vgpud serves and one may
	// start.
	upgradeIdle upgradeState = iota
	// upgradeStarting: the new vgpud starts; this one pauses, exports its
	// state and waits for the new one's Ready. Any failure abandons the
	// upgrade: this one goes on serving (upgradeIdle).
	upgradeStarting
	// upgradeOnProbation: committed with a probation: the new vgpud serves;
	// this one keeps what it handed over, paused, and serves it again
	// (upgradeIdle, after a rollback) if the new one dies or fails its
	// health check.
	upgradeOnProbation
	// upgradeHandedOver: the new vgpud serves alone; this one only
	// answers the upgrade request and exits (exit), touching nothing it
	// handed over.
	upgradeHandedOver
)

// String names the state, for logs.
func (s upgradeState) String() string {
	switch s {
	case upgradeIdle:
		return "idle"
	case upgradeStarting:
		return "starting"
	case upgradeOnProbation:
		return "probation"
	case upgradeHandedOver:
		return "handed over"
	}
	return "upgradeState(" + strconv.Itoa(int(s)) + ")"
}

// upgradeMoves are the changes of upgradeState that upgrader.to makes;
// any other is refused.
var upgradeMoves = map[upgradeState][]upgradeState{
	upgradeIdle:        {upgradeStarting},
	upgradeStarting:    {upgradeIdle, upgradeOnProbation, upgradeHandedOver},
	upgradeOnProbation: {upgradeIdle, upgradeHandedOver},
}

// upgrader hands the daemon over to a new vgpud (the old side of
// docs/upgrade.md).
type upgrader struct {
	log       *slog.Logger
	m         *mdev.Manager
	lock      *runstate.Lock
	gate      *control.Gate
	listeners map[string]*pausable
	args      []string
	stdout    *os.File
	stderr    *os.File
	// probation is how long after the commit this process keeps what it
	// handed over, paused, to serve it again if the new one dies; 0: it
	// exits at the commit (docs/upgrade.md, "Probation").
	probation time.Duration
	// onRollback runs after a rollback that followed a commit: the state
	// file is written again from this process's instances.
	onRollback func()
	// upgraded is this process's own upgrade (it is the new process of
	// one), nil for a plain start: no upgrade starts while it is on
	// probation.
	upgraded *incoming

	mu sync.Mutex
	// Guarded by mu.
	state    upgradeState  // upgradeHandedOver: from then on only exit runs: nothing here touches a shared object again
	stopping bool          // run shuts down: no upgrade starts
	running  chan struct{} // closed when the upgrade call in progress returns; nil: none

	answered   chan struct{} // closed once the upgrade's answer went out
	answerOnce sync.Once
	exitOnce   sync.Once
	// endProbation is closed by settle: a probation in progress ends at
	// once (this process stops; the new one goes on).
	endProbation chan struct{}
	endOnce      sync.Once
}

// newUpgrader makes u ready to use.
func newUpgrader(u *upgrader) *upgrader {
	u.answered = make(chan struct{})
	u.endProbation = make(chan struct{})
	return u
}

// ErrStopping refuses an upgrade while vgpud shuts down.
var ErrStopping = errors.New("vgpud is shutting down")

// current is u's state.
func (u *upgrader) current() upgradeState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.state
}

// to moves u to next if upgradeMoves allow it and reports whether it did.
func (u *upgrader) to(next upgradeState) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.toLocked(next)
}

// toLocked is to with u.mu held.
func (u *upgrader) toLocked(next upgradeState) bool {
	for _, s := range upgradeMoves[u.state] {
		if s == next {
			u.state = next
			return true
		}
	}
	return false
}

// begin starts an upgrade (upgradeStarting), or says why none starts
// now; finish ends it.
func (u *upgrader) begin() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.state == upgradeHandedOver:
		return control.ErrUpgraded // the new process serves it
	case u.stopping:
		return ErrStopping
	case u.state != upgradeIdle:
		return control.ErrUpgradeBusy
	case u.upgraded.onProbation():
		return fmt.Errorf("%w: this vgpud is on probation after its own upgrade in place; try again in a moment", control.ErrUpgradeBusy)
	}
	u.toLocked(upgradeStarting)
	u.running = make(chan struct{})
	return nil
}

// finish ends the upgrade begin started, as upgrade returns: one that
// did not hand over was abandoned or rolled back, and this vgpud serves
// (upgradeIdle). settle stops waiting for it.
func (u *upgrader) finish() {
	u.mu.Lock()
	if u.state != upgradeHandedOver {
		u.toLocked(upgradeIdle)
	}
	running := u.running
	u.running = nil
	u.mu.Unlock()
	close(running)
}

// answer is the after of a committed upgrade: its answer went out.
func (u *upgrader) answer() { u.answerOnce.Do(func() { close(u.answered) }) }

// exit ends a process that handed over, once the upgrade's answer went
// out (or answerWait passed): os.Exit, as a crash would, which frees only
// this process's own copies of the descriptors. Closing or removing
// anything, or releasing the devices (which may wait on the OpenCL
// runtime), would take from the new process what it serves.
func (u *upgrader) exit() {
	t := time.NewTimer(answerWait)
	select {
	case <-u.answered:
	case <-t.C:
		u.log.Warn("upgrade: the answer to the upgrade request did not go out; exiting anyway", "waited", answerWait)
	}
	u.exitOnce.Do(func() {
		u.log.Info("upgrade: exiting")
		os.Exit(0)
	})
}

// settle is the first step of every way run ends once it serves: no
// upgrade starts from now on, one in progress is waited for, and if one
// committed this process exits there and then (exit), touching nothing.
func (u *upgrader) settle() {
	u.mu.Lock()
	u.stopping = true
	running := u.running
	u.mu.Unlock()
	u.endOnce.Do(func() { close(u.endProbation) })
	if running != nil {
		u.log.Info("shutting down: waiting for the upgrade in progress to commit or roll back")
		<-running
	}
	if u.current() == upgradeHandedOver {
		u.exit() // does not return
	}
}

// resume serves again what an upgrade paused: the manager, the
// listeners, the control requests.
func (u *upgrader) resume() {
	u.m.Unpause()
	for _, l := range u.listeners {
		l.unpause()
	}
	u.gate.Open()
}

// handoff is an upgrade past the new vgpud's Ready: what was handed over
// and the upgrade's figures, which stop at the commit (from there the new
// process serves: the probation is not a pause).
type handoff struct {
	next   *successor
	st     handover.State
	proto  int           // the handover protocol both speak
	paused time.Duration // from the pause to the commit
	took   time.Duration // from the start to the commit
}

// upgrade starts binary ("" : this program's file) as the new vgpud and
// hands everything over; on any failure before the commit this process
// goes on serving.
func (u *upgrader) upgrade(ctx context.Context, binary string) (*control.UpgradeReport, func(), error) {
	if err := u.begin(); err != nil {
		return nil, nil, err
	}
	defer u.finish()
	if u.stdout == nil || u.stderr == nil {
		return nil, nil, errors.New("upgrade: vgpud's standard output and error are not files to hand on")
	}
	start := time.Now()
	next, err := u.startSuccessor(binary)
	if err != nil {
		return nil, nil, err
	}
	defer next.ch.Close()
	proto, err := next.greet()
	if err != nil {
		return nil, nil, u.abandon(next, err)
	}

	// From here until the commit or the rollback nothing is served.
	paused := time.Now()
	pctx, cancel := context.WithTimeout(ctx, pauseWait)
	defer cancel()
	if err := u.gate.Close(pctx); err != nil {
		return nil, nil, u.abandon(next, fmt.Errorf("control requests still in progress: %w", err))
	}
	for _, l := range u.listeners {
		l.pause()
	}
	if err := u.m.Pause(pctx); err != nil {
		u.resume()
		return nil, nil, u.abandon(next, err)
	}
	// What a rollback after the commit compares with (RollBack).
	checkpoint := u.m.Checkpoint()
	st, err := u.sendState(next)
	if err != nil {
		u.resume()
		return nil, nil, u.abandon(next, err)
	}
	h := handoff{next: next, st: st, proto: proto, paused: time.Since(paused), took: time.Since(start)}
	if proto >= handover.Protocol2 && u.probation > 0 {
		return u.commitOnProbation(h, checkpoint, start)
	}
	if proto < handover.Protocol2 {
		next.log.Warn("upgrade: the new vgpud speaks handover protocol 1: no probation (a crash of it after the commit is not rolled back)")
	}
	return u.handedOver(h, committedNow)
}

// sendState exports the paused daemon to the new vgpud and waits for its
// Ready.
func (u *upgrader) sendState(next *successor) (handover.State, error) {
	tab := handover.NewTable(nil)
	st, err := u.export(tab)
	if err == nil {
		next.ch.SetDeadline(time.Now().Add(readyWait))
		err = next.ch.SendState(st, tab.FDs())
	}
	tab.Close()
	if err == nil {
		err = next.ch.Expect(handover.KindReady, nil)
	}
	return st, err
}

// abandon ends an upgrade before its commit: the new vgpud is told
// (Abort) and waited for, killed after abandonWait; this one goes on
// serving. It returns the upgrade's error, cause wrapped.
func (u *upgrader) abandon(next *successor, cause error) error {
	_ = next.ch.Send(handover.KindAbort, nil, nil)
	next.ch.Close()
	select {
	case <-next.reaped:
	case <-time.After(abandonWait):
		_ = next.cmd.Process.Kill()
		<-next.reaped
	}
	u.reclaimLock() // it may have written its PID into the lock file
	return fmt.Errorf("upgrade abandoned, this vgpud goes on serving: %w", cause)
}

// commitOnProbation commits the upgrade with a probation (docs/upgrade.md):
// the new process serves; this one keeps everything it handed over,
// paused, and serves it again (rollBack) if the new one dies, fails its
// health check or sends none.
func (u *upgrader) commitOnProbation(h handoff, checkpoint mdev.Checkpoint, start time.Time) (*control.UpgradeReport, func(), error) {
	log := h.next.log
	if err := h.next.ch.Send(handover.KindCommit, handover.Commit{Protocol: h.proto, Probation: u.probation}, nil); err != nil {
		log.Warn("upgrade: commit not sent; on probation all the same", "err", err)
	}
	u.to(upgradeOnProbation)
	log.Info("upgrade: committed; the new vgpud serves on probation", "probation", u.probation, "paused", h.paused)
	end, cause := u.probate(h.next)
	if cause == nil {
		return u.handedOver(h, end)
	}
	rb := u.m.RollBack(checkpoint)
	u.resume()
	u.reclaimLock()
	if u.onRollback != nil {
		u.onRollback()
	}
	log.Error("upgrade: rolled back after the commit: this vgpud serves every instance again", "cause", cause,
		"instances", rb.Instances, "tails_moved", rb.Tails, "woken", rb.Woken, "took", time.Since(start))
	return nil, nil, fmt.Errorf("upgrade rolled back after the commit, this vgpud serves again (every instance, with its device state): %w", cause)
}

// How an upgrade that did not roll back ends for the old process.
type upgradeEnd int

const (
	// committedNow: no probation (protocol 1, or -upgrade-probation 0):
	// the commit is the end.
	committedNow upgradeEnd = iota
	// probationPassed: the new process serves alone from now on.
	probationPassed
	// stoppedOnProbation: the daemon was stopped on probation (SIGTERM to
	// either process): the new process did the shutdown (its drain, its
	// workers, the sockets) and exited; this one exits after it, still
	// the service's main process.
	stoppedOnProbation
)

// handedOver ends an upgrade that did not roll back (end says how).
// From here this process only answers and exits. The manager and its
// pool forget what they handed over, so no path of this process's
// shutdown (a signal, a server returning) can close, unlink or stop any
// of it; and exit runs whatever becomes of the answer.
func (u *upgrader) handedOver(h handoff, end upgradeEnd) (*control.UpgradeReport, func(), error) {
	log, newPID := h.next.log, h.next.cmd.Process.Pid
	u.m.HandOver()
	u.to(upgradeHandedOver)
	go u.exit()
	if end == committedNow {
		if err := h.next.ch.Send(handover.KindCommit, nil, nil); err != nil {
			// The new process holds everything and takes over when this
			// one exits (it reads the hang-up as the commit).
			log.Warn("upgrade: commit not sent; the new vgpud takes over when this one exits", "err", err)
		}
	}
	// Requests that waited are answered "send it again"; the listeners
	// stay paused (their servers must not return) until the exit.
	u.gate.Retire()
	// Under systemd (Type=notify) the new process becomes the service's
	// main process before this one exits (exit waits for the answer,
	// which goes out after this returns): the manager would otherwise
	// take that exit for the service's end and stop the new process.
	// On probation it stayed this one, so that the new process's death
	// is not the service's (and systemd's NotifyAccess=main would not
	// let this one take MAINPID back); a new process stopped on
	// probation has exited, and this one's exit is the service's end.
	if end != stoppedOnProbation {
		if err := sdnotify.MainPID(newPID, mainPIDWait); err != nil {
			log.Warn("upgrade: the service manager was not told the new main process", "err", err)
		}
	}
	if end == probationPassed {
		if err := h.next.ch.Send(handover.KindRelease, nil, nil); err != nil {
			log.Warn("upgrade: the end of the probation not sent; the new vgpud reads this one's exit as it", "err", err)
		}
	}
	rep := &control.UpgradeReport{OldPID: os.Getpid(), NewPID: newPID, Binary: h.next.binary,
		Instances: len(h.st.Instances), Workers: len(h.st.Workers), Paused: h.paused, Took: h.took}
	log.Info("upgrade: handed over; this vgpud exits", "paused", rep.Paused, "took", rep.Took,
		"instances", rep.Instances, "workers", rep.Workers)
	return rep, u.answer, nil
}

// probate waits out the probation of a committed upgrade (docs/upgrade.md,
// "Probation"). It ends with probationPassed once the new process has
// served for u.probation and reported its health check passed
// (KindHealthy); with stoppedOnProbation once the daemon was stopped
// (the new process said it stops, KindStopping, or this one stops,
// settle, and sends it SIGTERM) and the new process has exited; or with
// the cause of a rollback, once the new process is gone (reaped: it
// exited, or it was killed here: it failed its health check, sent none
// within healthWait past the probation, hung up or broke the protocol).
func (u *upgrader) probate(next *successor) (upgradeEnd, error) {
	next.ch.SetDeadline(time.Time{})
	done := make(chan struct{})
	defer close(done)
	msgs := next.messages(done)
	window := time.NewTimer(u.probation)
	defer window.Stop()
	limit := time.NewTimer(u.probation + healthWait)
	defer limit.Stop()
	healthy, served := false, false
	for !healthy || !served {
		select {
		case <-next.reaped:
			return 0, fmt.Errorf("the new vgpud exited on probation (%v)", next.exitErr)
		case m := <-msgs:
			if m.k == handover.KindHealthy && m.err == nil {
				healthy = true
				next.log.Info("upgrade: the new vgpud serves and passed its health check")
				continue
			}
			return next.onProbationMessage(m)
		case <-window.C:
			served = true
		case <-limit.C:
			return 0, next.gone(fmt.Sprintf("the new vgpud sent no health report within %v", u.probation+healthWait), "", true)
		case <-u.endProbation:
			// A stop of the daemon (under systemd, KillMode=mixed: the
			// main process's SIGTERM, and this one is still the main
			// process): the new process, which serves, stops it.
			next.log.Info("upgrade: this vgpud stops on probation: the new vgpud is stopped (its shutdown), this one exits after it")
			if err := next.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				next.log.Warn("upgrade: the new vgpud was not told to stop", "err", err)
			}
			return next.stopped()
		}
	}
	next.log.Info("upgrade: probation passed", "probation", u.probation)
	return probationPassed, nil
}

// reclaimLock writes this process's PID into the run directory's lock
// file again: a new process that adopted the lock wrote its own.
func (u *upgrader) reclaimLock() {
	if u.lock == nil {
		return
	}
	fd := u.lock.Fd()
	err := unix.Ftruncate(fd, 0)
	if err == nil {
		_, err = unix.Pwrite(fd, []byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		u.log.Warn("upgrade: the run directory's lock file does not name this vgpud again", "err", err)
	}
}

// export is the State of the paused daemon.
func (u *upgrader) export(tab *handover.Table) (handover.State, error) {
	st := handover.State{From: os.Getpid(), Lock: handover.None}
	var err error
	if st.Lock, err = tab.Add(u.lock.Fd()); err != nil {
		return st, err
	}
	for name, l := range u.listeners {
		sc, err := l.conn()
		if err != nil {
			return st, fmt.Errorf("%s listener: %w", name, err)
		}
		h := handover.Listener{Name: name}
		if h.FD, err = tab.AddConn(sc); err != nil {
			return st, err
		}
		st.Listeners = append(st.Listeners, h)
	}
	st.Instances, st.Workers, st.Domains, err = u.m.Export(tab)
	return st, err
}

// successor is the new vgpud of an upgrade in place as the old one sees
// it: its process, this one's child until it exits, and the handover
// channel to it.
type successor struct {
	binary string
	cmd    *exec.Cmd
	ch     *handover.Channel
	log    *slog.Logger // the upgrade's: the new process's PID and binary
	// reaped is closed once the process exited and was reaped (its
	// goroutine, started with it, waits for it); exitErr is then
	// cmd.Wait's error.
	reaped  chan struct{}
	exitErr error
}

// startSuccessor starts binary ("" : this program's file) with this
// vgpud's arguments, its standard output and error, and its end of a new
// handover channel (EnvHandover).
func (u *upgrader) startSuccessor(binary string) (*successor, error) {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("upgrade: find vgpud's file: %w", err)
		}
		binary = exe
	}
	ch, peer, err := handover.Pair()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, u.args...)
	cmd.Args[0] = "vgpud"
	cmd.ExtraFiles = []*os.File{peer}
	cmd.Env = append(os.Environ(), EnvHandover+"=3")
	cmd.Stdout, cmd.Stderr = u.stdout, u.stderr
	err = cmd.Start()
	peer.Close()
	if err != nil {
		ch.Close()
		return nil, fmt.Errorf("upgrade: start %s: %w", binary, err)
	}
	next := &successor{binary: binary, cmd: cmd, ch: ch, reaped: make(chan struct{}),
		log: u.log.With("new_pid", cmd.Process.Pid, "binary", binary)}
	next.log.Info("upgrade: new vgpud started")
	go func() {
		next.exitErr = cmd.Wait() // the new process is this one's child until it exits
		if u.current() != upgradeHandedOver {
			next.log.Warn("upgrade: the new vgpud exited", "err", next.exitErr)
		}
		close(next.reaped)
	}()
	return next, nil
}

// greet waits for the new vgpud's Hello and returns the handover
// protocol both speak.
func (next *successor) greet() (int, error) {
	next.ch.SetDeadline(time.Now().Add(helloWait))
	var hello handover.Hello
	if err := next.ch.Expect(handover.KindHello, &hello); err != nil {
		return 0, fmt.Errorf("the new vgpud did not greet: %w", err)
	}
	if hello.Version != handover.Version {
		return 0, fmt.Errorf("the new vgpud reads handover state version %d, this one writes %d", hello.Version, handover.Version)
	}
	return handover.Negotiate(hello)
}

// probationMsg is a message from the new vgpud on probation, or the
// error that ended the channel.
type probationMsg struct {
	k    handover.Kind
	body []byte
	err  error
}

// messages reads the channel in a goroutine, until it fails or done is
// closed; the descriptors a message carries are closed.
func (next *successor) messages(done <-chan struct{}) <-chan probationMsg {
	msgs := make(chan probationMsg, 1)
	go func() {
		for {
			k, body, fds, err := next.ch.Recv()
			for _, fd := range fds {
				unix.Close(fd)
			}
			select {
			case msgs <- probationMsg{k, body, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return msgs
}

// onProbationMessage is what a message from the new vgpud on probation
// (other than its health report) ends the probation with.
func (next *successor) onProbationMessage(m probationMsg) (upgradeEnd, error) {
	switch {
	case m.err != nil:
		// Its end of the channel closed: it is ending.
		return 0, next.gone(fmt.Sprintf("the new vgpud hung up on probation (%v) and did not exit", m.err),
			"the new vgpud exited on probation", false)
	case m.k == handover.KindStopping:
		next.log.Info("upgrade: the new vgpud stops on probation (it was asked to): nothing rolls back; this vgpud exits after it")
		return next.stopped()
	case m.k == handover.KindFail:
		var f handover.Failure
		if json.Unmarshal(m.body, &f) != nil || f.Error == "" {
			f.Error = "no reason given"
		}
		why := "the new vgpud failed its health check: " + f.Error
		return 0, next.gone(why, why, false)
	}
	return 0, next.gone(fmt.Sprintf("%v: message %q from the new vgpud on probation", handover.ErrChannel, m.k), "", true)
}

// gone waits for the new vgpud to end (killing it after exitWait, or at
// once if now: then the cause is why) and says why the upgrade rolls
// back; exited is the cause when it ended by itself.
func (next *successor) gone(why, exited string, now bool) error {
	if !now {
		select {
		case <-next.reaped:
			return fmt.Errorf("%s (%v)", exited, next.exitErr)
		case <-time.After(exitWait):
			next.log.Warn("upgrade: the new vgpud did not exit; killing it", "why", why, "waited", exitWait)
		}
	}
	_ = next.cmd.Process.Kill()
	<-next.reaped
	return fmt.Errorf("%s; killed it (%v)", why, next.exitErr)
}

// stopped waits for the shutdown of a new vgpud stopped on probation
// (killing it after stopWait): it owns what it adopted, and closes it;
// this process touches nothing and exits after it.
func (next *successor) stopped() (upgradeEnd, error) {
	select {
	case <-next.reaped:
	case <-time.After(stopWait):
		next.log.Warn("upgrade: the new vgpud did not finish its shutdown; killing it", "waited", stopWait)
		_ = next.cmd.Process.Kill()
		<-next.reaped
	}
	next.log.Info("upgrade: the new vgpud stopped on probation", "exit", next.exitErr)
	return stoppedOnProbation, nil
}

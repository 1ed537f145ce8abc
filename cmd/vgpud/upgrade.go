package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
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
)

// upgradeTestHook is a TEST HOOK, nil in vgpud: a test that runs its
// own binary as vgpud (upgrade_test.go) sets it to make a new process
// crash or fail at a point of its side of the exchange: "ready" (right
// after it sent Ready), "serving" (once it serves on probation, before
// its health report), "health" (its health check: an error fails it).
// Nothing outside tests sets it; no flag or environment variable of
// vgpud reaches it.
var upgradeTestHook func(point string) error

func testHook(point string) error {
	if upgradeTestHook == nil {
		return nil
	}
	return upgradeTestHook(point)
}

// pausable is a listener whose Accept an upgrade pauses: connections then
// wait in the listen queue for whichever process accepts next. After a
// commit it stays paused until the process exits: its server must not
// return (run would shut down what the new process serves).
type pausable struct {
	net.Listener
	mu     sync.Mutex
	paused bool
	resume chan struct{}
}

func newPausable(l net.Listener) *pausable {
	if ul, ok := l.(*net.UnixListener); ok {
		// Its socket file is removed by whoever stops serving it for
		// good, not by an http.Server returning (after a handover the
		// new process serves the same file).
		ul.SetUnlinkOnClose(false)
	}
	return &pausable{Listener: l, resume: make(chan struct{})}
}

func (p *pausable) deadline(t time.Time) {
	if d, ok := p.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		d.SetDeadline(t)
	}
}

func (p *pausable) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return c, err
		}
		p.mu.Lock()
		paused, resume := p.paused, p.resume
		p.mu.Unlock()
		if !paused {
			p.deadline(time.Time{})
			continue
		}
		<-resume
	}
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.paused = true
	p.resume = make(chan struct{})
	p.mu.Unlock()
	p.deadline(time.Unix(1, 0))
}

func (p *pausable) unpause() {
	p.mu.Lock()
	p.paused = false
	close(p.resume)
	p.mu.Unlock()
	p.deadline(time.Time{})
}

// conn is the listening socket, to hand over.
func (p *pausable) conn() (syscall.Conn, error) {
	sc, ok := p.Listener.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no descriptor", p.Listener)
	}
	return sc, nil
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
	stopping bool          // run shuts down: no upgrade starts
	running  chan struct{} // closed when the upgrade in progress ends; nil: none

	// committed: this process handed everything over. From then on only
	// exit runs: nothing here touches a shared object again.
	committed  atomic.Bool
	answered   chan struct{} // closed once the upgrade's answer went out
	answerOnce sync.Once
	exitOnce   sync.Once
	// endProbation is closed by settle: a probation in progress ends at
	// once (this process stops; the new one goes on).
	endProbation chan struct{}
	endOnce      sync.Once
}

func newUpgrader(u *upgrader) *upgrader {
	u.answered = make(chan struct{})
	u.endProbation = make(chan struct{})
	return u
}

// ErrStopping refuses an upgrade while vgpud shuts down.
var ErrStopping = errors.New("vgpud is shutting down")

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
	if u.committed.Load() {
		u.exit() // does not return
	}
}

// upgrade starts binary ("" : this program's file) as the new vgpud and
// hands everything over; on any failure before the commit this process
// goes on serving.
func (u *upgrader) upgrade(ctx context.Context, binary string) (*control.UpgradeReport, func(), error) {
	u.mu.Lock()
	switch {
	case u.committed.Load():
		u.mu.Unlock()
		return nil, nil, control.ErrUpgraded // the new process serves it
	case u.stopping:
		u.mu.Unlock()
		return nil, nil, ErrStopping
	case u.running != nil:
		u.mu.Unlock()
		return nil, nil, control.ErrUpgradeBusy
	case u.upgraded.onProbation():
		u.mu.Unlock()
		return nil, nil, fmt.Errorf("%w: this vgpud is on probation after its own upgrade in place; try again in a moment", control.ErrUpgradeBusy)
	}
	running := make(chan struct{})
	u.running = running
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.running = nil
		u.mu.Unlock()
		close(running)
	}()
	if u.stdout == nil || u.stderr == nil {
		return nil, nil, errors.New("upgrade: vgpud's standard output and error are not files to hand on")
	}
	start := time.Now()
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("upgrade: find vgpud's file: %w", err)
		}
		binary = exe
	}
	ch, peer, err := handover.Pair()
	if err != nil {
		return nil, nil, err
	}
	defer ch.Close()
	cmd := exec.Command(binary, u.args...)
	cmd.Args[0] = "vgpud"
	cmd.ExtraFiles = []*os.File{peer}
	cmd.Env = append(os.Environ(), EnvHandover+"=3")
	cmd.Stdout, cmd.Stderr = u.stdout, u.stderr
	err = cmd.Start()
	peer.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("upgrade: start %s: %w", binary, err)
	}
	log := u.log.With("new_pid", cmd.Process.Pid, "binary", binary)
	log.Info("upgrade: new vgpud started")
	reaped := make(chan struct{})
	var exitErr error // cmd.Wait's, once reaped is closed
	go func() {
		exitErr = cmd.Wait() // the new process is this one's child until it exits
		if !u.committed.Load() {
			log.Warn("upgrade: the new vgpud exited", "err", exitErr)
		}
		close(reaped)
	}()
	abort := func(cause error) error {
		_ = ch.Send(handover.KindAbort, nil, nil)
		ch.Close()
		select {
		case <-reaped:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-reaped
		}
		u.reclaimLock() // it may have written its PID into the lock file
		return fmt.Errorf("upgrade abandoned, this vgpud goes on serving: %w", cause)
	}
	ch.SetDeadline(time.Now().Add(helloWait))
	var hello handover.Hello
	if err := ch.Expect(handover.KindHello, &hello); err != nil {
		return nil, nil, abort(fmt.Errorf("the new vgpud did not greet: %w", err))
	}
	if hello.Version != handover.Version {
		return nil, nil, abort(fmt.Errorf("the new vgpud reads handover state version %d, this one writes %d", hello.Version, handover.Version))
	}
	proto, err := handover.Negotiate(hello)
	if err != nil {
		return nil, nil, abort(err)
	}

	// From here until the commit or the rollback nothing is served.
	paused := time.Now()
	pctx, cancel := context.WithTimeout(ctx, pauseWait)
	defer cancel()
	if err := u.gate.Close(pctx); err != nil {
		return nil, nil, abort(fmt.Errorf("control requests still in progress: %w", err))
	}
	for _, l := range u.listeners {
		l.pause()
	}
	resume := func() {
		u.m.Unpause()
		for _, l := range u.listeners {
			l.unpause()
		}
		u.gate.Open()
	}
	if err := u.m.Pause(pctx); err != nil {
		resume()
		return nil, nil, abort(err)
	}
	// What a rollback after the commit compares with (RollBack).
	checkpoint := u.m.Checkpoint()
	tab := handover.NewTable(nil)
	st, err := u.export(tab)
	if err == nil {
		ch.SetDeadline(time.Now().Add(readyWait))
		err = ch.SendState(st, tab.FDs())
	}
	tab.Close()
	if err == nil {
		err = ch.Expect(handover.KindReady, nil)
	}
	if err != nil {
		resume()
		return nil, nil, abort(err)
	}
	// The upgrade's figures stop at the commit: from there the new
	// process serves (the probation is not a pause).
	pausedFor, took := time.Since(paused), time.Since(start)
	if proto >= handover.Protocol2 && u.probation > 0 {
		// The commit, and the probation (docs/upgrade.md): the new
		// process serves; this one keeps everything it handed over,
		// paused, and serves it again if the new one dies, fails its
		// health check or sends none.
		if err := ch.Send(handover.KindCommit, handover.Commit{Protocol: proto, Probation: u.probation}, nil); err != nil {
			log.Warn("upgrade: commit not sent; on probation all the same", "err", err)
		}
		log.Info("upgrade: committed; the new vgpud serves on probation", "probation", u.probation, "paused", pausedFor)
		end, cause := u.probate(ch, cmd.Process, reaped, func() error { return exitErr }, log)
		if cause != nil {
			rb := u.m.RollBack(checkpoint)
			resume()
			u.reclaimLock()
			if u.onRollback != nil {
				u.onRollback()
			}
			log.Error("upgrade: rolled back after the commit: this vgpud serves every instance again", "cause", cause,
				"instances", rb.Instances, "tails_moved", rb.Tails, "woken", rb.Woken, "took", time.Since(start))
			return nil, nil, fmt.Errorf("upgrade rolled back after the commit, this vgpud serves again (every instance, with its device state): %w", cause)
		}
		return u.handedOver(ch, end, cmd.Process.Pid, binary, st, pausedFor, took, log)
	}
	if proto < handover.Protocol2 {
		log.Warn("upgrade: the new vgpud speaks handover protocol 1: no probation (a crash of it after the commit is not rolled back)")
	}
	return u.handedOver(ch, committedNow, cmd.Process.Pid, binary, st, pausedFor, took, log)
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
func (u *upgrader) handedOver(ch *handover.Channel, end upgradeEnd, newPID int, binary string, st handover.State,
	paused, took time.Duration, log *slog.Logger) (*control.UpgradeReport, func(), error) {
	u.m.HandOver()
	u.committed.Store(true)
	go u.exit()
	if end == committedNow {
		if err := ch.Send(handover.KindCommit, nil, nil); err != nil {
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
		if err := ch.Send(handover.KindRelease, nil, nil); err != nil {
			log.Warn("upgrade: the end of the probation not sent; the new vgpud reads this one's exit as it", "err", err)
		}
	}
	rep := &control.UpgradeReport{OldPID: os.Getpid(), NewPID: newPID, Binary: binary,
		Instances: len(st.Instances), Workers: len(st.Workers), Paused: paused, Took: took}
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
func (u *upgrader) probate(ch *handover.Channel, proc *os.Process, reaped <-chan struct{}, exitErr func() error, log *slog.Logger) (upgradeEnd, error) {
	kill := proc.Kill
	ch.SetDeadline(time.Time{})
	type msg struct {
		k    handover.Kind
		body []byte
		err  error
	}
	msgs := make(chan msg, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			k, body, fds, err := ch.Recv()
			for _, fd := range fds {
				unix.Close(fd)
			}
			select {
			case msgs <- msg{k, body, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// gone waits for the new process to end (killing it after exitWait,
	// or at once: then the cause is why) and says why the upgrade rolls
	// back; exited is the cause when it ended by itself.
	gone := func(why, exited string, now bool) error {
		if !now {
			select {
			case <-reaped:
				return fmt.Errorf("%s (%v)", exited, exitErr())
			case <-time.After(exitWait):
				log.Warn("upgrade: the new vgpud did not exit; killing it", "why", why, "waited", exitWait)
			}
		}
		_ = kill()
		<-reaped
		return fmt.Errorf("%s; killed it (%v)", why, exitErr())
	}
	// stopped waits for the shutdown of a new process stopped on
	// probation: it owns what it adopted, and closes it; this process
	// touches nothing and exits after it.
	stopped := func() (upgradeEnd, error) {
		select {
		case <-reaped:
		case <-time.After(stopWait):
			log.Warn("upgrade: the new vgpud did not finish its shutdown; killing it", "waited", stopWait)
			_ = kill()
			<-reaped
		}
		log.Info("upgrade: the new vgpud stopped on probation", "exit", exitErr())
		return stoppedOnProbation, nil
	}
	window := time.NewTimer(u.probation)
	defer window.Stop()
	limit := time.NewTimer(u.probation + healthWait)
	defer limit.Stop()
	healthy, served := false, false
	for !healthy || !served {
		select {
		case <-reaped:
			return 0, fmt.Errorf("the new vgpud exited on probation (%v)", exitErr())
		case m := <-msgs:
			switch {
			case m.err != nil:
				// Its end of the channel closed: it is ending.
				return 0, gone(fmt.Sprintf("the new vgpud hung up on probation (%v) and did not exit", m.err),
					"the new vgpud exited on probation", false)
			case m.k == handover.KindHealthy:
				healthy = true
				log.Info("upgrade: the new vgpud serves and passed its health check")
			case m.k == handover.KindStopping:
				log.Info("upgrade: the new vgpud stops on probation (it was asked to): nothing rolls back; this vgpud exits after it")
				return stopped()
			case m.k == handover.KindFail:
				var f handover.Failure
				if json.Unmarshal(m.body, &f) != nil || f.Error == "" {
					f.Error = "no reason given"
				}
				why := "the new vgpud failed its health check: " + f.Error
				return 0, gone(why, why, false)
			default:
				return 0, gone(fmt.Sprintf("%v: message %q from the new vgpud on probation", handover.ErrChannel, m.k), "", true)
			}
		case <-window.C:
			served = true
		case <-limit.C:
			return 0, gone(fmt.Sprintf("the new vgpud sent no health report within %v", u.probation+healthWait), "", true)
		case <-u.endProbation:
			// A stop of the daemon (under systemd, KillMode=mixed: the
			// main process's SIGTERM, and this one is still the main
			// process): the new process, which serves, stops it.
			log.Info("upgrade: this vgpud stops on probation: the new vgpud is stopped (its shutdown), this one exits after it")
			if err := proc.Signal(syscall.SIGTERM); err != nil {
				log.Warn("upgrade: the new vgpud was not told to stop", "err", err)
			}
			return stopped()
		}
	}
	log.Info("upgrade: probation passed", "probation", u.probation)
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

// incoming is the new side of an upgrade: the State it was handed and
// the channel to the old process.
type incoming struct {
	ch   *handover.Channel
	st   handover.State
	tab  *handover.Table
	log  *slog.Logger
	done bool

	// The probation (protocol 2, docs/upgrade.md): from the commit until
	// the old process releases this one (KindRelease) or hangs up, or this
	// one stops (stopping). Meanwhile its death rolls the upgrade back.
	probation time.Duration
	probing   atomic.Bool
	over      chan struct{} // closed when the probation ends
	overOnce  sync.Once
}

// onProbation reports whether this process (nil: not started by an
// upgrade) is on probation.
func (in *incoming) onProbation() bool { return in != nil && in.probing.Load() }

// probationOver is closed when the probation ends (nil: none).
func (in *incoming) probationOver() <-chan struct{} {
	if in == nil {
		return nil
	}
	return in.over
}

// receiveHandover greets the old process on the channel named by
// EnvHandover and receives its State.
func receiveHandover(log *slog.Logger) (*incoming, error) {
	v := os.Getenv(EnvHandover)
	if v == "" {
		return nil, nil
	}
	os.Unsetenv(EnvHandover)
	// The old process's standard output may be a pipe whose reader went
	// with it: a write must fail, not kill this process.
	signal.Ignore(syscall.SIGPIPE)
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
			in.tab.Close()
			in.probation = c.Probation
			in.probing.Store(true)
			in.done = true
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
	in.ch.Close()
	in.tab.Close()
	in.done = true
	in.overOnce.Do(func() { close(in.over) })
}

// serving is the health check of a new process on probation, once it
// serves: start is what starting the adopted instances and workers
// returned (mdev.Manager.Start): an instance or worker not served is a
// failure. It reports the outcome to the old process; on a failure it
// exits at once (the old process serves again). Then it waits, in the
// background, for the probation's end.
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
	go func() {
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
		in.end()
	}()
}

// end ends the probation.
func (in *incoming) end() {
	in.overOnce.Do(func() {
		in.probing.Store(false)
		close(in.over)
		in.ch.Close()
	})
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
	in.end()
}

// guard, deferred by run once it serves, ends a process on probation
// that panics or leaves run for any reason but stopping: os.Exit, before
// run's deferred shutdown could close, unlink or stop what the old
// process serves again.
func (in *incoming) guard() {
	if !in.onProbation() {
		return
	}
	if r := recover(); r != nil {
		in.log.Error("upgrade: panic on probation; exiting without cleanup: the old vgpud serves again", "panic", r, "stack", string(debug.Stack()))
		os.Exit(2)
	}
	in.log.Error("upgrade: stopped serving on probation; exiting without cleanup: the old vgpud serves again")
	os.Exit(1)
}

// fail reports err to the old process, which goes on serving, and exits
// at once: nothing here may close what the old process still serves.
func (in *incoming) fail(err error) {
	if in.done {
		return
	}
	in.log.Error("upgrade: cannot take over; the old vgpud goes on serving", "err", err)
	_ = in.ch.Send(handover.KindFail, handover.Failure{Error: err.Error()}, nil)
	os.Exit(1)
}

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

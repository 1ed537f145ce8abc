package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/runstate"
	"github.com/vgpud/vgpud/sdnotify"
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
)

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
}

func newUpgrader(u *upgrader) *upgrader {
	u.answered = make(chan struct{})
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
	go func() {
		err := cmd.Wait() // the new process is this one's child until it exits
		if !u.committed.Load() {
			log.Warn("upgrade: the new vgpud exited", "err", err)
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
		}
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
	// The commit: from here this process only answers and exits. The
	// manager and its pool forget what they handed over, so no path of
	// this process's shutdown (a signal, a server returning) can close,
	// unlink or stop any of it; and exit runs whatever becomes of the
	// answer.
	u.m.HandOver()
	u.committed.Store(true)
	go u.exit()
	if err := ch.Send(handover.KindCommit, nil, nil); err != nil {
		// The new process holds everything and takes over when this one
		// exits (it reads the hang-up as the commit).
		log.Warn("upgrade: commit not sent; the new vgpud takes over when this one exits", "err", err)
	}
	// Requests that waited are answered "send it again"; the listeners
	// stay paused (their servers must not return) until the exit.
	u.gate.Retire()
	// Under systemd (Type=notify) the new process becomes the service's
	// main process before this one exits (exit waits for the answer,
	// which goes out after this returns): the manager would otherwise
	// take that exit for the service's end and stop the new process.
	if err := sdnotify.MainPID(cmd.Process.Pid, mainPIDWait); err != nil {
		log.Warn("upgrade: the service manager was not told the new main process", "err", err)
	}
	rep := &control.UpgradeReport{OldPID: os.Getpid(), NewPID: cmd.Process.Pid, Binary: binary,
		Instances: len(st.Instances), Workers: len(st.Workers), Paused: time.Since(paused), Took: time.Since(start)}
	log.Info("upgrade: handed over; this vgpud exits", "paused", rep.Paused, "took", rep.Took,
		"instances", rep.Instances, "workers", rep.Workers)
	return rep, u.answer, nil
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
	in := &incoming{ch: ch, log: log}
	ch.SetDeadline(time.Now().Add(pauseWait + readyWait))
	if err := ch.Send(handover.KindHello, handover.Hello{PID: os.Getpid(), Version: handover.Version}, nil); err != nil {
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
// commit (or its exit, which commits too: it can no longer serve).
func (in *incoming) ready() {
	if err := in.ch.Send(handover.KindReady, nil, nil); err != nil {
		in.fail(err)
	}
	in.ch.SetDeadline(time.Time{})
	k, _, fds, err := in.ch.Recv()
	for _, fd := range fds {
		syscall.Close(fd)
	}
	switch {
	case err == nil && k == handover.KindCommit:
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

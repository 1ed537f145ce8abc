package child

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/remote"
	"github.com/vgpud/vgpud/worker/child/kernelout"
	"github.com/vgpud/vgpud/worker/sandbox"
)

// The executor (docs/isolation.md "Executors"): on a CPU device a guest's
// kernel is native code in the process that launches it, and a worker
// maps its instances' guest RAM. So, where the pool asks for it
// (EnvExecutor), a worker does not open its device itself: it starts an
// executor, this same program again, which inherits the worker's
// confinement (namespaces, Landlock, seccomp, limits: exec keeps them),
// opens the device and serves it with the executor protocol (package
// gpu/remote) on a socket, the only thing it shares with the worker. The
// worker interprets the rings and copies between guest RAM and buffers;
// the executor compiles and runs the guest's kernels and holds its
// buffers, and never maps guest RAM. It is started before any guest RAM
// reaches the worker.
//
// It is the worker's child, in the worker's PID namespace (the worker is
// its init: when the worker ends, the kernel ends the executor), and the
// leader of a process group of its own: the main process stops and
// continues it with the worker to preempt a turn, and the worker kills
// the group when the executor ends, with every process guest code in it
// started. When the executor ends, by a crashing kernel or
// compiler, the worker's device is lost (gpu.ErrContextLost): the worker
// exits with ExitExecutor (ExitContextLost if the executor lives on but
// broke the protocol), and its domain starts again on a fresh pair.
const (
	// EnvExecutor, "1" in a worker's environment, makes the worker run
	// its device in an executor process.
	EnvExecutor = "VGPUD_WORKER_EXECUTOR"
	// envExecutorDevice is the device index an executor (roleExecutor)
	// serves on ExecutorFD.
	envExecutorDevice = "VGPUD_EXECUTOR_DEVICE"
	// ExecutorFD is the executor's protocol socket.
	ExecutorFD = 3
	// WorkerExecutorFD and WorkerExecutorPeerFD are, in a worker started
	// with EnvExecutor, the two ends of the socket pair the main process
	// made for its executor: the worker's and the executor's (which
	// becomes the executor's ExecutorFD).
	WorkerExecutorFD     = 4
	WorkerExecutorPeerFD = 5
	// WorkerArenaFD is, in a worker started with EnvExecutor, the memory
	// file the main process made for the buffers the worker and its
	// executor share (docs/executor-protocol.md "Shared buffer
	// memory"); the executor gets it as executorArenaFD.
	WorkerArenaFD = 6
	// EnvArena, "1" in a worker's environment, says WorkerArenaFD is
	// open.
	EnvArena = "VGPUD_WORKER_ARENA"
	// executorArenaFD is that memory file in an executor, where
	// envExecutorArena is "1".
	executorArenaFD  = 4
	envExecutorArena = "VGPUD_EXECUTOR_ARENA"
	// EnvPollWindow is, in a worker's environment, how long an
	// executor's reads of its socket poll for the next request before
	// they block (remote.PollingConn): a duration, "0s" never.
	EnvPollWindow = "VGPUD_POLL_WINDOW"
	// ExitExecutor is a worker's exit code when its executor ended (a
	// crashing kernel or compiler): the main process counts it under
	// worker.CauseExecutor.
	ExitExecutor = 4
)

// executorMain runs an executor process and returns its exit code.
func executorMain() int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})).With("executor", os.Getpid())
	// The worker that started this was confined, and exec kept that;
	// Enter checks it (and refuses to run unconfined).
	pol, err := sandbox.PolicyFromEnv()
	if err != nil {
		log.Error("refusing to run unconfined", "err", err.Error())
		return 2
	}
	if _, err := sandbox.Enter(pol); err != nil {
		log.Error("cannot enter the sandbox", "err", err.Error())
		return 2
	}
	// Its own filter on top of the worker's: it signals nothing but
	// itself, stops nothing, sets no limit (docs/isolation.md
	// "Executors"). Before the device is opened: no guest code runs
	// without it.
	if err := sandbox.ConfineExecutor(pol); err != nil {
		log.Error("cannot confine the executor", "err", err.Error())
		return 2
	}
	index, err := strconv.Atoi(os.Getenv(envExecutorDevice))
	if err != nil {
		log.Error("bad device index", "err", err)
		return 2
	}
	f := os.NewFile(ExecutorFD, "executor-protocol")
	if f == nil {
		log.Error("no protocol socket on fd 3")
		return 2
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		log.Error("protocol socket", "err", err)
		return 2
	}
	// Standard output is where the runtime writes what kernels print
	// (printf): captured before the device is opened, so that each
	// launch that asks gets its own (OpLaunchPrinting). Without it
	// launches still run; their output is lost, as before.
	opts := remote.ServeOptions{}
	if out, err := kernelout.Start(1, remote.MaxPrintout); err != nil {
		log.Warn("kernels' printf output is not captured", "err", err.Error())
	} else {
		defer out.Close()
		opts.Output = out
	}
	guardRuntimeStacks(log)
	dev, err := gpu.Open(strconv.Itoa(index))
	if err != nil {
		log.Error("open device", "err", err)
		return 2
	}
	pc, err := remote.NewPollingConn(conn.(*net.UnixConn), pollWindow())
	if err != nil {
		log.Error("protocol socket", "err", err)
		return 2
	}
	opts.Arena = executorArena(log)
	if err := remote.ServeWith(pc, dev, opts); err != nil {
		log.Error("executor ends", "err", fmt.Sprint(err))
		return 1
	}
	return 0
}

// executorArena maps the memory an executor shares with its worker, or
// returns nil where it has none (a device context's executor) or cannot
// map it: its buffers are then its own, and the worker's writes and
// reads cross the socket.
func executorArena(log *slog.Logger) []byte {
	if os.Getenv(envExecutorArena) != "1" {
		return nil
	}
	f := os.NewFile(executorArenaFD, "executor-arena")
	if f == nil {
		log.Warn("no arena on fd 4: buffers go over the socket")
		return nil
	}
	defer f.Close()
	mem, err := remote.MapArena(f)
	if err != nil {
		log.Warn("cannot map the arena: buffers go over the socket", "err", err)
		return nil
	}
	return mem
}

// ContextBounds bound a device context's device (Options.OpenContext).
type ContextBounds struct {
	// DataBytes is the RLIMIT_DATA of the context's executor
	// (sandbox.DataLimit of what the context may hold); 0: the worker's.
	DataBytes uint64
	// Limits returns the instance's kernel limit and build budget (0:
	// none), which the main process's watchdog enforces on the whole
	// worker; the worker ends a context's executor that leaves a call
	// unanswered for a little less (executorBound), first. nil: no
	// bound.
	Limits func() (kernel, build time.Duration)
	// Arena returns the memory the context's executor shares with the
	// worker for its buffers (docs/executor-protocol.md "Shared buffer
	// memory"), which the main process makes; nil, or an error: none,
	// and its buffers' bytes cross its socket.
	Arena func() (*os.File, error)
}

// executorCloseWait bounds the executor's answer to close and its exit
// after it (docs/isolation.md "Executors"): past it, it is killed.
// Nothing is lost by killing an executor being closed.
const executorCloseWait = 5 * time.Second

// executorDevice is the device of an executor process: a remote.Device
// with the process that serves it.
type executorDevice struct {
	*remote.Device
	pid int

	status   syscall.WaitStatus // how the executor ended, once it did
	waitErr  error
	finished chan struct{} // closed once it was reaped
	killed   atomic.Bool
}

// openExecutor starts an executor for device index on the socket pair
// the main process gave this worker (WorkerExecutorFD and
// WorkerExecutorPeerFD) and returns its device.
func openExecutor(index int) (*executorDevice, error) {
	mine, theirs := os.NewFile(WorkerExecutorFD, "executor"), os.NewFile(WorkerExecutorPeerFD, "executor-peer")
	if mine == nil || theirs == nil {
		return nil, errors.New("executor: no socket pair on fds 4 and 5")
	}
	// The arena, where the main process gave one.
	var arena *os.File
	if os.Getenv(EnvArena) == "1" {
		arena = os.NewFile(WorkerArenaFD, "executor-arena")
	}
	return startExecutor(index, mine, theirs, arena, ContextBounds{})
}

// openContextExecutor starts an executor for one device context of an
// instance (docs/isolation.md "Device contexts") on a socket pair of its
// own: an AF_UNIX pair, connected to nothing else, is the one kind of
// socket a worker's seccomp filter lets it make.
func openContextExecutor(index int, b ContextBounds) (*executorDevice, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("context executor: socketpair: %w", err)
	}
	// An arena of its own, from the main process (the worker cannot make
	// shared memory, and one context's executor must never map
	// another's buffers); without one it still works, over its socket.
	var arena *os.File
	if b.Arena != nil {
		if arena, err = b.Arena(); err != nil {
			slog.Warn("context executor without an arena: its buffers cross its socket", "err", err)
			arena = nil
		}
	}
	return startExecutor(index, os.NewFile(uintptr(fds[0]), "executor"), os.NewFile(uintptr(fds[1]), "executor-peer"), arena, b)
}

// startExecutor starts an executor for device index serving the socket
// theirs, bounded by b, and returns its device, spoken to over mine;
// arena, if not nil, is memory the two share for the executor's buffers.
// It closes the files.
func startExecutor(index int, mine, theirs, arena *os.File, b ContextBounds) (*executorDevice, error) {
	defer theirs.Close()
	var mem []byte
	files := []uintptr{0, 1, 2, theirs.Fd()}
	if arena != nil {
		defer arena.Close()
		var err error
		if mem, err = remote.MapArena(arena); err != nil {
			mine.Close()
			return nil, fmt.Errorf("executor: %w", err)
		}
		syscall.CloseOnExec(int(arena.Fd()))
		files = append(files, arena.Fd())
	}
	// The mapping is the device's once SetArena has it; until then a
	// failure unmaps it here.
	handed := false
	defer func() {
		if mem != nil && !handed {
			syscall.Munmap(mem)
		}
	}()
	// The worker's end first, as a descriptor the executor does not
	// inherit; the executor's end only as its fd 3.
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	syscall.CloseOnExec(int(theirs.Fd()))
	env := []string{envExecutorDevice + "=" + strconv.Itoa(index)}
	if arena != nil {
		env = append(env, envExecutorArena+"=1")
	}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != EnvWorker && name != EnvExecutor && name != EnvArena && name != envExecutorDevice && name != envExecutorArena {
			env = append(env, kv)
		}
	}
	e := &executorDevice{finished: make(chan struct{})}
	// ForkExec, not os/exec: a plain vfork-style clone and wait4, which
	// the worker's seccomp filter allows. The executor dies with the
	// thread that started it; in a worker it is also in the worker's PID
	// namespace, which ends with the worker. It leads a process group of
	// its own, which it and what it starts cannot leave (its filter) and
	// which the reaper kills when it ends; the main process stops the
	// group to preempt a turn (worker.childProcess.Signal).
	e.pid, err = children.start(e, func() (int, error) {
		return syscall.ForkExec(selfExe, []string{"vgpud-executor", roleExecutor}, &syscall.ProcAttr{
			Env:   env,
			Files: files,
			Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true},
		})
	})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("executor: start: %w", err)
	}
	theirs.Close()
	// Its memory bound before it runs anything of the guest's: the
	// guest's programs reach it only through the socket, later.
	if b.DataBytes != 0 {
		if err := sandbox.SetDataBound(e.pid, b.DataBytes); err != nil {
			conn.Close()
			e.kill()
			<-e.finished
			return nil, fmt.Errorf("executor for device %d: %w", index, err)
		}
	}
	// The worker's end blocks for each reply: a worker polling for it
	// would take the CPU from the kernel it waits for (bench/README.md,
	// "Poll-then-block").
	if e.Device, err = remote.NewDevice(conn.(*net.UnixConn)); err != nil {
		// The executor ends once its socket does.
		e.waitOrKill(executorCloseWait)
		return nil, fmt.Errorf("executor for device %d (%s): %w", index, e.describe(), err)
	}
	if mem != nil {
		e.Device.SetArena(mem)
		handed = true
	}
	if b.Limits != nil {
		e.Device.SetWatchdog(&remote.Watchdog{
			Bound:   func(op remote.Op) time.Duration { return executorBound(op, b.Limits) },
			Paused:  continued.Load,
			Expired: func(remote.Op, time.Duration) { e.kill() },
		})
	}
	return e, nil
}

// executorBound is how long the worker waits for an executor's answer to
// op (docs/isolation.md "Executors"): the budget the main process's
// watchdog gives the call (a build's for a build, a device turn's for
// anything else) less a margin of a quarter of it, at least 2 s and at
// most half: with remote.Watchdog's confirmation (a tenth of the bound)
// the worker has ended a hung, stopped or half-replying executor, and
// its context alone, and released the turn, well before the main
// process would end the worker and every context of the VM. 0 where the
// budget is none.
func executorBound(op remote.Op, limits func() (kernel, build time.Duration)) time.Duration {
	kernel, build := limits()
	d := kernel
	if op == remote.OpBuild {
		d = build
	}
	margin := min(max(d/4, 2*time.Second), d/2)
	return d - margin
}

// kill ends the executor at once (SIGKILL), unless it was reaped (its
// pid may be another process's by then).
func (e *executorDevice) kill() {
	e.killed.Store(true)
	children.signal(e, syscall.SIGKILL)
}

// Abort kills the executor (aggregator's aborter): a context's destroy
// or reset uses it when a call to the executor does not return.
func (e *executorDevice) Abort() { e.kill() }

// waitOrKill waits at most bound for the executor's end, then kills it
// and waits for that.
func (e *executorDevice) waitOrKill(bound time.Duration) {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-e.finished:
	case <-t.C:
		e.kill()
		<-e.finished
	}
}

// reaped records how the executor ended; the reaper calls it once.
func (e *executorDevice) reaped(status syscall.WaitStatus, err error) {
	e.status, e.waitErr = status, err
	close(e.finished)
}

// describe says how the executor ended; only after finished.
func (e *executorDevice) describe() string {
	switch {
	case e.waitErr != nil:
		return fmt.Sprintf("not reaped: %v", e.waitErr)
	case e.status.Signaled() && e.killed.Load():
		return "killed by the worker (" + e.status.Signal().String() + ")"
	case e.status.Signaled():
		return "killed by signal " + e.status.Signal().String()
	default:
		return fmt.Sprintf("exit status %d", e.status.ExitStatus())
	}
}

// Close ends the executor: it asks it to close its device and exit, and
// kills it if it has not within executorCloseWait (a stopped or hung
// executor answers nothing; a context's destroy and a device reset must
// not wait on it).
func (e *executorDevice) Close() error {
	done := make(chan error, 1)
	go func() { done <- e.Device.Close() }()
	t := time.NewTimer(executorCloseWait)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C:
		e.kill() // its socket ends with it, and so does Device.Close
		err = <-done
	}
	e.waitOrKill(executorCloseWait)
	return err
}

// ended waits at most bound for the executor to end (its end follows its
// socket's) and reports whether it did, and how.
func (e *executorDevice) ended(bound time.Duration) (bool, string) {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-e.finished:
		return true, e.describe()
	case <-t.C:
		return false, "still running (it broke the protocol)"
	}
}

// selfExe runs this very program again (docs/sandbox.md: Landlock lets a
// worker execute this file and no other).
const selfExe = "/proc/self/exe"

// pollWindow is EnvPollWindow's duration: 0 when unset or unreadable, at
// most aggregator.MaxPollWindow.
func pollWindow() time.Duration {
	d, err := time.ParseDuration(os.Getenv(EnvPollWindow))
	if err != nil {
		return 0
	}
	return min(max(d, 0), aggregator.MaxPollWindow)
}

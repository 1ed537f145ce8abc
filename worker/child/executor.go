package child

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/remote"
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
// its init: when the worker ends, the kernel ends the executor) and
// process group (the main process stops and continues the group to
// preempt a turn). When the executor ends, by a crashing kernel or
// compiler, the worker's device is lost (gpu.ErrContextLost): the worker
// exits with ExitExecutor (ExitContextLost if the executor lives on but
// broke the protocol), and its domain starts again on a fresh pair.
const (
	// EnvExecutor, "1" in a worker's environment, makes the worker run
	// its device in an executor process.
	EnvExecutor = "VGPUD_WORKER_EXECUTOR"
	// envExecutorDevice, set to a device index, makes this program an
	// executor serving that device on ExecutorFD.
	envExecutorDevice = "VGPUD_EXECUTOR_DEVICE"
	// ExecutorFD is the executor's protocol socket.
	ExecutorFD = 3
	// WorkerExecutorFD and WorkerExecutorPeerFD are, in a worker started
	// with EnvExecutor, the two ends of the socket pair the main process
	// made for its executor: the worker's and the executor's (which
	// becomes the executor's ExecutorFD).
	WorkerExecutorFD     = 4
	WorkerExecutorPeerFD = 5
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
	dev, err := gpu.Open(strconv.Itoa(index))
	if err != nil {
		log.Error("open device", "err", err)
		return 2
	}
	if err := remote.Serve(conn, dev); err != nil {
		log.Error("executor ends", "err", fmt.Sprint(err))
		return 1
	}
	return 0
}

// executorDevice is the device of an executor process: a remote.Device
// with the process that serves it.
type executorDevice struct {
	*remote.Device
	pid int

	status   syscall.WaitStatus // how the executor ended, once it did
	waitErr  error
	finished chan struct{} // closed once it was reaped
}

// openExecutor starts an executor for device index on the socket pair
// the main process gave this worker (WorkerExecutorFD and
// WorkerExecutorPeerFD) and returns its device.
func openExecutor(index int) (*executorDevice, error) {
	mine, theirs := os.NewFile(WorkerExecutorFD, "executor"), os.NewFile(WorkerExecutorPeerFD, "executor-peer")
	if mine == nil || theirs == nil {
		return nil, errors.New("executor: no socket pair on fds 4 and 5")
	}
	return startExecutor(index, mine, theirs)
}

// openContextExecutor starts an executor for one device context of an
// instance (docs/isolation.md "Device contexts") on a socket pair of its
// own: an AF_UNIX pair, connected to nothing else, is the one kind of
// socket a worker's seccomp filter lets it make.
func openContextExecutor(index int) (*executorDevice, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("context executor: socketpair: %w", err)
	}
	return startExecutor(index, os.NewFile(uintptr(fds[0]), "executor"), os.NewFile(uintptr(fds[1]), "executor-peer"))
}

// startExecutor starts an executor for device index serving the socket
// theirs, and returns its device, spoken to over mine. It closes both
// files.
func startExecutor(index int, mine, theirs *os.File) (*executorDevice, error) {
	defer theirs.Close()
	// The worker's end first, as a descriptor the executor does not
	// inherit; the executor's end only as its fd 3.
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	syscall.CloseOnExec(int(theirs.Fd()))
	env := []string{envExecutorDevice + "=" + strconv.Itoa(index)}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != EnvWorker && name != EnvExecutor && name != envExecutorDevice {
			env = append(env, kv)
		}
	}
	// ForkExec, not os/exec: a plain vfork-style clone and wait4, which
	// the worker's seccomp filter allows. The executor dies with the
	// thread that started it; in a worker it is also in the worker's PID
	// namespace, which ends with the worker.
	pid, err := syscall.ForkExec(selfExe, []string{"vgpud-executor"}, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2, theirs.Fd()},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("executor: start: %w", err)
	}
	theirs.Close()
	e := &executorDevice{pid: pid, finished: make(chan struct{})}
	go e.reap()
	if e.Device, err = remote.NewDevice(conn.(*net.UnixConn)); err != nil {
		// The executor ends once its socket does.
		<-e.finished
		return nil, fmt.Errorf("executor for device %d (%s): %w", index, e.describe(), err)
	}
	return e, nil
}

// reap waits for the executor's end.
func (e *executorDevice) reap() {
	defer close(e.finished)
	for {
		_, err := syscall.Wait4(e.pid, &e.status, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			e.waitErr = err
			return
		}
	}
}

// describe says how the executor ended; only after finished.
func (e *executorDevice) describe() string {
	switch {
	case e.waitErr != nil:
		return fmt.Sprintf("not reaped: %v", e.waitErr)
	case e.status.Signaled():
		return "killed by signal " + e.status.Signal().String()
	default:
		return fmt.Sprintf("exit status %d", e.status.ExitStatus())
	}
}

// Close ends the executor: it closes its device and exits.
func (e *executorDevice) Close() error {
	err := e.Device.Close()
	<-e.finished
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

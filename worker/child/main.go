package child

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/worker/sandbox"
	"github.com/vgpud/vgpud/worker/wire"
)

// The environment of a worker process, which the main process (package
// worker) starts by executing its own binary again with RoleWorker.
const (
	// EnvWorker is "1" in a worker process (and its executors): the
	// fault handlers (fault_linux.go) and the exits on a lost device read
	// it. It names no role: RoleWorker does.
	EnvWorker = "VGPUD_WORKER"
	// EnvLog is the worker's log level (debug, info, warn, error); its
	// logs are JSON lines on stderr, which the main process relays.
	EnvLog = "VGPUD_WORKER_LOG"
	// EnvCache is the domain's compiler cache directory (PoCL's
	// POCL_CACHE_DIR is set to the same), trimmed to Hello's cap.
	EnvCache = "VGPUD_WORKER_CACHE"
)

// The roles a process of vgpud's binary is started in besides its own,
// named by its parent as the program's first argument (docs/worker.md):
// a flag no program defines, so a program that was not built to take a
// role (one that forgot EnterRole) refuses it as an unknown flag rather
// than running as itself.
const (
	// RoleWorker makes the program a worker (Main).
	RoleWorker = "-vgpud-role=worker"
	// roleExecutor makes it an executor (executorMain), which a worker
	// starts.
	roleExecutor = "-vgpud-role=executor"
)

// ProtocolFD is the descriptor of the worker's end of the protocol
// socket (the first of exec.Cmd.ExtraFiles).
const ProtocolFD = 3

// EnterRole runs this process in the role its parent named (RoleWorker,
// a worker's executor, or one of the pool's sandbox probes,
// sandbox.EnterProbe) and exits with its code; in a process started
// without a role it returns at once. A program whose binary the worker
// pool executes as a worker (vgpud, and each benchmark and test binary
// that runs a pool: worker.Config.Executable defaults to the program
// itself) calls it first thing in main or TestMain. Nothing takes a
// process over from an init function.
//
// A vgpud that predates roles named a worker by its environment alone
// (EnvWorker "1", and an executor by its device index): such a vgpud
// still runs during an upgrade in place that rolls back, and the workers
// it starts run this binary, which is on disk by then; so EnterRole
// takes those too.
func EnterRole() {
	sandbox.EnterProbe() // the worker pool's sandbox probes: this program again
	role := ""
	if len(os.Args) >= 2 {
		role = os.Args[1]
	}
	switch {
	case role == RoleWorker, role != roleExecutor && os.Getenv(EnvWorker) == "1" && os.Getenv(envExecutorDevice) == "":
		// The protocol loop stays on the thread the process started on:
		// its parent-death signal (wire.Parent) is that thread's.
		runtime.LockOSThread()
		os.Exit(Main())
	case role == roleExecutor, os.Getenv(envExecutorDevice) != "":
		os.Exit(executorMain())
	}
}

// Main runs a worker process: it serves the protocol on ProtocolFD until
// the main process hangs up, and returns the exit code.
func Main() int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	// Confined before anything else runs: the OpenCL runtime is loaded,
	// and guest code runs, only once this returns. No policy, no worker.
	pol, err := sandbox.PolicyFromEnv()
	if err != nil {
		log.Error("refusing to run unconfined", "err", err.Error())
		return 2
	}
	rep, err := sandbox.Enter(pol)
	if err != nil {
		log.Error("cannot enter the sandbox", "err", err.Error())
		return 2
	}
	if pol.Off {
		log.Warn("UNSAFE: this worker runs without its sandbox (docs/sandbox.md)")
	} else {
		log.Debug("sandboxed", "uid", rep.UID, "landlock_abi", rep.LandlockABI, "seccomp", rep.Seccomp, "weak", rep.Weak)
	}
	guardRuntimeStacks(log) // where kernels run in the worker (no executors)
	if sel, ok := os.LookupEnv(EnvSelfTest); ok {
		return runSelfTest(sel, os.Stdout)
	}
	f := os.NewFile(ProtocolFD, "worker-protocol")
	if f == nil {
		log.Error("no protocol socket on fd 3")
		return 2
	}
	conn, err := wire.FileConn(f)
	f.Close()
	if err != nil {
		log.Error("protocol socket", "err", err)
		return 2
	}
	opts := Options{CacheDir: os.Getenv(EnvCache), Logger: log}
	if os.Getenv(EnvExecutor) == "1" {
		// Its PID namespace's init reaps what the namespace hands it
		// (an executor's orphans); the worker runs no OpenCL runtime
		// whose children it could take.
		if os.Getpid() == 1 {
			children.reapAll()
		}
		watchContinued()
		opts.Open = func(i int) (gpu.Device, error) { return openExecutor(i) }
		opts.OpenContext = func(i int, b ContextBounds) (gpu.Device, error) { return openContextExecutor(i, b) }
	}
	if err := Serve(conn, opts); err != nil {
		log.Error("worker ends", "err", fmt.Sprint(err))
		return 1
	}
	return 0
}

// runtimeStackGuard is the guard region below each stack of the OpenCL
// runtime's threads in a worker or executor (gpu.GuardRuntimeThreads):
// address space only. A kernel's private arrays live on those stacks; one
// that passes its stack by up to this much faults there, and its process
// ends (the context is lost), rather than storing into a mapping below.
const runtimeStackGuard = 1 << 30

// guardRuntimeStacks gives the runtime's threads made from now on
// runtimeStackGuard. If it cannot, the process goes on with glibc's
// one-page guard, and says so.
func guardRuntimeStacks(log *slog.Logger) {
	if err := gpu.GuardRuntimeThreads(runtimeStackGuard); err != nil {
		log.Warn("the OpenCL runtime's threads keep a one-page stack guard", "err", err.Error())
	}
}

// logLevel is the level EnvLog names (info when none).
func logLevel() slog.Level {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(EnvLog))); err != nil {
		level = slog.LevelInfo
	}
	return level
}

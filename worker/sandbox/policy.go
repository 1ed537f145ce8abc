package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// EnvPolicy is the environment variable that carries a worker's Policy,
// as JSON, from the main process (Policy.Apply) to the worker
// (PolicyFromEnv).
const EnvPolicy = "VGPUD_WORKER_SANDBOX"

// Errors.
var (
	// ErrNoPolicy: the worker's environment carries no policy. A worker
	// refuses to run unconfined unless the main process said so.
	ErrNoPolicy = errors.New("no sandbox policy in the environment (" + EnvPolicy + ")")
	// ErrUnsupported: this system has no sandbox (not Linux).
	ErrUnsupported = errors.New("worker sandbox not supported on this system")
	// ErrUnreachable: the worker's uid cannot reach a directory it must
	// use.
	ErrUnreachable = errors.New("directory not reachable by the worker's uid")
)

// Default limits (Limits).
const (
	// DefaultOpenFiles bounds a worker's descriptors: an instance keeps
	// two (its eventfds; guest RAM and its page are closed once mapped),
	// the OpenCL runtime a few while it loads and builds.
	DefaultOpenFiles = 256
	// DataOverhead is the private memory a worker needs besides its
	// instances' device memory and programs and its threads' stacks: the
	// Go runtime, PoCL and LLVM while it compiles (a worker of the mdev
	// tests peaks at about 430 MiB of private memory, its guest's 256 MiB
	// of buffers included).
	DataOverhead = 1 << 30
	// DataPerCPU is the private memory of the threads PoCL starts per CPU
	// (the pthread device runs one per compute unit): an 8 MiB stack each
	// (glibc's default, which counts as private memory), with room.
	DataPerCPU = 16 << 20
	// ProcessesBase and ProcessesPerCPU make DefaultProcesses: the Go
	// runtime's threads (one per CPU and one per blocking call), PoCL's
	// (one per compute unit), the linker, with room for many instances'
	// concurrent calls.
	ProcessesBase   = 256
	ProcessesPerCPU = 4
	// ProcessesPerContext is what one device context's executor adds
	// (docs/isolation.md "Device contexts"): its Go runtime's threads and
	// PoCL's, for up to MaxContextExecutors of them.
	ProcessesPerContext = 16
	MaxContextExecutors = 64
	// DefaultDirBytes is the size of a worker's private directory when
	// neither DirBytes nor FileBytes says.
	DefaultDirBytes = 512 << 20
)

// DefaultProcesses is the RLIMIT_NPROC of a worker (Limits.Processes).
func DefaultProcesses() uint64 {
	return ProcessesBase + ProcessesPerCPU*uint64(runtime.NumCPU()) +
		MaxContextExecutors*(ProcessesPerContext+uint64(runtime.NumCPU()))
}

// PrivateView is where a worker finds its private directory
// (Policy.Private) in its file view: not at its host path, whose parent
// (holding other workers' directories) it must not see.
const PrivateView = "/worker"

// Policy is what a worker process may touch. Paths are files or
// directories (a directory grants the same on everything beneath it); a
// path that does not exist on this host is skipped. Symbolic links are
// followed when the policy is applied: the right lands on their target.
//
// Where the host allows (Report.View), the worker's root is a private
// file view that holds only these paths (and its own /proc): anything
// else does not exist for it, not even as a name to stat.
type Policy struct {
	// Read may be read (files) or listed and read (directories).
	Read []string `json:"read,omitempty"`
	// ReadExec may be read and executed (execve). Mapping a readable file
	// executable (a shared library) needs only Read.
	ReadExec []string `json:"read_exec,omitempty"`
	// Write may be read, written and truncated, and, in directories,
	// files and directories may be created, renamed and removed. No
	// device, socket, pipe or symbolic link may be created anywhere.
	Write []string `json:"write,omitempty"`
	// Devices are device nodes the worker opens read-write and drives
	// with ioctl (a GPU's: docs/sandbox.md "Platforms"): bound as devices
	// in the file view, granted read, write and (Landlock ABI 5 and
	// later) ioctl by Landlock. A policy with devices lets every ioctl
	// request through seccomp: a vendor driver's requests cannot be
	// listed, and Landlock confines device ioctls to these nodes.
	Devices []string `json:"devices,omitempty"`
	// Syscalls are system calls allowed with any arguments beyond the
	// worker's allowlist (a vendor runtime's needs, or an operator's
	// override); names this architecture lacks are skipped.
	Syscalls []string `json:"syscalls,omitempty"`
	// SharedMemory lets the worker map shared anonymous memory, which
	// the filter otherwise refuses because RLIMIT_DATA does not count it
	// (NVIDIA's runtime needs it). Its bound is then the worker's cgroup
	// memory.max where vgpud's cgroup is delegated, and nothing else.
	SharedMemory bool `json:"shared_memory,omitempty"`
	// Diagnose makes the seccomp filter report instead of only refuse:
	// every system call the filter would refuse, and every call that
	// names a file, goes to a supervisor in the main process
	// (Supervise), which records it and answers as the filter would
	// (EPERM), or lets the file call go on. NotifyFD is the socket the
	// worker sends the filter's listener descriptor on. For vgpud
	// -sandbox-diagnose only: the worker runs as confined as ever, but
	// slower.
	Diagnose bool `json:"diagnose,omitempty"`
	NotifyFD int  `json:"notify_fd,omitempty"`
	// Private is the worker's private directory (compiler cache, TMPDIR,
	// HOME), with Write's rights. In the file view it is a tmpfs of
	// Limits.DirBytes at PrivateView, and this host directory stays
	// empty (PrivateDir names it from the main process):
	// Enter points the environment variables and the working directory
	// that name it there.
	Private string `json:"private,omitempty"`
	// View makes Enter build the worker's file view. Apply sets it when
	// the host allows a view (Report.View); anything set before is
	// overwritten.
	View bool `json:"view,omitempty"`
	// Limits are the worker's resource limits.
	Limits Limits `json:"limits"`
	// ParentDeath is the signal the worker gets when the thread that
	// started it ends (exec.Cmd's SysProcAttr.Pdeathsig, which Apply
	// copies here): Enter sets it again on the thread it executes the
	// worker from, which need not be the one the kernel set it on.
	ParentDeath syscall.Signal `json:"parent_death,omitempty"`
	// Off runs the worker unconfined. Only tests and benchmarks that
	// must measure without the sandbox set it; the worker logs that it
	// runs unconfined.
	Off bool `json:"off,omitempty"`
}

// Limits are a worker's resource limits (setrlimit). A core dump is never
// written (RLIMIT_CORE is 0): it would hold guest data.
//
// RLIMIT_AS is not used: the Go runtime and LLVM reserve large ranges of
// address space they never touch, and every guest's RAM mapped into the
// worker counts against it, so any bound would either be meaningless or
// refuse to map a large guest. RLIMIT_DATA counts what matters: private
// writable memory (heap, device buffers of the CPU device, stacks), not
// the shared guest-RAM mappings.
//
// RLIMIT_CPU is not used either: it counts CPU time over the whole life of
// a process and a worker lives as long as its domain, so it would end
// healthy long-lived workers. The main process bounds time instead: every
// device turn and every build is timed by its watchdog, which kills a
// worker that overruns.
type Limits struct {
	// OpenFiles is RLIMIT_NOFILE; 0: DefaultOpenFiles.
	OpenFiles uint64 `json:"open_files,omitempty"`
	// FileBytes is RLIMIT_FSIZE, the largest file the worker may write
	// (the compiler cache's cap); 0: no limit.
	FileBytes uint64 `json:"file_bytes,omitempty"`
	// DataBytes is the soft RLIMIT_DATA, the private memory the worker may
	// map; 0: no limit. SetDataLimit moves it in a running worker.
	DataBytes uint64 `json:"data_bytes,omitempty"`
	// Processes is RLIMIT_NPROC, the tasks (threads and processes) the
	// worker may have at once; 0: DefaultProcesses. The kernel counts a
	// uid's tasks per user namespace, so the bound is the worker's own
	// only where it has a user namespace: elsewhere Enter leaves the
	// limit as it was (all workers would share one count) and Probe
	// reports that.
	Processes uint64 `json:"processes,omitempty"`
	// DirBytes is the size of the tmpfs that holds the worker's private
	// directory in its file view (Policy.View); 0: twice FileBytes, or
	// DefaultDirBytes without FileBytes. Writing past it fails with
	// ENOSPC. Without a file view the directory is the host's and only
	// its file system bounds it.
	DirBytes uint64 `json:"dir_bytes,omitempty"`
	// DataMax is the hard RLIMIT_DATA, up to which the main process may
	// raise DataBytes later without privilege; 0: DataBytes. The worker
	// cannot raise its own limits (its seccomp filter refuses).
	DataMax uint64 `json:"data_max,omitempty"`
}

// DataLimit is the RLIMIT_DATA for a worker whose instances together hold
// at most memBytes of device memory and programBytes of programs.
func DataLimit(memBytes, programBytes uint64) uint64 {
	return memBytes + programBytes + DataOverhead + uint64(runtime.NumCPU())*DataPerCPU
}

// Report says what confinement workers get on this host (Probe) or what
// a worker got (Enter).
type Report struct {
	// Namespaces are the namespaces a worker is started in: some of
	// user, mount, network, pid, ipc, uts.
	Namespaces []string `json:"namespaces,omitempty"`
	// UID and GID are the host ids a worker runs as.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// LandlockABI is the kernel's Landlock ABI version; 0: no Landlock.
	LandlockABI int `json:"landlock_abi"`
	// View is whether a worker's root is its private file view (Probe)
	// or was made so (Enter): only its policy's paths exist for it.
	View bool `json:"view"`
	// Cgroup is the delegated cgroup v2 directory in which each worker
	// gets a cgroup of its own (pids.max, memory.max); "" where there is
	// none (Probe).
	Cgroup string `json:"cgroup,omitempty"`
	// Seccomp is whether a seccomp filter can be (Probe) or was (Enter)
	// installed.
	Seccomp bool `json:"seccomp"`
	// Weak says, one line each, which protections are weaker than
	// designed and why.
	Weak []string `json:"weak,omitempty"`
}

func (r *Report) weak(format string, args ...any) {
	r.Weak = append(r.Weak, fmt.Sprintf(format, args...))
}

// PolicyFromEnv returns the policy the main process put in this worker's
// environment (EnvPolicy).
func PolicyFromEnv() (Policy, error) {
	v, ok := os.LookupEnv(EnvPolicy)
	if !ok {
		return Policy{}, ErrNoPolicy
	}
	var p Policy
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return Policy{}, fmt.Errorf("sandbox policy in %s: %w", EnvPolicy, err)
	}
	return p, nil
}

// env is the environment entry that carries p.
func (p Policy) env() (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode sandbox policy: %w", err)
	}
	return EnvPolicy + "=" + string(b), nil
}

// withDefaults fills the limits left zero that have a default.
func (l Limits) withDefaults() Limits {
	if l.OpenFiles == 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	if l.Processes == 0 {
		l.Processes = DefaultProcesses()
	}
	switch {
	case l.DirBytes != 0:
	case l.FileBytes != 0:
		l.DirBytes = 2 * l.FileBytes
	default:
		l.DirBytes = DefaultDirBytes
	}
	switch {
	case l.DataBytes == 0:
		l.DataMax = 0 // no soft limit, so no hard one
	case l.DataMax < l.DataBytes:
		l.DataMax = l.DataBytes
	}
	return l
}

package sandbox

import (
	"fmt"
	"slices"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// allowed are the system calls a worker may make with any arguments:
// those the Go runtime, the worker, PoCL (with hwloc and LLVM) and the
// linker PoCL runs make (measured with strace -f on real workers,
// docs/sandbox.md), and harmless relatives of them (the other stat and
// read variants). Names a CPU architecture lacks are skipped.
//
// Left out on purpose, among everything else: creating sockets or
// connecting them (the worker talks only over the socket it inherits),
// ptrace, process_vm_*, mount and namespaces, bpf, perf_event_open, keys,
// modules, kexec, reboot, swap, io_uring (which would bypass this
// filter), userfaultfd, memfd_create and shared anonymous mappings (memory
// RLIMIT_DATA does not count), execveat, metadata changes Landlock
// does not cover (chmod, chown, utimes, xattrs), links, mknod, SysV IPC,
// scheduling policy, setrlimit and setting credentials.
var allowed = []string{
	// Memory (mmap is below, with its flags).
	"brk", "munmap", "mprotect", "mremap", "madvise", "msync", "membarrier",
	// Files (Landlock decides which).
	"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
	"lseek", "close", "close_range", "open", "openat", "openat2", "creat",
	"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs",
	"access", "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64",
	"getcwd", "chdir", "fchdir", "umask",
	"mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2",
	"truncate", "ftruncate", "fallocate", "fsync", "fdatasync", "flock", "fadvise64",
	"fcntl", "dup", "dup2", "dup3", "pipe", "pipe2",
	// The inherited protocol socket.
	"recvmsg", "sendmsg", "recvfrom", "sendto", "getsockopt", "setsockopt", "getsockname", "getpeername", "shutdown",
	// Waiting.
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
	"poll", "ppoll", "select", "pselect6", "eventfd", "eventfd2",
	"futex", "futex_waitv", "nanosleep", "clock_nanosleep", "sched_yield", "restart_syscall",
	// Threads and the linker's process (clone is below, with its flags);
	// vfork is clone with exactly cloneSpawn's flags, which PoCL 6 starts
	// llvm-spirv with for a SPIR-V build.
	"execve", "vfork", "wait4", "waitid", "exit", "exit_group",
	"set_tid_address", "set_robust_list", "get_robust_list", "rseq", "arch_prctl",
	// Signals (sending them is below).
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait", "sigaltstack",
	// Reading the clock and the process's own state.
	"clock_gettime", "clock_getres", "gettimeofday", "time", "times", "getrusage",
	"gettid", "getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups", "getresuid", "getresgid",
	"getpgrp", "getpgid", "getsid", "getpriority", "getcpu", "getrlimit", "getrandom", "uname", "sysinfo",
	"sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
	"sched_get_priority_max", "sched_get_priority_min",
}

// cloneSpawn are the flags of the clone with which glibc's posix_spawn
// (and Go's os/exec) start a process that executes another program: it
// shares the caller's memory, and the caller waits until it has executed
// its program (or ended). PoCL 3.1 starts the linker so (clone3 first,
// which the filter answers ENOSYS).
const cloneSpawn = unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)

// maxPID is the largest process ID Linux gives (PID_MAX_LIMIT on 64-bit).
const maxPID = 1 << 22

// negativePID is -n as a system call's 64-bit argument: a pid_t
// argument arrives sign-extended.
func negativePID(n int64) uint64 { return uint64(-n) }

// cloneNamespaces are the clone flags that make new namespaces.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// prctlAllowed are the prctl operations a worker may use: naming
// threads and mappings (the Go runtime, LLVM), reading its own state, and
// its parent-death signal (wire.Parent: an upgrade in place).
var prctlAllowed = []uint64{
	unix.PR_SET_NAME, unix.PR_GET_NAME, unix.PR_SET_VMA, unix.PR_GET_DUMPABLE, unix.PR_SET_PDEATHSIG,
	unix.PR_GET_NO_NEW_PRIVS, unix.PR_GET_SECCOMP, unix.PR_CAPBSET_READ,
}

// ioctlAllowed are the ioctl requests a worker may make: is this a
// terminal (C libraries ask of every stream), the generic descriptor
// ones, and IOCTL_PRIVCMD_MMAPBATCH_V2, with which guestmem maps a Xen
// guest's frames through the privcmd fd the main process restricted to
// that guest (docs/isolation.md "Guest RAM"). No other privcmd request:
// not DM_OP (device-model operations on the guest), MMAP_RESOURCE,
// RESTRICT, HYPERCALL, MMAP or MMAPBATCH. Landlock cannot restrict ioctl
// on anything but device files before ABI 5, and from ABI 5 not on fds
// opened outside the sandbox; this covers every file.
var ioctlAllowed = []uint64{
	unix.TCGETS, unix.TIOCGWINSZ, unix.TIOCINQ, // TIOCINQ is FIONREAD
	ioctlFIONBIO, ioctlFIOCLEX, ioctlFIONCLEX,
	ioctlPrivcmdMmapBatchV2,
}

// Generic descriptor ioctls (asm-generic/ioctls.h), which x/sys/unix does
// not name.
const (
	ioctlFIONBIO  = 0x5421
	ioctlFIONCLEX = 0x5450
	ioctlFIOCLEX  = 0x5451
)

// ioctlPrivcmdMmapBatchV2 is IOCTL_PRIVCMD_MMAPBATCH_V2 (Linux
// include/uapi/xen/privcmd.h): _IOC(_IOC_NONE, 'P', 4, 32). The number is
// guestmem.IoctlPrivcmdMmapBatchV2 (this package imports no other vgpud
// package; a test compares them).
const ioctlPrivcmdMmapBatchV2 = 'P'<<8 | 4 | 32<<16

// errnoENOSYS returns ENOSYS: clone3's flags sit in memory, out of the
// filter's sight, so it is refused as if the kernel lacked it, and the C
// library falls back to clone, whose flags the filter checks.
const errnoENOSYS = seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))

// pathSyscalls are the allowed system calls that name a file: in a
// diagnosis (Policy.Diagnose) the supervisor sees each, to report the
// files the worker looked for and could not have (Supervise).
var pathSyscalls = []string{
	"open", "openat", "openat2", "creat", "stat", "lstat", "newfstatat", "statx",
	"access", "faccessat", "faccessat2", "readlink", "readlinkat", "execve",
}

// syscallPolicy is the seccomp policy of a worker whose process id is
// pid, confined by p: the allowlist with p's additions (Policy.Syscalls;
// every ioctl where p has devices), and everything else refused with
// EPERM, or, in a diagnosis, sent to the supervisor.
func syscallPolicy(pid int, p Policy) (seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return seccomp.Policy{}, fmt.Errorf("sandbox: seccomp architecture: %w", err)
	}
	var names, notify []string
	for _, n := range slices.Concat(allowed, p.Syscalls) {
		if _, ok := info.SyscallNames[n]; !ok || slices.Contains(names, n) || slices.Contains(notify, n) {
			continue
		}
		if p.Diagnose && slices.Contains(pathSyscalls, n) {
			notify = append(notify, n)
			continue
		}
		names = append(names, n)
	}
	equal := func(arg uint32, v uint64) seccomp.Condition {
		return seccomp.Condition{Argument: arg, Operation: seccomp.Equal, Value: v}
	}
	var cond []seccomp.NameWithConditions
	// New threads (CLONE_THREAD: the kernel then requires CLONE_SIGHAND
	// and CLONE_VM, so the thread is of this process), never in a new
	// namespace; and the one process PoCL makes, the linker, started by
	// posix_spawn as exactly cloneSpawn. No fork: a copy of the
	// worker's memory would have a data limit of its own.
	cond = append(cond,
		seccomp.NameWithConditions{Name: "clone", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD},
			{Argument: 0, Operation: seccomp.BitsNotSet, Value: cloneNamespaces},
		}},
		seccomp.NameWithConditions{Name: "clone", Conditions: seccomp.ArgumentConditions{equal(0, cloneSpawn)}},
	)
	// Signals only to this process and its own threads; or, for the
	// init of its own PID namespace (pid 1), to any process it can name,
	// which are its own and its children's (its executor's, which
	// inherits this filter and signals its own threads: the Go runtime's
	// preemption and crash), and with kill to any process group it can
	// name (an executor's, which it ends with its context), but not -1
	// (every process but itself). A negative pid is the sign-extended
	// 64-bit value the system call's int argument arrives as; any other
	// encoding of it falls outside both ranges and is refused.
	ownPIDs := seccomp.ArgumentConditions{equal(0, uint64(pid))}
	if pid == 1 {
		ownPIDs = seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.GreaterOrEqual, Value: 1},
			{Argument: 0, Operation: seccomp.LessOrEqual, Value: maxPID},
		}
		cond = append(cond, seccomp.NameWithConditions{Name: "kill", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.GreaterOrEqual, Value: negativePID(maxPID)},
			{Argument: 0, Operation: seccomp.LessOrEqual, Value: negativePID(2)},
		}})
	}
	cond = append(cond,
		seccomp.NameWithConditions{Name: "kill", Conditions: ownPIDs},
		seccomp.NameWithConditions{Name: "tgkill", Conditions: ownPIDs},
	)
	// A process group of its own, for a new executor: setpgid(0, 0) only,
	// which the child of the worker's spawn makes before it executes the
	// executor (syscall.SysProcAttr.Setpgid). An executor's filter refuses
	// it (it and the processes it starts stay in the group the worker
	// ends with its context).
	cond = append(cond, seccomp.NameWithConditions{Name: "setpgid", Conditions: seccomp.ArgumentConditions{
		equal(0, 0), equal(1, 0),
	}})
	// Any mapping but shared anonymous memory, which RLIMIT_DATA does not
	// count: shared mappings are of the guest RAM and instance pages the
	// main process hands over (and of files in the private directory,
	// whose sizes RLIMIT_FSIZE bounds).
	cond = append(cond,
		seccomp.NameWithConditions{Name: "mmap", Conditions: seccomp.ArgumentConditions{
			{Argument: 3, Operation: seccomp.BitsNotSet, Value: unix.MAP_SHARED},
		}},
		seccomp.NameWithConditions{Name: "mmap", Conditions: seccomp.ArgumentConditions{
			{Argument: 3, Operation: seccomp.BitsNotSet, Value: unix.MAP_ANONYMOUS},
		}},
	)
	// One kind of socket: an AF_UNIX stream pair, connected to nothing
	// but itself, for a device context's executor (docs/isolation.md
	// "Device contexts"). No socket that could reach an address.
	cond = append(cond, seccomp.NameWithConditions{Name: "socketpair", Conditions: seccomp.ArgumentConditions{
		equal(0, unix.AF_UNIX), equal(1, unix.SOCK_STREAM|unix.SOCK_CLOEXEC), equal(2, 0),
	}})
	// Limits may be read, never set: the worker must not raise its own.
	// It may set another process's memory limit (SetDataBound: its
	// executors', which it bounds by their contexts' quotas); without
	// CAP_SYS_RESOURCE nobody can raise a hard limit, and an executor's
	// own filter refuses it any prlimit64 that sets (executorPolicy). Its
	// own pid (0, or its number, 1 for a PID namespace's init) is never
	// a target.
	cond = append(cond,
		seccomp.NameWithConditions{Name: "prlimit64", Conditions: seccomp.ArgumentConditions{
			equal(0, 0), equal(2, 0),
		}},
		seccomp.NameWithConditions{Name: "prlimit64", Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.GreaterOrEqual, Value: 1},
			{Argument: 0, Operation: seccomp.LessOrEqual, Value: maxPID},
			{Argument: 0, Operation: seccomp.NotEqual, Value: uint64(pid)},
			equal(1, unix.RLIMIT_DATA),
		}},
	)
	// Stacking a further filter, which can only refuse more: an executor
	// adds its own (ConfineExecutor). Only SECCOMP_SET_MODE_FILTER, with
	// no flag but TSYNC.
	cond = append(cond, seccomp.NameWithConditions{Name: "seccomp", Conditions: seccomp.ArgumentConditions{
		equal(0, unix.SECCOMP_SET_MODE_FILTER), equal(1, unix.SECCOMP_FILTER_FLAG_TSYNC),
	}})
	for _, op := range prctlAllowed {
		cond = append(cond, seccomp.NameWithConditions{Name: "prctl", Conditions: seccomp.ArgumentConditions{equal(0, op)}})
	}
	// Becoming non-dumpable, never dumpable again (execve resets it, so
	// the confined image sets it itself).
	cond = append(cond, seccomp.NameWithConditions{Name: "prctl", Conditions: seccomp.ArgumentConditions{
		equal(0, unix.PR_SET_DUMPABLE), equal(1, 0),
	}})
	for _, req := range ioctlAllowed {
		cond = append(cond, seccomp.NameWithConditions{Name: "ioctl", Conditions: seccomp.ArgumentConditions{equal(1, req)}})
	}
	if p.SharedMemory && !slices.Contains(names, "mmap") {
		names = append(names, "mmap")
	}
	if slices.Contains(names, "mmap") {
		cond = slices.DeleteFunc(cond, func(c seccomp.NameWithConditions) bool { return c.Name == "mmap" })
	}
	if len(p.Devices) > 0 && !slices.Contains(names, "ioctl") {
		cond = append(cond, deviceIoctls()...)
	}
	if slices.Contains(names, "ioctl") {
		cond = slices.DeleteFunc(cond, func(c seccomp.NameWithConditions) bool { return c.Name == "ioctl" })
	}
	pol := seccomp.Policy{
		DefaultAction: seccomp.ActionErrno, // EPERM
		Syscalls: []seccomp.SyscallGroup{
			{Names: []string{"clone3"}, Action: errnoENOSYS},
			{Names: names, NamesWithCondtions: cond, Action: seccomp.ActionAllow},
		},
	}
	if p.Diagnose {
		// go-seccomp-bpf v1.6.0 refuses ActionUserNotify as an action
		// (its table of names lacks it): its stand-in, which nothing else
		// here uses, is ActionTrace, replaced in the assembled program
		// (loadDiagnosisFilter).
		pol.DefaultAction = notifyStandIn
		pol.Syscalls = append(pol.Syscalls, seccomp.SyscallGroup{Names: notify, Action: notifyStandIn})
	}
	return pol, nil
}

// restrictSyscalls installs the worker's seccomp filter on every thread
// (TSYNC), with no_new_privs. In a diagnosis it sends the filter's
// listener to the supervisor on p.NotifyFD and closes both.
func restrictSyscalls(pid int, p Policy) error {
	pol, err := syscallPolicy(pid, p)
	if err != nil {
		return err
	}
	if p.Diagnose {
		return loadDiagnosisFilter(pol, p.NotifyFD)
	}
	f := seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: pol}
	if err := seccomp.LoadFilter(f); err != nil {
		return fmt.Errorf("sandbox: seccomp: %w", err)
	}
	return nil
}

// deviceIoctls are the ioctl conditions of a policy with device nodes:
// any request whose type is not privcmd's ('P'), since a vendor driver's
// requests cannot be listed and Landlock (ABI 5 and later) keeps device
// ioctls to the policy's nodes. Landlock does not see descriptors opened
// outside the worker, such as the privcmd fd a Xen instance's guest RAM
// comes through, so privcmd's requests stay refused here but for the
// listed one. Seccomp compares words, not bytes: "the type byte (request
// bits 8-15) is not 0x50" is one condition per bit, any of which allows
// (a bit 0x50 has clear is set, or a bit it has set is clear).
func deviceIoctls() []seccomp.NameWithConditions {
	const typeP = 'P' << 8
	var out []seccomp.NameWithConditions
	for bit := uint64(1 << 8); bit <= 1<<15; bit <<= 1 {
		op := seccomp.BitsSet
		if typeP&bit != 0 {
			op = seccomp.BitsNotSet
		}
		out = append(out, seccomp.NameWithConditions{Name: "ioctl", Conditions: seccomp.ArgumentConditions{
			{Argument: 1, Operation: op, Value: bit},
		}})
	}
	return out
}

// notifyStandIn stands for SECCOMP_RET_USER_NOTIF in a diagnosis policy
// until it is assembled.
const notifyStandIn = seccomp.ActionTrace

// loadDiagnosisFilter installs pol on every thread with a listener
// (SECCOMP_FILTER_FLAG_NEW_LISTENER, which TSYNC accepts only with
// TSYNC_ESRCH) and sends the listener on the socket notifyFD.
func loadDiagnosisFilter(pol seccomp.Policy, notifyFD int) error {
	insts, err := pol.Assemble()
	if err != nil {
		return fmt.Errorf("sandbox: seccomp: %w", err)
	}
	for i, in := range insts {
		if r, ok := in.(bpf.RetConstant); ok && r.Val == uint32(notifyStandIn) {
			insts[i] = bpf.RetConstant{Val: unix.SECCOMP_RET_USER_NOTIF}
		}
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return fmt.Errorf("sandbox: seccomp: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	listener, err := seccompListener(prog,
		unix.SECCOMP_FILTER_FLAG_TSYNC|unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH|unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	if err != nil {
		return fmt.Errorf("sandbox: seccomp with a listener: %w", err)
	}
	defer unix.Close(listener)
	defer unix.Close(notifyFD)
	if err := unix.Sendmsg(notifyFD, []byte{1}, unix.UnixRights(listener), nil, 0); err != nil {
		return fmt.Errorf("sandbox: send the seccomp listener: %w", err)
	}
	return nil
}

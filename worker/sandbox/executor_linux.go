package sandbox

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// stopSignals are the signals whose default action stops a process: an
// executor sends none of them, not even to itself (a stopped executor
// would hold its context's device turn with no error to show for it).
var stopSignals = []uint64{uint64(unix.SIGSTOP), uint64(unix.SIGTSTP), uint64(unix.SIGTTIN), uint64(unix.SIGTTOU)}

// executorPolicy is the filter an executor whose process id is pid
// stacks on the worker's (docs/isolation.md "Executors"): the worker's
// filter lets its PID namespace's init signal every process it can name,
// and an executor inherits that filter, so it would reach its sibling
// executors and the worker. Everything the worker's filter allows stays
// allowed but:
//
//   - kill and tgkill to any process but pid (its own threads: the Go
//     runtime's preemption and crash signals), and any stop signal even to
//     itself;
//   - setting a resource limit (prlimit64 with a new value): the worker
//     sets the executor's memory bound from outside, and the executor must
//     not lower a sibling's;
//   - leaving its process group (setpgid, setsid): the worker starts each
//     executor as the leader of a group of its own and kills that group
//     when the executor ends, so every process the executor (guest code)
//     started ends with its context; the main process stops the group to
//     preempt a turn.
//
// Seccomp filters stack: a system call runs only if every filter allows
// it, so the worker's restrictions all remain, and nothing the executor
// or a process it starts does can remove this one.
func executorPolicy(pid int) seccomp.Policy {
	var cond []seccomp.NameWithConditions
	for _, name := range []string{"kill", "tgkill"} {
		cond = append(cond, seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.NotEqual, Value: uint64(pid)},
		}})
		sigArg := uint32(1)
		if name == "tgkill" {
			sigArg = 2
		}
		for _, sig := range stopSignals {
			cond = append(cond, seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{
				{Argument: sigArg, Operation: seccomp.Equal, Value: sig},
			}})
		}
	}
	cond = append(cond, seccomp.NameWithConditions{Name: "prlimit64", Conditions: seccomp.ArgumentConditions{
		{Argument: 2, Operation: seccomp.NotEqual, Value: 0},
	}})
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{{
			Names:              []string{"setrlimit", "setpgid", "setsid", "tkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal", "pidfd_open", "pidfd_getfd"},
			NamesWithCondtions: cond,
			Action:             seccomp.ActionErrno, // EPERM
		}},
	}
}

// ConfineExecutor stacks the executor's filter (executorPolicy) on every
// thread of this process, an executor: call it once Enter returned and
// before the device is opened, so that no guest code runs without it. In
// an unconfined worker (Policy.Off) it does nothing.
func ConfineExecutor(p Policy) error {
	if p.Off {
		return nil
	}
	// Not seccomp.Supported: its probe (strict mode with a flag) is a
	// call the worker's filter refuses. Enter checked that the worker
	// has a filter (a worker without one has no sandbox either).
	// no_new_privs is set already (Enter) and the worker's filter refuses
	// the prctl that sets it again.
	f := seccomp.Filter{Flag: seccomp.FilterFlagTSync, Policy: executorPolicy(unix.Getpid())}
	if err := seccomp.LoadFilter(f); err != nil {
		return fmt.Errorf("sandbox: executor's seccomp filter: %w", err)
	}
	return nil
}

// SetDataBound sets process pid's RLIMIT_DATA, soft and hard, to n
// bytes: the worker bounds each executor it starts by its context's
// quota (DataLimit), before the executor runs anything of the guest's.
// Lowering a limit needs no privilege; the worker's filter allows it for
// other processes only (never its own: it must not raise its soft limit
// to its hard one).
func SetDataBound(pid int, n uint64) error {
	lim := unix.Rlimit{Cur: n, Max: n}
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &lim, nil); err != nil {
		return fmt.Errorf("sandbox: set RLIMIT_DATA of process %d to %d: %w", pid, n, err)
	}
	return nil
}

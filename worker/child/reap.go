package child

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// children are the processes this worker started: its executors, each
// the leader of a process group of its own (startExecutor), which it
// kills when the executor ends: what the executor started ends with it.
// It reaps them, and, in a worker that is its PID namespace's init
// (reapAll), every process the namespace hands it: an executor's
// children come to the worker as orphans, which it must reap or keep as
// zombies that count against its RLIMIT_NPROC (docs/isolation.md
// "Executors").
var children = &reaper{procs: map[int]*executorDevice{}}

// reaper waits for a worker's children.
type reaper struct {
	mu     sync.Mutex // guards what follows; held across a fork, so a child is registered before it is reaped
	procs  map[int]*executorDevice
	asInit bool // reapAll runs: it reaps every child

	// orphans counts the processes reaped that this worker did not start.
	orphans atomic.Uint64
}

// start runs fork, which returns the pid of a new child of this process,
// and registers e as that child: reaping it ends e (reaped).
func (r *reaper) start(e *executorDevice, fork func() (int, error)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	r.procs[pid] = e
	if !r.asInit {
		go r.wait(pid, e)
	}
	return pid, nil
}

// wait reaps child pid, when no reapAll does. It waits for the child's
// end without reaping it (WNOWAIT), so that its pid, and with it its
// process group's ID, names nothing else while endGroup kills what is
// left in its group.
func (r *reaper) wait(pid int, e *executorDevice) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	r.mu.Lock()
	endGroup(pid)
	var st syscall.WaitStatus
	var err error
	for {
		_, err = syscall.Wait4(pid, &st, 0, nil)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	delete(r.procs, pid)
	r.mu.Unlock()
	e.reaped(st, err)
}

// signal sends sig to e's process and its process group if it was not
// reaped yet (after that its pid may name another process).
func (r *reaper) signal(e *executorDevice, sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.pid > 0 && r.procs[e.pid] == e {
		_ = syscall.Kill(e.pid, sig)
		_ = syscall.Kill(-e.pid, sig)
	}
}

// endGroup kills what is left of the process group an executor led (its
// pid is pgid): the processes it, or guest code in it, started, which
// its filter keeps in the group (docs/isolation.md "Executors"). Call it
// with r.mu held, once the executor has ended and before its pid can be
// another group's: only this worker makes process groups, and only
// under r.mu (start).
func endGroup(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH: nothing was left
}

// reapAll makes r reap every child of this process from now on, on each
// SIGCHLD: the executors it started, and the orphans the kernel
// reparents to it as its PID namespace's init. Call it before the first
// executor starts, and only in a worker whose device runs in executors:
// a worker that runs the OpenCL runtime itself would take from it the
// linker's status, which the runtime waits for. The goroutine it starts
// lives as long as the process.
func (r *reaper) reapAll() {
	r.mu.Lock()
	r.asInit = true
	r.mu.Unlock()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for {
			r.reapExited()
			<-ch
		}
	}()
}

// reapExited reaps every child that has ended, and ends the process
// group of each executor among them (endGroup: under r.mu, which no
// executor starts without).
func (r *reaper) reapExited() {
	for {
		r.mu.Lock()
		var st syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			r.mu.Unlock()
			continue
		}
		if err != nil || pid <= 0 {
			r.mu.Unlock()
			return
		}
		e := r.procs[pid]
		if e != nil {
			endGroup(pid)
			delete(r.procs, pid)
		}
		r.mu.Unlock()
		if e != nil {
			e.reaped(st, nil)
		} else {
			r.orphans.Add(1)
		}
	}
}

// continued counts the SIGCONTs this process received (watchContinued):
// a preemption stops the worker and its executors together, and a call
// to an executor must not be charged the time both stood still
// (remote.Watchdog.Paused).
var continued atomic.Uint64

// watchContinued starts counting SIGCONTs, for the life of the process.
func watchContinued() {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGCONT)
	go func() {
		for range ch {
			continued.Add(1)
		}
	}()
}

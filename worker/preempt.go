package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/sched"
)

// Preemption of device turns (docs/scheduler.md "Preemption"): a turn
// that ran its instance's slice while another domain's instance waits is
// taken off the device. On a CPU device (PoCL) the kernel runs on the
// worker's own threads, so the worker process is stopped (SIGSTOP) and
// continued (SIGCONT) when the scheduler resumes the turn; on a GPU
// stopping the process would not stop the kernel, so the driver
// time-slices it with the next turns and the scheduler only accounts.
//
// A stopped worker answers nothing: calls to it continue it first
// (process.call, Scheduler.Wake), it is not preempted while a call is
// pending or while the pool pauses it for an upgrade, and it is continued
// before it is killed or asked to stop. An upgrade turns preemption off
// (every stopped turn continued) before it waits for the turns in
// progress.

// schedLimits gives an instance's kernel limit and slice to its device's
// scheduler; its group is its domain, whose instances on a device share
// one worker process.
func (p *Pool) schedLimits(dev int, id, domain string, l Limits) {
	s := p.scheds[dev]
	s.SetLimit(id, l.KernelTimeout)
	s.SetSlice(id, domain, l.Slice)
}

// preempter is device dev's sched.Preempter. It runs under the
// scheduler's lock: it takes the pool's, the instance's and the
// process's locks, none of which is ever held while calling the
// scheduler.
func (p *Pool) preempter(dev int) sched.Preempter {
	cpu := p.cfg.Devices[dev].CPU
	return func(id string) (sched.Preemption, func()) {
		if !cpu {
			return sched.PreemptShared, nil
		}
		p.mu.Lock()
		inst := p.instances[id]
		p.mu.Unlock()
		if inst == nil {
			return sched.PreemptRefused, nil
		}
		inst.mu.Lock()
		pr := inst.proc
		inst.mu.Unlock()
		if pr == nil {
			return sched.PreemptRefused, nil
		}
		return pr.preempt()
	}
}

// preempt stops the worker for the scheduler, unless it owes an answer,
// is being paused or stopped, or is gone; the function returned continues
// it.
func (pr *process) preempt() (sched.Preemption, func()) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.ctx.Err() != nil || pr.stopped || len(pr.pending) > 0 || pr.deferTurn || pr.noCalls || pr.stopping {
		return sched.PreemptRefused, nil
	}
	if err := pr.signal(syscall.SIGSTOP); err != nil {
		pr.log.Warn("preempt worker", "err", err)
		return sched.PreemptRefused, nil
	}
	pr.stopped = true
	return sched.PreemptStopped, func() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		pr.cont()
	}
}

// cont continues the worker if it is stopped; pr.mu is held.
func (pr *process) cont() {
	if !pr.stopped {
		return
	}
	pr.stopped = false
	if err := pr.signal(syscall.SIGCONT); err != nil && pr.ctx.Err() == nil {
		pr.log.Warn("continue worker", "err", err)
	}
}

// wake continues a stopped worker through its scheduler (which then
// counts the stopped turn as running beside the holder), because it must
// answer something; if no turn of it was stopped there, it is continued
// anyway. pr.mu is not held.
func (pr *process) wake() {
	pr.mu.Lock()
	ids := make([]string, 0, len(pr.slots))
	for _, in := range pr.slots {
		ids = append(ids, in.cfg.ID)
	}
	pr.mu.Unlock()
	pr.sched.Wake(ids...)
	pr.mu.Lock()
	pr.cont()
	pr.mu.Unlock()
}

// signal sends sig to the worker process.
func (pr *process) signal(sig syscall.Signal) error {
	s, ok := pr.os.(interface{ Signal(syscall.Signal) error })
	if !ok {
		return fmt.Errorf("signal %v: %T cannot be signalled", sig, pr.os)
	}
	return s.Signal(sig)
}

// Signal sends sig to the child, then to its process group, then to
// each of its children and the process group each leads: its executors
// (docs/isolation.md "Executors"), where a preempted turn's kernel runs,
// each the leader of a group of its own with what it started. The child
// is its group's leader (Setpgid); while the signal reaches it, it is not
// reaped, so the group's ID is not anyone else's.
func (c childProcess) Signal(sig syscall.Signal) error {
	if err := c.cmd.Process.Signal(sig); err != nil {
		return err
	}
	return errors.Join(signalGroup(c.cmd.Process.Pid, sig), signalChildren(c.cmd.Process.Pid, sig))
}

// Signal sends sig to the adopted worker through its pidfd (nothing once
// it was reaped), then to its process group and its children's, as
// childProcess.Signal.
func (a *adoptedProcess) Signal(sig syscall.Signal) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fd < 0 {
		return nil
	}
	if err := unix.PidfdSendSignal(a.fd, sig, nil, 0); err != nil {
		return err
	}
	err := signalGroup(a.pid, sig)
	// Its pid names it while it is alive: its children are read only
	// then (the pidfd says so after the read).
	pids, cerr := workerChildren(a.pid)
	if cerr == nil && unix.PidfdSendSignal(a.fd, 0, nil, 0) == nil {
		cerr = signalEach(pids, sig)
	}
	return errors.Join(err, cerr)
}

// signalGroup sends sig to process group pgid; a group with no member
// left (the worker just ended) is no error.
func signalGroup(pgid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, pgid, err)
	}
	return nil
}

// signalChildren sends sig to each child of process pid and to the
// process group it leads, if it leads one (signalEach).
func signalChildren(pid int, sig syscall.Signal) error {
	pids, err := workerChildren(pid)
	if err != nil {
		return err
	}
	return signalEach(pids, sig)
}

// signalEach sends sig to each process of pids, children of a worker,
// and to the group each leads. A worker's child leads a group only if it
// is an executor (the worker made the group at its start; nothing in an
// executor may make one): while the child lives its pid is its group's
// ID, if any group's. A child that ended since it was listed is skipped;
// its pid would name another process only after the worker reaped it
// and the kernel gave the number out again, which takes every other
// number in the PID space first.
func signalEach(pids []int, sig syscall.Signal) error {
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, sig); err != nil {
			if !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("signal %v to worker's child %d: %w", sig, p, err))
			}
			continue
		}
		errs = append(errs, signalGroup(p, sig))
	}
	return errors.Join(errs...)
}

// workerChildren lists the children of process pid, from each of its
// threads' /proc children file (a child belongs to the thread that
// started it, or to any thread once it was handed to the process as an
// orphan).
func workerChildren(pid int) ([]int, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // the thread ended
			}
			return nil, fmt.Errorf("children of worker %d: %w", pid, err)
		}
		for _, field := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(field); err == nil && c > 0 {
				pids = append(pids, c)
			}
		}
	}
	return pids, nil
}

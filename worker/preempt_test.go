package worker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// procState is the state letter of process pid (R, S, T for stopped...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

// holdTurn starts a worker on a CPU device whose instance "hold" takes
// its turn and keeps it, and returns once the scheduler shows that turn
// held: the pool, the instance and its limits, closed at the test's end.
func holdTurn(t *testing.T) (*Pool, Backend, Limits) {
	t.Helper()
	dev := liarDevice
	dev.CPU = true
	p := liarPool(t, "hold-turn", dev)
	t.Cleanup(func() { p.Close() })
	lim := Limits{MemBytes: 1 << 20, KernelTimeout: 10 * time.Minute, Slice: 10 * time.Millisecond, BuildTimeout: time.Second}
	inst, err := p.Create(InstanceConfig{ID: "hold", Domain: "instance:hold", Limits: lim, Notify: func(uint32) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close() })
	for p.Sched(0).Stats().Holder != "hold" {
		time.Sleep(time.Millisecond) // the worker asks for its turn after Add
	}
	return p, inst, lim
}

// TestStoppedWorkerWokenForCalls: on a CPU device, a worker whose turn
// runs while another client waits is stopped (SIGSTOP) and the waiter
// granted; a call to the stopped worker (here the instance's new limits)
// continues it first instead of waiting on a process that cannot answer;
// closing everything leaves no worker stopped.
func TestStoppedWorkerWokenForCalls(t *testing.T) {
	p, inst, lim := holdTurn(t)
	s := p.Sched(0)
	pid := p.WorkerPID("hold")

	// Generous: the neighbour is granted once the held turn ran 2 ms.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, release, err := s.Acquire(ctx, "neighbour", 0)
	if err != nil {
		t.Fatalf("neighbour's Acquire beside a held turn = %v, want a grant by preemption", err)
	}
	if c := s.Client("hold"); !c.Stopped || c.Preemptions == 0 {
		t.Errorf("held turn after the neighbour's grant: %+v, want stopped", c)
	}
	// A stop signal takes effect when the process next runs in the kernel.
	for procState(t, pid) != "T" {
		if ctx.Err() != nil {
			t.Fatalf("worker state = %s, want T (stopped)", procState(t, pid))
		}
		time.Sleep(time.Millisecond)
	}

	// A call to the worker: it must be continued to answer.
	done := make(chan error, 1)
	go func() { done <- inst.SetLimits(lim) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("SetLimits on a preempted worker = %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("SetLimits on a preempted worker did not return: the worker was left stopped")
	}
	if st := procState(t, pid); st == "T" {
		t.Errorf("worker state after a call = %s, want it continued", st)
	}
	if c := s.Client("hold"); c.Stopped {
		t.Errorf("held turn after the call: %+v, want continued", c)
	}
	release(0, 0)
	if exits := p.Exits(); len(exits) != 0 {
		t.Errorf("worker exits = %v, want none (a stopped worker is not a dead one)", exits)
	}
}

// TestPauseContinuesStoppedWorker: an upgrade in place (Pool.Pause)
// continues a preempted worker before it waits for the turns in progress,
// so that the worker can end its turn and answer, and no stopped worker
// is handed over; Resume turns preemption back on.
func TestPauseContinuesStoppedWorker(t *testing.T) {
	p, _, _ := holdTurn(t)
	s := p.Sched(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, release, err := s.Acquire(ctx, "neighbour", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer release(0, 0)
	if c := s.Client("hold"); !c.Stopped {
		t.Fatalf("held turn after the neighbour's grant: %+v, want stopped", c)
	}
	// The liar never ends its turn: the pause gives up waiting for it,
	// but only after it continued the worker.
	pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer pcancel()
	if err := p.Pause(pctx); err == nil {
		t.Errorf("Pause with a turn held forever = nil, want its wait to fail")
	}
	if c := s.Client("hold"); c.Stopped {
		t.Errorf("held turn after Pause: %+v, want continued", c)
	}
	if st := procState(t, p.WorkerPID("hold")); st == "T" {
		t.Errorf("worker state after Pause = %s, want it continued", st)
	}
	p.Resume()
}

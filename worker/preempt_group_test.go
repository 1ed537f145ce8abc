package worker

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// The process tree of TestPreemptionStopsExecutorGroups, this test binary
// again (envPreemptTree in TestMain): a "worker" in a process group of its
// own, as the pool starts it, with an "executor" that leads a group of its
// own, as worker/child starts it, which has started a process of its own
// (the linker, or guest code's), in the executor's group.
const envPreemptTree = "VGPUD_PREEMPT_TREE" // "worker" or "executor"

// preemptTree runs one process of that tree; it returns its exit code.
func preemptTree(role string) int {
	switch role {
	case "worker":
		self, _ := os.Executable()
		os.Setenv(envPreemptTree, "executor")
		_, err := syscall.ForkExec(self, []string{"executor"}, &syscall.ProcAttr{
			Env:   os.Environ(),
			Files: []uintptr{0, 1, 2},
			Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	case "executor":
		spawned := exec.Command("/bin/sleep", "3600")
		if err := spawned.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println(os.Getpid(), spawned.Process.Pid)
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the test closes it
	return 0
}

// waitState waits until process pid's state is (stopped) or is not
// (!stopped) T; the bound only ends a test whose signal went nowhere.
func waitState(t *testing.T, pid int, stopped bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for (procState(t, pid) == "T") != stopped {
		if time.Now().After(deadline) {
			t.Fatalf("process %d: state %s, want stopped %v", pid, procState(t, pid), stopped)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPreemptionStopsExecutorGroups (issue 40, item 3): each executor
// leads a process group of its own (so its worker can end everything it
// started with its context), so a preemption's stop reaches it and what
// it started through the worker's children, not the worker's group: the
// worker, the executor and the executor's child are all stopped, and all
// continued. Before, an executor out of the worker's group ran on through
// a preemption.
func TestPreemptionStopsExecutorGroups(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), envPreemptTree+"=worker")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // as the pool starts a worker
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var executor, spawned int
		if _, err := fmt.Fscan(bufio.NewReader(out), &executor, &spawned); err != nil {
			t.Fatalf("run %d: the tree's pids: %v", i, err)
		}
		proc := childProcess{cmd: cmd}
		if err := proc.Signal(syscall.SIGSTOP); err != nil {
			t.Errorf("run %d: stop: %v", i, err)
		}
		for _, pid := range []int{cmd.Process.Pid, executor, spawned} {
			waitState(t, pid, true)
		}
		if err := proc.Signal(syscall.SIGCONT); err != nil {
			t.Errorf("run %d: continue: %v", i, err)
		}
		for _, pid := range []int{cmd.Process.Pid, executor, spawned} {
			waitState(t, pid, false)
		}
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("run %d: worker: %v", i, err)
		}
		// What a worker's reaper does when its executor ends.
		_ = syscall.Kill(-executor, syscall.SIGKILL)
	}
}

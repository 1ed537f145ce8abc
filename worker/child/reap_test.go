package child

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The reaper test runs in a process of its own (this test binary again):
// reapAll takes every child of the process it runs in.
const (
	envReapTest = "VGPUD_REAP_TEST" // "worker", "spawner" or "sleeper"
	// spawned is how many children the spawner leaves unwaited; running
	// how many of them still run when it ends.
	spawned = 50
	running = 5
)

func TestMain(m *testing.M) {
	EnterRole() // a worker or executor of this test binary's pool
	switch os.Getenv(envReapTest) {
	case "worker":
		os.Exit(reapWorker())
	case "spawner":
		// An executor's guest code: processes started and never waited
		// for, and the executor ends.
		for i := range spawned {
			prog, argv := "/bin/true", []string{"true"}
			if i < running {
				prog, argv = "/proc/self/exe", []string{"sleeper"}
			}
			if _, err := syscall.ForkExec(prog, argv, &syscall.ProcAttr{Env: []string{envReapTest + "=sleeper"}}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
		os.Exit(0)
	case "sleeper":
		// Guest code's process that would outlive its executor.
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// reapResult is what reapWorker reports.
type reapResult struct {
	Orphans  uint64 // reaped that it did not start
	Children []int  // its children left at the end: zombies it kept
	Executor string // how its "executor" ended, as the worker logs it
}

// reapWorker plays a worker that is its PID namespace's init (a child
// subreaper here: the orphans of its descendants come to it as they
// would to an init): it reaps every child (reapAll), starts an
// "executor" (the spawner) and waits until every process the executor
// left has come to it and been reaped.
func reapWorker() int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	r := &reaper{procs: map[int]*executorDevice{}}
	r.reapAll()
	e := &executorDevice{finished: make(chan struct{})}
	var err error
	e.pid, err = r.start(e, func() (int, error) {
		return syscall.ForkExec("/proc/self/exe", []string{"spawner"}, &syscall.ProcAttr{
			Env: []string{envReapTest + "=spawner"}, Files: []uintptr{0, 1, 2},
			Sys: &syscall.SysProcAttr{Setpgid: true}, // as startExecutor
		})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	<-e.finished
	deadline := time.Now().Add(time.Minute) // a bound on a broken reaper, not a budget
	for r.orphans.Load() < spawned && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	res := reapResult{Orphans: r.orphans.Load(), Executor: e.describe()}
	files, _ := filepath.Glob("/proc/self/task/*/children")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, p := range strings.Fields(string(b)) {
			var pid int
			fmt.Sscan(p, &pid)
			res.Children = append(res.Children, pid)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// TestReaperTakesOrphans (issue 40, items 2 and 3): processes an executor
// started and left unwaited come, when it ends, to its worker, the init
// of their PID namespace; the worker reaps every one of them (before, it
// kept them as zombies: 1300 of them after one context, until
// RLIMIT_NPROC refused every new context of the VM), and tells its own
// executor's end from theirs. Those still running end with the executor:
// the worker kills its process group (before, they outlived their
// context, each with a data limit of its own).
func TestReaperTakesOrphans(t *testing.T) {
	for i := range 5 {
		cmd := exec.Command("/proc/self/exe", "-test.run=^$")
		cmd.Env = append(os.Environ(), envReapTest+"=worker")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("run %d: reaper worker: %v", i, err)
		}
		var res reapResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("run %d: %v: %q", i, err, out)
		}
		if res.Orphans != spawned || len(res.Children) != 0 || res.Executor != "exit status 0" {
			t.Errorf("run %d: reaped %d orphans (want %d), children left %v (want none), executor %q (want exit status 0)",
				i, res.Orphans, spawned, res.Children, res.Executor)
		}
	}
}

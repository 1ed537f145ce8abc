package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Executors (docs/isolation.md "Executors"): a confined worker starts two
// executors of itself, as worker/child does for two device contexts; one
// attacks the other and the worker.
const (
	modeExecutors      = "executors"       // the worker: starts both, reports what the attacker could do
	modeExecutorIdle   = "executor-idle"   // the victim: confined as an executor, waits
	modeExecutorAttack = "executor-attack" // the attacker: confined as an executor, tries
	modeExecutorOrphan = "executor-orphan" // a process the attacker starts and leaves running: waits
	envVictim          = "VGPUD_SANDBOX_TEST_VICTIM"
	// executorTestData is the memory bound the worker gives the victim.
	executorTestData = 768 << 20
)

// executorHelper runs an executor of modeExecutors: the worker's
// confinement (inherited), Enter's check of it and ConfineExecutor, as
// worker/child's executorMain does.
func executorHelper(mode string) int {
	pol, err := PolicyFromEnv()
	if err == nil {
		_, err = Enter(pol)
	}
	if err == nil {
		err = ConfineExecutor(pol)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "executor:", err)
		return 2
	}
	if mode == modeExecutorIdle {
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the worker closes it
		return 0
	}
	victim, _ := strconv.Atoi(os.Getenv(envVictim))
	self := unix.Getpid()
	// Signals the attacker sends itself are caught, so that one the filter
	// wrongly let through shows as success, not as a stopped attacker.
	caught := make(chan os.Signal, 8)
	signal.Notify(caught, unix.SIGTSTP, unix.SIGUSR1)
	defer signal.Stop(caught)
	out := runChecks(map[string]func() error{
		"stop sibling":        func() error { return unix.Kill(victim, unix.SIGSTOP) },
		"tgkill-stop sibling": func() error { return unix.Tgkill(victim, victim, unix.SIGSTOP) },
		"probe sibling":       func() error { return unix.Kill(victim, 0) },
		"probe worker":        func() error { return unix.Kill(1, 0) },
		"tstp itself":         func() error { return unix.Kill(self, unix.SIGTSTP) },
		"usr1 itself":         func() error { return unix.Kill(self, unix.SIGUSR1) },
		"lower sibling's limit": func() error {
			return unix.Prlimit(victim, unix.RLIMIT_DATA, &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}, nil)
		},
		"lower own limit":         func() error { return unix.Prlimit(0, unix.RLIMIT_DATA, &unix.Rlimit{Cur: 1 << 30, Max: 1 << 30}, nil) },
		"read own limit":          func() error { var l unix.Rlimit; return unix.Getrlimit(unix.RLIMIT_DATA, &l) },
		"open sibling's pidfd":    func() error { fd, err := unix.PidfdOpen(victim, 0); unix.Close(fd); return err },
		"kill sibling last":       func() error { return unix.Kill(victim, unix.SIGKILL) },
		"terminate the worker":    func() error { return unix.Kill(1, unix.SIGTERM) },
		"stop itself (executors)": func() error { return unix.Kill(self, unix.SIGSTOP) },
		"leave its group":         func() error { return unix.Setpgid(0, 0) },
		"new session":             func() error { _, err := unix.Setsid(); return err },
		"kill sibling's group":    func() error { return unix.Kill(-victim, unix.SIGKILL) },
	})
	// A process that would outlive it: started as PoCL starts the linker
	// (a vfork-style clone, then /proc/self/exe, which Landlock lets it
	// execute), left running when it ends.
	out["spawn"] = ""
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"vgpud-orphan"}, &syscall.ProcAttr{
		Env: []string{envHelper + "=" + modeExecutorOrphan},
	})
	if err != nil {
		out["spawn"] = err.Error()
	}
	out["orphan"] = strconv.Itoa(pid)
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 2
	}
	return 0
}

// executorChecks runs in the confined worker: it starts the victim,
// bounds its memory (SetDataBound), starts the attacker against it and
// reports the attacker's results ("executor: " each) and what became of
// the victim.
func executorChecks() map[string]string {
	out := map[string]string{}
	fail := func(err error) map[string]string { out["setup"] = err.Error(); return out }
	start := func(mode string, extra ...string) (int, *os.File, *os.File, error) {
		inR, inW, err := os.Pipe()
		if err != nil {
			return 0, nil, nil, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			return 0, nil, nil, err
		}
		defer inR.Close()
		defer outW.Close()
		env := append([]string{envHelper + "=" + mode}, extra...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, envHelper+"=") {
				env = append(env, kv)
			}
		}
		// As worker/child starts an executor: the leader of a process
		// group of its own.
		pid, err := syscall.ForkExec("/proc/self/exe", []string{"vgpud-executor"}, &syscall.ProcAttr{
			Env: env, Files: []uintptr{inR.Fd(), outW.Fd(), 2}, Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true},
		})
		if err != nil {
			inW.Close()
			outR.Close()
			return 0, nil, nil, err
		}
		return pid, inW, outR, nil
	}
	victim, victimIn, victimOut, err := start(modeExecutorIdle)
	if err != nil {
		return fail(err)
	}
	defer victimIn.Close()
	defer victimOut.Close()
	if line, err := bufio.NewReader(victimOut).ReadString('\n'); err != nil || line != "ready\n" {
		return fail(fmt.Errorf("victim: %q, %v", line, err))
	}
	out["bound the victim"] = ""
	if err := SetDataBound(victim, executorTestData); err != nil {
		out["bound the victim"] = err.Error()
	} else {
		var l unix.Rlimit
		if err := unix.Prlimit(victim, unix.RLIMIT_DATA, nil, &l); err != nil || l.Cur != executorTestData || l.Max != executorTestData {
			out["bound the victim"] = fmt.Sprintf("victim's RLIMIT_DATA %+v, %v", l, err)
		}
	}
	attacker, attackerIn, attackerOut, err := start(modeExecutorAttack, envVictim+"="+strconv.Itoa(victim))
	if err != nil {
		return fail(err)
	}
	attackerIn.Close()
	var attack map[string]string
	if err := json.NewDecoder(attackerOut).Decode(&attack); err != nil {
		attackerOut.Close()
		return fail(fmt.Errorf("attacker's report: %w", err))
	}
	attackerOut.Close()
	for k, v := range attack {
		out["executor: "+k] = v
	}
	var st unix.WaitStatus
	for {
		if _, err := unix.Wait4(attacker, &st, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	out["orphan ends with its executor"] = endsWithGroup(attacker, attack["orphan"])
	// The victim: running, not stopped nor killed.
	pid, err := unix.Wait4(victim, &st, unix.WNOHANG|unix.WUNTRACED, nil)
	switch {
	case err != nil:
		out["sibling still running"] = err.Error()
	case pid == 0:
		out["sibling still running"] = ""
	case st.Stopped():
		out["sibling still running"] = "stopped by " + st.StopSignal().String()
	default:
		out["sibling still running"] = fmt.Sprintf("ended: %v", st)
	}
	_ = unix.Kill(victim, unix.SIGKILL)
	for {
		if _, err := unix.Wait4(victim, &st, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	return out
}

// TestExecutorsCannotTouchSiblings: an executor (guest code, in the threat
// model) cannot stop, kill or probe its sibling executor or its worker,
// cannot stop itself, and cannot change a limit, its own or a sibling's;
// its worker bounds its memory; it cannot leave its process group, so
// what it starts ends with it when its worker kills the group. Before ConfineExecutor (77f3f11) an
// executor had only the worker's filter, whose PID-namespace-init branch
// let it signal any process of the namespace.
func TestExecutorsCannotTouchSiblings(t *testing.T) {
	rep := Probe()
	if !rep.Seccomp || !slices.Contains(rep.Namespaces, "pid") {
		t.Skipf("this host gives workers no seccomp (%v) or PID namespace (%v)", rep.Seccomp, rep.Namespaces)
	}
	cache, outside, port := testDirs(t)
	pol := DefaultPolicy(cache)
	pol.Limits = testLimits
	for i := range 3 {
		start := time.Now()
		res := runHelper(t, modeExecutors, pol.Apply, cache, outside, port, 0)
		const ok, eperm = "", "operation not permitted"
		for name, want := range map[string]string{
			"setup":                             ok,
			"bound the victim":                  ok,
			"sibling still running":             ok,
			"executor: stop sibling":            eperm,
			"executor: tgkill-stop sibling":     eperm,
			"executor: probe sibling":           eperm,
			"executor: probe worker":            eperm,
			"executor: tstp itself":             eperm,
			"executor: usr1 itself":             ok,
			"executor: lower sibling's limit":   eperm,
			"executor: lower own limit":         eperm,
			"executor: read own limit":          ok,
			"executor: open sibling's pidfd":    eperm,
			"executor: kill sibling last":       eperm,
			"executor: terminate the worker":    eperm,
			"executor: stop itself (executors)": eperm,
			"executor: leave its group":         eperm,
			"executor: new session":             eperm,
			"executor: kill sibling's group":    eperm,
			"executor: spawn":                   ok,
			"orphan ends with its executor":     ok,
		} {
			got, present := res.checks[name]
			if name == "setup" && !present {
				continue
			}
			if !present || got != want {
				t.Errorf("run %d: %s = %q (reported %v), want %q", i, name, got, present, want)
			}
		}
		t.Logf("run %d: %v", i, time.Since(start).Round(time.Millisecond))
	}
}

// endsWithGroup does what worker/child's reaper does once an executor
// (pid attacker) ended: it kills the executor's process group. It
// reports whether the attacker's orphan (its pid in the attacker's
// report), which the worker, its PID namespace's init, now parents,
// ended by that: "" if so. The bound only ends a test whose group kill
// failed, with the orphan still running.
func endsWithGroup(attacker int, orphan string) string {
	pid, err := strconv.Atoi(orphan)
	if err != nil || pid <= 0 {
		return fmt.Sprintf("no orphan: %q", orphan)
	}
	if err := unix.Kill(-attacker, unix.SIGKILL); err != nil {
		return fmt.Sprintf("kill the executor's group: %v", err)
	}
	survived := time.AfterFunc(time.Minute, func() { _ = unix.Kill(pid, unix.SIGKILL) })
	var st unix.WaitStatus
	for {
		if _, err = unix.Wait4(pid, &st, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if !survived.Stop() {
		return "it survived its executor's group kill"
	}
	if err != nil || !st.Signaled() || st.Signal() != unix.SIGKILL {
		return fmt.Sprintf("orphan: %v, %v", st, err)
	}
	return ""
}

package mdev

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
	"github.com/vgpud/vgpud/worker/sandbox"
)

// hangProfile offers device contexts with a kernel limit short enough to
// reach in a test and long enough for a loaded machine's legitimate turns.
var hangProfile = Profile{Name: "hang", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8, Contexts: 4,
	TurnTimeout: Duration(8 * time.Second), BuildTimeout: Duration(10 * time.Minute)}

// endlessSteps makes spinSource run for longer than any test.
const endlessSteps = 1 << 62

// executorDataLimit reads process pid's RLIMIT_DATA (soft and hard) from
// /proc.
func executorDataLimit(t *testing.T, pid int) (soft, hard uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(line, "Max data size")); len(f) >= 2 && strings.HasPrefix(line, "Max data size") {
			soft, _ = strconv.ParseUint(f[0], 10, 64)
			hard, _ = strconv.ParseUint(f[1], 10, 64)
			return soft, hard
		}
	}
	t.Fatalf("no data limit in /proc/%d/limits", pid)
	return 0, 0
}

// TestContextHangEndsAlone (issue 40, items 1, 3 and 6): a device
// context whose executor stops answering (an endless kernel here; a
// stopped or half-replying executor looks the same to the worker) is
// ended by its worker, alone, before the main process's watchdog would
// end the worker and every context of the VM; another context's job and
// the default ring go on, on the same worker. A context destroyed while
// its executor is stuck is destroyed without waiting for the kernel
// limit. Each context's executor is bounded by its own quota.
func TestContextHangEndsAlone(t *testing.T) {
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t)}, Profiles: []Profile{hangProfile, contextProfile}})
	if !m.Pool().KernelsInExecutor(0) {
		t.Skip("no executors here (a device off the host, or workers without a PID namespace): TestContextsInTheWorker covers contexts there")
	}
	inst := mustCreate(t, m, CreateRequest{Profile: hangProfile.Name})
	_, d, _ := markedGuest(t, inst)
	worker0 := inst.WorkerPID()
	hung, hungExec := openContext(t, d, worker0, driver.ContextOptions{ID: 1})
	defer hung.Close()
	victim, victimExec := openContext(t, d, worker0, driver.ContextOptions{ID: 2, MemLimit: 64 << 20})
	defer victim.Close()

	// Each executor's memory is its context's quota (the instance's for
	// a context without a limit of its own), not the worker's.
	progs := uint64(DefaultProgramBytes)
	for _, c := range []struct {
		name string
		pid  int
		want uint64
	}{
		{"context 1 (no limit of its own)", hungExec, sandbox.DataLimit(hangProfile.MemBytes, progs)},
		{"context 2 (64 MiB)", victimExec, sandbox.DataLimit(64<<20, progs)},
	} {
		if soft, hard := executorDataLimit(t, c.pid); soft != c.want || hard != c.want {
			t.Errorf("%s: executor %d's RLIMIT_DATA = %d (hard %d), want %d", c.name, c.pid, soft, hard, c.want)
		}
	}

	restartsBefore := restarts(m)
	p, log, err := hung.Build(spinSource, "")
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log)
	}
	ob := mustBuffer(t, hung, 8)
	var wg sync.WaitGroup
	var victimErr error
	wg.Go(func() { victimErr = contextVectorAdd(victim, 1<<12, 4) })
	start := time.Now()
	err = hung.Launch(p, "spin", driver.Range1(1, 0), driver.BufferArg(ob), driver.Uint64Arg(endlessSteps))
	if err == nil {
		err = hung.Finish()
	}
	if !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("the endless kernel in context 1 = %v, want its context lost", err)
	}
	t.Logf("context 1's endless kernel ended its context after %v (kernel limit %v)",
		time.Since(start).Round(time.Millisecond), hangProfile.TurnTimeout.D())
	wg.Wait()
	if victimErr != nil {
		t.Errorf("context 2's job while context 1 hung: %v", victimErr)
	}
	if l := inst.ContextList(); len(l) != 2 || !l[0].Lost || l[1].Lost {
		t.Errorf("ContextList after the hang = %+v, want context 1 lost, 2 not", l)
	}
	if err := contextVectorAdd(d, 4096, 2); err != nil {
		t.Errorf("the default ring after context 1 hung: %v", err)
	}
	if err := contextVectorAdd(victim, 4096, 2); err != nil {
		t.Errorf("context 2 after context 1 hung: %v", err)
	}
	if inst.WorkerPID() != worker0 || restarts(m) != restartsBefore {
		t.Errorf("the worker changed (%d -> %d) or restarted (%v -> %v): a context's hang ended more than the context",
			worker0, inst.WorkerPID(), restartsBefore, restarts(m))
	}

	// A context whose executor is stopped (what a sibling's SIGSTOP did
	// before executors were confined, and what the destroy and reset
	// paths must still survive) on an instance whose kernel limit is ten
	// minutes: its destroy (vgpu-icdd's when its client exits) and a
	// device reset end it without waiting for any limit (the test would
	// time out), and nothing else is touched.
	inst2 := mustCreate(t, m, CreateRequest{Profile: contextProfile.Name})
	_, d2, _ := markedGuest(t, inst2)
	worker2 := inst2.WorkerPID()
	for i, reset := range []bool{false, true} {
		c, exe := openContext(t, d2, worker2, driver.ContextOptions{ID: uint32(3 + i)})
		if err := contextVectorAdd(c, 4096, 1); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(exe, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		what := "destroy"
		if reset {
			what = "reset"
			if err := d2.Reopen(); err != nil {
				t.Fatalf("reset with context %d's executor stopped: %v", 3+i, err)
			}
			c.Close()
		} else if err := c.Close(); err != nil {
			t.Errorf("destroy of context %d with its executor stopped: %v", 3+i, err)
		}
		// Its executor ends: wait for it.
		for slices.Contains(addrspacetest.Children(worker2), exe) {
			if t.Context().Err() != nil {
				t.Fatalf("context %d's stopped executor outlived its %s", 3+i, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s with context %d's executor stopped: returned, the executor gone, after %v", what, 3+i, time.Since(start).Round(time.Millisecond))
		if err := contextVectorAdd(d2, 4096, 2); err != nil {
			t.Errorf("the default ring after the %s: %v", what, err)
		}
	}
	if err := contextVectorAdd(victim, 4096, 2); err != nil {
		t.Errorf("the other instance's context 2 afterwards: %v", err)
	}
	if inst2.WorkerPID() != worker2 || restarts(m) != restartsBefore {
		t.Errorf("a worker changed or restarted")
	}
}

// openContext opens device context opts.ID on d, whose worker is
// process worker, and returns it with the executor it started.
func openContext(t *testing.T, d *driver.Device, worker int, opts driver.ContextOptions) (*driver.Device, int) {
	t.Helper()
	before := addrspacetest.Children(worker)
	c, err := d.OpenContext(opts)
	if err != nil {
		t.Fatal(err)
	}
	exe := addrspacetest.NewPIDs(before, addrspacetest.Children(worker))
	if len(exe) != 1 {
		c.Close()
		t.Fatalf("context %d's executors: %v, want one", opts.ID, exe)
	}
	return c, exe[0]
}

// restarts counts the worker ends nobody asked for, all causes.
func restarts(m *Manager) uint64 {
	var n uint64
	for _, v := range m.Pool().Exits() {
		n += v
	}
	return n
}

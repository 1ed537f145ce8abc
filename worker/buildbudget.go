package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// buildWallFactor bounds a build's wall-clock time at this many times its
// budget, whatever CPU time it got: a build that blocks (rather than
// computes) still ends.
const buildWallFactor = 8

// buildRecheckMin is the shortest wait before the budget is checked again:
// a build that is close to its budget is not polled in a busy loop.
const buildRecheckMin = 50 * time.Millisecond

// buildWatch ends a build that ran over its budget. The budget counts the
// CPU time the worker process spent since the build began, not wall-clock
// time: on a loaded host a legitimate build gets less of a CPU and takes
// longer, and that is not the tenant's doing. The CPU time of the worker
// and its descendants (its executor, which compiles, and the linker) is
// an upper bound of the compiler's own (it may run its domain's kernels
// meanwhile), so a build is never given more than the budget of
// CPU; a build that blocks instead of computing ends at buildWallFactor
// times the budget of wall-clock time.
type buildWatch struct {
	pid    int
	budget time.Duration
	wall   time.Duration // the wall-clock bound: buildWallFactor * budget
	cpu0   time.Duration
	start  time.Time
	over   func(reason string)
	cpu    func(pid int) (time.Duration, error)

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// watchBuild starts watching a build of the worker pid; over is called at
// most once, from a timer's goroutine, when the build ran over.
func watchBuild(pid int, budget time.Duration, over func(reason string)) *buildWatch {
	return startBuildWatch(pid, budget, buildWallFactor*budget, over, processTreeCPU)
}

func startBuildWatch(pid int, budget, wall time.Duration, over func(string), cpu func(int) (time.Duration, error)) *buildWatch {
	w := &buildWatch{pid: pid, budget: budget, wall: wall, start: time.Now(), over: over, cpu: cpu}
	// Without a readable CPU time the budget is wall-clock time, as if
	// every second of the build had been CPU.
	w.cpu0, _ = cpu(pid)
	w.mu.Lock()
	w.timer = time.AfterFunc(budget, w.check)
	w.mu.Unlock()
	return w
}

// check runs when the budget may be spent: it ends the build or looks
// again when the CPU time still missing could have been spent.
func (w *buildWatch) check() {
	wall := time.Since(w.start)
	used := wall
	if now, err := w.cpu(w.pid); err == nil {
		used = now - w.cpu0
	}
	var reason string
	switch {
	case used >= w.budget:
		reason = fmt.Sprintf("ran over its budget of %v (%v of CPU in %v)", w.budget, used.Round(time.Millisecond), wall.Round(time.Millisecond))
	case wall >= w.wall:
		reason = fmt.Sprintf("ran over %v of wall-clock time (its budget: %v of CPU; it had %v)", w.wall, w.budget, used.Round(time.Millisecond))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if reason != "" {
		w.stopped = true
		go w.over(reason)
		return
	}
	next := min(max(w.budget-used, buildRecheckMin), w.wall-wall)
	w.timer = time.AfterFunc(next, w.check)
}

// stop ends the watch: the build finished.
func (w *buildWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
}

// processTreeCPU is the CPU time of process pid and of its descendants
// now alive: a worker's executor compiles the worker's builds
// (docs/isolation.md "Executors"), and PoCL runs its linker as a
// process. A descendant that ended is no longer counted: it lost the
// domain its device context.
func processTreeCPU(pid int) (time.Duration, error) {
	total, err := processCPU(pid)
	if err != nil {
		return 0, err
	}
	seen := map[int]bool{pid: true}
	queue := []int{pid}
	for len(queue) > 0 && len(seen) < 256 {
		p := queue[0]
		queue = queue[1:]
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", p))
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, w := range strings.Fields(string(b)) {
				c, err := strconv.Atoi(w)
				if err != nil || seen[c] {
					continue
				}
				seen[c] = true
				queue = append(queue, c)
				if t, err := processCPU(c); err == nil {
					total += t
				}
			}
		}
	}
	return total, nil
}

// processCPU reads the user and system CPU time of process pid from
// /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

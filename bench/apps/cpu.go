package main

// Where a small command's CPU goes, process by process (issue 43's kept
// profile): the host ICD path is a pipeline of four processes (clsmall
// with the ICD; icdhost: the ICD server, vgpud's main process and the
// harness playing the VM; the worker; the executors, one per device
// context), and on a machine of few CPUs their CPU time per command,
// summed and divided by the CPUs, is a floor under the time per command
// however well the stages overlap.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// procCPU is the CPU time of the processes under an icdhost, by role.
type procCPU struct {
	main      time.Duration // icdhost itself
	worker    time.Duration // the worker processes
	executors time.Duration // live executors, and every child a worker reaped (ended executors)
	live      []int         // the live executors' pids
}

func (a procCPU) sub(b procCPU) procCPU {
	return procCPU{main: a.main - b.main, worker: a.worker - b.worker, executors: a.executors - b.executors}
}

func (a procCPU) add(b procCPU) procCPU {
	return procCPU{main: a.main + b.main, worker: a.worker + b.worker, executors: a.executors + b.executors}
}

// procStat is what sampleCPU reads of one process.
type procStat struct {
	ppid                 int
	own, reapedChildren  time.Duration
	worker, executorRole bool
	zombie               bool // ended, not yet reaped (no command line left)
}

// readProcStat reads /proc/<pid>/stat and the process's role from its
// command line.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	st := procStat{ppid: int(num(4)), zombie: f[0] == "Z",
		own:            time.Duration(num(14)+num(15)) * clockTick,
		reapedChildren: time.Duration(num(16)+num(17)) * clockTick}
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	st.worker = bytes.Contains(cmdline, []byte("-vgpud-role=worker"))
	st.executorRole = bytes.Contains(cmdline, []byte("-vgpud-role=executor"))
	return st, nil
}

// sampleCPU reads the CPU time of root (an icdhost) and of its workers
// and executors.
func sampleCPU(root int) (procCPU, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return procCPU{}, err
	}
	stats := map[int]procStat{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil {
			stats[pid] = st
		}
	}
	rs, ok := stats[root]
	if !ok {
		return procCPU{}, fmt.Errorf("icdhost (pid %d) is gone", root)
	}
	under := func(pid int) bool {
		for p := stats[pid].ppid; p > 1; p = stats[p].ppid {
			if p == root {
				return true
			}
		}
		return false
	}
	c := procCPU{main: rs.own}
	for pid, st := range stats {
		switch {
		case !under(pid):
		case st.worker:
			c.worker += st.own
			c.executors += st.reapedChildren
		case st.executorRole:
			c.executors += st.own
			c.live = append(c.live, pid)
		case st.zombie && stats[st.ppid].worker:
			// An ended executor its worker has not reaped yet: its
			// times are final, and not yet in the worker's.
			c.executors += st.own
		}
	}
	slices.Sort(c.live)
	return c, nil
}

// cpuAfter samples root's CPU once the executors that started since
// before (a device context's, which ends with its client) have ended and
// been reaped, so that their time is counted; after a minute it samples
// anyway.
func cpuAfter(root int, before procCPU) (procCPU, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := sampleCPU(root)
		if err != nil {
			return procCPU{}, err
		}
		gone := true
		for _, pid := range c.live {
			if !slices.Contains(before.live, pid) {
				gone = false
			}
		}
		if gone || time.Now().After(deadline) {
			return c, nil
		}
		time.Sleep(time.Millisecond) // /proc has nothing to wait on
	}
}

// cpuProfile accumulates the CPU time of one mode's runs (each of the
// mode's n commands).
type cpuProfile struct {
	runs, directRuns int           // runs through the ICD, and directly
	client, direct   time.Duration // clsmall through the ICD; clsmall on the platform directly
	host             procCPU
}

// work is p less runs of the start-up mode's profile s: the CPU of the
// mode's commands without the program's set-up (platform, context, the
// build), which every run pays.
func (p cpuProfile) work(s *cpuProfile) cpuProfile {
	if s == nil || s.runs == 0 || s.directRuns == 0 {
		return p
	}
	scale := func(d time.Duration, runs, of int) time.Duration { return d * time.Duration(runs) / time.Duration(of) }
	p.client -= scale(s.client, p.runs, s.runs)
	p.direct -= scale(s.direct, p.directRuns, s.directRuns)
	p.host.main -= scale(s.host.main, p.runs, s.runs)
	p.host.worker -= scale(s.host.worker, p.runs, s.runs)
	p.host.executors -= scale(s.host.executors, p.runs, s.runs)
	return p
}

// perCmd is d per command of n, in microseconds.
func perCmd(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}

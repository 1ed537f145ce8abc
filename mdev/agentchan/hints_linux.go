package agentchan

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/vgpud/vgpud/abi/agentmsg"
)

// vcpuSample is one reading of a vCPU thread's counters.
type vcpuSample struct {
	run, wait, slices, invol uint64
}

// ProcHinter estimates a VM's vCPU scheduling from procfs
// (docs/agent-channel.md "Hints"): for each vCPU thread of the QEMU
// process (threads named "CPU n/TCG" or "CPU n/KVM"), the deltas since the
// previous call of run time, run-queue wait time and scheduling count
// (/proc/PID/task/TID/schedstat) and involuntary switches
// (/proc/PID/task/TID/sched), summed over the vCPUs:
//
//	mean slice  = Δrun / Δinvoluntary (Δrun if no preemption)
//	wait        = Δwait / (Δrun + Δwait)
//	preempted   = Δinvoluntary / Δslices
//
// A window in which the vCPUs did not run at all yields no hints.
type ProcHinter struct {
	fs   procfs.FS
	root string
	pid  int
	now  func() time.Time

	last   map[int]vcpuSample
	lastAt time.Time
}

// NewProcHinter returns a hinter for the QEMU process pid; root is the
// procfs mount ("" means /proc).
func NewProcHinter(pid int, root string) (*ProcHinter, error) {
	if root == "" {
		root = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("vcpu hints: %w", err)
	}
	h := &ProcHinter{fs: fs, root: root, pid: pid, now: time.Now}
	if _, err := h.sample(); err != nil {
		return nil, err
	}
	return h, nil
}

// isVCPU reports whether a thread name is one of QEMU's vCPU threads.
func isVCPU(comm string) bool {
	rest, ok := strings.CutPrefix(comm, "CPU ")
	if !ok {
		return false
	}
	n, accel, ok := strings.Cut(rest, "/")
	if _, err := strconv.Atoi(n); err != nil || !ok {
		return false
	}
	return accel != ""
}

// VCPUThreads returns the TIDs of pid's vCPU threads.
func VCPUThreads(pid int, root string) ([]int, error) {
	if root == "" {
		root = procfs.DefaultMountPoint
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		return nil, err
	}
	return vcpuThreads(fs, pid)
}

func vcpuThreads(fs procfs.FS, pid int) ([]int, error) {
	threads, err := fs.AllThreads(pid)
	if err != nil {
		return nil, fmt.Errorf("vcpu threads of %d: %w", pid, err)
	}
	var tids []int
	for _, t := range threads {
		comm, err := t.Comm()
		if err == nil && isVCPU(comm) {
			tids = append(tids, t.PID)
		}
	}
	return tids, nil
}

func (h *ProcHinter) sample() (map[int]vcpuSample, error) {
	tids, err := vcpuThreads(h.fs, h.pid)
	if err != nil {
		return nil, err
	}
	if len(tids) == 0 {
		return nil, fmt.Errorf("vcpu hints: process %d has no vCPU threads", h.pid)
	}
	out := make(map[int]vcpuSample, len(tids))
	for _, tid := range tids {
		t, err := h.fs.Thread(h.pid, tid)
		if err != nil {
			continue // the thread exited
		}
		ss, err := t.Schedstat()
		if err != nil {
			continue
		}
		s := vcpuSample{run: ss.RunningNanoseconds, wait: ss.WaitingNanoseconds, slices: ss.RunTimeslices}
		if b, err := os.ReadFile(filepath.Join(h.root, strconv.Itoa(h.pid), "task", strconv.Itoa(tid), "sched")); err == nil {
			s.invol, _ = schedField(b, "nr_involuntary_switches")
		}
		out[tid] = s
	}
	h.last, h.lastAt = out, h.now()
	return out, nil
}

// schedField reads one integer field of /proc/PID/task/TID/sched.
func schedField(b []byte, name string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != name {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// Hints implements Hinter.
func (h *ProcHinter) Hints() (agentmsg.Hints, bool, error) {
	prev, prevAt := h.last, h.lastAt
	cur, err := h.sample()
	if err != nil {
		return agentmsg.Hints{}, false, err
	}
	return estimate(prev, cur, h.lastAt.Sub(prevAt))
}

// estimate turns two samples into hints (see ProcHinter).
func estimate(prev, cur map[int]vcpuSample, period time.Duration) (agentmsg.Hints, bool, error) {
	var d vcpuSample
	for tid, c := range cur {
		p, ok := prev[tid]
		if !ok || c.run < p.run || c.wait < p.wait || c.slices < p.slices || c.invol < p.invol {
			continue // new thread or counters reset: no delta
		}
		d.run += c.run - p.run
		d.wait += c.wait - p.wait
		d.slices += c.slices - p.slices
		d.invol += c.invol - p.invol
	}
	if d.slices == 0 || d.run == 0 {
		return agentmsg.Hints{}, false, nil
	}
	ppm := func(a, b uint64) uint32 {
		if b == 0 {
			return 0
		}
		return uint32(min(a, b) * 1_000_000 / b)
	}
	// The slice that matters is the run until the host takes the CPU
	// away: runs that end because the vCPU sleeps (halts, waits for
	// QEMU's main loop) do not end the slice. With no preemption in the
	// window the slice is at least the whole run time.
	slice := d.run
	if d.invol > 0 {
		slice = d.run / d.invol
	}
	return agentmsg.Hints{
		PeriodNs:    uint64(max(period, 0)),
		MeanSliceNs: slice,
		WaitPPM:     ppm(d.wait, d.run+d.wait),
		PreemptPPM:  ppm(d.invol, d.slices),
		VCPUs:       uint32(len(cur)),
	}, true, nil
}

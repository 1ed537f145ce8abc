// Command restart measures what a guest loses when vgpud dies (docs/
// operating.md): vgpud is killed with SIGKILL while a TCG guest runs a
// job on its vGPU, started again on the same run directory, and re-plugs
// the running VM's vGPU; the guest's program is told its device state was
// lost and starts its job again. The figure is the guest-visible outage:
// from the kill to the first progress line of the job on the re-plugged
// device. The baseline, in the same run, is what an operator does without
// reattach: restart the VM (QEMU killed, a new one booted, the job started
// from scratch), from the kill of QEMU to the same progress line.
//
// Before the kill, each run upgrades vgpud in place (vgpuctl upgrade,
// docs/upgrade.md): nothing is lost, and the figure is the guest-visible
// pause, the longest step of the job (launch to finish, timed in the
// guest) in the window of ten steps that holds the upgrade, against the
// longest step of windows without one in the same run.
//
//	go run ./bench/restart [-runs 3] [-transport mpqemu|vfio-user]
//
// It needs the guest kernel (make kernel), QEMU with x-pci-proxy-dev (or,
// with -transport vfio-user, QEMU 11.1 from the VMM root: make vmm-root)
// and PoCL; it builds vgpud, vgpuctl and the guest image itself.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/stats"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

func main() {
	benchmain.Main("bench/restart", run)
}

// app is the guest job: progress every 10 steps, one recovery allowed.
const app = "vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,1000000000,-pace,15ms,-progress,10,-recover,1"

type env struct {
	*migratetest.Env
	runDir   string
	vfioUser bool // -transport vfio-user: QEMU 11.1's vfio-user-pci
	d        *migratetest.Daemon
	id       string
}

// sample is one run's figures.
type sample struct {
	ready, reattach, outage, baseline time.Duration
	// The upgrade in place: the longest guest step in the window that
	// held it and in windows without one; vgpud's own pause and the
	// upgrade's whole time (vgpuctl's report).
	upLongest, calmLongest, upPaused, upTook time.Duration
}

var longestRE = regexp.MustCompile(` longest=([0-9]+)us`)

// longest is the longest step a progress line reports.
func longest(line string) (time.Duration, error) {
	m := longestRE.FindStringSubmatch(line)
	if m == nil {
		return 0, fmt.Errorf("progress line %q has no longest step", line)
	}
	us, err := strconv.ParseInt(m[1], 10, 64)
	return time.Duration(us) * time.Microsecond, err
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runs := fs.Int("runs", 3, "kills (and VM restarts) to measure")
	tr := fs.String("transport", "mpqemu", "how the guest's QEMU reaches vgpud: mpqemu (QEMU 7.2's x-pci-proxy-dev) or vfio-user (QEMU 11.1's vfio-user-pci)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || fs.NArg() > 0 || (*tr != "mpqemu" && *tr != "vfio-user") {
		return errors.New("usage: restart [-runs N] [-transport mpqemu|vfio-user], N >= 1")
	}
	// A short directory: the instance sockets' paths must fit a Unix
	// socket address.
	dir, err := os.MkdirTemp("", "vbr-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e := &env{runDir: filepath.Join(dir, "run"), vfioUser: *tr == "vfio-user"}
	if err := e.setup(ctx, dir); err != nil {
		return err
	}
	defer func() { e.d.Stop() }()
	var samples []sample
	for i := range *runs {
		s, err := e.once(ctx)
		if err != nil {
			return fmt.Errorf("run %d: %w\nvgpud log:\n%s", i, err, e.d.Logs())
		}
		fmt.Fprintf(stderr, "bench/restart: run %d: %+v\n", i, s)
		samples = append(samples, s)
	}
	printTable(ctx, stdout, *tr, samples)
	return nil
}

func (e *env) setup(ctx context.Context, dir string) error {
	var err error
	if e.Env, err = migratetest.NewEnv(ctx, dir); err != nil {
		return err
	}
	if err := os.Mkdir(e.runDir, 0o700); err != nil {
		return err
	}
	if err := e.start(ctx); err != nil {
		return err
	}
	e.id, err = e.d.Create(ctx, "vgpu-small")
	return err
}

// start starts vgpud on the run directory.
func (e *env) start(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var flags []string
	if e.vfioUser {
		flags = []string{"-transport", "vfio-user"}
	}
	d, err := migratetest.StartDaemonFlags(sctx, e.Bin, e.runDir, "pthread", e.TLSDir, flags)
	if err != nil {
		return err
	}
	e.d = d
	return nil
}

// boot starts the guest job on the instance.
func (e *env) boot(ctx context.Context) (*qemuvm.VM, error) {
	if e.vfioUser {
		return e.StartVFIOUserVM(ctx, e.d.InstanceBase(e.id), "", app)
	}
	return e.StartVM(ctx, e.d.InstanceBase(e.id), "", app)
}

var tookRE = regexp.MustCompile(`reattached the VM's vGPU after a restart.* took=([0-9.]+[a-zµ]+)`)

// once measures one kill of vgpud and one restart of the VM.
func (e *env) once(ctx context.Context) (sample, error) {
	var s sample
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	vm, err := e.boot(ctx)
	if err != nil {
		return s, err
	}
	defer func() { vm.Kill() }()
	// The job's first progress lines, consumed so that the next "step 10/"
	// is the restarted job's.
	var calm []time.Duration
	for _, l := range []string{"ITERATE step 10/", "ITERATE step 20/", "ITERATE step 30/"} {
		line, err := vm.WaitLine(ctx, l)
		if err != nil {
			return s, fmt.Errorf("the job did not start: %w", err)
		}
		if l != "ITERATE step 10/" { // the first window warms up
			d, err := longest(line)
			if err != nil {
				return s, err
			}
			calm = append(calm, d)
		}
	}
	// vgpud is upgraded in place under the job.
	out, err := e.d.Ctl(ctx, "upgrade", "-json")
	if err != nil {
		return s, fmt.Errorf("vgpuctl upgrade: %w: %s", err, out)
	}
	var rep struct {
		Paused time.Duration `json:"paused_ns"`
		Took   time.Duration `json:"took_ns"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		return s, fmt.Errorf("vgpuctl upgrade: %w: %s", err, out)
	}
	s.upPaused, s.upTook = rep.Paused, rep.Took
	for _, l := range []string{"ITERATE step 40/", "ITERATE step 50/"} {
		line, err := vm.WaitLine(ctx, l)
		if err != nil {
			return s, fmt.Errorf("the job did not go on after the upgrade: %w", err)
		}
		d, err := longest(line)
		if err != nil {
			return s, err
		}
		s.upLongest = max(s.upLongest, d)
	}
	for _, l := range []string{"ITERATE step 60/", "ITERATE step 70/"} {
		line, err := vm.WaitLine(ctx, l)
		if err != nil {
			return s, err
		}
		d, err := longest(line)
		if err != nil {
			return s, err
		}
		calm = append(calm, d)
	}
	s.calmLongest = stats.Median(calm)
	for _, l := range vm.Lines() {
		if strings.Contains(l, "ITERATE LOST") || strings.Contains(l, "ITERATE FAIL") {
			return s, fmt.Errorf("the guest saw an error across the upgrade: %q", l)
		}
	}
	// vgpud dies; a new one reattaches the VM.
	t0 := time.Now()
	e.d.Kill()
	if err := e.start(ctx); err != nil {
		return s, err
	}
	s.ready = time.Since(t0)
	if _, err := vm.WaitLine(ctx, "ITERATE RECOVERED"); err != nil {
		return s, fmt.Errorf("the guest did not recover: %w\n%s", err, strings.Join(vm.Lines(), "\n"))
	}
	if _, err := vm.WaitLine(ctx, "ITERATE step 10/"); err != nil {
		return s, fmt.Errorf("the job did not go on: %w", err)
	}
	s.outage = time.Since(t0)
	if m := tookRE.FindStringSubmatch(e.d.Logs()); m != nil {
		s.reattach, _ = time.ParseDuration(m[1])
	}
	// The baseline: restart the VM instead.
	if _, err := vm.WaitLine(ctx, "ITERATE step 30/"); err != nil {
		return s, err
	}
	t0 = time.Now()
	vm.Kill()
	vm, err = e.boot(ctx)
	if err != nil {
		return s, err
	}
	if _, err := vm.WaitLine(ctx, "ITERATE step 10/"); err != nil {
		return s, fmt.Errorf("the rebooted job did not start: %w", err)
	}
	s.baseline = time.Since(t0)
	return s, nil
}

func printTable(ctx context.Context, w io.Writer, transport string, ss []sample) {
	commit := "unknown"
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	fmt.Fprintf(w, "bench/restart: commit %s, %d CPUs, TCG guest (512 MiB), transport %s, PoCL pthread, %d runs (median)\n", commit, runtime.NumCPU(), transport, len(ss))
	col := func(f func(sample) time.Duration) time.Duration {
		var d []time.Duration
		for _, s := range ss {
			d = append(d, f(s))
		}
		return stats.Median(d)
	}
	ready, reattach := col(func(s sample) time.Duration { return s.ready }), col(func(s sample) time.Duration { return s.reattach })
	outage, base := col(func(s sample) time.Duration { return s.outage }), col(func(s sample) time.Duration { return s.baseline })
	t := &table.Table{
		Title:  "A guest's outage when vgpud dies (kill -9) and comes back, against restarting the VM",
		Header: []string{"recovery", "vgpud ready", "reattach", "guest outage", "vs VM restart"},
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
	t.Add("reattach (vgpud restarted, VM kept)", ms(ready), ms(reattach), ms(outage), fmt.Sprintf("%.3fx", float64(outage)/float64(base)))
	t.Add("baseline: restart the VM", "-", "-", ms(base), "1.000x")
	t.Note("guest outage: from the kill to the job's first progress line on the device (the job starts over either way: the device state is lost).")
	t.Note("vgpud ready: the new daemon's ready line (state restored); reattach: its device_del + device_add + the agent's answer (log field took).")
	t.Print(w)
	fmt.Fprintln(w)
	up, calm := col(func(s sample) time.Duration { return s.upLongest }), col(func(s sample) time.Duration { return s.calmLongest })
	paused, took := col(func(s sample) time.Duration { return s.upPaused }), col(func(s sample) time.Duration { return s.upTook })
	u := &table.Table{
		Title:  "A guest's pause when vgpud is upgraded in place (vgpuctl upgrade) under its job",
		Header: []string{"window of 10 steps", "longest guest step", "vs steps without", "vgpud paused", "upgrade took"},
	}
	u.Add("holding the upgrade", ms(up), fmt.Sprintf("%.2fx", float64(up)/float64(calm)), ms(paused), ms(took))
	u.Add("baseline: no upgrade (same run)", ms(calm), "1.00x", "-", "-")
	u.Note("longest guest step: launch to finish, timed in the guest (vgpu-iterate longest=); the upgrade's pause is the step it lands in, less the step's own time.")
	u.Note("vgpud paused: from the old process's pause to its commit (the new one then serves); upgrade took: from vgpuctl's request, the new process's start (runtime, OpenCL devices) included, which the guest does not see.")
	u.Print(w)
}

// Command apps measures unmodified OpenCL applications through the guest
// ICD (issue 11, docs/icd.md) against baselines measured in the same run:
//
//   - job: the data-path benchmark's matmul job (package guestagent/job)
//     as an ordinary OpenCL program (bench/apps/cljob/cljob.c, linked
//     against the ICD loader), run on the host's PoCL directly and in a
//     TCG guest through the vgpud ICD and vgpu-icdd, and the same job
//     through the Go driver library (vgpu-bench) in the same guest image
//     and VM configuration. Goal: the ICD path within 1.1x of the Go
//     driver path.
//   - pyopencl: pyopencl's own benchmark module
//     (pyopencl.characterize.performance: command latency, empty kernel,
//     host-to-device latency and bandwidth, device-to-host bandwidth) run
//     by /usr/bin/python3 on the host's PoCL and in the guest through the
//     ICD. The host row needs Debian's python3-pyopencl on the host; it is
//     left out (and said so) when it is missing.
//   - hashcat: `hashcat -b -m 0` (MD5 benchmark), Debian's hashcat, on the
//     host's PoCL and in the guest through the ICD.
//   - clpeak: Debian's clpeak (global memory bandwidth, single-precision
//     compute, transfer bandwidth, kernel latency) on both.
//   - small: an OpenCL program of many small commands
//     (bench/apps/clsmall/clsmall.c: 10,000 short launches, 10,000 small
//     reads, kernel+read steps, start-up; issue 32) on the host's PoCL
//     directly and, in the same run, through the vgpud ICD on the host
//     (tests/icdhost: vgpu-icdd's server over an in-process vgpud, no VM)
//     and in a TCG guest (-small-guest). Goals (issue 43): launches and
//     reads through the ICD on the host within 1.5x of PoCL directly,
//     steps within 2x, start-up within 1.2x + 50 ms (issue 32's).
//
// The host rows of pyopencl, hashcat and clpeak need the Debian packages
// on the host (python3-pyopencl, hashcat, clpeak); without them the row is
// left out and the table says so.
//
// Every guest boots the userland disk (make guest-apps) with one vGPU of
// -profile; the host rows use the same PoCL device vgpud serves (-device).
// Only the small section with -small-guest=false runs without the disk;
// with -prebuilt (cljob, clsmall and icdhost built elsewhere) and -direct
// (the vendors directory of the platform the host rows use, not PoCL's)
// it runs on a machine without gcc or Go: scripts/gpu-check.sh's icd step
// on a GPU.
// TCG inflates the guest's own CPU work (Python, the ICD, the copies into
// DMA memory), so guest/host ratios are reported as measured, not as the
// cost of the ICD alone; the ICD/Go-driver ratio compares two guests.
//
//	go run ./bench/apps [-sections job,pyopencl] [-n 512] [-reps 10] [-runs 3]
//	go run ./bench/apps -sections small [-small-launches 10000] [-small-reads 10000] [-small-steps 2000] [-small-runs 3] [-small-guest=false]
//	apps -sections small -small-guest=false -prebuilt DIR -direct VENDORS -icd LIB
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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/guestagent/image"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/guestagent/job"
	"github.com/vgpud/vgpud/guestagent/suite"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

const (
	sectionJob      = "job"
	sectionPyopencl = "pyopencl"
	sectionHashcat  = "hashcat"
	sectionClpeak   = "clpeak"
	sectionSmall    = "small"
	icddPkg         = "github.com/vgpud/vgpud/guestagent/cmd/vgpu-icdd"
	benchPkg        = "github.com/vgpud/vgpud/guestagent/cmd/vgpu-bench"
	hostPython      = "/usr/bin/python3"
)

var allSections = []string{sectionJob, sectionPyopencl, sectionHashcat, sectionClpeak, sectionSmall}

func main() {
	benchmain.Main("apps", benchmain.Stdout(run))
}

type config struct {
	sections []string
	job      job.Spec
	runs     int
	profile  string
	device   string
	icd      string // the guest ICD (make icd)
	// prebuilt is a directory of binaries built elsewhere (cljob,
	// clsmall, icdhost: scripts/gpu-check.sh's bundle), "" to build them.
	prebuilt string
	// direct is the vendors directory of the platform used directly, ""
	// for one holding only PoCL's .icd.
	direct string
	// vfioUser attaches guests with vfio-user-pci (QEMU 11.1) rather
	// than x-pci-proxy-dev (QEMU 7.2).
	vfioUser bool
	timeout  time.Duration
	serial   io.Writer
	small    smallConfig
}

// smallConfig sizes the small section.
type smallConfig struct {
	launches, reads, steps int  // clsmall's N of each mode
	runs                   int  // runs of each mode per path; the median is shown
	guest                  bool // the guest rows too
}

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("apps", flag.ContinueOnError)
	fs.SetOutput(out)
	sections := fs.String("sections", strings.Join(allSections, ","), "tables to print: "+strings.Join(allSections, ","))
	d := job.Default()
	var c config
	fs.IntVar(&c.job.N, "n", d.N, "matrix side of the job")
	fs.IntVar(&c.job.Reps, "reps", d.Reps, "matmuls per run of the job")
	fs.IntVar(&c.job.Local, "local", d.Local, "work-group side of the job")
	fs.Uint64Var(&c.job.Seed, "seed", d.Seed, "input seed of the job")
	fs.IntVar(&c.runs, "runs", 3, "runs of the job per path; the median is shown")
	fs.StringVar(&c.profile, "profile", "vgpu-medium", "vGPU profile of the guests")
	fs.StringVar(&c.device, "device", os.Getenv("VGPUD_TEST_DEVICE"), "OpenCL device (gpu.Open selector; empty: the first)")
	fs.StringVar(&c.icd, "icd", "build/icd/libvgpud-icd.so", "the guest ICD (make icd)")
	fs.StringVar(&c.prebuilt, "prebuilt", "", "directory of cljob, clsmall and icdhost built elsewhere (a machine without gcc or Go; scripts/gpu-check.sh); empty: build them")
	fs.StringVar(&c.direct, "direct", "", "vendors directory of the platform the host rows use directly (an OCL_ICD_VENDORS value); empty: the host's PoCL alone")
	fs.DurationVar(&c.timeout, "timeout", 45*time.Minute, "bound on each guest boot (clpeak's takes over 10 minutes under TCG)")
	serial := fs.Bool("serial", false, "copy the guests' consoles to stderr")
	fs.IntVar(&c.small.launches, "small-launches", 10000, "small: short kernel launches of clsmall launches")
	fs.IntVar(&c.small.reads, "small-reads", 10000, "small: 64-byte blocking reads of clsmall reads")
	fs.IntVar(&c.small.steps, "small-steps", 2000, "small: kernel+read steps of clsmall steps")
	fs.IntVar(&c.small.runs, "small-runs", 3, "small: runs of each mode per path; the median is shown")
	fs.BoolVar(&c.small.guest, "small-guest", true, "small: the guest rows too (boots one TCG guest)")
	fs.BoolVar(&c.vfioUser, "vfio-user", false, "attach the guests' vGPUs with QEMU 11.1's vfio-user-pci (vgpud's default transport; the VMM root of make vmm-root, which delivers INTx under TCG) instead of QEMU 7.2's x-pci-proxy-dev")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.sections, err = table.ParseSections(*sections, allSections); err != nil {
		return c, err
	}
	if err := c.job.Validate(); err != nil {
		return c, err
	}
	if c.runs < 1 || c.runs > 100 {
		return c, fmt.Errorf("-runs %d: want 1..100", c.runs)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"-small-launches", c.small.launches}, {"-small-reads", c.small.reads}, {"-small-steps", c.small.steps}} {
		if f.v < 1 || f.v > 10_000_000 {
			return c, fmt.Errorf("%s %d: want 1..10000000", f.name, f.v)
		}
	}
	if c.small.runs < 1 || c.small.runs > 100 {
		return c, fmt.Errorf("-small-runs %d: want 1..100", c.small.runs)
	}
	if *serial {
		c.serial = os.Stderr
	}
	return c, nil
}

func (c config) has(s string) bool { return slices.Contains(c.sections, s) }

// needsGuest says whether a section boots a guest: all but small without
// its guest rows do.
func (c config) needsGuest() bool {
	for _, s := range c.sections {
		if s != sectionSmall || c.small.guest {
			return true
		}
	}
	return false
}

type bench struct {
	cfg  config
	h    *host.Host
	apps imagetest.Apps
	dir  string // job data, binaries, initramfs files
	icd  string // absolute path of the ICD
	pocl string // the vendors directory of the platform used directly (-direct, else only PoCL's .icd)
	// cljob is the job program built on the host; it runs on the host and,
	// unchanged, in the guest (the guest userland is the same Debian).
	cljob string
	jobs  string // the job's data directory
	// clsmall is the small section's program, built like cljob.
	clsmall string
	// vgpud is a vendors directory holding only the vgpud ICD (-icd).
	vgpud string
	// cpu is the small section's CPU profile, printed after its table.
	cpu *table.Table
}

func run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	cfg, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	var apps imagetest.Apps
	if cfg.needsGuest() {
		if apps, err = imagetest.FindApps(); err != nil {
			return err
		}
	}
	icd, err := filepath.Abs(cfg.icd)
	if err != nil {
		return err
	}
	if _, err := os.Stat(icd); err != nil {
		return fmt.Errorf("guest ICD: %w (run make icd)", err)
	}
	h, err := host.StartMode(cfg.device, "vgpud-apps-", host.Mode{VFIOUser: cfg.vfioUser})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	b := &bench{cfg: cfg, h: h, apps: apps, dir: h.Dir, icd: icd}
	if err := b.prepare(ctx); err != nil {
		return err
	}
	info := h.Dev.Info()
	fmt.Fprintf(stdout, "vgpud application benchmark (issue 11), %s, %s, %d host CPUs\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU())
	if cfg.needsGuest() {
		fmt.Fprintf(stdout, "  device: %s (%d compute units); guests: TCG, profile %s, Debian userland disk, kernel %s\n\n", info.Name, info.ComputeUnits, cfg.profile, apps.Release)
	} else {
		fmt.Fprintf(stdout, "  device: %s (%d compute units); no guests, profile %s\n\n", info.Name, info.ComputeUnits, cfg.profile)
	}

	if cfg.has(sectionJob) {
		t, err := b.jobTable(ctx)
		if err != nil {
			return fmt.Errorf("job: %w", err)
		}
		t.Print(stdout)
		fmt.Fprintln(stdout)
	}
	for _, sec := range []struct {
		name string
		run  func(context.Context) (*table.Table, error)
	}{{sectionPyopencl, b.pyopenclTable}, {sectionHashcat, b.hashcatTable}, {sectionClpeak, b.clpeakTable}, {sectionSmall, b.smallTable}} {
		if !cfg.has(sec.name) {
			continue
		}
		t, err := sec.run(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", sec.name, err)
		}
		t.Print(stdout)
		fmt.Fprintln(stdout)
		if sec.name == sectionSmall && b.cpu != nil {
			b.cpu.Print(stdout)
			fmt.Fprintln(stdout)
		}
	}
	return nil
}

// prepare builds cljob (and clsmall for the small section), writes the
// job's data and the PoCL-only and vgpud-only vendors directories.
func (b *bench) prepare(ctx context.Context) error {
	src, err := filepath.Abs("bench/apps/cljob/cljob.c")
	if err != nil {
		return err
	}
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("%w (run from the repository root)", err)
	}
	if b.cljob, err = b.program(ctx, "cljob", src, "-lm"); err != nil {
		return err
	}
	b.jobs = filepath.Join(b.dir, "jobdata")
	if err := os.Mkdir(b.jobs, 0o755); err != nil {
		return err
	}
	in := job.MakeInputs(b.cfg.job)
	for name, data := range map[string][]byte{
		"job.cl": []byte(job.Source), "opts": []byte(job.BuildOptions),
		"a0.f32": suite.Bytes(in.As[0]), "a1.f32": suite.Bytes(in.As[1]), "b.f32": suite.Bytes(in.B),
	} {
		if err := os.WriteFile(filepath.Join(b.jobs, name), data, 0o644); err != nil {
			return err
		}
	}
	if b.cfg.direct != "" {
		if b.pocl, err = filepath.Abs(b.cfg.direct); err != nil {
			return err
		}
	} else if err := b.poclVendors(); err != nil {
		return err
	}
	if b.cfg.has(sectionSmall) {
		return b.prepareSmall(ctx)
	}
	return nil
}

// program is the path of the C program name built from src against the
// ICD loader (with extra libraries), or the prebuilt one (-prebuilt).
func (b *bench) program(ctx context.Context, name, src string, libs ...string) (string, error) {
	if b.cfg.prebuilt != "" {
		p, err := filepath.Abs(filepath.Join(b.cfg.prebuilt, name))
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("-prebuilt: %w", err)
		}
		return p, nil
	}
	bin := filepath.Join(b.dir, name)
	args := append([]string{"-std=c11", "-O2", "-Wall", "-Werror", "-o", bin, src, "-lOpenCL"}, libs...)
	if out, err := exec.CommandContext(ctx, "gcc", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// poclVendors writes the vendors directory holding only PoCL's .icd.
func (b *bench) poclVendors() error {
	b.pocl = filepath.Join(b.dir, "pocl-vendors")
	if err := os.Mkdir(b.pocl, 0o755); err != nil {
		return err
	}
	icd, err := os.ReadFile("/etc/OpenCL/vendors/pocl.icd")
	if err != nil {
		return fmt.Errorf("host PoCL: %w (install pocl-opencl-icd)", err)
	}
	return os.WriteFile(filepath.Join(b.pocl, "pocl.icd"), icd, 0o644)
}

// hostEnv is the environment of a program run on the host's PoCL: only
// PoCL's ICD, and the PoCL device vgpud serves.
func (b *bench) hostEnv() []string {
	env := append(os.Environ(), "OCL_ICD_VENDORS="+b.pocl)
	if d := pocldevice(b.h.Dev.Info().Name); d != "" {
		env = append(env, "POCL_DEVICES="+d)
	}
	return env
}

// pocldevice is the POCL_DEVICES value of a PoCL device name
// ("pthread-..." -> "pthread"), or "" for another platform.
func pocldevice(name string) string {
	for _, d := range []string{"pthread", "basic"} {
		if strings.HasPrefix(name, d+"-") {
			return d
		}
	}
	return ""
}

// guest boots the userland disk with one new vGPU instance, the files
// given under /bin (the userland's /vgpu/bin), vgpu-icdd and the ICD when
// icd is set, running prog with args; it returns the console.
func (b *bench) guest(ctx context.Context, icd bool, files []image.File, progs []string, prog string, args ...string) (_ []string, err error) {
	inst, err := b.h.Mgr.Create(mdev.CreateRequest{Profile: b.cfg.profile})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.h.Mgr.Destroy(inst.UUID())) }()
	if icd {
		files = append(files, image.File{Src: b.icd, Dst: "/lib/vgpud/libvgpud-icd.so", Mode: 0o755})
		progs = append(progs, icddPkg)
	}
	dir, err := os.MkdirTemp(b.dir, "guest")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	initrd, err := imagetest.BuildAppsInitramfs(ctx, dir, b.apps, files, progs...)
	if err != nil {
		return nil, err
	}
	qcfg := qemuvm.Config{
		Kernel: b.apps.Vmlinuz, Initrd: initrd, Disk: b.apps.Disk, MemMiB: 2048,
		Append:    "vgpu.run=" + imagetest.AppsProgram + " vgpu.args=" + strings.Join(append([]string{prog}, args...), ","),
		SerialLog: b.cfg.serial,
	}
	if b.cfg.vfioUser {
		root, err := qemuvm.RepoVMMRoot()
		if err != nil {
			return nil, err
		}
		qcfg.VFIOUser = []qemuvm.VFIOUserDevice{{ID: "vgpu0", Socket: inst.Socket()}}
		root.Apply(&qcfg)
	} else {
		f, err := qemuvm.DialProxy(inst.Socket())
		if err != nil {
			return nil, err
		}
		defer f.Close() // QEMU holds its own copy once started
		qcfg.Devices = []qemuvm.ProxyDevice{{ID: "vgpu0", FD: f}}
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.timeout)
	defer cancel()
	vm, err := qemuvm.Start(ctx, qcfg)
	if err != nil {
		return nil, err
	}
	defer vm.Kill()
	exit, err := vm.WaitLine(ctx, "VGPU-INIT exit=")
	if err != nil {
		return vm.Lines(), fmt.Errorf("guest %s: %w\n%s", prog, err, strings.Join(vm.Lines(), "\n"))
	}
	if exit != "VGPU-INIT exit=0" {
		return vm.Lines(), fmt.Errorf("guest %s: %s\n%s", prog, exit, strings.Join(vm.Lines(), "\n"))
	}
	return vm.Lines(), vm.Wait()
}

// results decodes the JSON after marker on each line.
func results[T any](lines []string, marker string) ([]T, error) {
	var out []T
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, marker)
		if !ok {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(rest), &v); err != nil {
			return nil, fmt.Errorf("decode %q: %w", l, err)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %q line", marker)
	}
	return out, nil
}

func (b *bench) jobArgs() []string {
	s := b.cfg.job
	return []string{strconv.Itoa(s.N), strconv.Itoa(s.Reps), strconv.Itoa(s.Local), strconv.Itoa(b.cfg.runs)}
}

// jobFiles puts cljob and the job's data in the guest's /vgpu/bin.
func (b *bench) jobFiles() []image.File {
	files := []image.File{{Src: b.cljob, Dst: image.BinDir + "/cljob", Mode: 0o755}}
	for _, n := range []string{"job.cl", "opts", "a0.f32", "a1.f32", "b.f32"} {
		files = append(files, image.File{Src: filepath.Join(b.jobs, n), Dst: image.BinDir + "/jobdata/" + n, Mode: 0o644})
	}
	return files
}

func (b *bench) checkRuns(name string, runs []job.Result) error {
	s := b.cfg.job
	if len(runs) != b.cfg.runs {
		return fmt.Errorf("%s: %d runs, want %d", name, len(runs), b.cfg.runs)
	}
	for _, r := range runs {
		if r.N != s.N || r.Reps != s.Reps || r.Checked != job.Checks || r.TotalNS <= 0 {
			return fmt.Errorf("%s: result %+v: want n %d, %d iterations, %d checked", name, r, s.N, s.Reps, job.Checks)
		}
	}
	return nil
}

func (b *bench) jobTable(ctx context.Context) (*table.Table, error) {
	s := b.cfg.job
	// Host: cljob on PoCL directly.
	cmd := exec.CommandContext(ctx, b.cljob, append([]string{b.jobs}, b.jobArgs()...)...)
	cmd.Env = b.hostEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("host cljob: %v\n%s", err, stderr.String())
	}
	hostRuns, err := results[job.Result](strings.Split(string(out), "\n"), "CLJOB ")
	if err != nil {
		return nil, fmt.Errorf("host cljob: %w", err)
	}
	// Guest, through the ICD.
	lines, err := b.guest(ctx, true, b.jobFiles(), nil, imagetest.AppsBinDir+"/cljob", append([]string{imagetest.AppsBinDir + "/jobdata"}, b.jobArgs()...)...)
	if err != nil {
		return nil, fmt.Errorf("guest ICD: %w", err)
	}
	icdRuns, err := results[job.Result](lines, "CLJOB ")
	if err != nil {
		return nil, fmt.Errorf("guest ICD: %w\n%s", err, strings.Join(lines, "\n"))
	}
	// Guest, through the Go driver library (no vgpu-icdd: vgpu-bench owns
	// the vGPU).
	lines, err = b.guest(ctx, false, nil, []string{benchPkg}, imagetest.AppsBinDir+"/vgpu-bench",
		"-n", strconv.Itoa(s.N), "-reps", strconv.Itoa(s.Reps), "-local", strconv.Itoa(s.Local),
		"-seed", strconv.FormatUint(s.Seed, 10), "-runs", strconv.Itoa(b.cfg.runs))
	if err != nil {
		return nil, fmt.Errorf("guest Go driver: %w", err)
	}
	goRuns, err := results[job.Result](lines, "VGPU-BENCH ")
	if err != nil {
		return nil, fmt.Errorf("guest Go driver: %w\n%s", err, strings.Join(lines, "\n"))
	}
	for name, runs := range map[string][]job.Result{"host": hostRuns, "guest ICD": icdRuns, "guest Go driver": goRuns} {
		if err := b.checkRuns(name, runs); err != nil {
			return nil, err
		}
	}
	goDrv, hostR := median(goRuns), median(hostRuns)
	t := &table.Table{
		Title: fmt.Sprintf("The matmul job, %d x %d float x %d (upload A, multiply, download C each), the same work on three paths; median of %d runs",
			s.N, s.N, s.Reps, b.cfg.runs),
		Header: []string{"path", "per matmul (ms)", "kernel (ms)", "setup (ms)", "vs Go driver", "vs host PoCL"},
	}
	row := func(name string, runs []job.Result) {
		r := median(runs)
		kernel := "-"
		if r.KernelLaunches > 0 {
			kernel = ms(time.Duration(r.KernelNS / int64(r.KernelLaunches)))
		}
		t.Add(name, ms(r.PerMatMul()), kernel, ms(time.Duration(r.SetupNS)),
			ratio(float64(r.TotalNS), float64(goDrv.TotalNS)), ratio(float64(r.TotalNS), float64(hostR.TotalNS)))
	}
	row("host: cljob on PoCL directly", hostRuns)
	row("guest: vgpu-bench, Go driver library", goRuns)
	row("guest: cljob through the ICD + vgpu-icdd", icdRuns)
	t.Note("cljob (bench/apps/cljob) is an ordinary OpenCL 1.2 program, the same binary on the host and in the guest; vgpu-bench is the Go driver path of bench/datapath.")
	t.Note("Goal: the ICD path within 1.1x of the Go driver path. Both guests: same image, profile and VM size, separate boots.")
	return t, nil
}

func median(runs []job.Result) job.Result {
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b job.Result) int { return int(a.TotalNS - b.TotalNS) })
	return s[(len(s)-1)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

func ratio(x, base float64) string {
	if base <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x/base)
}

// pyperf runs pyopencl's own benchmark module on the first platform and
// prints one JSON line.
const pyperf = `import json, sys
import pyopencl as cl
import pyopencl.characterize.performance as perf
plat = cl.get_platforms()[0]
ctx = cl.Context([plat.get_devices()[0]])
q = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
_, latency = perf.get_profiling_overhead(ctx)
r = {"platform": plat.name, "latency_s": latency, "empty_kernel_s": perf.get_empty_kernel_time(q),
     "h2d_latency_s": perf.transfer_latency(q, perf.HostToDeviceTransfer),
     "h2d_gbs": perf.transfer_bandwidth(q, perf.HostToDeviceTransfer, 1 << 22) / 1e9,
     "d2h_gbs": perf.transfer_bandwidth(q, perf.DeviceToHostTransfer, 1 << 22) / 1e9}
print("PYPERF " + json.dumps(r))
`

type pyResult struct {
	Platform     string  `json:"platform"`
	Latency      float64 `json:"latency_s"`
	EmptyKernel  float64 `json:"empty_kernel_s"`
	H2DLatency   float64 `json:"h2d_latency_s"`
	H2DBandwidth float64 `json:"h2d_gbs"`
	D2HBandwidth float64 `json:"d2h_gbs"`
}

func (b *bench) pyopenclTable(ctx context.Context) (*table.Table, error) {
	script := filepath.Join(b.dir, "pyperf.py")
	if err := os.WriteFile(script, []byte(pyperf), 0o644); err != nil {
		return nil, err
	}
	t := &table.Table{
		Title:  "pyopencl.characterize.performance (pyopencl's own benchmark module), host PoCL vs guest through the ICD",
		Header: []string{"path", "command latency (us)", "empty kernel (us)", "H2D latency (us)", "H2D 4 MiB (GB/s)", "D2H 4 MiB (GB/s)"},
	}
	add := func(name string, r pyResult) {
		us := func(s float64) string { return fmt.Sprintf("%.0f", s*1e6) }
		t.Add(name, us(r.Latency), us(r.EmptyKernel), us(r.H2DLatency),
			fmt.Sprintf("%.3f", r.H2DBandwidth), fmt.Sprintf("%.3f", r.D2HBandwidth))
	}
	var hostR *pyResult
	cmd := exec.CommandContext(ctx, hostPython, script)
	cmd.Env = b.hostEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Note("host row left out: %s %s: %v (install python3-pyopencl for it)", hostPython, filepath.Base(script), firstLine(string(out)))
	} else {
		rs, err := results[pyResult](strings.Split(string(out), "\n"), "PYPERF ")
		if err != nil {
			return nil, fmt.Errorf("host: %w", err)
		}
		hostR = &rs[0]
		add("host: PoCL directly", *hostR)
	}
	lines, err := b.guest(ctx, true, []image.File{{Src: script, Dst: image.BinDir + "/pyperf.py", Mode: 0o644}}, nil,
		"/usr/bin/python3", imagetest.AppsBinDir+"/pyperf.py")
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	rs, err := results[pyResult](lines, "PYPERF ")
	if err != nil {
		return nil, fmt.Errorf("guest: %w\n%s", err, strings.Join(lines, "\n"))
	}
	if rs[0].Platform != "vgpud" {
		return nil, fmt.Errorf("guest ran on platform %q, not the vgpud ICD", rs[0].Platform)
	}
	add("guest: through the ICD (TCG)", rs[0])
	if hostR != nil {
		g := rs[0]
		t.Add("guest / host", ratio(g.Latency, hostR.Latency), ratio(g.EmptyKernel, hostR.EmptyKernel),
			ratio(g.H2DLatency, hostR.H2DLatency),
			ratio(g.H2DBandwidth, hostR.H2DBandwidth), ratio(g.D2HBandwidth, hostR.D2HBandwidth))
	}
	t.Note("Latencies in the guest include TCG's slowdown of Python and of the guest's copies; the kernel and the device are the host's in both rows.")
	t.Note("The module's float32 add rate is left out: on PoCL's pthread device its event profiling gives hundreds of TOps/s on two cores, not a measurement.")
	return t, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// hostTool runs an application on the host's PoCL with a private HOME
// (hashcat and pyopencl cache kernels there). ok is false, with a note,
// when the tool is not installed.
func (b *bench) hostTool(ctx context.Context, t *table.Table, bin string, args ...string) (string, bool, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Note("host row left out: %s is not installed here (apt-get install %s)", bin, bin)
		return "", false, nil
	}
	home, err := os.MkdirTemp(b.dir, "home")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(b.hostEnv(), "HOME="+home)
	cmd.Dir = home
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), false, fmt.Errorf("host %s: %v\n%s", bin, err, tail(string(out), 20))
	}
	return string(out), true, nil
}

// guestTool runs an application in a guest through the ICD, as root
// (hashcat keeps its files under the passwd entry's home, which nobody
// lacks; running as nobody is tested by tests/TestGuestICD), and returns
// its output (the lines between the markers).
func (b *bench) guestTool(ctx context.Context, cmdline string) (string, error) {
	script := filepath.Join(b.dir, "tool-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	text := "#!/bin/sh\necho TOOL-BEGIN\ncd /tmp && " + cmdline + "\nrc=$?\necho TOOL-END $rc\nexit $rc\n"
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		return "", err
	}
	lines, err := b.guest(ctx, true, []image.File{{Src: script, Dst: image.BinDir + "/tool", Mode: 0o755}}, nil, imagetest.AppsBinDir+"/tool")
	var out []string
	on := false
	for _, l := range lines {
		switch {
		case l == "TOOL-BEGIN":
			on = true
		case strings.HasPrefix(l, "TOOL-END"):
			on = false
		case on && !strings.Contains(l, "prog=vgpu-icdd"):
			out = append(out, l)
		}
	}
	if err != nil {
		return strings.Join(out, "\n"), err
	}
	return strings.Join(out, "\n"), nil
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

var hashcatSpeed = regexp.MustCompile(`(?m)^Speed\.#1\.*: *([0-9.]+) ([kMGT]?)H/s`)

// hashes is hashcat's speed line as hashes per second.
func hashes(out string) (float64, error) {
	m := hashcatSpeed.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no Speed.#1 line in:\n%s", tail(out, 20))
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	return v * map[string]float64{"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m[2]], nil
}

func (b *bench) hashcatTable(ctx context.Context) (*table.Table, error) {
	t := &table.Table{
		Title:  "hashcat -b -m 0 (MD5 benchmark, optimized kernels), Debian's hashcat, host PoCL vs guest through the ICD",
		Header: []string{"path", "speed (MH/s)", "vs host"},
	}
	var host float64
	out, ok, err := b.hostTool(ctx, t, "hashcat", "-b", "-m", "0", "-D", "1,2") // PoCL is a CPU device
	if err != nil {
		return nil, err
	}
	if ok {
		if host, err = hashes(out); err != nil {
			return nil, fmt.Errorf("host: %w", err)
		}
		t.Add("host: PoCL directly", fmt.Sprintf("%.1f", host/1e6), "1.00x")
	}
	out, err = b.guestTool(ctx, "hashcat -b -m 0")
	if err != nil {
		return nil, fmt.Errorf("guest: %w\n%s", err, tail(out, 30))
	}
	g, err := hashes(out)
	if err != nil {
		return nil, fmt.Errorf("guest: %w", err)
	}
	t.Add("guest: through the ICD (TCG)", fmt.Sprintf("%.1f", g/1e6), ratio(g, host))
	t.Note("The speed is hashcat's own figure: hashes over the kernels' time on the device, which is the host's in both rows.")
	return t, nil
}

// clpeakArgs are the clpeak tests run: the device's bandwidth and compute,
// and the two the virtualization path costs (transfers, kernel latency).
var clpeakArgs = []string{"--global-bandwidth", "--compute-sp", "--transfer-bandwidth", "--kernel-latency"}

var clpeakLine = regexp.MustCompile(`^\s+([A-Za-z0-9 ()-]+?)\s*:\s*([0-9.]+)\s*(us)?\s*$`)

// clpeakFigures collects clpeak's "name : value" lines under their section
// headings ("Global memory bandwidth (GBPS): float4"), and the figures
// that stand alone with their unit ("Kernel launch latency : 16.17 us"
// becomes "Kernel launch latency (us)"). The device's own lines before
// the first section are not figures.
func clpeakFigures(out string) (keys []string, vals map[string]float64) {
	vals = map[string]float64{}
	section := ""
	for _, l := range strings.Split(out, "\n") {
		trim := strings.TrimSpace(l)
		if m := clpeakLine.FindStringSubmatch(l); m != nil && (section != "" || m[3] != "") {
			v, err := strconv.ParseFloat(m[2], 64)
			if err == nil {
				name := strings.TrimSpace(m[1])
				k := section + ": " + name
				if m[3] != "" {
					k = name + " (" + m[3] + ")"
				}
				keys = append(keys, k)
				vals[k] = v
			}
			continue
		}
		if strings.HasSuffix(trim, ")") && !strings.Contains(trim, ":") {
			section = trim
		}
	}
	return keys, vals
}

func (b *bench) clpeakTable(ctx context.Context) (*table.Table, error) {
	t := &table.Table{
		Title:  "clpeak " + strings.Join(clpeakArgs, " ") + ", Debian's clpeak, host PoCL vs guest through the ICD",
		Header: []string{"figure", "host PoCL", "guest via ICD (TCG)", "guest / host"},
	}
	out, ok, err := b.hostTool(ctx, t, "clpeak", clpeakArgs...)
	if err != nil {
		return nil, err
	}
	var hostVals map[string]float64
	if ok {
		_, hostVals = clpeakFigures(out)
	}
	gout, err := b.guestTool(ctx, "clpeak "+strings.Join(clpeakArgs, " "))
	if err != nil {
		return nil, fmt.Errorf("guest: %w\n%s", err, tail(gout, 30))
	}
	keys, gv := clpeakFigures(gout)
	if len(keys) == 0 {
		return nil, fmt.Errorf("guest: no clpeak figures in:\n%s", tail(gout, 30))
	}
	for _, k := range keys {
		h, ok := hostVals[k]
		hs := "-"
		if ok {
			hs = fmt.Sprintf("%.2f", h)
		}
		t.Add(k, hs, fmt.Sprintf("%.2f", gv[k]), ratio(gv[k], h))
	}
	t.Note("Bandwidth and compute run on the host's device in both columns; transfer bandwidth and kernel latency include the guest's path (TCG, the ICD's arena, vgpu-icdd, the vGPU ring).")
	return t, nil
}

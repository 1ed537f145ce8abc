// Command isolation measures what process isolation costs (docs/isolation.md):
// vgpud's default, each trust domain's device work in a worker process with
// a CPU device's kernels in an executor process beside it (worker/executor),
// against the design before executors (worker/kernels: the kernels in the
// worker, mdev.Config.KernelsInWorker) and the unsafe in-process baseline
// (mdev.Config.InProcess), and what a device context (ABI 1.5, docs/ABI.md
// "Device contexts") costs against the default ring (worker/context: the
// default configuration, every command on a context that the guest opened
// with driver.Device.OpenContext, rung through RegContextKick, its kernels
// in an executor of its own), in one run on one OpenCL device. The
// tables (-sections):
//
//   - command: the latency a guest sees for a small command (a nop, a
//     one-item launch, a 4 KiB write and read back), the modes measured
//     in rotating blocks, as the median and as paired ratios with their
//     95% confidence intervals (each mode / in-process, worker/executor /
//     worker/kernels, worker/context / worker/executor);
//   - matmul: the 512 x 512 matmul job of guestagent/job (upload A,
//     multiply, download C, ten times) in each mode and directly on the
//     device, all rotating run by run, median of -runs. The direct
//     baseline is no vgpud at all: gpu.Open on the same selector, a queue
//     of this process, and job.Run on it, so the same kernel source and
//     build options, sizes, NDRange and repetitions, timed and checked
//     against the CPU reference exactly as through vgpud. The table's
//     notes give each mode / direct, / in-process, worker/executor /
//     worker/kernels and worker/context / worker/executor (goal, issue 29:
//     vgpud within 1.03x of direct on a GPU; issue 31: executors within
//     1.1x of the path without them, a context within 1.1x of the default
//     ring);
//   - ladder (issue 32's profile, not run by default): small commands on
//     the device directly and through vgpud one hop more at each rung
//     (in-process, worker/kernels, worker/executor), rotating in blocks,
//     with the difference each hop makes (ladder.go);
//   - bandwidth (issue 42's copy-bandwidth table, not run by default): one
//     contiguous upload and download of each -bwsizes size (default 4 KiB,
//     1 MiB, 16 MiB, 256 MiB) directly (one blocking clEnqueueWriteBuffer
//     or clEnqueueReadBuffer on a gpu.Queue of this process) and through
//     vgpud on each ladder rung (driver.Device.Write then Finish, Read),
//     the paths rotating (a lone copy) and then back to back (a stream of
//     copies), as MB/s and % of direct, with what one transfer
//     became (ring commands, doorbells, device turns) and every download
//     checked byte for byte against its upload (bandwidth.go);
//   - context: what making a device context costs, from the OpenContext
//     call to its first nop's completion (on a CPU device that includes
//     starting the context's executor process), and its Close, against
//     opening the instance's default ring (driver.Open) and its first nop,
//     median and range of -runs repetitions on an instance of its own.
//
// The guests are the driver library on a QEMU-less harness VM, so the
// figures are vgpud's, not QEMU's: with -transport mpqemu (the default,
// comparable with the earlier tables) mdev/mpqemu/mpqemutest, where every
// BAR access, the kick too, is a round trip, as x-pci-proxy-dev makes it;
// with -transport vfio-user mdev/vfiouser/vfiousertest, the kick on the
// session's ioeventfd as QEMU 11.1 wires it under KVM. The harness guest
// is in this process: its driver's spinning waits share the Go scheduler
// with vgpud's main process, which a real guest (another process, QEMU's)
// does not (bench/README.md, issue 42 fifth round).
//
//	go run ./bench/isolation [-ops 2000] [-runs 5]
//	go run ./bench/isolation -sections matmul [-runs 5]   (the matmul table alone)
//	go run ./bench/isolation -sections context [-runs 5]  (context creation alone)
//	go run ./bench/isolation -sections ladder [-ops 1000] (the hop-by-hop profile)
//	go run ./bench/isolation -sections bandwidth [-bwsizes 4K,1M,16M,256M] [-bwreps 30] [-bwguest dma|staged] (copy bandwidth)
//	go run ./bench/isolation ... -transport vfio-user    (any table, the guests on vfio-user)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/bench/stats"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/job"
	"github.com/vgpud/vgpud/mdev"
)

func main() {
	benchmain.Main("isolation", benchmain.Stdout(run))
}

type config struct {
	device string
	ops    int // per-command operations per mode
	block  int // operations per block (the modes alternate by block)
	runs   int // matmul job runs per mode, context-table repetitions
	job    job.Spec
	sects  []string
	// the bandwidth table: the sizes, and the most repetitions of each
	bwSizes []uint64
	bwReps  int
	bwGuest string // bwGuestDMA or bwGuestStaged
	// poll is every worker mode's poll window (mdev.Config.PollWindow:
	// 0 vgpud's default, negative never, as before issue 42)
	poll time.Duration
	// requestTurns: every worker mode asks for every device turn, none
	// parked (mdev.Config.RequestEveryTurn, as before issue 42)
	requestTurns bool
	// noNotify: the guests ring every doorbell, with no poll word
	// (driver.Options.NoNotify, as before ABI 1.6)
	noNotify bool
	// vfioUser: the instances are served over vfio-user and the guests
	// kick on its ioeventfd (-transport vfio-user), or, posted, post
	// their BAR writes and kick with one (-transport vfio-user-posted).
	vfioUser, posted bool
}

var sections = []string{"command", "matmul", "context", "ladder", "bandwidth"}

func run(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("isolation", flag.ContinueOnError)
	var cfg config
	fs.StringVar(&cfg.device, "device", os.Getenv("VGPUD_TEST_DEVICE"), "gpu.Open selector")
	fs.IntVar(&cfg.ops, "ops", 2000, "per-command operations per mode")
	fs.IntVar(&cfg.block, "block", 100, "operations per block; the modes alternate block by block")
	fs.IntVar(&cfg.runs, "runs", 5, "matmul job runs per mode; repetitions of the context table")
	cfg.job = job.Default()
	fs.IntVar(&cfg.job.N, "n", cfg.job.N, "matrix side of the job")
	fs.IntVar(&cfg.job.Reps, "reps", cfg.job.Reps, "matmuls per job run")
	list := fs.String("sections", "command,matmul,context", "tables: "+fmt.Sprint(sections))
	sizes := fs.String("bwsizes", defaultBWSizes, "bandwidth table: transfer sizes (bytes, K, M or G suffix)")
	fs.DurationVar(&cfg.poll, "poll-window", 0, "the workers' poll window (0: vgpud's default; negative: never poll)")
	fs.BoolVar(&cfg.noNotify, "no-notify", false, "the guests ring every doorbell: no poll word tells them when the worker polls (as before ABI 1.6)")
	transportName := fs.String("transport", "mpqemu", "how the harness guests reach vgpud: mpqemu (QEMU 7.2's x-pci-proxy-dev: every BAR access, the kick too, a round trip), vfio-user (vgpud's default transport, the kick on its ioeventfd, as a client that wires it under KVM would) or vfio-user-posted (vfio-user as QEMU 11.1's vfio-user-pci is: no ioeventfd, every BAR write posted, the kick too)")
	fs.BoolVar(&cfg.requestTurns, "request-every-turn", false, "the workers ask for every device turn; none is parked at an idle instance (as before issue 42)")
	fs.IntVar(&cfg.bwReps, "bwreps", 30, "bandwidth table: the most transfers of a size each way per path (fewer for large sizes)")
	fs.StringVar(&cfg.bwGuest, "bwguest", bwGuestDMA, "bandwidth table: where the guest's data lies: dma (its DMA memory, handed to the device in place) or staged (copied through the driver's staging pool)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.sects, err = table.ParseSections(*list, sections); err != nil {
		return err
	}
	switch *transportName {
	case "mpqemu":
	case "vfio-user":
		cfg.vfioUser = true
	case "vfio-user-posted":
		cfg.vfioUser, cfg.posted = true, true
	default:
		return fmt.Errorf("-transport %q: want mpqemu, vfio-user or vfio-user-posted", *transportName)
	}
	if cfg.bwGuest != bwGuestDMA && cfg.bwGuest != bwGuestStaged {
		return fmt.Errorf("-bwguest %q: want %s or %s", cfg.bwGuest, bwGuestDMA, bwGuestStaged)
	}
	if cfg.ops < 1 || cfg.block < 1 || cfg.runs < 1 || cfg.bwReps < 1 {
		return fmt.Errorf("-ops %d, -block %d, -runs %d, -bwreps %d: want positive values", cfg.ops, cfg.block, cfg.runs, cfg.bwReps)
	}
	if cfg.bwSizes, err = parseSizes(*sizes); err != nil {
		return fmt.Errorf("-bwsizes: %w", err)
	}
	if err := cfg.job.Validate(); err != nil {
		return err
	}
	// The per-command and matmul tables measure every mode, the ladder and
	// bandwidth tables the rungs; the context table needs only
	// worker/context's vgpud.
	specs := modeSpecs
	if !slices.ContainsFunc(cfg.sects, func(s string) bool { return s != "context" }) {
		specs = specs[len(specs)-1:]
	}
	var modes []*mode
	for _, ms := range specs {
		ms.host.PollWindow = cfg.poll
		ms.host.RequestEveryTurn = cfg.requestTurns
		ms.noNotify = cfg.noNotify
		ms.host.VFIOUser, ms.host.Posted = cfg.vfioUser, cfg.posted
		m, err := newMode(cfg.device, ms)
		if err != nil {
			return err
		}
		defer m.close()
		modes = append(modes, m)
	}
	info := modes[0].h.Dev.Info()
	fmt.Fprintf(w, "vgpud isolation benchmark, %s, %s\n", time.Now().UTC().Format(time.RFC3339), runtime.Version())
	fmt.Fprintf(w, "  host CPUs:     %d\n", runtime.NumCPU())
	fmt.Fprintf(w, "  OpenCL device: %s (%s, %d compute units)\n", info.Name, info.Platform, info.ComputeUnits)
	fmt.Fprintf(w, "  guests:        QEMU-less harness + guest driver library, one vgpu-small instance per mode\n")
	fmt.Fprintf(w, "  transport:     %s\n", modes[0].h.Transport())
	fmt.Fprintf(w, "  modes:         in-process (unsafe baseline); worker/kernels (a worker process per trust domain running the kernels too,\n")
	fmt.Fprintf(w, "                 the design before executors); worker/executor (the kernels of a CPU device in an executor process\n")
	fmt.Fprintf(w, "                 beside the worker, which maps no guest RAM: vgpud's default, docs/isolation.md \"Executors\");\n")
	fmt.Fprintf(w, "                 worker/context (worker/executor's configuration, every command on device context 1 that the guest\n")
	fmt.Fprintf(w, "                 opened with OpenContext (ABI 1.5), not the default ring: its own ring and its own executor process)\n")
	if len(specs) < len(modeSpecs) {
		fmt.Fprintf(w, "                 (this run: worker/context's vgpud only)\n")
	}
	if slices.Contains(cfg.sects, "matmul") {
		fmt.Fprintf(w, "  matmul also:   direct (the job on a gpu.Queue of this process, no vgpud: the matmul table's baseline)\n")
	}
	if slices.Contains(cfg.sects, "bandwidth") {
		fmt.Fprintf(w, "  bandwidth:     direct (a gpu.Queue of this process: the baseline), and on each rung's vgpud a %s instance\n", bwProfile)
		fmt.Fprintf(w, "                 of its own with a guest (its quota holds a 256 MiB buffer); sizes %s\n", sizeList(cfg.bwSizes))
	}
	for _, s := range cfg.sects {
		var t *table.Table
		switch s {
		case "command":
			t, err = commandTable(ctx, cfg, modes)
		case "matmul":
			t, err = matmulTable(ctx, cfg, modes)
		case "context":
			t, err = contextTable(ctx, cfg, modes[len(modes)-1])
		case "ladder":
			t, err = ladderTable(ctx, cfg, modes)
		case "bandwidth":
			t, err = bandwidthTable(ctx, cfg, modes)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		t.Print(w)
	}
	return nil
}

// modeSpec is how a mode runs: its vgpud's configuration and whether
// the guest's commands go to a device context rather than the default ring.
type modeSpec struct {
	name     string
	host     host.Mode
	context  bool
	noNotify bool // the guest rings every doorbell (-no-notify)
}

// modeSpecs are the modes, in the tables' order; worker/context is last
// (the context table runs on its vgpud).
var modeSpecs = []modeSpec{
	{name: "in-process", host: host.Mode{InProcess: true}},
	{name: "worker/kernels", host: host.Mode{KernelsInWorker: true}},
	{name: "worker/executor"},
	{name: "worker/context", context: true},
}

// contextID is the device context worker/context's commands go to.
const contextID = 1

// mode is one vgpud (in process or with workers) with one harness guest.
type mode struct {
	name   string
	h      *host.Host
	vm     host.VM
	parent *driver.Device // the default ring, when d is a device context
	d      *driver.Device // what the guest's commands go to
	prog   driver.Program
	buf    driver.Buffer
}

// emptySource's kernel does almost nothing: a launch of it is the cost
// of a launch.
const emptySource = `__kernel void touch(__global int *o) { o[get_global_id(0)] = 1; }`

func newMode(selector string, ms modeSpec) (_ *mode, err error) {
	m := &mode{name: ms.name}
	if m.h, err = host.StartMode(selector, "vgpud-isolation-", ms.host); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if m.vm, err = newGuest(m.h, 64<<20); err != nil {
		return nil, err
	}
	if m.d, err = driver.Open(m.vm, m.vm, driver.Options{NoNotify: ms.noNotify}); err != nil {
		return nil, err
	}
	if ms.context {
		m.parent = m.d
		if m.d, err = openContext(m.parent); err != nil {
			m.d = nil
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
	}
	if m.prog, _, err = m.d.Build(emptySource, ""); err != nil {
		return nil, err
	}
	if m.buf, err = m.d.CreateBuffer(4096); err != nil {
		return nil, err
	}
	return m, m.d.Finish()
}

// newGuest makes a vgpu-small instance on h and a harness VM with ramBytes
// of RAM attached to it.
func newGuest(h *host.Host, ramBytes uint64) (host.VM, error) {
	_, vm, err := newInstanceGuest(h, "vgpu-small", ramBytes)
	return vm, err
}

// newInstanceGuest makes an instance of profile on h, result reuse off
// (every copy reaches the device), and a harness VM with ramBytes of RAM
// attached to it.
func newInstanceGuest(h *host.Host, profile string, ramBytes uint64) (*mdev.Instance, host.VM, error) {
	inst, err := h.Mgr.Create(mdev.CreateRequest{Profile: profile, NoReuse: true})
	if err != nil {
		return nil, nil, fmt.Errorf("create a %s instance: %w", profile, err)
	}
	vm, err := h.Dial(inst.Socket(), ramBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("attach a guest to the %s instance: %w", profile, err)
	}
	return inst, vm, nil
}

// openContext opens device context contextID on the default ring d, as
// worker/context's guest and the context table do.
func openContext(d *driver.Device) (*driver.Device, error) {
	if n := d.Info().MaxContexts; n < contextID {
		return nil, fmt.Errorf("the instance's profile (%s) offers %d device contexts (mdev.Profile.Contexts), want at least %d", d.Info().Profile, n, contextID)
	}
	return d.OpenContext(driver.ContextOptions{ID: contextID})
}

func (m *mode) close() {
	if m.parent != nil && m.d != nil {
		m.d.Close() // the context, before its default ring
	}
	if m.parent != nil {
		m.parent.Close()
	} else if m.d != nil {
		m.d.Close()
	}
	if m.vm != nil {
		m.vm.Close()
	}
	if m.h != nil {
		m.h.Close()
	}
}

// op is one kind of small command as a guest issues it.
type op struct {
	name string
	do   func(m *mode, scratch []byte) error
}

var ops = []op{
	{"nop (doorbell, completion)", func(m *mode, _ []byte) error { return nop(m.d) }},
	{"launch of 1 item (a device turn)", func(m *mode, _ []byte) error {
		if err := m.d.Launch(m.prog, "touch", driver.Range1(1, 0), driver.BufferArg(m.buf)); err != nil {
			return err
		}
		return m.d.Finish()
	}},
	{"write + read 4 KiB (two turns)", func(m *mode, scratch []byte) error {
		if err := m.d.Write(m.buf, 0, scratch); err != nil {
			return err
		}
		return m.d.Read(m.buf, 0, scratch)
	}},
}

// commandTable measures each op in every mode, block by block.
func commandTable(ctx context.Context, cfg config, modes []*mode) (*table.Table, error) {
	n := len(modes)
	header := []string{"command"}
	for _, m := range modes {
		header = append(header, m.name)
	}
	for _, m := range modes[1:] {
		header = append(header, m.name+" / "+modes[0].name+" paired [95% CI]")
	}
	// The pairs beside the in-process baseline: each design against the
	// one it replaces (issue 31's goals: within 1.1x).
	var pairs [][2]int
	for _, p := range [][2]string{{"worker/executor", "worker/kernels"}, {"worker/context", "worker/executor"}} {
		a, b := indexOf(modes, p[0]), indexOf(modes, p[1])
		pairs = append(pairs, [2]int{a, b})
		header = append(header, p[0]+" / "+p[1]+" paired")
	}
	t := &table.Table{
		Title:  fmt.Sprintf("Per-command cost: latency a guest sees, median of %d ops per mode (blocks of %d, modes rotating)", cfg.ops, cfg.block),
		Header: header,
	}
	scratch := make([]byte, 4096)
	for _, o := range ops {
		lat, blocks, err := measureBlocks(ctx, cfg, n, func(i int) error { return o.do(modes[i], scratch) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.name, err)
		}
		row := []string{o.name}
		for i := range modes {
			row = append(row, stats.Median(lat[i]).Round(100*time.Nanosecond).String())
		}
		for i := 1; i < n; i++ {
			row = append(row, fmt.Sprintf("%.2fx %s", float64(stats.Median(lat[i]))/float64(stats.Median(lat[0])), stats.PairedRatio(blocks[i], blocks[0])))
		}
		for _, p := range pairs {
			row = append(row, stats.PairedRatio(blocks[p[0]], blocks[p[1]]).String())
		}
		t.Add(row...)
	}
	t.Note("worker: the register file and scheduler in the main process, the ring's execution in a worker process: a doorbell is a")
	t.Note("store into the instance page and an eventfd write; each device turn is a request and a grant on the worker's socket")
	t.Note("executor: the worker's every device call (alloc, write, read, build, launch) is a request to its executor on a socket")
	t.Note("context: worker/context's commands go to device context %d (OpenContext), its own ring rung through RegContextKick,", contextID)
	t.Note("its kernels in an executor process of its own; goal (issue 31): worker/context / worker/executor <= 1.1x")
	t.Note("paired: geometric mean over blocks of one mode's mean latency / the other's, with its 95%% confidence interval (t)")
	return t, nil
}

// matmulTable runs the job in each mode and directly on the device, the
// three alternating run by run (and which goes first rotating).
func matmulTable(ctx context.Context, cfg config, modes []*mode) (*table.Table, error) {
	s := cfg.job
	d, err := newDirect(cfg.device)
	if err != nil {
		return nil, err
	}
	defer d.close()
	t := &table.Table{
		Title:  fmt.Sprintf("The %d x %d float matmul job x %d (upload A, multiply, download C each), median of %d runs per mode", s.N, s.N, s.Reps, cfg.runs),
		Header: []string{"mode", "total", "per matmul", "kernel (device)", "vs direct", "vs in-process", "totals (min-max)"},
	}
	// The rows: direct (the baseline), then vgpud's modes.
	const direct, inProcess = 0, 1
	names := []string{"direct"}
	for _, m := range modes {
		names = append(names, m.name)
	}
	n := len(names)
	kernels, executor, contexts := 1+indexOf(modes, "worker/kernels"), 1+indexOf(modes, "worker/executor"), 1+indexOf(modes, "worker/context")
	runOnce := func(i int) (job.Result, error) {
		if i == direct {
			return d.runJob(ctx, s)
		}
		dd := job.NewDriverDevice(modes[i-1].d)
		res, err := job.Run(ctx, s, dd)
		if err != nil {
			return res, err
		}
		// Untimed: the instance's memory would otherwise fill up over many runs.
		return res, dd.Free()
	}
	runs := make([][]job.Result, n)
	totals := make([][]float64, n)
	for r := 0; r < cfg.runs; r++ {
		for k := range n {
			i := (r + k) % n
			res, err := runOnce(i)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", names[i], err)
			}
			runs[i] = append(runs[i], res)
			totals[i] = append(totals[i], float64(res.TotalNS))
		}
	}
	med := func(rs []job.Result) job.Result {
		ds := make([]time.Duration, len(rs))
		for i, r := range rs {
			ds[i] = time.Duration(r.TotalNS)
		}
		m := stats.Median(ds)
		best := rs[0]
		for _, r := range rs {
			if abs(time.Duration(r.TotalNS)-m) < abs(time.Duration(best.TotalNS)-m) {
				best = r
			}
		}
		return best
	}
	base, in := med(runs[direct]), med(runs[inProcess])
	for i, name := range names {
		r := med(runs[i])
		lo, hi := r.TotalNS, r.TotalNS
		for _, x := range runs[i] {
			lo, hi = min(lo, x.TotalNS), max(hi, x.TotalNS)
		}
		kernel := "-"
		if r.KernelLaunches > 0 {
			kernel = (time.Duration(r.KernelNS) / time.Duration(r.KernelLaunches)).Round(100 * time.Microsecond).String()
		}
		vsIn := "-"
		if i != direct {
			vsIn = fmt.Sprintf("%.3fx", float64(r.TotalNS)/float64(in.TotalNS))
		}
		t.Add(name, time.Duration(r.TotalNS).Round(100*time.Microsecond).String(), r.PerMatMul().Round(10*time.Microsecond).String(),
			kernel, fmt.Sprintf("%.3fx", float64(r.TotalNS)/float64(base.TotalNS)), vsIn,
			fmt.Sprintf("%v-%v", time.Duration(lo).Round(time.Millisecond), time.Duration(hi).Round(time.Millisecond)))
	}
	ratio := func(a, b int) string {
		return fmt.Sprintf("%.3fx by median, paired over runs %s", float64(med(runs[a]).TotalNS)/float64(med(runs[b]).TotalNS), stats.PairedRatio(totals[a], totals[b]))
	}
	t.Note("worker/context / direct:           %s", ratio(contexts, direct))
	t.Note("worker/executor / direct:          %s", ratio(executor, direct))
	t.Note("worker/kernels / direct:           %s", ratio(kernels, direct))
	t.Note("in-process / direct:               %s", ratio(inProcess, direct))
	t.Note("worker/executor / in-process:      %s", ratio(executor, inProcess))
	t.Note("worker/executor / worker/kernels:  %s", ratio(executor, kernels))
	t.Note("worker/context / worker/executor:  %s", ratio(contexts, executor))
	t.Note("direct: the same job (source, %s, sizes, NDRange, repetitions) on a gpu.Queue of this process, no vgpud", job.BuildOptions)
	t.Note("goal (issue 29): vgpud / direct <= 1.03x on a GPU; issue 31: worker/executor / worker/kernels and worker/context /")
	t.Note("worker/executor <= 1.1x. worker/context runs the job on device context %d, whose staging pool is the driver's", contextID)
	t.Note("default for a context (%d KiB; the default ring's: %d KiB), so a 1 MiB upload or download is more copy commands", driver.DefaultContextStagingBytes>>10, driver.DefaultStagingBytes>>10)
	t.Note("every run checks %d elements of its last product against a CPU reference", job.Checks)
	return t, nil
}

// indexOf is the index of the mode named name.
func indexOf(modes []*mode, name string) int {
	for i, m := range modes {
		if m.name == name {
			return i
		}
	}
	panic("no mode " + name)
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

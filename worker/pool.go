package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/devmem"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/handover"
	"github.com/vgpud/vgpud/reuse"
	"github.com/vgpud/vgpud/sched"
	"github.com/vgpud/vgpud/worker/child"
	"github.com/vgpud/vgpud/worker/sandbox"
	"github.com/vgpud/vgpud/worker/wire"
)

// DefaultCacheBytes caps one domain's compiler cache directory.
const DefaultCacheBytes = 256 << 20

// Config configures a Pool.
type Config struct {
	// Devices are the physical devices the pool serves, a subset of
	// gpu.Devices in any order: a worker opens its device by Info.Index
	// (its place in gpu.Devices) and the name is checked.
	Devices []gpu.Info
	// Dir is where workers' private directories (compiler caches) go; it
	// must exist. Empty: os.TempDir().
	Dir string
	// CacheBytes caps each worker's compiler cache; 0: DefaultCacheBytes.
	CacheBytes int64
	// Executable runs as a worker when started with child.RoleWorker as
	// its first argument; empty: this program (os.Executable), which
	// must then call child.EnterRole first thing in main or TestMain.
	Executable string
	// WorkerLog is the workers' log level.
	WorkerLog slog.Level
	Logger    *slog.Logger

	// Sandbox confines every worker (docs/sandbox.md). Nil: the policy
	// the OpenCL platforms found on this host need (sandbox.DefaultPolicy,
	// derived once, when the pool is made).
	// Either way the worker's private directory is its Private one (at
	// sandbox.PrivateView in its file view), and limits left zero get the pool's: files up to CacheBytes,
	// private memory up to sandbox.DataLimit of the device's memory.
	Sandbox *sandbox.Policy
	// NoSandbox runs workers unconfined: only for tests and benchmarks
	// that must run without the sandbox.
	NoSandbox bool

	// InProcess runs every instance's device work in this process, on
	// GPUs (opened devices, same order as Devices): no isolation between
	// tenants (docs/isolation.md); for benchmarks' baselines only.
	InProcess bool
	GPUs      []gpu.Device

	// KernelsInWorker runs the kernels of CPU devices in the worker
	// process itself, which maps its instances' guest RAM, instead of in
	// an executor process beside it (docs/isolation.md "Executors"): a
	// guest's kernel can then read and write its own VM's RAM. For
	// benchmarks' baselines only.
	KernelsInWorker bool

	// PollWindow is how long an instance's ring loop in a worker looks
	// for the next doorbell before it blocks on the doorbell eventfd
	// (poll-then-block, docs/worker.md "Instance page"): 0 means
	// DefaultPollWindow, a negative value never polls. At most
	// aggregator.MaxPollWindow.
	PollWindow time.Duration

	// RequestEveryTurn turns parked turns off (sched/offer.go): every
	// device turn of a worker's instance is asked for and granted across
	// the process boundary, as before issue 42. For benchmarks' baselines.
	RequestEveryTurn bool

	// DeviceMemory is how much memory the pool lets all instances on each
	// device hold together (same order as Devices; a missing or 0 entry:
	// the device's GlobalMemBytes). A profile may advertise more than
	// this (overcommit, docs/overcommit.md). In process (InProcess) there
	// is no ledger: only the instances' quotas bound them.
	DeviceMemory []uint64
	// Shortage decides what a reservation that does not fit its device
	// waits for (docs/overcommit.md); nil: it is refused at once.
	Shortage func(dev int, id string, want uint64) ShortagePlan
}

// Pool runs the device work of vgpud's instances: a worker process per
// (trust domain, physical device) by default, started on first use and
// stopped when its last instance goes; and the schedulers of the physical
// devices, whose turns it grants to the workers and whose watchdog ends a
// worker that overruns a turn.
type Pool struct {
	cfg    Config
	log    *slog.Logger
	policy sandbox.Policy // every worker's, but Private (not NoSandbox)
	pidNS  bool           // workers get a PID namespace of their own
	scheds []*sched.Scheduler
	local  []*aggregator.Device // InProcess
	eng    *reuse.Engine        // InProcess
	mem    []*devmem.Ledger     // per device: what the instances hold
	memSt  []memCounters        // per device: overcommit decisions
	// pages maps an instance's id to its *procInstance for the
	// schedulers' contention hook, which runs under a scheduler's lock
	// and so may not take mu (contended).
	pages sync.Map

	mu sync.Mutex
	// Guarded by mu.
	procs     map[key]*process
	starting  map[key]*startCall
	instances map[string]*procInstance
	domains   map[string]*domainInfo
	exits     map[string]uint64
	closed    bool
	// An upgrade in place (handover.go): paused in the old process;
	// adopting in the new one until Start, with what it took over.
	paused     bool
	adopting   bool
	adoptProcs []*process
	adoptInsts map[string]handover.Instance
	adoptTab   *handover.Table
	// handedOver: a new process serves the workers (HandOver); nothing
	// here stops or kills one again.
	handedOver bool
}

// domainInfo is what the pool knows of a trust domain.
type domainInfo struct {
	shared bool
	budget int64 // reuse bytes; 0: the worker's default
}

// startCall is a worker start in progress, which others for the same key
// wait for.
type startCall struct {
	done chan struct{}
	pr   *process
	err  error
}

// NewPool returns a Pool with no workers.
// DefaultPollWindow is the poll window of Config.PollWindow's zero
// value: a little more than the gap between a guest's completion and its
// next doorbell on the benchmark machines (bench/README.md, the ladder),
// short enough that an idle instance gives its CPU back at once.
const DefaultPollWindow = 200 * time.Microsecond

// pollWindow is the window the pool's workers poll for.
func (c Config) pollWindow() time.Duration {
	switch {
	case c.PollWindow < 0:
		return 0
	case c.PollWindow == 0:
		return DefaultPollWindow
	}
	return min(c.PollWindow, aggregator.MaxPollWindow)
}

func NewPool(cfg Config) (*Pool, error) {
	if len(cfg.Devices) == 0 {
		return nil, fmt.Errorf("worker pool: no device")
	}
	if cfg.InProcess && len(cfg.GPUs) != len(cfg.Devices) {
		return nil, fmt.Errorf("worker pool: in-process needs the %d devices opened", len(cfg.Devices))
	}
	if cfg.Dir == "" {
		cfg.Dir = os.TempDir()
	}
	if cfg.CacheBytes <= 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Executable == "" && !cfg.InProcess {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("worker pool: find this program to run as workers: %w", err)
		}
		cfg.Executable = exe
	}
	p := &Pool{cfg: cfg, log: cfg.Logger, procs: map[key]*process{}, starting: map[key]*startCall{},
		instances: map[string]*procInstance{}, domains: map[string]*domainInfo{}, exits: map[string]uint64{}}
	p.memSt = make([]memCounters, len(cfg.Devices))
	for i, info := range cfg.Devices {
		capacity := info.GlobalMemBytes
		if i < len(cfg.DeviceMemory) && cfg.DeviceMemory[i] != 0 {
			capacity = cfg.DeviceMemory[i]
		}
		p.mem = append(p.mem, devmem.New(capacity))
	}
	for i := range cfg.Devices {
		dev := i
		s := sched.New(sched.DefaultPolicy, func(id string, ran time.Duration) { p.overrun(dev, id, ran) })
		if !cfg.InProcess {
			s.SetPreempter(p.preempter(dev))
			s.SetContended(p.contended)
			if !cfg.RequestEveryTurn {
				s.SetOffers(parks{p})
			}
		}
		p.scheds = append(p.scheds, s)
	}
	if cfg.InProcess {
		p.eng = reuse.New(reuse.Config{})
		for i, g := range cfg.GPUs {
			p.local = append(p.local, aggregator.NewDevice(g, p.scheds[i], p.log))
		}
		p.log.Warn("UNSAFE: instances run in vgpud's own process: guests can read and crash each other and vgpud (docs/isolation.md); use only as a benchmark baseline")
	}
	switch {
	case cfg.InProcess:
	case cfg.NoSandbox:
		p.log.Warn("UNSAFE: workers run without their sandbox: guest code may reach the host's files, network and processes (docs/sandbox.md)")
	default:
		if cfg.Sandbox != nil {
			p.policy = *cfg.Sandbox
		} else {
			p.policy = DeriveSandbox(p.log)
		}
		rep := sandbox.Probe()
		p.pidNS = slices.Contains(rep.Namespaces, "pid")
		if !p.pidNS && !cfg.KernelsInWorker {
			p.log.Warn("worker sandbox: no PID namespace for workers: kernels of CPU devices run in the worker, which maps its guests' RAM, not in an executor beside it (docs/isolation.md \"Executors\")")
		}
		for _, w := range rep.Weak {
			p.log.Warn("worker sandbox weaker than designed: " + w)
		}
		p.log.Info("worker sandbox", "namespaces", rep.Namespaces, "uid", rep.UID, "gid", rep.GID,
			"landlock_abi", rep.LandlockABI, "seccomp", rep.Seccomp)
	}
	return p, nil
}

// DeriveSandbox is the workers' sandbox policy derived from the OpenCL
// platforms this host has (sandbox.DefaultPolicy), each platform logged
// on log: what NewPool uses when Config.Sandbox is nil. It reads the
// platforms' files once (tens of milliseconds), so a caller in a hurry later,
// an upgrade's new process among them, derives it beforehand and passes
// it in.
func DeriveSandbox(log *slog.Logger) sandbox.Policy {
	platforms, err := sandbox.FindPlatforms(sandbox.Host{})
	if err != nil {
		log.Warn("worker sandbox: no OpenCL platform found to derive the policy from: workers get the base policy", "err", err)
	}
	for _, pl := range platforms {
		log.Info("worker sandbox platform", "vendor", pl.Vendor, "icd", pl.ICD, "library", pl.Library,
			"libraries", len(pl.Libraries), "dirs", pl.Dirs, "devices", pl.Devices, "missing", pl.Missing)
	}
	return sandbox.PolicyFor("", platforms, err)
}

// Sched returns physical device i's scheduler.
func (p *Pool) Sched(i int) *sched.Scheduler { return p.scheds[i] }

// InProcess reports whether instances run in this process.
func (p *Pool) InProcess() bool { return p.cfg.InProcess }

// Create places a new instance on its domain's worker for its device,
// starting the worker if there is none.
func (p *Pool) Create(cfg InstanceConfig) (Backend, error) {
	if cfg.Device < 0 || cfg.Device >= len(p.cfg.Devices) {
		return nil, fmt.Errorf("create %s: device %d of %d", cfg.ID, cfg.Device, len(p.cfg.Devices))
	}
	if err := p.declare(cfg.Domain, cfg.Shared); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.ID, err)
	}
	p.schedLimits(cfg.Device, cfg.ID, cfg.Domain, cfg.Limits)
	if p.cfg.InProcess {
		return p.createLocal(cfg)
	}
	p.mu.Lock()
	h, adopt := p.adoptInsts[cfg.ID]
	delete(p.adoptInsts, cfg.ID)
	paused, adopting := p.paused, p.adopting
	p.mu.Unlock()
	switch {
	case adopt:
		inst, err := p.adoptInstance(cfg, h)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.instances[cfg.ID] = inst
		p.mu.Unlock()
		p.pages.Store(cfg.ID, inst)
		return inst, nil
	case paused || adopting:
		return nil, fmt.Errorf("create %s: %w", cfg.ID, ErrUpgrading)
	}
	inst, err := newProcInstance(p, cfg)
	if err != nil {
		return nil, err
	}
	if err := inst.attach(); err != nil {
		inst.free()
		return nil, fmt.Errorf("create %s: %w", cfg.ID, err)
	}
	p.mu.Lock()
	p.instances[cfg.ID] = inst
	p.mu.Unlock()
	p.pages.Store(cfg.ID, inst)
	return inst, nil
}

// contended tells instance id's worker, through its page, that another
// instance waits for the device (aggregator.Shared.TurnWanted): a turn
// it keeps across commands goes back at once.
func (p *Pool) contended(id string) {
	if sh := p.pageOf(id); sh != nil {
		sh.TurnWanted.Store(1)
	}
}

// pageOf returns the instance page of worker instance id, or nil (no
// such instance, or one run in this process). It takes no lock.
func (p *Pool) pageOf(id string) *aggregator.Shared {
	if v, ok := p.pages.Load(id); ok {
		return v.(*procInstance).sh
	}
	return nil
}

// parks is a device scheduler's sched.Offers: a free turn is parked in
// the instance page of a worker's instance (aggregator.Shared.TurnOffer),
// where the instance's ring loop takes it without a request. Its methods
// run under the scheduler's lock and take no lock themselves.
type parks struct{ p *Pool }

func (o parks) Offer(id string, gen uint64) bool {
	sh := o.p.pageOf(id)
	if sh == nil {
		return false
	}
	sh.ParkTurn(gen)
	return true
}

func (o parks) Revoke(id string, gen uint64) bool {
	sh := o.p.pageOf(id)
	return sh != nil && sh.RevokeTurn(gen)
}

// declare notes a domain and whether it is operator-named.
func (p *Pool) declare(domain string, shared bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrPoolClosed
	}
	d, ok := p.domains[domain]
	if !ok {
		p.domains[domain] = &domainInfo{shared: shared}
		return nil
	}
	if d.shared != shared {
		return fmt.Errorf("domain %q is both shared and private", domain)
	}
	return nil
}

// processFor returns the live worker of k, starting one if there is none.
func (p *Pool) processFor(k key) (*process, error) {
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		if pr, ok := p.procs[k]; ok && pr.ctx.Err() == nil {
			p.mu.Unlock()
			return pr, nil
		}
		sc, ok := p.starting[k]
		if !ok {
			break
		}
		p.mu.Unlock()
		<-sc.done
		p.mu.Lock()
	}
	sc := &startCall{done: make(chan struct{})}
	p.starting[k] = sc
	p.mu.Unlock()
	pr, err := p.start(k)
	p.mu.Lock()
	delete(p.starting, k)
	if err == nil {
		p.procs[k] = pr
	}
	p.mu.Unlock()
	sc.pr, sc.err = pr, err
	close(sc.done)
	return pr, err
}

// forget drops a reaped worker.
func (p *Pool) forget(pr *process) {
	p.mu.Lock()
	if p.procs[pr.key] == pr {
		delete(p.procs, pr.key)
	}
	p.mu.Unlock()
}

// retire stops pr if it serves no instance any more.
func (p *Pool) retire(pr *process) {
	pr.mu.Lock()
	idle := len(pr.slots) == 0 && pr.pinned == 0
	pr.mu.Unlock()
	if !idle {
		return
	}
	p.mu.Lock()
	if p.handedOver {
		p.mu.Unlock()
		return
	}
	if p.procs[pr.key] == pr {
		delete(p.procs, pr.key)
	}
	p.mu.Unlock()
	pr.stop()
}

// count records a worker's end by cause.
func (p *Pool) count(cause string) {
	p.mu.Lock()
	p.exits[cause]++
	p.mu.Unlock()
}

// Exits returns how many workers ended, by cause (Cause*), since the
// pool started; a worker stopped because its last instance went is not
// counted.
func (p *Pool) Exits() map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]uint64, len(p.exits))
	for k, v := range p.exits {
		out[k] = v
	}
	return out
}

// Workers returns how many worker processes run.
func (p *Pool) Workers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.procs)
}

// WorkerPID returns the process id of the worker serving instance id, or
// 0 (in-process, lost, unknown).
func (p *Pool) WorkerPID(id string) int {
	p.mu.Lock()
	inst := p.instances[id]
	p.mu.Unlock()
	if inst == nil {
		return 0
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.proc == nil {
		return 0
	}
	return inst.proc.os.Pid()
}

// CacheDir returns the compiler cache directory of the worker serving
// instance id as the main process reaches it (its contents are the
// worker's: untrusted), or "" (in-process, lost, unknown).
func (p *Pool) CacheDir(id string) string {
	p.mu.Lock()
	inst := p.instances[id]
	p.mu.Unlock()
	if inst == nil {
		return ""
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.proc == nil {
		return ""
	}
	if p.cfg.NoSandbox {
		return inst.proc.cache
	}
	// A confined worker's directory is its own tmpfs (docs/sandbox.md).
	return sandbox.PrivateDir(inst.proc.os.Pid(), inst.proc.cache)
}

// overrun is the schedulers' watchdog: a turn of instance id on device
// dev ran longer than its kernel limit (the time it was stopped by
// preemptions excluded). Its worker is ended.
func (p *Pool) overrun(dev int, id string, ran time.Duration) {
	p.mu.Lock()
	inst := p.instances[id]
	p.mu.Unlock()
	if inst == nil {
		p.log.Error("device turn over its kernel limit, but no worker to end (in-process instance)", "instance", id, "ran", ran)
		return
	}
	inst.mu.Lock()
	pr := inst.proc
	budget := inst.limits.KernelTimeout
	inst.mu.Unlock()
	if pr != nil {
		pr.kill(CauseWatchdog, fmt.Sprintf("a device turn of instance %s ran on device %d for %v, over its kernel limit of %v",
			id, dev, ran.Round(time.Millisecond), budget))
	}
}

// isShared reports whether the domain is operator-named.
func (p *Pool) isShared(domain string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.domains[domain]
	return ok && d.shared
}

// budget is the domain's reuse budget (0: the worker's default).
func (p *Pool) budget(domain string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.domains[domain]; ok {
		return d.budget
	}
	return 0
}

// SetBudget sets a domain's reuse byte budget, in every worker of the
// domain now and later.
func (p *Pool) SetBudget(domain string, n int64) {
	p.mu.Lock()
	d, ok := p.domains[domain]
	if !ok {
		d = &domainInfo{}
		p.domains[domain] = d
	}
	d.budget = n
	if p.adopting {
		p.mu.Unlock()
		return // sent by Start
	}
	var procs []*process
	for k, pr := range p.procs {
		if k.domain == domain {
			procs = append(procs, pr)
		}
	}
	p.mu.Unlock()
	if p.cfg.InProcess {
		if dom, ok := p.eng.Lookup(domain); ok {
			dom.SetBudget(n)
		}
		return
	}
	for _, pr := range procs {
		if _, err := pr.call(context.Background(), &wire.Budget{Bytes: n}); err != nil {
			pr.log.Warn("set reuse budget", "err", err)
		}
	}
}

// DomainStats are a trust domain's reuse table, over its workers.
type DomainStats struct {
	Name    string
	Shared  bool
	Workers int
	wire.StatsReply
}

// Domains returns the domains with a worker (or, in process, a table),
// ordered by name.
func (p *Pool) Domains() []DomainStats {
	if p.cfg.InProcess {
		return p.localDomains()
	}
	p.mu.Lock()
	if p.adopting || p.paused {
		// Nothing is read from the workers: names only.
		var out []DomainStats
		for n, d := range p.domains {
			out = append(out, DomainStats{Name: n, Shared: d.shared})
		}
		p.mu.Unlock()
		slices.SortFunc(out, func(a, b DomainStats) int { return strings.Compare(a.Name, b.Name) })
		return out
	}
	byName := map[string][]*process{}
	for k, pr := range p.procs {
		byName[k.domain] = append(byName[k.domain], pr)
	}
	shared := map[string]bool{}
	for n, d := range p.domains {
		shared[n] = d.shared
	}
	p.mu.Unlock()
	var out []DomainStats
	for name, procs := range byName {
		ds := DomainStats{Name: name, Shared: shared[name]}
		for _, pr := range procs {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r, err := pr.call(ctx, &wire.Stats{})
			cancel()
			if err != nil {
				continue
			}
			s, err := wire.DecodeStatsReply(r.Body)
			if err != nil {
				pr.kill(CauseProtocol, fmt.Sprintf("protocol violation: stats reply: %v", err))
				continue
			}
			ds.Workers++
			ds.Entries += s.Entries
			ds.Bytes += s.Bytes
			ds.Budget = max(ds.Budget, s.Budget)
			ds.Hits += s.Hits
			ds.Misses += s.Misses
			ds.Skipped += s.Skipped
			ds.Recorded += s.Recorded
			ds.Evictions += s.Evictions
			ds.BytesSaved += s.BytesSaved
			ds.DeviceNanos += s.DeviceNanos
			ds.Instances += s.Instances
		}
		out = append(out, ds)
	}
	slices.SortFunc(out, func(a, b DomainStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// DropDomain forgets a domain that no instance uses any more.
func (p *Pool) DropDomain(name string) {
	p.mu.Lock()
	delete(p.domains, name)
	p.mu.Unlock()
	if p.cfg.InProcess {
		if d, ok := p.eng.Lookup(name); ok {
			p.eng.Drop(d)
		}
	}
}

// Close stops every worker (their instances must be closed first, or are
// lost) and the schedulers.
//
// After HandOver it does nothing: the workers are the new process's.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	procs := make([]*process, 0, len(p.procs))
	for _, pr := range p.procs {
		procs = append(procs, pr)
	}
	p.mu.Unlock()
	for _, pr := range procs {
		pr.stop()
	}
	var err error
	for _, d := range p.local {
		if e := d.Close(); e != nil && err == nil {
			err = e
		}
	}
	for _, s := range p.scheds {
		s.Close()
	}
	return err
}

// command is the exec.Cmd of a worker for k.
func (p *Pool) command(k key, cacheDir string) (*exec.Cmd, error) {
	cmd := exec.Command(p.cfg.Executable)
	cmd.Args = []string{"vgpud-worker", child.RoleWorker}
	cmd.Env = append(workerEnv(os.Environ(), cacheDir, p.cfg.WorkerLog), child.EnvPollWindow+"="+p.cfg.pollWindow().String())
	cmd.Dir = cacheDir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The worker dies with the thread that started it; its socket
		// closing ends it too.
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	pol := sandbox.Policy{Off: true}
	if !p.cfg.NoSandbox {
		pol = p.policy
		pol.Private = cacheDir
		if pol.Limits.FileBytes == 0 {
			pol.Limits.FileBytes = uint64(p.cfg.CacheBytes)
		}
		if pol.Limits.DataBytes == 0 {
			// The most device memory the domain's instances could ever
			// hold on this device; the instances' quotas are tighter.
			pol.Limits.DataBytes = sandbox.DataLimit(p.cfg.Devices[k.device].GlobalMemBytes, 0)
		}
		if err := sandbox.PrepareDir(cacheDir); err != nil {
			return nil, fmt.Errorf("worker for domain %s on device %d: %w", k.domain, k.device, err)
		}
	}
	if err := pol.Apply(cmd); err != nil {
		return nil, fmt.Errorf("worker for domain %s on device %d: %w", k.domain, k.device, err)
	}
	return cmd, nil
}

// workerEnv is a worker's environment: only what the OpenCL runtime and
// the worker need from vgpud's own, nothing else. Mesa's rusticl reads
// RUSTICL_ (RUSTICL_ENABLE=llvmpipe turns on its CPU device), its Gallium
// drivers GALLIUM_ and LP_ (llvmpipe's threads), and Mesa MESA_; but not
// MESA_SHADER_CACHE_DIR (nor the older MESA_GLSL_CACHE_DIR): one directory
// for every worker would share compiled programs between trust domains, so
// Mesa's cache stays under HOME, the worker's own directory, as PoCL's
// does (docs/platforms.md).
func workerEnv(from []string, cacheDir string, level slog.Level) []string {
	env := []string{
		child.EnvWorker + "=1",
		child.EnvLog + "=" + level.String(),
		child.EnvCache + "=" + cacheDir,
		"POCL_CACHE_DIR=" + cacheDir,
		"TMPDIR=" + cacheDir,
		"HOME=" + cacheDir,
		"PATH=/usr/bin:/bin",
	}
	for _, kv := range from {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "POCL_CACHE_DIR" || name == "TMPDIR" || name == "HOME" || name == "PATH",
			name == "MESA_SHADER_CACHE_DIR" || name == "MESA_GLSL_CACHE_DIR":
		case strings.HasPrefix(name, "POCL_"), strings.HasPrefix(name, "OCL_ICD_"), strings.HasPrefix(name, "OPENCL_"),
			strings.HasPrefix(name, "CUDA_"), strings.HasPrefix(name, "__GL"), name == "LD_LIBRARY_PATH", name == "GOMAXPROCS",
			strings.HasPrefix(name, "RUSTICL_"), strings.HasPrefix(name, "MESA_"), strings.HasPrefix(name, "LP_"),
			strings.HasPrefix(name, "GALLIUM_"):
			env = append(env, kv)
		}
	}
	return env
}

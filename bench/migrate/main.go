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
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/migratetest"
)

func main() {
	benchmain.Main("bench/migrate", run)
}

// Transports the benchmark runs on.
const (
	mpqemuT   = "mpqemu"    // QEMU 7.2 (the host's), x-pci-proxy-dev: unplug, migrate, plug
	vfioUserT = "vfio-user" // QEMU 11.1 (the VMM root), vfio-user-pci: the vGPU stays attached
)

// config is one run's settings.
type config struct {
	transports []string
	sizes      []uint64 // ballast bytes
	rates      []string // "low", "high"
	profile    string
	pace       time.Duration
	n          int // vector elements
	serial     bool
	keep       bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "16,256,1024", "device memory in use (the ballast), MiB, comma-separated")
	rates := fs.String("rates", "low,high", "dirty rates: low (the two 256 KiB vectors each step), high (also a 64 MiB ballast buffer each step)")
	transports := fs.String("transports", mpqemuT+","+vfioUserT, "mpqemu (QEMU 7.2, the vGPU unplugged and plugged again) and/or vfio-user (QEMU 11.1 from the VMM root, the vGPU stays attached)")
	var c config
	fs.StringVar(&c.profile, "profile", "vgpu-large", "vGPU profile of the instance (its memory must hold the ballast)")
	fs.DurationVar(&c.pace, "pace", 15*time.Millisecond, "the guest job's sleep between steps")
	fs.IntVar(&c.n, "n", 65536, "uint32 elements of each of the job's two vectors")
	fs.BoolVar(&c.serial, "serial", false, "copy the guests' consoles to stderr")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (the daemons' logs) and print its path")
	if err := benchmain.Parse(fs, args); err != nil {
		return c, err
	}
	for _, s := range strings.Split(*sizes, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil || v == 0 {
			return c, fmt.Errorf("-sizes: %q is not a size in MiB", s)
		}
		c.sizes = append(c.sizes, v<<20)
	}
	for _, t := range strings.Split(*transports, ",") {
		if t != mpqemuT && t != vfioUserT {
			return c, fmt.Errorf("-transports: %q, want %s or %s", t, mpqemuT, vfioUserT)
		}
		c.transports = append(c.transports, t)
	}
	for _, r := range strings.Split(*rates, ",") {
		if r != "low" && r != "high" {
			return c, fmt.Errorf("-rates: %q, want low or high", r)
		}
		c.rates = append(c.rates, r)
	}
	if c.n < 1 || c.pace < 0 {
		return c, errors.New("-n must be positive and -pace not negative")
	}
	return c, nil
}

// mode is how a migration copies the device state.
type mode string

const (
	precopy  mode = "pre-copy"
	stopCopy mode = "stop-and-copy"
	// quiesceFirst is pre-copy with the guest quiesced before QEMU
	// copies the VM (vgpuctl migrate -quiesce-first): on vfio-user the
	// baseline of the vGPU running during QEMU's copy (issue 44).
	quiesceFirst mode = "pre-copy, quiesce first"
)

// step is one migration of a plan (aToB: from A to B).
type step struct {
	m    mode
	aToB bool
}

// planFor is the migrations of one configuration on a transport: each
// mode once in each direction, alternating, so the VM ends where it
// started; vfio-user adds the quiesce-first baseline.
func planFor(transport string) []step {
	if transport == vfioUserT {
		return []step{{precopy, true}, {stopCopy, false}, {quiesceFirst, true}, {precopy, false}, {stopCopy, true}, {quiesceFirst, false}}
	}
	return []step{{precopy, true}, {stopCopy, false}, {stopCopy, true}, {precopy, false}}
}

// result is one migration's report.
type result struct {
	transport string
	size      uint64
	rate      string
	mode      mode
	rep       *migrate.Report
}

type bench struct {
	cfg       config
	dir       string
	env       *migratetest.Env
	transport string
	a, b      *migratetest.Daemon
	runDirs   []string // the daemons' run directories, removed at the end
	stderr    io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "vgpud-bench-migrate-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(stderr, "bench/migrate: work directory %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b := &bench{cfg: cfg, dir: dir, stderr: stderr}
	defer func() {
		for _, d := range b.runDirs {
			if cfg.keep {
				fmt.Fprintf(stderr, "bench/migrate: daemon run directory %s\n", d)
			} else {
				os.RemoveAll(d)
			}
		}
	}()
	env, err := migratetest.NewEnv(ctx, b.dir)
	if err != nil {
		return err
	}
	if cfg.serial {
		env.SerialLog = stderr
	}
	b.env = env
	printHeader(ctx, stdout, b)
	var results []result
	for _, tr := range cfg.transports {
		rs, err := b.runTransport(ctx, tr)
		if err != nil {
			return fmt.Errorf("%s: %w", tr, err)
		}
		results = append(results, rs...)
	}
	for _, t := range tables(results) {
		t.Print(stdout)
	}
	return nil
}

// runTransport starts a pair of daemons speaking tr and measures every
// size and rate on it.
func (b *bench) runTransport(ctx context.Context, tr string) ([]result, error) {
	b.transport = tr
	if err := b.setup(ctx); err != nil {
		return nil, err
	}
	defer b.a.Stop()
	defer b.b.Stop()
	var out []result
	for _, size := range b.cfg.sizes {
		for _, rate := range b.cfg.rates {
			rs, err := b.measure(ctx, size, rate)
			if err != nil {
				return nil, fmt.Errorf("%d MiB, %s dirty rate: %w", size>>20, rate, err)
			}
			out = append(out, rs...)
			fmt.Fprintf(b.stderr, "bench/migrate: %s, %d MiB, %s dirty rate: done\n", tr, size>>20, rate)
		}
	}
	return out, nil
}

// setup starts the two daemons of b.transport. Their run directories are
// short: an instance's vfio-user socket path must fit a Unix socket
// address.
func (b *bench) setup(ctx context.Context) error {
	b.a, b.b = nil, nil
	for _, d := range []struct {
		dev string
		p   **migratetest.Daemon
	}{{"pthread", &b.a}, {"basic", &b.b}} {
		// Not under b.dir: its long name would push an instance's
		// vfio-user socket past a Unix socket address's 107 bytes.
		runDir, err := os.MkdirTemp("", "vb")
		if err != nil {
			return err
		}
		b.runDirs = append(b.runDirs, runDir)
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		*d.p, err = migratetest.StartDaemonFlags(sctx, b.env.Bin, runDir, d.dev, b.env.TLSDir, []string{"-transport", b.transport},
			"POCL_DEVICES=pthread basic")
		cancel()
		if err != nil {
			if b.a != nil {
				b.a.Stop()
			}
			return err
		}
	}
	return nil
}

// vm starts QEMU for instance id of d: booting the guest job, or, with
// incoming, waiting for the VM to arrive. On vfio-user the destination's
// instance is created first, to await the migration: the destination
// QEMU's vfio-user-pci connects to it at its start.
func (b *bench) vm(ctx context.Context, d *migratetest.Daemon, id, incoming, app string) (*qemuvm.VM, error) {
	if b.transport == mpqemuT {
		return b.env.StartVM(ctx, d.InstanceBase(id), incoming, app)
	}
	if incoming != "" {
		if out, err := d.Ctl(ctx, "create", "-incoming", "-uuid", id, "-profile", b.cfg.profile); err != nil {
			return nil, fmt.Errorf("create -incoming: %w: %s", err, out)
		}
	}
	return b.env.StartVFIOUserVM(ctx, d.InstanceBase(id), incoming, app)
}

// measure boots one guest with size bytes of ballast at rate and migrates
// it as plan says.
func (b *bench) measure(ctx context.Context, size uint64, rate string) ([]result, error) {
	id, err := b.a.Create(ctx, b.cfg.profile)
	if err != nil {
		return nil, err
	}
	defer b.a.Ctl(context.Background(), "destroy", id)
	defer b.b.Ctl(context.Background(), "destroy", id)
	rewrite := 0
	if rate == "high" {
		rewrite = 1
	}
	app := fmt.Sprintf("vgpu.run=vgpu-agent vgpu.args=/bin/vgpu-iterate,-steps,1000000000,-migrations,%d,-pace,%s,-n,%d,-progress,10,-ballast,%d,-rewrite,%d",
		len(planFor(b.transport)), b.cfg.pace, b.cfg.n, size, rewrite)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	vm, err := b.vm(ctx, b.a, id, "", app)
	if err != nil {
		return nil, err
	}
	defer func() { vm.Kill() }()
	if _, err := vm.WaitLine(ctx, "ITERATE step 20/"); err != nil {
		return nil, fmt.Errorf("the guest job did not start: %w\n%s", err, strings.Join(vm.Lines(), "\n"))
	}
	var out []result
	plan := planFor(b.transport)
	for i, p := range plan {
		from, to := b.a, b.b
		if !p.aToB {
			from, to = b.b, b.a
		}
		uri := "unix:" + filepath.Join(b.dir, fmt.Sprintf("m%d.sock", i))
		next, err := b.vm(ctx, to, id, uri, app)
		if err != nil {
			return nil, err
		}
		var extra []string
		switch p.m {
		case stopCopy:
			extra = append(extra, "-no-precopy")
		case quiesceFirst:
			extra = append(extra, "-quiesce-first")
		}
		rep, err := from.Migrate(ctx, id, to.MigrateAddr, uri, extra...)
		if err != nil {
			next.Kill()
			return nil, fmt.Errorf("migration %d (%s): %w\nsource log:\n%s\ndestination log:\n%s", i, p.m, err, from.Logs(), to.Logs())
		}
		out = append(out, result{transport: b.transport, size: size, rate: rate, mode: p.m, rep: rep})
		if js, err := json.Marshal(rep); err == nil {
			fmt.Fprintf(b.stderr, "bench/migrate: %s %d MiB %s %s: %s\n", b.transport, size>>20, rate, p.m, js)
		}
		// The job must go on where it arrived before the next move.
		if _, err := next.WaitLine(ctx, "ITERATE resumed replugged=true"); err != nil {
			next.Kill()
			return nil, fmt.Errorf("migration %d: the guest did not resume: %w\n%s", i, err, strings.Join(next.Lines(), "\n"))
		}
		if i < len(plan)-1 {
			if _, err := next.WaitLine(ctx, "ITERATE step "); err != nil {
				next.Kill()
				return nil, fmt.Errorf("migration %d: the job did not go on: %w", i, err)
			}
		}
		vm.Kill()
		vm = next
	}
	line, err := vm.WaitLine(ctx, "ITERATE OK")
	if err != nil {
		return nil, fmt.Errorf("the job did not end OK: %w\n%s", err, strings.Join(vm.Lines(), "\n"))
	}
	fmt.Fprintf(b.stderr, "bench/migrate: %s\n", line)
	return out, nil
}

func printHeader(ctx context.Context, w io.Writer, b *bench) {
	commit := "unknown"
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			commit += " (with uncommitted changes)"
		}
	}
	version := func(cmd ...string) string {
		if out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).Output(); err == nil {
			v, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
			return v
		}
		return "unknown"
	}
	fmt.Fprintf(w, "bench/migrate: commit %s, %d CPUs, TCG, guest kernel %s, 512 MiB VMs\n", commit, runtime.NumCPU(), filepath.Base(b.env.Kernel.Vmlinuz))
	for _, t := range b.cfg.transports {
		switch t {
		case mpqemuT:
			fmt.Fprintf(w, "  mpqemu: %s (the host's), x-pci-proxy-dev: the vGPU is unplugged, QEMU migrates, the destination plugs one\n", version("qemu-system-x86_64", "--version"))
		case vfioUserT:
			v := "unknown"
			if root, err := qemuvm.RepoVMMRoot(); err == nil {
				v = version(root.Script, root.Root, "--", "qemu-system-x86_64", "--version")
			}
			fmt.Fprintf(w, "  vfio-user: %s (the VMM root), vfio-user-pci: the vGPU stays attached\n", v)
		}
	}
	fmt.Fprintf(w, "vgpud A: PoCL pthread (2 compute units); vgpud B: PoCL basic (1); profile %s; job: 2 x %d KiB vectors, %v between steps\n",
		b.cfg.profile, b.cfg.n*4>>10, b.cfg.pace)
}

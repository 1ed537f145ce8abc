package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/job"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

func main() {
	benchmain.Main("datapath", benchmain.Stdout(run))
}

// Sections, in the order they print.
const (
	sectionMMIO      = "mmio"
	sectionTransport = "transport"
	sectionMatmul    = "matmul"
)

var allSections = []string{sectionMMIO, sectionTransport, sectionMatmul}

// config is the parsed command line.
type config struct {
	sections    []string
	qemu        bool // boot TCG guests for the in-guest columns
	guestMMIO   int  // accesses per op in the guest
	harnessMMIO int  // accesses per op through the harness
	job         job.Spec
	runs        int    // job runs per path; the table shows the median
	device      string // OpenCL device selector
	profile     string // vGPU profile of the instances
	bootTimeout time.Duration
	serial      io.Writer // guest consoles, or nil
}

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("datapath", flag.ContinueOnError)
	fs.SetOutput(out)
	c := config{job: job.Default()}
	sections := fs.String("sections", strings.Join(allSections, ","), "comma-separated `list` of tables: "+strings.Join(allSections, ", "))
	fs.BoolVar(&c.qemu, "qemu", true, "boot TCG guests for the in-guest rows (false: host and harness rows only)")
	fs.IntVar(&c.guestMMIO, "guest-mmio-n", 20000, "MMIO accesses per operation inside the guest")
	fs.IntVar(&c.harnessMMIO, "harness-mmio-n", 20000, "MMIO accesses per operation through the harness")
	fs.IntVar(&c.job.N, "n", c.job.N, "matmul: matrix side (a multiple of -local)")
	fs.IntVar(&c.job.Reps, "reps", c.job.Reps, "matmul: repetitions, each with an upload of A and a download of C")
	fs.IntVar(&c.job.Local, "local", c.job.Local, "matmul: work-group side")
	fs.Uint64Var(&c.job.Seed, "seed", c.job.Seed, "matmul: input seed")
	fs.IntVar(&c.runs, "runs", 3, "matmul: runs of the job per path; the table shows the run with the median total")
	fs.StringVar(&c.device, "device", os.Getenv("VGPUD_TEST_DEVICE"), "OpenCL device: index or name substring (default $VGPUD_TEST_DEVICE, else the first)")
	fs.StringVar(&c.profile, "profile", "vgpu-small", "vGPU profile of the benchmark's instances")
	fs.DurationVar(&c.bootTimeout, "boot-timeout", 4*time.Minute, "bound on each guest's boot, run and power-off")
	serial := fs.Bool("serial", false, "copy the guests' consoles to stderr")
	if err := benchmain.Parse(fs, args); err != nil {
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
	if c.guestMMIO < 1 || c.guestMMIO > 10_000_000 || c.harnessMMIO < 1 || c.harnessMMIO > 10_000_000 {
		return c, fmt.Errorf("-guest-mmio-n %d, -harness-mmio-n %d: want 1..10000000", c.guestMMIO, c.harnessMMIO)
	}
	if *serial {
		c.serial = os.Stderr
	}
	return c, nil
}

func (c config) has(section string) bool { return slices.Contains(c.sections, section) }

// bench holds what every section shares.
type bench struct {
	cfg   config
	dev   gpu.Device
	mgr   *mdev.Manager
	guest *guestImage // nil without -qemu
	env   environment
	// vfioUser is a second manager whose VMs attach by vfio-user, and
	// root the VMM root its QEMU 11.1 runs from; nil without -qemu or
	// without a root.
	vfioUser *mdev.Manager
	root     *qemuvm.VMMRoot

	bootTime []time.Duration // each guest's start to its program
}

func run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	cfg, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	h, err := host.Start(cfg.device, "vgpud-bench-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	dev, mgr, tmp := h.Dev, h.Mgr, h.Dir

	b := &bench{cfg: cfg, dev: dev, mgr: mgr}
	b.env = describe(ctx, dev, cfg)
	if cfg.qemu {
		b.guest, err = buildGuest(ctx, tmp)
		if err != nil {
			return err
		}
		b.env.Kernel = b.guest.kernel.Release
		if root, rerr := qemuvm.RepoVMMRoot(); rerr == nil {
			// Short: a vfio-user socket's path must fit a Unix socket
			// address.
			dir, derr := os.MkdirTemp("", "dp")
			if derr != nil {
				return derr
			}
			defer os.RemoveAll(dir)
			m, merr := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: dir, Transport: vfiouser.Transport{},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if merr != nil {
				return merr
			}
			defer func() { err = errors.Join(err, m.Close()) }()
			b.vfioUser, b.root = m, &root
		}
	}
	b.env.print(stdout)

	if cfg.has(sectionMMIO) {
		t, err := b.mmioTable(ctx)
		if err != nil {
			return fmt.Errorf("mmio: %w", err)
		}
		t.Print(stdout)
	}
	if cfg.has(sectionTransport) {
		t, err := b.transportTable(ctx)
		if err != nil {
			return fmt.Errorf("transport: %w", err)
		}
		t.Print(stdout)
	}
	if cfg.has(sectionMatmul) {
		t, err := b.matmulTable(ctx)
		if err != nil {
			return fmt.Errorf("matmul: %w", err)
		}
		t.Print(stdout)
	}
	return nil
}

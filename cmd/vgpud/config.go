package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/internal/buildinfo"
	"github.com/vgpud/vgpud/internal/cliargs"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/definitions"
	"github.com/vgpud/vgpud/mdev/keeper"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/migrate"
)

// Config is the daemon's configuration file (JSON). Flags override it.
type Config struct {
	// Devices select physical devices (gpu.Open selectors: index or name
	// substring). Empty: the first device.
	Devices []string `json:"devices"`
	// RunDir holds control.sock and instances/<uuid>.sock.
	RunDir string `json:"run_dir"`
	// Transport is what VMs speak on the instance sockets: "mpqemu"
	// (QEMU's x-pci-proxy-dev, <uuid>.sock; the default) or "vfio-user"
	// (QEMU >= 10.1's vfio-user-pci, <uuid>.vfio-user.sock). Xen guests
	// attach with vgpuctl attach -xen whatever this says.
	Transport string `json:"transport,omitempty"`
	// Profiles replace the built-in vGPU types when set.
	Profiles []mdev.Profile `json:"profiles"`
	// Instances are created at start.
	Instances []mdev.CreateRequest `json:"instances"`
	LogLevel  string               `json:"log_level"`
	LogFormat string               `json:"log_format"` // text or json
	// DefinitionsDir holds the persistent instance definitions (vgpuctl
	// define; one NAME.json each), created at every start when missing.
	// Empty: definitions.DefaultDir (/etc/vgpud/instances.d).
	DefinitionsDir string `json:"definitions_dir,omitempty"`
	// Reuse configures result reuse: {"off": true} turns it off, "budget"
	// bounds the bytes of shadow results (default 256 MiB), docs/reuse.md.
	Reuse mdev.ReuseConfig `json:"reuse"`
	// WorkerDir holds the worker processes' private directories (their
	// compiler caches); it and its parents must let the workers'
	// unprivileged user through. Empty: the system's temporary directory.
	WorkerDir string `json:"worker_dir,omitempty"`
	// UnsafeInProcess runs every instance's device work (guest-supplied
	// kernels and the compiler included) in vgpud's own process, with no
	// isolation between tenants (docs/isolation.md): a benchmark baseline,
	// never for guests one does not trust. Refused unless set.
	UnsafeInProcess bool `json:"unsafe_in_process,omitempty"`
	// MigrateTLS is the directory of the migration channel's ca.pem,
	// cert.pem and key.pem (docs/migration.md); MigrateListen the TCP
	// address where this vgpud receives migrations ("" receives none).
	MigrateTLS    string `json:"migrate_tls,omitempty"`
	MigrateListen string `json:"migrate_listen,omitempty"`
	// Libvirt, if set, is the libvirt connection URI (e.g. qemu:///system)
	// whose domains get the vGPU their metadata names, automatically
	// (docs/operating.md, "libvirt-managed VMs").
	Libvirt string `json:"libvirt,omitempty"`
	// Sandbox adds to every worker's sandbox policy, which vgpud derives
	// from the OpenCL platform it finds (docs/sandbox.md, "Platforms").
	Sandbox SandboxConfig `json:"sandbox,omitzero"`
	// SocketGroup, if set, is the group that may use the control socket
	// and start VMs on the instances: the socket is made mode 0660 and
	// the run directory 0750, the instances directory 0770 and the
	// instances' sockets 0660, all of that group (the Debian package's
	// unit names the vgpud group). Empty: root's alone (0600, 0700).
	SocketGroup string `json:"socket_group,omitempty"`
	// Placement chooses where new instances go (docs/placement.md):
	// {"policy": "interference", "dataset": "/var/lib/vgpud/interference.json"}.
	Placement PlacementConfig `json:"placement,omitzero"`
}

// PlacementConfig is the configuration file's placement section.
type PlacementConfig struct {
	// Policy: fewest, round-robin or interference; empty: interference
	// when a dataset is given, else fewest.
	Policy string `json:"policy,omitempty"`
	// Dataset is a co-run dataset file (bench/interference writes one)
	// the interference model learns from at start.
	Dataset string `json:"dataset,omitempty"`
	// Model chooses the model ({"kind": "forest", "set": "select"});
	// empty: mdev.DefaultModel.
	Model interference.Options `json:"model,omitzero"`
}

// managerPlacement loads the dataset c names.
func (c PlacementConfig) managerPlacement() (mdev.PlacementConfig, error) {
	out := mdev.PlacementConfig{Model: c.Model}
	if c.Policy != "" {
		p, err := mdev.ParsePlacementPolicy(c.Policy)
		if err != nil {
			return out, err
		}
		out.Policy = p
	}
	if c.Dataset != "" {
		ds, err := interference.Load(c.Dataset)
		if err != nil {
			return out, fmt.Errorf("placement dataset: %w", err)
		}
		out.Dataset = ds
	}
	return out, nil
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// loadConfig reads the configuration file at path ("": none, the zero
// Config); an unknown field is an error.
func loadConfig(path string) (Config, error) {
	var c Config
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// newLogger is the daemon's logger on w at level ("": info) in format
// (text, the default, or json).
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if level != "" {
		if err := lv.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("log level %q: %w", level, err)
		}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// errBadUsage: a command line vgpud cannot run; it exits 2.
var errBadUsage = errors.New("bad command line")

// commandLine is vgpud's command line, parsed: the flags' values.
type commandLine struct {
	args []string // as given: an upgrade's new vgpud gets them too
	rest []string // what follows the flags (refused)

	configPath, runDir, transport, logLevel, logFormat string
	listDevices, diagnose, diagnoseJSON, version       bool
	metricsAddr                                        string
	unsafeInProcess                                    bool
	migrateTLS, migrateListen                          string
	stopDrain, probation, pollWindow                   time.Duration
	reattach                                           bool
	placement, placementDataset, definitions           string
	socketGroup, libvirt                               string
	devices, deviceMemory                              multiFlag
}

// flagSet is vgpud's flags, bound to c's fields.
func (c *commandLine) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("vgpud", flag.ContinueOnError)
	fs.StringVar(&c.configPath, "config", "", "configuration file (JSON)")
	fs.StringVar(&c.runDir, "run-dir", "", "directory for the control and instance sockets (default /run/vgpud)")
	fs.StringVar(&c.transport, "transport", "", "protocol VMs speak on the instance sockets: mpqemu (QEMU x-pci-proxy-dev, default) or vfio-user (QEMU >= 10.1 vfio-user-pci)")
	fs.StringVar(&c.logLevel, "log-level", "", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "", "text or json")
	fs.BoolVar(&c.listDevices, "list-devices", false, "print the OpenCL devices and exit")
	fs.BoolVar(&c.diagnose, "sandbox-diagnose", false, "run one kernel in a confined worker on the -device given (default the first), print every file, ioctl and system call the sandbox refused it, and exit")
	fs.BoolVar(&c.diagnoseJSON, "json", false, "with -sandbox-diagnose: print the platforms, policy and diagnosis as JSON")
	fs.StringVar(&c.metricsAddr, "metrics-addr", defaultMetricsAddr, "TCP address for Prometheus /metrics (\"\" disables)")
	fs.BoolVar(&c.unsafeInProcess, "unsafe-in-process", false, "run guests' device work in vgpud's own process: NO isolation between tenants (benchmark baseline only)")
	fs.StringVar(&c.migrateTLS, "migrate-tls", "", "directory with the migration channel's ca.pem, cert.pem, key.pem (docs/migration.md)")
	fs.StringVar(&c.migrateListen, "migrate-listen", "", "TCP address to receive migrations on, e.g. :7450 (needs -migrate-tls)")
	fs.DurationVar(&c.stopDrain, "stop-drain", 10*time.Second, "on SIGTERM or SIGINT: tell the guests, stop fetching commands and let those fetched finish for at most this long")
	fs.DurationVar(&c.pollWindow, "poll-window", 0, "how long a worker looks for a guest's next command before it sleeps (0: the default, 200us; negative: never; docs/worker.md \"Poll-then-block\")")
	fs.BoolVar(&c.reattach, "reattach", true, "after a restart, re-plug the vGPU of each restored instance whose VM is still running (docs/operating.md)")
	fs.StringVar(&c.placement, "placement", "", "placement policy of new instances: fewest, round-robin or interference (default: interference with a dataset, else fewest)")
	fs.StringVar(&c.placementDataset, "placement-dataset", "", "co-run dataset the interference placement model learns from (docs/placement.md)")
	fs.StringVar(&c.definitions, "definitions", "", "directory of persistent instance definitions, created at every start when missing (default "+definitions.DefaultDir+"; vgpuctl define)")
	fs.StringVar(&c.socketGroup, "socket-group", "", "group allowed to use the control socket and the instances' sockets (made 0660, the run directory 0750 and its instances directory 0770, of that group): members start VMs on the instances; default: root only (0600)")
	fs.DurationVar(&c.probation, "upgrade-probation", probationDefault, "after an upgrade in place commits, keep what was handed over for this long, ready to serve it again if the new vgpud dies or fails its health check (0: exit at the commit; docs/upgrade.md)")
	fs.StringVar(&c.libvirt, "libvirt", "", "libvirt connection URI (e.g. qemu:///system): plug the vGPU of every domain whose metadata names an instance, whenever it starts and after a restart (docs/operating.md)")
	fs.Var(&c.devices, "device", "physical device selector (index or name substring); repeatable")
	fs.Var(&c.deviceMemory, "device-memory", "memory all instances on a device may hold together, e.g. 256MiB; repeatable, one per device in order (default: the device's own; a profile may advertise more: docs/overcommit.md)")
	fs.BoolVar(&c.version, "version", false, "print the build (version, VCS revision, Go version) and exit")
	fs.Usage = func() {} // a bad flag: one line with a hint (errBadUsage)
	return fs
}

// parseCommandLine parses args. Asked for the usage (-h), it prints it
// on stdout and returns nil, nil: run succeeds.
func parseCommandLine(args []string, stdout io.Writer) (*commandLine, error) {
	c := &commandLine{args: args}
	fs := c.flagSet()
	if cliargs.WantsHelp(args) {
		fmt.Fprintln(stdout, "usage: vgpud [flags]   (docs/operating.md)\n\nflags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, nil
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w (vgpud -h lists the flags)", errBadUsage, err)
	}
	c.rest = fs.Args()
	return c, nil
}

// answer does what a command line that asks something and exits asks
// (-version, -list-devices, -sandbox-diagnose), or refuses arguments:
// done then, run returns err. Otherwise vgpud runs as the daemon.
func (c *commandLine) answer(ctx context.Context, stdout io.Writer) (done bool, err error) {
	if c.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Get("vgpud"))
		return true, err
	}
	if len(c.rest) > 0 {
		return true, fmt.Errorf("%w: unexpected argument %q (vgpud takes flags only: vgpud -h lists them)", errBadUsage, c.rest[0])
	}
	if c.listDevices {
		infos, err := gpu.Devices()
		if err != nil {
			return true, err
		}
		for _, i := range infos {
			fmt.Fprintln(stdout, gpu.Describe(i))
		}
		return true, nil
	}
	if !c.diagnose {
		return false, nil
	}
	cfg, err := loadConfig(c.configPath)
	if err != nil {
		return true, err
	}
	if len(c.devices) > 1 {
		return true, errDiagnoseArgs
	}
	sel := ""
	if len(c.devices) == 1 {
		sel = c.devices[0]
	}
	return true, diagnoseSandbox(ctx, cfg, sel, c.diagnoseJSON, stdout)
}

// settings is what the daemon runs with: the configuration file with
// the flags laid over it and the defaults filled in, what only flags
// say, and what the configuration names, looked up and loaded.
type settings struct {
	Config
	args         []string // the command line, for an upgrade's new vgpud
	metricsAddr  string   // "": no metrics unless an upgrade hands a listener over
	stopDrain    time.Duration
	pollWindow   time.Duration
	reattach     bool
	probation    time.Duration
	deviceMemory []string

	transport  transport.Socket
	socketGID  int // -1: root's alone
	placement  mdev.PlacementConfig
	migrateTLS *migrate.TLS // nil: no migration channel
}

// settings reads the configuration file, lays the flags over it and
// loads and checks what it names.
func (c *commandLine) settings() (*settings, error) {
	cfg, err := loadConfig(c.configPath)
	if err != nil {
		return nil, err
	}
	c.override(&cfg)
	s := &settings{Config: cfg, args: c.args, metricsAddr: c.metricsAddr, stopDrain: c.stopDrain,
		pollWindow: c.pollWindow, reattach: c.reattach, probation: c.probation, deviceMemory: c.deviceMemory, socketGID: -1}
	if s.transport, err = socketTransport(s.Transport); err != nil {
		return nil, err
	}
	if s.SocketGroup != "" {
		if s.socketGID, err = lookupGroup(s.SocketGroup); err != nil {
			return nil, err
		}
	}
	if s.placement, err = s.Placement.managerPlacement(); err != nil {
		return nil, err
	}
	if s.Libvirt != "" {
		if _, err := exec.LookPath("virsh"); err != nil {
			return nil, fmt.Errorf("-libvirt needs virsh (Debian: libvirt-clients): %w", err)
		}
	}
	if s.MigrateTLS != "" {
		if s.migrateTLS, err = migrate.LoadTLS(s.MigrateTLS); err != nil {
			return nil, err
		}
	} else if s.MigrateListen != "" {
		return nil, errors.New("-migrate-listen needs -migrate-tls: the migration channel is always authenticated")
	}
	return s, nil
}

// override lays the flags given over cfg and fills in the defaults.
func (c *commandLine) override(cfg *Config) {
	set := func(dst *string, flag string) {
		if flag != "" {
			*dst = flag
		}
	}
	if len(c.devices) > 0 {
		cfg.Devices = c.devices
	}
	set(&cfg.RunDir, c.runDir)
	cfg.RunDir = cmp.Or(cfg.RunDir, "/run/vgpud")
	set(&cfg.Transport, c.transport)
	set(&cfg.LogLevel, c.logLevel)
	set(&cfg.LogFormat, c.logFormat)
	cfg.UnsafeInProcess = cfg.UnsafeInProcess || c.unsafeInProcess
	set(&cfg.MigrateTLS, c.migrateTLS)
	set(&cfg.MigrateListen, c.migrateListen)
	set(&cfg.Libvirt, c.libvirt)
	set(&cfg.SocketGroup, c.socketGroup)
	set(&cfg.DefinitionsDir, c.definitions)
	cfg.DefinitionsDir = cmp.Or(cfg.DefinitionsDir, definitions.DefaultDir)
	set(&cfg.Placement.Policy, c.placement)
	set(&cfg.Placement.Dataset, c.placementDataset)
	if len(cfg.Devices) == 0 {
		cfg.Devices = []string{""} // the first device
	}
}

// keeperFarewells are the connection keeper's farewells (keeper.Farewell)
// by name: vfio-user's answers the requests vgpud never read, which
// QEMU would otherwise wait 5 s for with its big lock held
// (docs/keeper.md "Farewells").
var keeperFarewells = map[string]keeper.Farewell{"vfio-user": vfiouser.RefuseWaiting}

// keeperFarewell names the farewell for t's connections ("": none).
func keeperFarewell(t transport.Socket) string {
	if _, ok := t.(vfiouser.Transport); ok {
		return "vfio-user"
	}
	return ""
}

// socketTransport is the transport the instance sockets speak.
func socketTransport(name string) (transport.Socket, error) {
	switch name {
	case "", "mpqemu":
		return mpqemu.Transport{}, nil
	case "vfio-user":
		return vfiouser.Transport{}, nil
	}
	return nil, fmt.Errorf("transport %q: want mpqemu or vfio-user", name)
}

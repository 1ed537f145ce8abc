package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/internal/buildinfo"
	"github.com/vgpud/vgpud/internal/eventlog"
	"github.com/vgpud/vgpud/internal/sdnotify"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/definitions"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/runstate"
	"github.com/vgpud/vgpud/mdev/transport"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/libvirt"
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

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

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

// run is the daemon. It prints "vgpud ready control=PATH" on stdout once
// it serves, and returns after ctx ends and everything is shut down.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vgpud", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configPath = fs.String("config", "", "configuration file (JSON)")
		runDir     = fs.String("run-dir", "", "directory for the control and instance sockets (default /run/vgpud)")
		transp     = fs.String("transport", "", "protocol VMs speak on the instance sockets: mpqemu (QEMU x-pci-proxy-dev, default) or vfio-user (QEMU >= 10.1 vfio-user-pci)")
		logLevel   = fs.String("log-level", "", "debug, info, warn or error")
		logFormat  = fs.String("log-format", "", "text or json")
		listDevs   = fs.Bool("list-devices", false, "print the OpenCL devices and exit")
		diagnose   = fs.Bool("sandbox-diagnose", false, "run one kernel in a confined worker on the -device given (default the first), print every file, ioctl and system call the sandbox refused it, and exit")
		diagJSON   = fs.Bool("json", false, "with -sandbox-diagnose: print the platforms, policy and diagnosis as JSON")
		metricsAt  = fs.String("metrics-addr", defaultMetricsAddr, "TCP address for Prometheus /metrics (\"\" disables)")
		unsafeProc = fs.Bool("unsafe-in-process", false, "run guests' device work in vgpud's own process: NO isolation between tenants (benchmark baseline only)")
		migTLS     = fs.String("migrate-tls", "", "directory with the migration channel's ca.pem, cert.pem, key.pem (docs/migration.md)")
		migListen  = fs.String("migrate-listen", "", "TCP address to receive migrations on, e.g. :7450 (needs -migrate-tls)")
		stopDrain  = fs.Duration("stop-drain", 10*time.Second, "on SIGTERM or SIGINT: tell the guests, stop fetching commands and let those fetched finish for at most this long")
		reattach   = fs.Bool("reattach", true, "after a restart, re-plug the vGPU of each restored instance whose VM is still running (docs/operating.md)")
		placePol   = fs.String("placement", "", "placement policy of new instances: fewest, round-robin or interference (default: interference with a dataset, else fewest)")
		placeData  = fs.String("placement-dataset", "", "co-run dataset the interference placement model learns from (docs/placement.md)")
		defsDir    = fs.String("definitions", "", "directory of persistent instance definitions, created at every start when missing (default "+definitions.DefaultDir+"; vgpuctl define)")
		sockGroup  = fs.String("socket-group", "", "group allowed to use the control socket and the instances' sockets (made 0660, the run directory 0750 and its instances directory 0770, of that group): members start VMs on the instances; default: root only (0600)")
		probation  = fs.Duration("upgrade-probation", probationDefault, "after an upgrade in place commits, keep what was handed over for this long, ready to serve it again if the new vgpud dies or fails its health check (0: exit at the commit; docs/upgrade.md)")
		libvirtURI = fs.String("libvirt", "", "libvirt connection URI (e.g. qemu:///system): plug the vGPU of every domain whose metadata names an instance, whenever it starts and after a restart (docs/operating.md)")
		devices    multiFlag
		devMem     multiFlag
	)
	fs.Var(&devices, "device", "physical device selector (index or name substring); repeatable")
	fs.Var(&devMem, "device-memory", "memory all instances on a device may hold together, e.g. 256MiB; repeatable, one per device in order (default: the device's own; a profile may advertise more: docs/overcommit.md)")
	version := fs.Bool("version", false, "print the build (version, VCS revision, Go version) and exit")
	fs.Usage = func() {} // a bad flag: one line with a hint (errBadUsage)
	if helpAsked(args) {
		// Asked for: the usage on stdout, exit 0.
		fmt.Fprintln(stdout, "usage: vgpud [flags]   (docs/operating.md)\n\nflags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w (vgpud -h lists the flags)", errBadUsage, err)
	}
	if *version {
		_, err := fmt.Fprintln(stdout, buildinfo.Get("vgpud"))
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (vgpud takes flags only: vgpud -h lists them)", errBadUsage, fs.Arg(0))
	}
	if *listDevs {
		infos, err := gpu.Devices()
		if err != nil {
			return err
		}
		for _, i := range infos {
			fmt.Fprintln(stdout, gpu.Describe(i))
		}
		return nil
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	if *diagnose {
		if len(devices) > 1 {
			return errDiagnoseArgs
		}
		sel := ""
		if len(devices) == 1 {
			sel = devices[0]
		}
		return diagnoseSandbox(ctx, cfg, sel, *diagJSON, stdout)
	}
	if len(devices) > 0 {
		cfg.Devices = devices
	}
	if *runDir != "" {
		cfg.RunDir = *runDir
	}
	if cfg.RunDir == "" {
		cfg.RunDir = "/run/vgpud"
	}
	if *transp != "" {
		cfg.Transport = *transp
	}
	sockTransport, err := socketTransport(cfg.Transport)
	if err != nil {
		return err
	}
	if *logLevel != "" {
		cfg.LogLevel = *logLevel
	}
	if *logFormat != "" {
		cfg.LogFormat = *logFormat
	}
	if *unsafeProc {
		cfg.UnsafeInProcess = true
	}
	if *migTLS != "" {
		cfg.MigrateTLS = *migTLS
	}
	if *migListen != "" {
		cfg.MigrateListen = *migListen
	}
	if *libvirtURI != "" {
		cfg.Libvirt = *libvirtURI
	}
	if *sockGroup != "" {
		cfg.SocketGroup = *sockGroup
	}
	sockGID := -1
	if cfg.SocketGroup != "" {
		if sockGID, err = lookupGroup(cfg.SocketGroup); err != nil {
			return err
		}
	}
	if *defsDir != "" {
		cfg.DefinitionsDir = *defsDir
	}
	if cfg.DefinitionsDir == "" {
		cfg.DefinitionsDir = definitions.DefaultDir
	}
	if *placePol != "" {
		cfg.Placement.Policy = *placePol
	}
	if *placeData != "" {
		cfg.Placement.Dataset = *placeData
	}
	placement, err := cfg.Placement.managerPlacement()
	if err != nil {
		return err
	}
	if cfg.Libvirt != "" {
		if _, err := exec.LookPath("virsh"); err != nil {
			return fmt.Errorf("-libvirt needs virsh (Debian: libvirt-clients): %w", err)
		}
	}
	var migTLSConf *migrate.TLS
	if cfg.MigrateTLS != "" {
		if migTLSConf, err = migrate.LoadTLS(cfg.MigrateTLS); err != nil {
			return err
		}
	} else if cfg.MigrateListen != "" {
		return errors.New("-migrate-listen needs -migrate-tls: the migration channel is always authenticated")
	}
	log, err := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	// The events an operator follows (vgpuctl events) are the log's
	// records of them, kept whatever the log level.
	events := eventlog.New(eventsKept)
	log = slog.New(events.Handler(log.Handler()))
	if len(cfg.Devices) == 0 {
		cfg.Devices = []string{""}
	}
	// Started by an upgrade in place: the old vgpud hands everything over.
	in, err := receiveHandover(log)
	if err != nil {
		return err
	}
	// One daemon per run directory: a second one would take over the
	// control socket and leave the first running unmanaged.
	if err := os.MkdirAll(cfg.RunDir, 0o700); err != nil {
		return err
	}
	var lock *runstate.Lock
	if in != nil {
		lock, err = runstate.AdoptLock(in.tab.Take(in.st.Lock))
		if err != nil {
			in.fail(err)
		}
	} else if lock, err = runstate.Acquire(cfg.RunDir); err != nil {
		return err
	}
	defer lock.Release()
	// The instances an earlier vgpud on this run directory had. A state
	// file that cannot be read stops the start: starting empty would
	// overwrite it.
	state, haveState, err := runstate.Load(cfg.RunDir)
	if err != nil {
		in.failIf(err)
		return fmt.Errorf("%w (fix it, or move it away to start with no instances)", err)
	}
	store := runstate.NewStore(cfg.RunDir, log)

	var devs []gpu.Device
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	for _, sel := range cfg.Devices {
		d, err := gpu.Open(sel)
		if err != nil {
			in.failIf(err)
			return fmt.Errorf("device %q: %w", sel, err)
		}
		log.Info("device opened", "device", gpu.Describe(d.Info()))
		devs = append(devs, d)
	}

	devMemBytes, err := parseDeviceMemory(devMem, len(devs))
	if err != nil {
		in.failIf(err)
		return err
	}
	var adopt *mdev.Adoption
	if in != nil {
		adopt = &mdev.Adoption{State: in.st, FDs: in.tab}
	}
	m, err := mdev.NewManager(mdev.Config{
		Adopt:     adopt,
		Devices:   devs,
		Profiles:  cfg.Profiles,
		SocketDir: filepath.Join(cfg.RunDir, "instances"),
		// The group that may use the control socket may also start VMs on
		// the instances it creates.
		SocketGroup: sockGID,
		Transport:   sockTransport,
		Logger:      log,
		Reuse:       cfg.Reuse,
		WorkerDir:   cfg.WorkerDir,
		Sandbox:     cfg.Sandbox.policy(),
		InProcess:   cfg.UnsafeInProcess,
		OnChange:    store.Changed,
		Placement:   placement,

		DeviceMemory: devMemBytes,
	})
	if err != nil {
		in.failIf(err)
		return err
	}
	defer m.Close()
	var kept []runstate.Instance
	if haveState {
		// The state file is the record of what the operator made; the
		// config file's instances are only created on the first start
		// (or, with an explicit UUID, when the state lacks them).
		var rerr error
		kept, rerr = runstate.Restore(m, state)
		if rerr != nil && in != nil {
			in.fail(fmt.Errorf("restore the instances handed over: %w", rerr))
		}
		if rerr != nil {
			log.Error("some of the run directory's state could not be restored; the records are kept", "err", rerr, "kept", len(kept))
		}
		log.Info("state restored", "instances", len(state.Instances)-len(kept), "state", filepath.Join(cfg.RunDir, runstate.StateFile))
	}
	for _, req := range cfg.Instances {
		if haveState && (req.UUID == "" || recorded(state, req.UUID)) {
			continue
		}
		if _, err := m.Create(req); err != nil {
			return fmt.Errorf("config instance: %w", err)
		}
	}
	defDir := definitions.Dir(cfg.DefinitionsDir)
	if in == nil { // an upgrade in place hands over every instance there is
		applyDefinitions(m, defDir, log)
	}
	if err := store.Attach(m, kept); err != nil {
		in.failIf(err)
		return fmt.Errorf("run directory state: %w", err)
	}
	sock := filepath.Join(cfg.RunDir, "control.sock")
	handed := func(name string) net.Listener {
		l, err := in.listener(name)
		if err != nil {
			in.fail(err)
		}
		return l
	}
	l := handed("control")
	if l == nil {
		if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if l, err = net.Listen("unix", sock); err != nil {
			return err
		}
		if err := restrictSocket(cfg.RunDir, sock, sockGID); err != nil {
			l.Close()
			return err
		}
	}
	metricsL, migL := handed("metrics"), handed("migrate")
	var startErr error
	if in != nil {
		// Everything is built; nothing is served yet. Once the old
		// process commits, this one serves it all (on probation: until
		// the old one releases it, any way out of run but a stop exits
		// at once, touching nothing the old one would serve again).
		in.ready()
		defer in.guard()
		if startErr = m.Start(); startErr != nil {
			log.Error("upgrade: adopted with errors", "err", startErr)
		}
		log.Info("upgrade: serving what the old vgpud handed over", "from_pid", in.st.From, "instances", len(m.List()))
	}
	if haveState && *reattach && in == nil {
		defer reattachRunning(ctx, m, log)()
	}
	// vgpuctl attach -libvirt works with virsh's default connection when
	// no -libvirt is given; with one, its domains are also watched (after
	// an upgrade in place too: the domains' vGPUs are attached already).
	att := &libvirt.Attacher{Manager: m, Virsh: libvirt.Exec{URI: cfg.Libvirt}, Logger: log.With("libvirt", cfg.Libvirt)}
	if cfg.Libvirt != "" {
		defer watchLibvirt(ctx, att, cfg.Libvirt)()
	}
	listeners := map[string]*pausable{}
	pl := newPausable(l)
	listeners["control"] = pl
	var ms *metricsServer
	if *metricsAt != "" || metricsL != nil {
		if metricsL == nil {
			if metricsL, err = net.Listen("tcp", *metricsAt); err != nil {
				l.Close()
				return fmt.Errorf("metrics: %w", err)
			}
		}
		mp := newPausable(metricsL)
		listeners["metrics"] = mp
		ms = startMetrics(mp, m, log, metricsLimits)
	}
	gate := &control.Gate{}
	if in.onProbation() {
		// On probation control requests wait (as in a pause), so that a
		// rollback finds the instances the old process handed over.
		_ = gate.Close(context.Background())
	}
	stdoutF, _ := stdout.(*os.File)
	stderrF, _ := stderr.(*os.File)
	up := newUpgrader(&upgrader{log: log, m: m, lock: lock, gate: gate, listeners: listeners, args: args,
		stdout: stdoutF, stderr: stderrF, probation: *probation, onRollback: store.Changed, upgraded: in})
	xenCtx, stopXen := context.WithCancel(ctx)
	xa := newXenAttacher(xenCtx, m, log)
	defer func() { stopXen(); xa.Wait() }() // before the manager closes
	handlerOpts := []control.Option{control.WithUpgrade(up.upgrade, gate), control.WithLibvirt(att), control.WithXen(xa),
		control.WithEvents(events), control.WithDefinitions(defDir)}
	if migTLSConf != nil {
		handlerOpts = append(handlerOpts, control.WithMigration(migTLSConf))
	}
	srv, controlL := controlLimits.serve(pl, control.Handler(m, handlerOpts...), m, log)
	srv.RegisterOnShutdown(events.Close) // followers end, so the shutdown need not wait for them
	migDone := make(chan error, 1)
	migCtx, stopMig := context.WithCancel(ctx)
	defer stopMig()
	migAddr := ""
	if cfg.MigrateListen != "" || migL != nil {
		ml := migL
		if ml == nil {
			if ml, err = net.Listen("tcp", cfg.MigrateListen); err != nil {
				l.Close()
				return fmt.Errorf("migrate listen: %w", err)
			}
		}
		mp := newPausable(ml)
		if in.onProbation() {
			mp.pause() // no incoming migration until the probation ends
		}
		listeners["migrate"] = mp
		ml = mp
		migAddr = ml.Addr().String()
		log.Info("receiving migrations", "addr", migAddr)
		dst := &migrate.Destination{Manager: m, TLS: migTLSConf, Logger: log, OnRefuse: m.RefuseConn}
		go func() { migDone <- dst.Serve(migCtx, ml) }()
	} else {
		migDone <- nil
	}
	if in.onProbation() {
		go func() {
			<-in.probationOver()
			gate.Open()
			if mp := listeners["migrate"]; mp != nil {
				mp.unpause()
			}
		}()
	}
	// From here an upgrade may hand everything over (the control API,
	// SIGHUP): every way out of run passes up.settle first, which exits
	// this process, touching nothing, if one committed.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	hupDone := make(chan struct{})
	var hupWG sync.WaitGroup
	defer func() {
		signal.Stop(hup)
		close(hupDone)
		hupWG.Wait()
	}()
	hupWG.Add(1)
	go func() {
		defer hupWG.Done()
		for {
			select {
			case <-hupDone:
				return
			case <-hup:
			}
			if rep, after, err := up.upgrade(ctx, ""); err != nil {
				log.Error("upgrade on SIGHUP", "err", err)
			} else {
				log.Info("upgraded on SIGHUP", "new_pid", rep.NewPID, "paused", rep.Paused)
				after()
				return
			}
		}
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(controlL) }()
	log.Info("serving", "control", sock, "instances", len(m.List()))
	ready := "vgpud ready control=" + sock
	if ms != nil {
		ready += " metrics=http://" + ms.addr.String() + "/metrics"
	}
	if migAddr != "" {
		ready += " migrate=" + migAddr
	}
	// Ready for /readyz before the ready line: whoever reads the line may
	// ask /readyz at once.
	ms.setReady(true)
	fmt.Fprintln(stdout, ready)
	if in == nil { // after an upgrade, the old process named this one (MAINPID)
		if err := sdnotify.Notify("READY=1\nSTATUS=serving " + sock); err != nil {
			log.Warn("service manager not told that vgpud is ready", "err", err)
		}
	}
	in.serving(startErr) // on probation: the health check, reported to the old process

	select {
	case <-ctx.Done():
		in.stopping() // on probation: the old process must not roll back what this shutdown closes
		ms.setReady(false)
		up.settle()
		if err := sdnotify.Notify("STOPPING=1"); err != nil {
			log.Warn("service manager not told that vgpud stops", "err", err)
		}
		log.Info("shutting down: telling the guests, draining fetched commands", "drain", *stopDrain)
		rep := m.Drain(context.Background(), *stopDrain)
		log.Info("drained", "instances", rep.Instance, "agents_told", rep.Told, "drained", rep.Drained, "cut_off", rep.Cut)
	case err := <-served:
		up.settle()
		return errors.Join(fmt.Errorf("control server: %w", err), ms.stop(context.Background()))
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = errors.Join(srv.Shutdown(shutCtx), ms.stop(shutCtx))
	<-served
	stopMig()
	err = errors.Join(err, <-migDone)
	os.Remove(sock)
	return errors.Join(err, m.Close())
}

// applyDefinitions creates each instance defined in dir that does not
// exist; a definition that cannot be used, or an instance refused, is
// logged, and the daemon starts without it.
func applyDefinitions(m *mdev.Manager, dir definitions.Dir, log *slog.Logger) {
	defs, bad, err := dir.List()
	if err != nil {
		log.Error("instance definitions not read", "dir", string(dir), "err", err)
		return
	}
	for _, b := range bad {
		log.Error("instance definition not used", "err", b)
	}
	created, err := definitions.Apply(m, defs)
	if err != nil {
		log.Error("some defined instances were not created", "err", err)
	}
	if len(defs) > 0 {
		log.Info("instance definitions", "dir", string(dir), "defined", len(defs), "created", len(created))
	}
}

// eventsKept is how many recent events vgpuctl events can show.
const eventsKept = 4096

// errBadUsage: a command line vgpud cannot run; it exits 2.
var errBadUsage = errors.New("bad command line")

// helpAsked reports whether args ask for the usage (-h, -help, --help)
// before any "--".
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// recorded reports whether the state has instance id.
func recorded(st runstate.State, id string) bool {
	for _, in := range st.Instances {
		if strings.EqualFold(in.UUID, id) {
			return true
		}
	}
	return false
}

// reattachRunning gives each instance whose VM is still running (its QMP
// socket answers) its vGPU back after a restart, in the background: VMs
// that kept running while vgpud was away still have a proxy device on the
// old daemon's socket (migrate.Reattach). The returned stop cancels what
// is still in progress and waits for it.
func reattachRunning(ctx context.Context, m *mdev.Manager, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, in := range m.List() {
		if _, err := os.Stat(in.QMPSocket()); err != nil {
			continue // no VM's monitor there: nothing to reattach
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := migrate.Reattach(ctx, m, in.UUID(), migrate.ReattachOptions{})
			if err != nil {
				log.Warn("the VM's vGPU was not reattached", "instance", in.UUID(), "err", err)
				return
			}
			log.Info("reattached the VM's vGPU after a restart", "instance", in.UUID(), "slot", rep.Slot,
				"took", rep.Took, "programs", rep.Programs, "agent_error", rep.AgentErr)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// watchLibvirt runs a libvirt.Watcher for att's connection until ctx
// ends; the returned stop ends it and waits.
func watchLibvirt(ctx context.Context, att *libvirt.Attacher, uri string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := &libvirt.Watcher{Attacher: att, Logger: att.Logger}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	att.Logger.Info("plugging libvirt domains whose metadata names an instance", "uri", uri, "namespace", libvirt.MetadataURI)
	return func() {
		cancel()
		<-done
	}
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

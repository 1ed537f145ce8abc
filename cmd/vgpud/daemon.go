package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/definitions"
	"github.com/vgpud/vgpud/mdev/keeper"
	"github.com/vgpud/vgpud/mdev/runstate"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/libvirt"
	"github.com/vgpud/vgpud/worker/sandbox"
)

// build makes the daemon, step by step; a step that leaves something to
// undo registers its closer (onClose). On an error close undoes what
// was built. Started by an upgrade in place, the daemon adopts what the
// old vgpud hands over: a failure before the commit is reported to the
// old one, which goes on serving, and this process exits (incoming.fail).
func (d *daemon) build(ctx context.Context) (err error) {
	// What does not depend on the state an upgrade hands over is done
	// before this process asks for it: the old vgpud pauses its guests
	// when asked (docs/upgrade.md "The pause"). A failure here ends this
	// process before it asked, and the old one goes on serving.
	ignorePipeIfInheriting()
	if err := d.openDevices(); err != nil {
		return err
	}
	if !d.s.UnsafeInProcess {
		d.sandbox = d.s.Sandbox.derive(d.log)
		sandbox.Probe() // what the worker pool asks: probed once, remembered
	}
	if d.in, err = receiveHandover(d.log); err != nil {
		return err
	}
	if err := d.openRunDir(); err != nil {
		return err
	}
	if err := d.newManager(); err != nil {
		return err
	}
	if err := d.populate(); err != nil {
		return err
	}
	if err := d.listenControl(); err != nil {
		return err
	}
	d.adopt()
	d.startWatchers(ctx)
	if err := d.serveMetrics(); err != nil {
		return err
	}
	d.buildControl(ctx)
	if err := d.receiveMigrations(ctx); err != nil {
		return err
	}
	d.awaitProbation()
	return nil
}

// openRunDir takes the run directory's lock and reads its state: the
// instances an earlier vgpud on it had.
func (d *daemon) openRunDir() (err error) {
	// One daemon per run directory: a second one would take over the
	// control socket and leave the first running unmanaged.
	if err := os.MkdirAll(d.s.RunDir, 0o700); err != nil {
		return err
	}
	if d.in != nil {
		if d.lock, err = runstate.AdoptLock(d.in.tab.Take(d.in.st.Lock)); err != nil {
			d.in.fail(err)
		}
	} else if d.lock, err = runstate.Acquire(d.s.RunDir); err != nil {
		return err
	}
	d.onClose("run directory lock", func(context.Context) error {
		d.lock.Release()
		return nil
	})
	// A state file that cannot be read stops the start: starting empty
	// would overwrite it.
	d.state, d.haveState, err = runstate.Load(d.s.RunDir)
	if err != nil {
		d.in.failIf(err)
		return fmt.Errorf("%w (fix it, or move it away to start with no instances)", err)
	}
	d.store = runstate.NewStore(d.s.RunDir, d.log)
	return nil
}

// openDevices opens the physical devices the settings select.
func (d *daemon) openDevices() error {
	d.onClose("devices", func(context.Context) error {
		for _, dev := range d.devs {
			dev.Close()
		}
		return nil
	})
	for _, sel := range d.s.Devices {
		dev, err := gpu.Open(sel)
		if err != nil {
			d.in.failIf(err)
			return fmt.Errorf("device %q: %w", sel, err)
		}
		d.log.Info("device opened", "device", gpu.Describe(dev.Info()))
		d.devs = append(d.devs, dev)
	}
	return nil
}

// newManager makes the instance manager on the devices; after an upgrade
// it adopts the state handed over.
func (d *daemon) newManager() error {
	devMem, err := parseDeviceMemory(d.s.deviceMemory, len(d.devs))
	if err != nil {
		d.in.failIf(err)
		return err
	}
	// The VMs' connections end in order however this process ends
	// (package keeper): started before the manager accepts or adopts
	// any, ended after it.
	var kp *keeper.Keeper
	if d.s.transport != nil {
		if kp, err = keeper.Start(d.log, keeperFarewell(d.s.transport)); err != nil {
			d.in.failIf(err)
			return err
		}
		d.onClose("connection keeper", func(context.Context) error { return kp.Close() })
	}
	var adopt *mdev.Adoption
	if d.in != nil {
		adopt = &mdev.Adoption{State: d.in.st, FDs: d.in.tab}
	}
	m, err := mdev.NewManager(mdev.Config{
		Adopt:     adopt,
		Devices:   d.devs,
		Profiles:  d.s.Profiles,
		SocketDir: filepath.Join(d.s.RunDir, "instances"),
		// The group that may use the control socket may also start VMs on
		// the instances it creates.
		SocketGroup: d.s.socketGID,
		Transport:   d.s.transport,
		Keeper:      kp,
		Logger:      d.log,
		Reuse:       d.s.Reuse,
		WorkerDir:   d.s.WorkerDir,
		Sandbox:     d.sandbox,
		InProcess:   d.s.UnsafeInProcess,
		PollWindow:  d.s.pollWindow,
		OnChange:    d.store.Changed,
		Placement:   d.s.placement,

		DeviceMemory: devMem,
	})
	if err != nil {
		d.in.failIf(err)
		return err
	}
	d.m = m
	d.onClose("manager", func(context.Context) error { return m.Close() })
	return nil
}

// populate gives the manager its instances: the run directory's state,
// the configuration file's and the definitions' (not after an upgrade
// in place: it hands over every instance there is); from then on the
// state file follows the manager.
func (d *daemon) populate() error {
	var kept []runstate.Instance
	if d.haveState {
		kept = d.restore()
	}
	for _, req := range d.s.Instances {
		if d.haveState && (req.UUID == "" || recorded(d.state, req.UUID)) {
			continue
		}
		if _, err := d.m.Create(req); err != nil {
			err = fmt.Errorf("config instance: %w", err)
			// A new vgpud of an upgrade must not shut down what the old
			// one still serves: it reports and exits (incoming.fail).
			d.in.failIf(err)
			return err
		}
	}
	d.defs = definitions.Dir(d.s.DefinitionsDir)
	if d.in == nil { // an upgrade in place hands over every instance there is
		applyDefinitions(d.m, d.defs, d.log)
	}
	if err := d.store.Attach(d.m, kept); err != nil {
		d.in.failIf(err)
		return fmt.Errorf("run directory state: %w", err)
	}
	return nil
}

// restore makes the instances of the run directory's state and returns
// the records kept that could not be restored. The state file is the
// record of what the operator made; the config file's instances are only
// created on the first start (or, with an explicit UUID, when the state
// lacks them).
func (d *daemon) restore() []runstate.Instance {
	kept, err := runstate.Restore(d.m, d.state)
	if err != nil && d.in != nil {
		d.in.fail(fmt.Errorf("restore the instances handed over: %w", err))
	}
	if err != nil {
		d.log.Error("some of the run directory's state could not be restored; the records are kept", "err", err, "kept", len(kept))
	}
	d.log.Info("state restored", "instances", len(d.state.Instances)-len(kept), "state", filepath.Join(d.s.RunDir, runstate.StateFile))
	return kept
}

// listenControl makes the control socket's listener, handed over or a
// new socket with its mode and group, and takes the other listeners an
// upgrade handed over.
func (d *daemon) listenControl() error {
	d.sock = filepath.Join(d.s.RunDir, "control.sock")
	l := d.in.handedListener("control")
	handed := l != nil
	if !handed {
		if err := os.Remove(d.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		var err error
		if l, err = net.Listen("unix", d.sock); err != nil {
			return err
		}
	}
	d.onClose("control socket", func(context.Context) error {
		l.Close()         // its server's Shutdown closed it already, if it served
		os.Remove(d.sock) // a pausable listener does not unlink its socket
		return nil
	})
	if !handed {
		if err := restrictSocket(d.s.RunDir, d.sock, d.s.socketGID); err != nil {
			return err
		}
	}
	d.listeners["control"] = newPausable(l)
	d.handedMetrics, d.handedMigrate = d.in.handedListener("metrics"), d.in.handedListener("migrate")
	return nil
}

// adopt, after an upgrade in place, tells the old vgpud that everything
// is built and waits for its commit; then starts what it handed over.
func (d *daemon) adopt() {
	if d.in == nil {
		return
	}
	// Everything is built; nothing is served yet. Once the old process
	// commits, this one serves it all (on probation: until the old one
	// releases it, any way out of run but a stop exits at once, touching
	// nothing the old one would serve again: guard, deferred by run).
	d.in.ready()
	if d.startErr = d.m.Start(); d.startErr != nil {
		d.log.Error("upgrade: adopted with errors", "err", d.startErr)
	}
	d.log.Info("upgrade: serving what the old vgpud handed over", "from_pid", d.in.st.From, "instances", len(d.m.List()))
}

// startWatchers gives the vGPU back to the VMs that ran on through a
// restart (-reattach), and with -libvirt watches the domains to plug
// theirs.
func (d *daemon) startWatchers(ctx context.Context) {
	if d.haveState && d.s.reattach && d.in == nil {
		stop := reattachRunning(ctx, d.m, d.log)
		d.onClose("reattachments", func(context.Context) error {
			stop()
			return nil
		})
	}
	// vgpuctl attach -libvirt works with virsh's default connection when
	// no -libvirt is given; with one, its domains are also watched (after
	// an upgrade in place too: the domains' vGPUs are attached already).
	d.att = &libvirt.Attacher{Manager: d.m, Virsh: libvirt.Exec{URI: d.s.Libvirt}, Logger: d.log.With("libvirt", d.s.Libvirt)}
	if d.s.Libvirt != "" {
		stop := watchLibvirt(ctx, d.att, d.s.Libvirt)
		d.onClose("libvirt watcher", func(context.Context) error {
			stop()
			return nil
		})
	}
}

// serveMetrics serves /metrics and the health checks on the listener
// handed over or a new one on -metrics-addr (none: no metrics).
func (d *daemon) serveMetrics() error {
	l := d.handedMetrics
	if d.s.metricsAddr == "" && l == nil {
		return nil
	}
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", d.s.metricsAddr); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	mp := newPausable(l)
	d.listeners["metrics"] = mp
	d.ms = startMetrics(mp, d.m, d.log, metricsLimits)
	d.onClose("metrics server", d.ms.stop)
	return nil
}

// buildControl makes the control API's server (serve starts it) with
// what it drives: the gate of its requests, the upgrader, the Xen
// attacher.
func (d *daemon) buildControl(ctx context.Context) {
	d.gate = &control.Gate{}
	if d.in.onProbation() {
		// On probation control requests wait (as in a pause), so that a
		// rollback finds the instances the old process handed over.
		_ = d.gate.Close(context.Background())
	}
	stdoutF, _ := d.stdout.(*os.File)
	stderrF, _ := d.stderr.(*os.File)
	d.up = newUpgrader(&upgrader{log: d.log, m: d.m, lock: d.lock, gate: d.gate, listeners: d.listeners, args: d.s.args,
		stdout: stdoutF, stderr: stderrF, probation: d.s.probation, onRollback: d.store.Changed, upgraded: d.in})
	xenCtx, stopXen := context.WithCancel(ctx)
	d.xa = newXenAttacher(xenCtx, d.m, d.log)
	d.onClose("Xen sessions", func(context.Context) error { // before the manager closes
		stopXen()
		d.xa.Wait()
		return nil
	})
	opts := []control.Option{control.WithUpgrade(d.up.upgrade, d.gate), control.WithLibvirt(d.att), control.WithXen(d.xa),
		control.WithEvents(d.events), control.WithDefinitions(d.defs)}
	if d.s.migrateTLS != nil {
		opts = append(opts, control.WithMigration(d.s.migrateTLS))
	}
	d.srv, d.controlL = controlLimits.serve(d.listeners["control"], control.Handler(d.m, opts...), d.m, d.log)
	d.srv.RegisterOnShutdown(d.events.Close) // followers end, so the shutdown need not wait for them
}

// receiveMigrations receives migrations on the listener handed over or
// a new one on -migrate-listen (none: no migrations), held while on
// probation.
func (d *daemon) receiveMigrations(ctx context.Context) error {
	l := d.handedMigrate
	if d.s.MigrateListen == "" && l == nil {
		return nil
	}
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", d.s.MigrateListen); err != nil {
			return fmt.Errorf("migrate listen: %w", err)
		}
	}
	mp := newPausable(l)
	if d.in.onProbation() {
		mp.pause() // no incoming migration until the probation ends
	}
	d.listeners["migrate"] = mp
	d.migAddr = mp.Addr().String()
	d.log.Info("receiving migrations", "addr", d.migAddr)
	dst := &migrate.Destination{Manager: d.m, TLS: d.s.migrateTLS, Logger: d.log, OnRefuse: d.m.RefuseConn}
	migCtx, stopMig := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- dst.Serve(migCtx, mp) }()
	d.onClose("migration listener", func(context.Context) error {
		stopMig()
		return <-done
	})
	return nil
}

// awaitProbation, on probation, lets the control requests and the
// incoming migrations in once the probation ends. Its goroutine ends
// with the probation, which every way out of run ends: a stop
// (incoming.stopping), or an exit (guard).
func (d *daemon) awaitProbation() {
	if !d.in.onProbation() {
		return
	}
	go func() {
		<-d.in.probationOver()
		d.gate.Open()
		if mp := d.listeners["migrate"]; mp != nil {
			mp.unpause()
		}
	}()
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
				"took", rep.Took, "programs", rep.Programs, "agent_error", rep.AgentErr, "abandoned_migration", rep.AbandonedMigration)
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

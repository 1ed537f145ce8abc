package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/internal/eventlog"
	"github.com/vgpud/vgpud/internal/sdnotify"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/definitions"
	"github.com/vgpud/vgpud/mdev/runstate"
	"github.com/vgpud/vgpud/migrate/libvirt"
	"github.com/vgpud/vgpud/worker/sandbox"
)

// run is the daemon. It prints "vgpud ready control=PATH" on stdout once
// it serves, and returns after ctx ends and everything is shut down.
//
// Its life has three parts: the command line and the configuration file
// make the settings (config.go); build makes the daemon (daemon.go),
// each step registering what undoes it; serve serves until ctx ends,
// and close undoes the construction in reverse order, the shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cl, err := parseCommandLine(args, stdout)
	if cl == nil || err != nil {
		return err // the usage was asked for, or a bad command line
	}
	if done, err := cl.answer(ctx, stdout); done {
		return err
	}
	s, err := cl.settings()
	if err != nil {
		return err
	}
	d, err := newDaemon(s, stdout, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.close()) }()
	// On probation after its own upgrade in place, a panic or any way
	// out of run but a stop exits at once (guard), before close could
	// close, unlink or stop what the old vgpud serves again.
	defer func() {
		if d.in.onProbation() {
			d.in.guard(recover())
		}
	}()
	if err := d.build(ctx); err != nil {
		return err
	}
	return d.serve(ctx)
}

// eventsKept is how many recent events vgpuctl events can show.
const eventsKept = 4096

// shutdownWait bounds the graceful shutdown of the control and metrics
// servers (their requests in progress) in close.
const shutdownWait = 10 * time.Second

// daemon is vgpud as it runs: what build made and the closers that
// undo it. Its fields are set by build, in the order of its steps, and
// only read after.
type daemon struct {
	s      *settings
	log    *slog.Logger
	events *eventlog.Log
	stdout io.Writer
	stderr io.Writer
	// in is the new side of the upgrade in place that started this
	// vgpud; nil: a plain start.
	in *incoming

	lock      *runstate.Lock
	state     runstate.State // the run directory's, when haveState
	haveState bool
	store     *runstate.Store
	devs      []gpu.Device
	sandbox   *sandbox.Policy // the workers' sandbox, derived before an upgrade's pause; nil in-process
	m         *mdev.Manager
	// startErr is what starting the adopted instances and workers
	// returned after an upgrade (mdev.Manager.Start): the health check's.
	startErr error
	defs     definitions.Dir
	sock     string // the control socket's path
	// handedMetrics and handedMigrate are the listeners an upgrade handed
	// over besides the control socket's, or nil.
	handedMetrics, handedMigrate net.Listener
	att                          *libvirt.Attacher
	listeners                    map[string]*pausable // by their handover names: control, metrics, migrate
	ms                           *metricsServer       // nil: no metrics
	gate                         *control.Gate
	up                           *upgrader
	xa                           *xenAttacher
	srv                          *http.Server // the control API's
	controlL                     net.Listener // srv's listener (limited)
	migAddr                      string       // where migrations are received; "": nowhere
	// served is closed when srv.Serve returned, servedErr its error.
	served    chan struct{}
	servedErr error

	closers []closer // in the order of construction
}

// closer undoes one step of the daemon's construction.
type closer struct {
	what  string
	close func(ctx context.Context) error
}

// newDaemon is a daemon with s and its log (on stderr; the events that
// vgpuctl events shows are its records of them), not yet built.
func newDaemon(s *settings, stdout, stderr io.Writer) (*daemon, error) {
	log, err := newLogger(stderr, s.LogLevel, s.LogFormat)
	if err != nil {
		return nil, err
	}
	// The events an operator follows (vgpuctl events) are the log's
	// records of them, kept whatever the log level.
	events := eventlog.New(eventsKept)
	log = slog.New(events.Handler(log.Handler()))
	return &daemon{s: s, log: log, events: events, stdout: stdout, stderr: stderr,
		listeners: map[string]*pausable{}}, nil
}

// onClose registers fn as what undoes the step of the construction just
// done: close runs it, after those of the later steps.
func (d *daemon) onClose(what string, fn func(ctx context.Context) error) {
	d.closers = append(d.closers, closer{what: what, close: fn})
}

// close undoes the construction in reverse order, however far it went:
// this order is the daemon's shutdown (docs/architecture.md): the control
// server, the SIGHUP handler, the migration listener, the Xen sessions,
// the metrics server, the libvirt watcher, the reattachments, the control
// socket, the manager (its instances and workers), the devices, and the
// run directory's lock last. Graceful shutdowns share shutdownWait. It
// returns the closers' errors.
func (d *daemon) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownWait)
	defer cancel()
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		c := d.closers[i]
		if err := c.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %s: %w", c.what, err))
		}
	}
	d.closers = nil
	return errors.Join(errs...)
}

// serve serves until ctx ends, then takes the shutdown's first steps
// (stop), or until the control server fails. From here an upgrade may
// hand everything over (the control API, SIGHUP): every way out of serve
// passes up.settle first, which exits this process, touching nothing, if
// one committed.
func (d *daemon) serve(ctx context.Context) error {
	d.handleSIGHUP(ctx)
	d.served = make(chan struct{})
	go func() {
		d.servedErr = d.srv.Serve(d.controlL)
		close(d.served)
	}()
	d.onClose("control server", func(ctx context.Context) error {
		err := d.srv.Shutdown(ctx)
		<-d.served
		return err
	})
	d.log.Info("serving", "control", d.sock, "instances", len(d.m.List()))
	d.announce()
	d.in.serving(d.startErr) // on probation: the health check, reported to the old process

	select {
	case <-ctx.Done():
		d.stop()
		return nil
	case <-d.served:
		d.up.settle()
		return fmt.Errorf("control server: %w", d.servedErr)
	}
}

// announce says that the daemon serves: to /readyz, on stdout (the
// ready line) and to the service manager.
func (d *daemon) announce() {
	ready := "vgpud ready control=" + d.sock
	if d.ms != nil {
		ready += " metrics=http://" + d.ms.addr.String() + "/metrics"
	}
	if d.migAddr != "" {
		ready += " migrate=" + d.migAddr
	}
	// Ready for /readyz before the ready line: whoever reads the line may
	// ask /readyz at once.
	d.ms.setReady(true)
	fmt.Fprintln(d.stdout, ready)
	if d.in == nil { // after an upgrade, the old process named this one (MAINPID)
		if err := sdnotify.Notify("READY=1\nSTATUS=serving " + d.sock); err != nil {
			d.log.Warn("service manager not told that vgpud is ready", "err", err)
		}
	}
}

// stop is the shutdown's first steps, once ctx ended (SIGTERM, SIGINT):
// no upgrade from now on, the service manager told, the guests told and
// the commands they had fetched drained. close does the rest.
func (d *daemon) stop() {
	d.in.stopping() // on probation: the old process must not roll back what this shutdown closes
	d.ms.setReady(false)
	d.up.settle()
	if err := sdnotify.Notify("STOPPING=1"); err != nil {
		d.log.Warn("service manager not told that vgpud stops", "err", err)
	}
	d.log.Info("shutting down: telling the guests, draining fetched commands", "drain", d.s.stopDrain)
	rep := d.m.Drain(context.Background(), d.s.stopDrain)
	d.log.Info("drained", "instances", rep.Instance, "agents_told", rep.Told, "drained", rep.Drained, "cut_off", rep.Cut)
}

// handleSIGHUP upgrades in place on each SIGHUP until one hands over, in
// a goroutine that close stops and waits for.
func (d *daemon) handleSIGHUP(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			if rep, after, err := d.up.upgrade(ctx, ""); err != nil {
				d.log.Error("upgrade on SIGHUP", "err", err)
			} else {
				d.log.Info("upgraded on SIGHUP", "new_pid", rep.NewPID, "paused", rep.Paused)
				after()
				return
			}
		}
	}()
	d.onClose("SIGHUP handler", func(context.Context) error {
		signal.Stop(hup)
		close(done)
		wg.Wait()
		return nil
	})
}

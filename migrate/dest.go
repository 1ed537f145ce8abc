package migrate

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/vgpud/vgpud/internal/accept"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate/qmp"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/worker"
)

// Destination receives migrations: it accepts mutually authenticated TLS
// connections from other vgpud daemons, recreates each instance, applies
// its rounds in a worker process and, on commit, plugs the vGPU into the
// VM that QEMU migrated here.
type Destination struct {
	Manager *mdev.Manager
	TLS     *TLS
	Logger  *slog.Logger
	// StepTimeout bounds each wait on the source (a round's records, the
	// command after the stream) and on QEMU; 0 means 2 minutes.
	StepTimeout time.Duration
	// HandshakeTimeout bounds a new connection's TLS handshake and its
	// first records (Header, Instance) together: a peer that connects and
	// sends nothing is dropped then. 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxConns bounds the connections open at once, authenticated or not;
	// one over it is closed as soon as it is accepted. 0 means
	// DefaultMaxConns.
	MaxConns int
	// MaxConnsPerHost bounds those from one IP address, so that one
	// host's flood leaves places for the others. 0 means
	// DefaultMaxConnsPerHost.
	MaxConnsPerHost int
	// OnRefuse, if set, is called for each connection refused over
	// MaxConns (a metric).
	OnRefuse func()
	// ResumeTimeout bounds the guest agent's answer to Resume after the
	// device is plugged (it includes the guest noticing the hot-plug); 0
	// means 60 s.
	ResumeTimeout time.Duration
	// InjectFault is for fault-injection tests: when set, it is called at
	// the start of each step ("instance", "round", "final" for the
	// stop-and-copy round, "commit", "go"), and an error makes the
	// destination drop the connection there without an answer, as a cut
	// link would.
	InjectFault func(step string) error

	wg sync.WaitGroup
}

// Defaults for Destination.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxConns         = 16
	DefaultMaxConnsPerHost  = 8
)

// Serve accepts connections on ln until ctx ends or ln is closed, then
// waits for the migrations in progress (which ctx also ends).
func (d *Destination) Serve(ctx context.Context, ln net.Listener) error {
	if d.TLS == nil || d.Manager == nil {
		return errors.New("migrate: destination needs a manager and TLS")
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	maxConns := d.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	perHost := d.MaxConnsPerHost
	if perHost <= 0 {
		perHost = DefaultMaxConnsPerHost
	}
	limit := &accept.Limit{Max: maxConns, PerHost: perHost, Name: "migrate", Logger: d.log(), OnRefuse: d.OnRefuse}
	tl := tls.NewListener(limit.Listener(ln), d.TLS.Server())
	defer d.wg.Wait()
	for {
		c, err := accept.Retry(ctx, tl.Accept, func(err error, delay time.Duration) {
			d.log().Warn("migration listener: accept failed, retrying", "err", err, "in", delay)
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("migrate: accept: %w", err)
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			defer c.Close()
			if err := d.handle(ctx, c.(*tls.Conn)); err != nil {
				d.log().Warn("incoming migration failed", "peer", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

func (d *Destination) log() *slog.Logger {
	if d.Logger == nil {
		return slog.Default()
	}
	return d.Logger
}

func (d *Destination) stepTimeout() time.Duration {
	if d.StepTimeout <= 0 {
		return 2 * time.Minute
	}
	return d.StepTimeout
}

// incoming is one migration being received.
type incoming struct {
	d     *Destination
	conn  *tls.Conn
	br    *bufio.Reader
	r     *stream.Reader
	inst  *mdev.Instance
	mig   worker.Migrator
	mon   *qmp.Monitor
	ring  *stream.Ring
	log   *slog.Logger
	final bool
	// running: this QEMU was told to run the VM ("go"); from then on the
	// VM is this host's and nothing here may stop it.
	running bool
	// late: no QEMU was there at the start; it comes with the VM's
	// migration (libvirt) and resets the device as it starts, which must
	// spare the state the rounds put in the backend (HoldBackend).
	late bool
}

// errFault is what an injected fault ends a migration with.
var errFault = errors.New("injected fault: connection dropped")

// fault runs the InjectFault hook for step; on an error it drops the
// connection.
func (in *incoming) fault(step string) error {
	if in.d.InjectFault == nil {
		return nil
	}
	if err := in.d.InjectFault(step); err != nil {
		in.conn.Close()
		return fmt.Errorf("%s: %w: %w", step, errFault, err)
	}
	return nil
}

// deadline bounds the next step: a source that stops sending is dropped.
func (in *incoming) deadline() {
	in.conn.SetDeadline(time.Now().Add(in.d.stepTimeout()))
}

func (in *incoming) fail(step string, err error) error {
	_ = writeLine(in.conn, Reply{Step: step, Error: err.Error()})
	return fmt.Errorf("%s: %w", step, err)
}

func (d *Destination) handshakeTimeout() time.Duration {
	if d.HandshakeTimeout <= 0 {
		return DefaultHandshakeTimeout
	}
	return d.HandshakeTimeout
}

func (d *Destination) handle(ctx context.Context, conn *tls.Conn) (err error) {
	// Until the peer has authenticated and said which instance it
	// brings, it gets seconds, not a step's minutes: a flood of
	// connections that never send a byte holds its places only that long.
	conn.SetDeadline(time.Now().Add(d.handshakeTimeout()))
	if err := conn.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	br := bufio.NewReaderSize(conn, 1<<20)
	in := &incoming{d: d, conn: conn, br: br, r: stream.NewReader(br), log: d.log()}
	defer func() {
		if err != nil {
			in.discard(ctx)
		}
		if in.mon != nil {
			in.mon.Close()
		}
	}()
	if err := in.fault("instance"); err != nil {
		return err
	}
	if err := in.instance(ctx); err != nil {
		return in.fail("instance", err)
	}
	for !in.final {
		if err := in.fault("round"); err != nil {
			return err
		}
		if _, err := in.round(ctx); err != nil {
			return in.fail("round", err)
		}
	}
	in.deadline()
	if rec, err := in.r.Next(); err != nil || rec.Type() != stream.TypeEnd {
		return in.fail("round", fmt.Errorf("no End after the final round: %v", err))
	}
	cmd, err := in.command("commit")
	if err != nil || cmd.Do == "abort" {
		return err
	}
	if err := in.fault("commit"); err != nil {
		return err
	}
	rep, err := in.commit(ctx, cmd)
	in.deadline()
	if err != nil {
		return in.fail("commit", err)
	}
	if err := writeLine(conn, rep); err != nil {
		return err
	}
	// The vGPU is plugged into the VM, which is still paused. It runs
	// here only when the source says "go": until then the source may
	// still take it back (a lost link or an abort), and this copy of the
	// VM is discarded.
	if cmd, err = in.command("go"); err != nil || cmd.Do == "abort" {
		return err
	}
	if err := in.fault("go"); err != nil {
		return err
	}
	rep, err = in.run(ctx)
	if err != nil {
		// The VM runs here (or QEMU failed it): the source has let go,
		// so nothing is discarded; the operator sees the error.
		in.log.Error("the migrated VM may not run", "err", err)
		in.deadline()
		return in.fail("go", err)
	}
	in.deadline() // the guest's resume may have taken longer than a step
	return writeLine(conn, rep)
}

// command reads the source's next command, which must be want or abort.
func (in *incoming) command(want string) (Command, error) {
	var cmd Command
	in.deadline()
	if err := readLine(in.br, &cmd); err != nil {
		return cmd, err
	}
	switch cmd.Do {
	case want:
		return cmd, nil
	case "abort":
		in.log.Info("migration aborted by the source", "why", cmd.Why)
		_ = writeLine(in.conn, Reply{Step: "abort"})
		return cmd, fmt.Errorf("aborted by the source: %s", cmd.Why)
	}
	return cmd, in.fail(want, fmt.Errorf("unknown command %q, want %q", cmd.Do, want))
}

// discard undoes a failed incoming migration before the VM runs here: the
// instance is destroyed and, if QEMU already holds the VM, QEMU is told to
// quit, since the source takes the VM back. A QEMU still waiting for the
// VM (-incoming) is left waiting: the operator may try again.
func (in *incoming) discard(ctx context.Context) {
	if in.running {
		return
	}
	if in.mon != nil {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		st, err := in.mon.QueryStatus(qctx)
		if err != nil || st.Status != qmp.RunStateInMigrate {
			if qerr := in.mon.Quit(qctx); qerr != nil {
				in.log.Error("could not quit the destination QEMU of a failed migration", "err", qerr)
			} else {
				in.log.Info("quit the destination QEMU of a failed migration", "status", st.Status)
			}
		}
		cancel()
	}
	if in.inst != nil {
		if derr := in.d.Manager.Destroy(in.inst.UUID()); derr != nil {
			in.log.Warn("discard a failed incoming instance", "err", derr)
		}
	}
}

// instance reads Header and Instance (within the handshake's deadline),
// creates the instance (frozen) and checks that the VM's QEMU is waiting
// for the migration.
func (in *incoming) instance(ctx context.Context) error {
	if _, err := in.r.Next(); err != nil { // Header: checked by the Reader
		return err
	}
	rec, err := in.r.Next()
	if err != nil {
		return err
	}
	ir, ok := rec.(*stream.Instance)
	if !ok {
		return fmt.Errorf("%w: stream starts with %v, want instance", stream.ErrCorrupt, rec.Type())
	}
	in.deadline()
	// The trust domain is this host operator's to choose, never the
	// stream's: a source (any holder of a certificate the migration CA
	// signed) that named another tenant's domain would have its records
	// applied, and its programs built, in that tenant's worker. The
	// instance gets its private domain (instance:<uuid>).
	// An instance created to await this migration (vgpuctl create
	// -incoming: a VMM that keeps the vGPU attached, vfio-user-pci, is
	// connected to it already) is filled; any other instance of that UUID
	// is refused (ErrNotAwaiting), never taken over.
	inst, err := in.d.Manager.ClaimIncoming(ir.ID, ir.Profile)
	if err != nil {
		return err
	}
	if inst == nil {
		if in.d.Manager.KeepsDeviceOnMigration() {
			return fmt.Errorf("no instance %s awaits this migration: create it first (vgpuctl create -incoming -uuid %s -profile %s), then start the destination QEMU attached to it with -incoming",
				ir.ID, ir.ID, ir.Profile)
		}
		if inst, err = in.d.Manager.Create(mdev.CreateRequest{UUID: ir.ID, Profile: ir.Profile}); err != nil {
			return err
		}
	}
	in.inst = inst
	in.log = in.log.With("instance", inst.UUID())
	if ir.Domain != "" {
		in.log.Warn("incoming migration: the source named a reuse domain; the instance gets its own private domain here",
			"source_domain", ir.Domain, "domain", inst.ReuseDomain())
	}
	if in.mig, err = inst.Migrator(); err != nil {
		return err
	}
	if err := in.mig.Freeze(ctx); err != nil {
		return err
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if in.mon, err = qmp.Dial(qctx, inst.QMPSocket()); err != nil {
		if !in.d.Manager.KeepsDeviceOnMigration() || inst.Attached() {
			return fmt.Errorf("no QEMU for the instance: start it with -incoming and -qmp unix:%s,server=on,wait=off: %w", inst.QMPSocket(), err)
		}
		// No QEMU yet and none attached: one whose manager starts it
		// during the VM's migration (libvirt's virsh migrate) connects to
		// the instance then; commit looks for it.
		in.mon = nil
		in.late = true
		inst.HoldBackend(true)
		in.log.Info("incoming migration: no destination QEMU yet; it must come with the VM's migration (libvirt)")
	} else {
		st, err := in.mon.QueryStatus(qctx)
		if err != nil {
			return err
		}
		if st.Status != qmp.RunStateInMigrate {
			return fmt.Errorf("QEMU at %s is %q, not waiting for an incoming migration (-incoming)", inst.QMPSocket(), st.Status)
		}
	}
	dev := in.d.Manager.Devices()[inst.Device()].Name
	in.log.Info("incoming migration", "source device", ir.Device, "device", dev, "profile", ir.Profile)
	return writeLine(in.conn, Reply{Step: "instance", Device: dev, KeepsDevice: in.d.Manager.KeepsDeviceOnMigration(),
		GuestPages: in.d.Manager.KeepsDeviceOnMigration()})
}

// round applies one round's records through a pipe to the worker.
func (in *incoming) round(ctx context.Context) (uint32, error) {
	var start time.Time // the round's first record: what came before is the source's time
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := in.mig.Inject(ctx, pr)
		pr.CloseWithError(errors.Join(err, io.ErrClosedPipe))
		errc <- err
	}()
	w := stream.NewWriter(pw)
	var number uint32
	fwdErr := func() error {
		cur := uint32(0) // the device context the records are of (0: the default ring)
		for {
			in.deadline()
			if err := in.abortBetweenRecords(); err != nil {
				return err
			}
			raw, err := in.r.NextRaw()
			if err != nil {
				return err
			}
			if start.IsZero() {
				start = time.Now()
			}
			switch raw.Type {
			case stream.TypeRound:
				rec, err := raw.Decode()
				if err != nil {
					return err
				}
				rd := rec.(*stream.Round)
				number, in.final = rd.Number, rd.Final
				if rd.Final {
					if err := in.fault("final"); err != nil {
						return err
					}
				}
				return w.Close()
			case stream.TypeRing:
				rec, err := raw.Decode()
				if err != nil {
					return err
				}
				if cur == 0 { // a device context's ring is the worker's business
					in.ring = rec.(*stream.Ring)
				}
			case stream.TypeContext:
				rec, err := raw.Decode()
				if err != nil {
					return err
				}
				cur = rec.(*stream.Context).ID
			case stream.TypeProgram, stream.TypeProgramFree, stream.TypeBuffer, stream.TypeBufferData, stream.TypeBufferFree:
			case stream.TypeGuestPages:
				// The worker holds them until the commit's Thaw, after
				// QEMU has loaded the VM, and checks each against the
				// guest RAM its VMM mapped.
				if !in.d.Manager.KeepsDeviceOnMigration() {
					return fmt.Errorf("%w: guest pages for a vGPU that is plugged at commit", stream.ErrCorrupt)
				}
			default:
				return fmt.Errorf("%w: a %v record inside a round", stream.ErrCorrupt, raw.Type)
			}
			if err := w.WriteRaw(raw); err != nil {
				return err
			}
		}
	}()
	pw.CloseWithError(fwdErr)
	injErr := <-errc
	if fwdErr != nil {
		return number, fwdErr
	}
	if injErr != nil {
		return number, fmt.Errorf("round %d: %w", number, injErr)
	}
	if in.final && in.ring == nil {
		return number, fmt.Errorf("%w: the final round carries no ring state", stream.ErrCorrupt)
	}
	return number, writeLine(in.conn, Reply{Step: "round", Round: number, AppliedNs: ns(time.Since(start))})
}

// abortBetweenRecords reads the source's abort where a record would
// start: a source that rolls back while this side waits for a round's
// records (a live migration's final round comes only after QEMU's copy)
// sends its abort line there. A record's header starts with its type's
// low byte, never '{'. It returns nil when a record follows.
func (in *incoming) abortBetweenRecords() error {
	b, err := in.br.Peek(1)
	if err != nil || b[0] != '{' {
		return nil // the stream reader reports what is wrong
	}
	var cmd Command
	if err := readLine(in.br, &cmd); err != nil {
		return fmt.Errorf("%w: a line where a record should start: %w", stream.ErrCorrupt, err)
	}
	if cmd.Do != "abort" {
		return fmt.Errorf("%w: a %q command inside a round", stream.ErrCorrupt, cmd.Do)
	}
	in.log.Info("migration aborted by the source", "why", cmd.Why)
	return fmt.Errorf("aborted by the source: %s", cmd.Why)
}

// commit plugs the vGPU into the migrated VM and resumes it and its guest
// programs.
func (in *incoming) commit(ctx context.Context, cmd Command) (Reply, error) {
	rep := Reply{Step: "commit"}
	ctx, cancel := context.WithTimeout(ctx, in.d.stepTimeout())
	defer cancel()
	start := time.Now()
	if cmd.SourceGone {
		// The VM's manager moved it and the source QEMU is gone: this
		// copy is the only one, never quit here.
		in.running = true
	}
	if in.mon == nil {
		var err error
		if in.mon, err = qmp.Dial(ctx, in.inst.QMPSocket()); err != nil {
			return rep, fmt.Errorf("no destination QEMU after the VM's migration (its monitor at %s): %w", in.inst.QMPSocket(), err)
		}
	}
	// The source says its QEMU completed; this one may take a moment more
	// to load the last pages.
	var st qmp.StatusInfo
	for {
		var err error
		if st, err = in.mon.QueryStatus(ctx); err != nil {
			return rep, err
		}
		if st.Status != qmp.RunStateInMigrate {
			break
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return rep, fmt.Errorf("QEMU still receiving the VM: %w", ctx.Err())
		}
	}
	if st.Running {
		// QEMU was started without -S and runs the VM already. Stop it:
		// until "go" the source may still take the VM back.
		in.log.Warn("the destination QEMU runs the VM before the vGPU is back (start it with -S): stopping it")
		if err := in.mon.Stop(ctx); err != nil {
			return rep, err
		}
	}
	if cmd.InPlace != in.d.Manager.KeepsDeviceOnMigration() {
		return rep, fmt.Errorf("the source says the vGPU stayed attached: %t; this vgpud's VMMs keep it: %t", cmd.InPlace, !cmd.InPlace)
	}
	if cmd.InPlace && !in.inst.Attached() {
		// The destination QEMU connected to the instance at its start
		// and stays connected; without it the VM comes without its vGPU.
		return rep, fmt.Errorf("the destination QEMU is not attached to instance %s (start it with the vGPU's vfio-user-pci device)", in.inst.UUID())
	}
	if in.ring.Enabled {
		in.inst.Restore(in.ring.Base, in.ring.ComplBase, in.ring.Slots, in.ring.Tail)
	}
	if in.late {
		in.inst.HoldBackend(false)
	}
	if !cmd.InPlace {
		if err := plug(ctx, in.mon, in.inst, cmd.DeviceID, cmd.Slot, in.d.Manager.KeepsDeviceOnMigration()); err != nil {
			return rep, err
		}
	}
	// Thaw first writes the guest pages the final round brought (the
	// device's writes while QEMU copied the VM): QEMU has loaded the VM,
	// which has not run yet.
	if err := in.mig.Thaw(ctx, true); err != nil {
		return rep, err
	}
	rep.PlugNs = ns(time.Since(start))
	in.log.Info("incoming migration: vGPU plugged", "plug", time.Duration(rep.PlugNs))
	return rep, nil
}

// run lets the VM run here and resumes its guest programs.
func (in *incoming) run(ctx context.Context) (Reply, error) {
	rep := Reply{Step: "go"}
	ctx, cancel := context.WithTimeout(ctx, in.d.stepTimeout())
	defer cancel()
	start := time.Now()
	in.running = true
	st, err := in.mon.QueryStatus(ctx)
	if err != nil {
		return rep, err
	}
	var ran time.Time // when this vgpud ran the VM (cont); zero if it was running
	if !st.Running {
		ran = time.Now()
		if err := in.mon.Cont(ctx); err != nil {
			return rep, err
		}
	}
	rep.PlugNs = ns(time.Since(start))
	resumed := time.Now()
	if a := in.inst.Agent(); a != nil {
		rt := in.d.ResumeTimeout
		if rt <= 0 {
			rt = 60 * time.Second
		}
		rctx, cancel := context.WithTimeout(ctx, rt)
		// The guest's programs were quiesced on the source: the Resume
		// follows our greeting without waiting for the agent's Hello.
		n, err := a.ResumeArrived(rctx, rt)
		cancel()
		if err != nil {
			// The vGPU is here and running: a guest program that did not
			// resume is the guest's to handle, not a reason to lose the VM.
			in.log.Warn("guest did not confirm resume", "err", err)
		}
		rep.Programs = n
	}
	rep.ResumeNs = ns(time.Since(resumed))
	if a := in.inst.Agent(); a != nil && !ran.IsZero() {
		// The agent's Hello after the VM ran: the guest's first answer,
		// which asks nothing of the vGPU.
		if h := a.LastHello(); h.After(ran) {
			rep.HelloNs = ns(max(h.Sub(resumed), 0))
		}
	}
	in.log.Info("incoming migration committed", "cont", time.Duration(rep.PlugNs), "resume", time.Duration(rep.ResumeNs),
		"guest_hello", time.Duration(rep.HelloNs))
	return rep, nil
}

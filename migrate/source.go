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
	"time"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/migrate/qmp"
	"github.com/vgpud/vgpud/migrate/stream"
	"github.com/vgpud/vgpud/worker"
	"github.com/vgpud/vgpud/worker/wire"
)

// Defaults of Options.
const (
	DefaultDeviceID  = "vgpu0"
	DefaultMaxRounds = 5
	// DefaultConverged: pre-copy stops once a round sends no more buffer
	// bytes than this; the final round then has little left to copy.
	DefaultConverged = 1 << 20
)

// Options configure one outgoing migration.
type Options struct {
	// To is the destination vgpud's migration listener, host:port.
	To  string
	TLS *TLS
	// URI is where the destination QEMU listens for the VM (its -incoming
	// argument), e.g. tcp:desthost:4444 or unix:/path.
	URI string
	// QMP is the source QEMU's monitor socket; "" means the instance's
	// conventional path (mdev.Instance.QMPSocket).
	QMP string
	// DeviceID is the proxy device's QEMU id; "" means DefaultDeviceID.
	DeviceID string
	// MaxRounds bounds the pre-copy rounds (0: DefaultMaxRounds); pre-copy
	// also stops once a round sends at most Converged bytes of buffers or
	// no less than three quarters of the round before (the guest dirties
	// memory as fast as it is copied). With NoPrecopy the state is copied
	// only once the guest is quiesced (the baseline of bench/migrate).
	MaxRounds int
	NoPrecopy bool
	// QuiesceFirst quiesces the guest's programs before QEMU copies the
	// VM even where the vGPU could keep running meanwhile (the baseline
	// of bench/migrate; docs/migration.md "The vGPU runs while QEMU
	// copies the VM").
	QuiesceFirst bool
	// Converged ends pre-copy early (0: DefaultConverged).
	Converged uint64
	// QEMUBandwidth caps QEMU's own migration of the VM, in bytes per
	// second (QMP max-bandwidth). The vGPU is unplugged while QEMU copies
	// the VM's RAM, so this bounds the GPU stun; 0 means no cap, as
	// libvirt does by default (QEMU's own default is 128 MiB/s).
	QEMUBandwidth uint64
	// Timeouts; 0 means the default noted.
	QuiesceTimeout time.Duration // the guest draining its programs: 30 s
	UnplugTimeout  time.Duration // the guest ejecting the device: 30 s
	QEMUTimeout    time.Duration // QEMU's own migration: 10 min
	Logger         *slog.Logger
	// MoveVM, if set, moves the VM in place of the QMP migrate to URI:
	// the VM's manager drives QEMU's migration (libvirt's virsh migrate,
	// migrate/libvirt.Attacher.MoveVM), starting the destination QEMU,
	// whose vGPU device connects to the instance that awaits it. It is
	// called where the QMP migrate would be (the guest's programs
	// quiesced, the final round applied) and returns once the VM is on
	// the destination, paused, and the source QEMU gone: from then on
	// nothing rolls back. Only for transports that keep the device
	// attached (vfio-user).
	MoveVM func(ctx context.Context) error
}

// RoundReport is what one round moved.
type RoundReport struct {
	Number      uint32        `json:"number"`
	Final       bool          `json:"final"`
	StreamBytes uint64        `json:"stream_bytes"` // on the wire
	BufferBytes uint64        `json:"buffer_bytes"` // buffer content read
	Buffers     uint32        `json:"buffers"`
	Programs    uint32        `json:"programs"`
	Redirty     uint32        `json:"redirty"`
	GuestBytes  uint64        `json:"guest_bytes,omitempty"` // guest RAM the device wrote (a live final round)
	Took        time.Duration `json:"took_ns"`
	Applied     time.Duration `json:"applied_ns"` // on the destination, from the round's first record
}

// Report is what a migration did, phase by phase.
type Report struct {
	Instance    string        `json:"instance"`
	From        string        `json:"from_device"`
	To          string        `json:"to_device"`
	Rounds      []RoundReport `json:"rounds"`
	StreamBytes uint64        `json:"stream_bytes"`
	// InPlace: the vGPU stayed attached through QEMU's migration
	// (vfio-user); nothing was unplugged or plugged.
	InPlace bool `json:"in_place,omitempty"`
	// Live: the vGPU kept running while QEMU copied the VM, for
	// LiveCopy, before the stun; the final round carried GuestBytes of
	// guest RAM the device wrote meanwhile.
	Live       bool          `json:"live,omitempty"`
	LiveCopy   time.Duration `json:"live_copy_ns,omitempty"`
	GuestBytes uint64        `json:"guest_bytes,omitempty"`
	// Phases of the GPU stun (the guest's programs cannot use the vGPU):
	// Quiesce (draining them), then at once Final (the stop-and-copy
	// round) and Unplug (device_del until the guest ejected it), QEMU (its
	// migration of the VM), Plug (device_add and resuming on the
	// destination), Resume (the guest agent reopening the device).
	Quiesce time.Duration `json:"quiesce_ns"`
	Final   time.Duration `json:"final_ns"`
	Unplug  time.Duration `json:"unplug_ns"`
	QEMU    time.Duration `json:"qemu_ns"`
	Plug    time.Duration `json:"plug_ns"`
	Resume  time.Duration `json:"resume_ns"`
	// GuestHello is, within Resume, when the guest first answered after
	// the VM ran on the destination: its agent's Hello, which asks nothing
	// of the vGPU (the guest's and QEMU's own resume, the baseline of
	// Resume); 0 where not measured (the VM's manager ran it, or the agent
	// had said Hello before).
	GuestHello time.Duration `json:"guest_hello_ns,omitempty"`
	// Stun is from the Quiesce request to the guest's Resumed: no guest
	// command is served in between.
	Stun time.Duration `json:"stun_ns"`
	// QEMUDowntime and QEMUTotal are QEMU's own figures (query-migrate).
	QEMUDowntime time.Duration `json:"qemu_downtime_ns"`
	QEMUTotal    time.Duration `json:"qemu_total_ns"`
	Total        time.Duration `json:"total_ns"`
	Programs     uint32        `json:"programs"` // guest programs that quiesced
	// MovedByManager: the VM's manager (libvirt) moved the VM
	// (Options.MoveVM); QEMU is then its whole run and QEMU's own
	// figures, which the manager reads, are not here.
	MovedByManager bool `json:"moved_by_manager,omitempty"`
	// RolledBack says the migration failed and the VM kept running on
	// the source with its vGPU; Phase is where it failed.
	RolledBack bool   `json:"rolled_back,omitempty"`
	Phase      string `json:"phase,omitempty"`
}

// ErrOutcomeUnknown: the source told the destination to run the VM ("go")
// and got no answer. The VM may be running there; this side leaves its
// copy paused (QEMU's postmigrate) and the instance frozen, and does not
// roll back. The operator checks the destination (vgpuctl list there, its
// QEMU's query-status) and then quits the source QEMU, or, if the
// destination does not have the VM, resumes it here (docs/migration.md).
var ErrOutcomeUnknown = errors.New("migration outcome unknown: the destination did not confirm that it runs the VM")

// outgoing is one migration being sent.
type outgoing struct {
	opts  Options
	m     *mdev.Manager
	inst  *mdev.Instance
	mig   worker.Migrator
	mon   *qmp.Monitor
	conn  net.Conn
	br    *bufio.Reader
	cw    *countWriter
	w     *stream.Writer
	log   *slog.Logger
	rep   Report
	slot  int
	pages bool // the destination takes GuestPages records
	// qemuStarted: QEMU's migration was started (live.go) and, unless
	// qemu, may still be under way: a rollback cancels it. paused: the
	// pause-before-switchover capability was set on the source QEMU.
	qemuStarted bool
	paused      bool
	bandwidth   uint64 // QEMU's max-bandwidth for this migration
	downtime    int64  // the source QEMU's downtime-limit before it (ms)
	downtimeSet bool   // the live path lowered it (restored by a rollback)
	frozen      bool   // the final round froze the ring
	quiet       bool   // the guest quiesced
	gone        bool   // the device was unplugged from the source QEMU
	qemu        bool   // QEMU's migration completed
	// committed: "go" was sent; the VM is the destination's (or, if no
	// answer came, nobody here can tell), never run again here.
	committed bool
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n uint64
}

// Write writes p to the underlying writer and counts what it took.
func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// Migrate moves instance id and its VM to the destination: pre-copy of the
// device state while the guest computes, quiesce, stop-and-copy, QEMU's
// own migration, commit. On failure the VM keeps running here with its
// vGPU (re-plugged if it had been unplugged) and the report says where it
// failed.
func Migrate(ctx context.Context, m *mdev.Manager, id string, opts Options) (*Report, error) {
	if opts.DeviceID == "" {
		opts.DeviceID = DefaultDeviceID
	}
	if opts.MaxRounds <= 0 {
		opts.MaxRounds = DefaultMaxRounds
	}
	if opts.Converged == 0 {
		opts.Converged = DefaultConverged
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.To == "" || (opts.URI == "" && opts.MoveVM == nil) || opts.TLS == nil {
		return nil, errors.New("migrate: the destination, the QEMU migration URI and TLS are required")
	}
	inst, err := m.Get(id)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	o := &outgoing{opts: opts, m: m, inst: inst, log: opts.Logger.With("instance", inst.UUID(), "to", opts.To)}
	o.rep.Instance = inst.UUID()
	o.rep.From = m.Devices()[inst.Device()].Name
	start := time.Now()
	err = o.run(ctx)
	o.rep.Total = time.Since(start)
	if o.conn != nil {
		defer o.conn.Close() // after the rollback's abort
	}
	if o.mon != nil {
		defer o.mon.Close()
	}
	if err != nil && o.committed {
		// No rollback: the destination may be running the VM.
		o.log.Error("migration committed, but the destination did not confirm", "err", err)
		o.rep.Phase = "go"
		return &o.rep, err
	}
	if err != nil {
		o.rollback(err)
		return &o.rep, err
	}
	o.log.Info("migrated", "stun", o.rep.Stun, "bytes", o.rep.StreamBytes, "rounds", len(o.rep.Rounds))
	if derr := m.Destroy(inst.UUID()); derr != nil {
		o.log.Warn("free the migrated instance", "err", derr)
	}
	return &o.rep, nil
}

// phase records the phase under way, for the report.
func (o *outgoing) phase(p string) { o.rep.Phase = p }

// run drives the migration phase by phase (o.rep.Phase names the one
// under way, for a rollback's report); Migrate rolls back on its error
// unless the VM was committed to the destination.
func (o *outgoing) run(ctx context.Context) error {
	var err error
	o.phase("prepare")
	if o.mig, err = o.inst.Migrator(); err != nil {
		return err
	}
	// One deadline covers reaching the source QEMU and the destination.
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := o.openMonitor(qctx); err != nil {
		return err
	}

	o.phase("connect")
	c, err := o.dial(qctx)
	if err != nil {
		return err
	}
	o.conn = c
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	inPlace, err := o.introduce()
	if err != nil {
		return err
	}

	o.phase("pre-copy")
	if err := o.precopy(ctx); err != nil {
		return err
	}
	if ok, err := o.goLive(ctx, inPlace); err != nil {
		return err
	} else if ok {
		return o.runLive(ctx)
	}

	o.phase("quiesce")
	stunStart := time.Now()
	if err := o.quiesce(ctx, stunStart); err != nil {
		return err
	}

	o.phase("stop-and-copy")
	if err := o.stopAndCopy(ctx, inPlace); err != nil {
		return err
	}

	o.phase("qemu")
	t := time.Now()
	if o.opts.MoveVM != nil {
		return o.moveVM(ctx, t, stunStart)
	}
	if err := o.migrateQEMU(ctx, t); err != nil {
		return err
	}
	return o.commitAndGo(inPlace, stunStart)
}

// openMonitor connects to the source QEMU's monitor (o.mon), finds the
// vGPU's PCI slot (o.slot) and checks that the guest can be quiesced
// (phase "prepare").
func (o *outgoing) openMonitor(qctx context.Context) error {
	var err error
	qmpPath := o.opts.QMP
	if qmpPath == "" {
		qmpPath = o.inst.QMPSocket()
	}
	if o.mon, err = qmp.Dial(qctx, qmpPath); err != nil {
		return fmt.Errorf("source QEMU monitor %s: %w", qmpPath, err)
	}
	if o.slot, err = DeviceSlot(qctx, o.mon, o.opts.DeviceID); err != nil {
		return err
	}
	if o.inst.Agent() == nil {
		return errors.New("the instance has no guest agent channel: the guest cannot be quiesced")
	}
	return nil
}

// dial connects to the destination over TLS (phase "connect").
func (o *outgoing) dial(qctx context.Context) (net.Conn, error) {
	host, _, err := net.SplitHostPort(o.opts.To)
	if err != nil {
		return nil, fmt.Errorf("destination %q: %w", o.opts.To, err)
	}
	d := tls.Dialer{Config: o.opts.TLS.Client(host)}
	c, err := d.DialContext(qctx, "tcp", o.opts.To)
	if err != nil {
		return nil, fmt.Errorf("connect to the destination: %w", err)
	}
	return c, nil
}

// introduce starts the stream on o.conn with the instance's record, reads
// the destination's answer and checks that both daemons treat the vGPU
// alike through QEMU's migration, which it returns: true where the vGPU
// stays attached (vfio-user).
func (o *outgoing) introduce() (inPlace bool, err error) {
	o.br = bufio.NewReaderSize(o.conn, 64<<10)
	o.cw = &countWriter{w: o.conn}
	o.w = stream.NewWriter(o.cw)
	prof := o.inst.Profile()
	setting := o.m.ReuseSettingOf(o.inst)
	if err := o.w.Write(&stream.Instance{ID: o.inst.UUID(), Profile: prof.Name, Domain: setting.Domain,
		Device: o.rep.From, MemBytes: prof.MemBytes, ProgramBytes: prof.ProgramBytes}); err != nil {
		return false, err
	}
	rep, err := expect(o.br, "instance")
	if err != nil {
		return false, err
	}
	o.rep.To = rep.Device
	o.pages = rep.GuestPages
	// vfio-user keeps the vGPU attached through QEMU's migration; mpqemu
	// unplugs it and the destination plugs one at commit. A VM cannot
	// move from one kind to the other: its destination QEMU was started
	// for one of them.
	inPlace = o.m.KeepsDeviceOnMigration()
	if rep.KeepsDevice != inPlace {
		return false, fmt.Errorf("the destination's vGPUs %s through QEMU's migration, this vgpud's %s: migrate between daemons of the same transport",
			keepsWord(rep.KeepsDevice), keepsWord(inPlace))
	}
	o.rep.InPlace = inPlace
	if o.opts.MoveVM != nil && !inPlace {
		return false, errors.New("a VM whose manager moves it (libvirt) keeps its vGPU attached only on vfio-user: this vgpud's transport unplugs it")
	}
	return inPlace, nil
}

// precopy sends the pre-copy rounds while the guest computes, until they
// stop shrinking or MaxRounds; none with NoPrecopy.
func (o *outgoing) precopy(ctx context.Context) error {
	if o.opts.NoPrecopy {
		return nil
	}
	var prev uint64
	for n := uint32(0); int(n) < o.opts.MaxRounds; n++ {
		r, err := o.round(ctx, n, false)
		if err != nil {
			return err
		}
		if n > 0 && !shrinking(prev, r.BufferBytes, o.opts.Converged) {
			break
		}
		prev = r.BufferBytes
	}
	return nil
}

// quiesce asks the guest agent to drain the guest's programs; the GPU
// stun starts at stunStart. From here on a rollback resumes the guest.
func (o *outgoing) quiesce(ctx context.Context, stunStart time.Time) error {
	qt := o.opts.QuiesceTimeout
	if qt <= 0 {
		qt = 30 * time.Second
	}
	qc, cancelQ := context.WithTimeout(ctx, qt+5*time.Second)
	var err error
	o.quiet = true // from here on a rollback resumes the guest
	o.rep.Programs, err = o.inst.Agent().Quiesce(qc, qt, o.rep.InPlace)
	cancelQ()
	if err != nil {
		return fmt.Errorf("quiesce the guest: %w", err)
	}
	o.rep.Quiesce = time.Since(stunStart)
	return nil
}

// stopAndCopy freezes the ring and sends the final round, unplugging the
// vGPU meanwhile unless it stays attached (inPlace).
func (o *outgoing) stopAndCopy(ctx context.Context, inPlace bool) error {
	t := time.Now()
	o.frozen = true
	if inPlace {
		// The vGPU stays in the VM: the guest's programs are quiesced and
		// the ring frozen, so nothing reaches the device, and the device
		// writes no guest RAM, while QEMU copies the VM.
		err := o.finalRound(ctx)
		o.rep.Final = time.Since(t)
		return err
	}
	return o.unplugAndFinal(ctx, t)
}

// migrateQEMU runs QEMU's own migration of the VM to Options.URI, begun
// at t, and waits for it to complete.
func (o *outgoing) migrateQEMU(ctx context.Context, t time.Time) error {
	if err := o.mon.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": o.qemuBandwidth()}); err != nil {
		return fmt.Errorf("QEMU migration bandwidth: %w", err)
	}
	if err := o.mon.Migrate(ctx, o.opts.URI); err != nil {
		return err
	}
	mc, cancelM := context.WithTimeout(ctx, o.qemuTimeout())
	info, err := o.mon.WaitMigration(mc, 5*time.Millisecond)
	cancelM()
	if err != nil {
		return fmt.Errorf("QEMU migration: %w", err)
	}
	o.rep.QEMU = time.Since(t)
	o.qemuCompleted(info)
	return nil
}

// qemuCompleted records that QEMU's migration completed, with QEMU's own
// figures from its last query-migrate.
func (o *outgoing) qemuCompleted(info qmp.MigrationInfo) {
	o.qemu = true
	o.rep.QEMUDowntime = time.Duration(info.DowntimeMS) * time.Millisecond
	o.rep.QEMUTotal = time.Duration(info.TotalTimeMS) * time.Millisecond
}

// commitAndGo commits the VM to the destination and tells it to run it:
// the end of every migration that QEMU's migration driven here moved.
func (o *outgoing) commitAndGo(inPlace bool, stunStart time.Time) error {
	o.phase("commit")
	if err := o.commit(inPlace); err != nil {
		return err
	}
	// The destination holds the VM, paused, with the vGPU plugged. From
	// "go" on the VM is the destination's: this side never runs it again.
	o.committed = true
	return o.sendGo(stunStart)
}

// qemuBandwidth is QEMU's max-bandwidth for this migration.
func (o *outgoing) qemuBandwidth() uint64 {
	bw := o.opts.QEMUBandwidth
	if bw == 0 || bw > maxQEMUBandwidth {
		bw = maxQEMUBandwidth
	}
	return bw
}

// qemuTimeout bounds QEMU's own migration.
func (o *outgoing) qemuTimeout() time.Duration {
	if o.opts.QEMUTimeout > 0 {
		return o.opts.QEMUTimeout
	}
	return 10 * time.Minute
}

// commit tells the destination to take the VM, paused, with the vGPU
// plugged (or kept, inPlace), and waits for its answer.
func (o *outgoing) commit(inPlace bool) error {
	if err := writeLine(o.conn, Command{Do: "commit", DeviceID: o.opts.DeviceID, Slot: o.slot, InPlace: inPlace}); err != nil {
		return err
	}
	o.conn.SetReadDeadline(time.Now().Add(3 * time.Minute))
	rep, err := expect(o.br, "commit")
	if err != nil {
		return err
	}
	o.rep.Plug = time.Duration(rep.PlugNs)
	return nil
}

// sendGo tells the destination to run the VM ("go") and completes the
// report with its answer. From here the VM is the destination's: an
// unanswered "go" leaves the outcome unknown, never rolled back.
func (o *outgoing) sendGo(stunStart time.Time) error {
	o.phase("go")
	if err := writeLine(o.conn, Command{Do: "go"}); err != nil {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	rep, err := expect(o.br, "go")
	if err != nil {
		if errors.Is(err, ErrPeer) && rep.Step == "go" {
			// The destination answered: it holds the VM, with an error.
			return err
		}
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	o.rep.Plug += time.Duration(rep.PlugNs)
	o.rep.Resume = time.Duration(rep.ResumeNs)
	o.rep.GuestHello = time.Duration(rep.HelloNs)
	o.rep.Stun = time.Since(stunStart)
	o.rep.StreamBytes = o.cw.n
	o.rep.Phase = ""
	return nil
}

// moveVM is the end of run when the VM's manager moves it (Options.MoveVM):
// once it has, the source QEMU is gone, so the VM is the destination's
// and nothing rolls back; the destination then checks that its QEMU is
// attached to the instance ("commit") and runs the VM ("go").
func (o *outgoing) moveVM(ctx context.Context, t, stunStart time.Time) error {
	if err := o.opts.MoveVM(ctx); err != nil {
		return fmt.Errorf("the VM's migration: %w", err)
	}
	o.qemu = true
	o.committed = true
	o.rep.QEMU = time.Since(t)
	o.rep.MovedByManager = true
	o.phase("commit")
	if err := writeLine(o.conn, Command{Do: "commit", DeviceID: o.opts.DeviceID, Slot: o.slot, InPlace: true, SourceGone: true}); err != nil {
		return fmt.Errorf("%w: the VM is on the destination, paused: %w", ErrOutcomeUnknown, err)
	}
	o.conn.SetReadDeadline(time.Now().Add(3 * time.Minute))
	rep, err := expect(o.br, "commit")
	if err != nil {
		return fmt.Errorf("%w: the VM is on the destination, paused: %w", ErrOutcomeUnknown, err)
	}
	o.rep.Plug = time.Duration(rep.PlugNs)
	return o.sendGo(stunStart)
}

// unplugAndFinal unplugs the vGPU (device_del) while it sends the final
// round: the final round reads the frozen state from the worker and needs
// nothing from the guest; the guest's ejecting the device (ACPI, about a
// second under TCG) needs nothing from the worker: both at once.
func (o *outgoing) unplugAndFinal(ctx context.Context, t time.Time) error {
	ut := o.opts.UnplugTimeout
	if ut <= 0 {
		ut = 30 * time.Second
	}
	uc, cancelU := context.WithTimeout(ctx, ut)
	defer cancelU()
	unplugged := make(chan error, 1)
	go func() {
		err := unplug(uc, o.mon, o.opts.DeviceID)
		o.rep.Unplug = time.Since(t)
		unplugged <- err
	}()
	err := o.finalRound(ctx)
	o.rep.Final = time.Since(t)
	if err != nil {
		// device_del was asked for: the guest ejects the device whether
		// or not this round failed, so wait for it, and the rollback
		// re-plugs it.
		uerr := <-unplugged
		o.gone = uerr == nil || o.deviceAbsent()
		return err
	}
	o.phase("unplug")
	if err := <-unplugged; err != nil {
		o.gone = o.deviceAbsent()
		return err
	}
	o.gone = true
	return nil
}

// keepsWord says what a daemon's vGPUs do through QEMU's migration.
func keepsWord(keeps bool) string {
	if keeps {
		return "stay attached (vfio-user)"
	}
	return "are unplugged and plugged again (mpqemu)"
}

// shrinking reports whether pre-copy should go on after a round that sent
// cur buffer bytes, following one that sent prev: not once cur is at most
// converged (the final round has little left), nor when cur is more than
// three quarters of prev (the guest dirties its memory about as fast as it
// is copied: more rounds would send it again and again, and the final
// round would be no smaller).
func shrinking(prev, cur, converged uint64) bool {
	return cur > converged && cur/3 < prev/4
}

// maxQEMUBandwidth is "no cap" for QMP max-bandwidth: QEMU takes at most
// INT64_MAX bytes per second; libvirt's "unlimited" is 8 PiB/s.
const maxQEMUBandwidth = 8 << 50

// finalRound sends the stop-and-copy round and closes the stream.
func (o *outgoing) finalRound(ctx context.Context) error {
	if _, err := o.round(ctx, uint32(len(o.rep.Rounds)), true); err != nil {
		return err
	}
	return o.w.Close()
}

// deviceAbsent reports whether the source QEMU no longer has the vGPU
// (best effort: an unanswered query counts as present).
func (o *outgoing) deviceAbsent() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := DeviceSlot(ctx, o.mon, o.opts.DeviceID)
	return errors.Is(err, ErrNoDevice)
}

// round sends one round: the worker's records, then the Round record
// that closes it, and waits for the destination to have applied it.
func (o *outgoing) round(ctx context.Context, n uint32, final bool) (RoundReport, error) {
	start := time.Now()
	before := o.cw.n
	pr, pw := io.Pipe()
	type result struct {
		st  wire.ExtractReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := o.mig.ExtractRound(ctx, final, pw)
		pw.CloseWithError(errors.Join(err, io.EOF))
		done <- result{st, err}
	}()
	fwdErr := func() error {
		r := stream.NewReader(pr)
		for {
			raw, err := r.NextRaw()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("the worker's round: %w", err)
			}
			switch raw.Type {
			case stream.TypeHeader, stream.TypeEnd:
				continue
			case stream.TypeProgram, stream.TypeProgramFree, stream.TypeBuffer, stream.TypeBufferData, stream.TypeBufferFree,
				stream.TypeContext:
			case stream.TypeRing, stream.TypeGuestPages:
				if !final {
					return fmt.Errorf("the worker sent a %v record in a pre-copy round", raw.Type)
				}
			default:
				return fmt.Errorf("the worker sent a %v record", raw.Type)
			}
			if err := o.w.WriteRaw(raw); err != nil {
				return fmt.Errorf("send to the destination: %w", err)
			}
		}
	}()
	pr.CloseWithError(errors.Join(fwdErr, io.ErrClosedPipe))
	res := <-done
	rr := RoundReport{Number: n, Final: final}
	if fwdErr != nil {
		return rr, fwdErr
	}
	if res.err != nil {
		return rr, fmt.Errorf("extract: %w", res.err)
	}
	if err := o.w.Write(&stream.Round{Number: n, Final: final}); err != nil {
		return rr, err
	}
	o.conn.SetReadDeadline(time.Now().Add(3 * time.Minute))
	rep, err := expect(o.br, "round")
	if err != nil {
		return rr, err
	}
	rr.StreamBytes = o.cw.n - before
	rr.BufferBytes = res.st.BufferBytes
	rr.Buffers = res.st.Buffers
	rr.Programs = res.st.Programs
	rr.Redirty = res.st.Redirty
	rr.GuestBytes = res.st.GuestBytes
	o.rep.GuestBytes += rr.GuestBytes
	rr.Took = time.Since(start)
	rr.Applied = time.Duration(rep.AppliedNs)
	o.rep.Rounds = append(o.rep.Rounds, rr)
	o.log.Info("migration round", "round", n, "final", final, "bytes", rr.StreamBytes, "buffers", rr.Buffers, "took", rr.Took)
	return rr, nil
}

// rollback puts the VM back as it was on the source: the destination
// told to discard what it got, QEMU running, the vGPU plugged, the ring
// thawed, the guest's programs resumed.
func (o *outgoing) rollback(cause error) {
	o.rep.RolledBack = true
	o.log.Warn("migration failed, rolling back", "phase", o.rep.Phase, "err", cause)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if o.conn != nil {
		// Best effort: a destination that lost the connection discards
		// the instance anyway (and quits its QEMU if it holds the VM).
		o.conn.SetDeadline(time.Now().Add(5 * time.Second))
		_ = writeLine(o.conn, Command{Do: "abort", Why: cause.Error()})
	}
	if o.mon == nil || o.mig == nil {
		return
	}
	if o.qemuStarted || o.paused {
		o.stopQEMU(ctx) // a live migration's QEMU side (live.go)
	}
	if o.qemu {
		// QEMU handed the VM over but the destination could not take the
		// vGPU (it has stopped its copy of the VM): run it here again.
		if st, err := o.mon.QueryStatus(ctx); err == nil && !st.Running {
			if err := o.mon.Cont(ctx); err != nil {
				o.log.Error("rollback: cont", "err", err)
			}
		}
	}
	if o.gone {
		o.inst.SpareNextReset() // the state is intact: spare it from the hot-plug reset
		if err := o.replug(ctx); err != nil {
			o.log.Error("rollback: re-plug the vGPU", "err", err)
			return
		}
	}
	if o.frozen || o.quiet {
		if err := o.mig.Thaw(ctx, true); err != nil {
			o.log.Error("rollback: thaw", "err", err)
		}
	} else {
		_ = o.mig.Thaw(ctx, true) // forget what pre-copy sent
	}
	if o.quiet {
		if _, err := o.inst.Agent().Resume(ctx, o.gone, 60*time.Second); err != nil {
			o.log.Error("rollback: resume the guest", "err", err)
		}
	}
}

// replug plugs the vGPU back into the source QEMU at its slot (rollback).
func (o *outgoing) replug(ctx context.Context) error {
	return plug(ctx, o.mon, o.inst, o.opts.DeviceID, o.slot, o.m.KeepsDeviceOnMigration())
}

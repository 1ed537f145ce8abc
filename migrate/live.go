package migrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/migrate/qmp"
	"github.com/vgpud/vgpud/worker"
)

// The vGPU runs while QEMU copies the VM (docs/migration.md): on
// vfio-user, where the device stays in the VM, the worker logs its own
// writes to guest RAM (which QEMU's dirty tracking cannot see), QEMU
// copies the VM with the guest computing on its vGPU, the guest's
// programs are quiesced only as QEMU's copy nears its end, QEMU stops
// the VM before its switchover (pause-before-switchover), and the final
// round carries the device state and the guest pages the device wrote;
// the destination writes them after QEMU has loaded the VM.

const (
	// liveDowntimeMS is QEMU's downtime-limit while the vGPU runs: QEMU
	// switches over once what is left fits in the downtime limit at its
	// measured bandwidth (at QEMU's default of 300 ms that came with 82
	// MiB of 512 left, here, in the middle of its first pass), which
	// would stop the VM before its guest's programs quiesced. At 1 ms it
	// does not before the end of that pass. The limit the source QEMU
	// had is restored once the guest has quiesced.
	liveDowntimeMS = 1
	// holdBandwidth is QEMU's max-bandwidth while the guest quiesces, in
	// bytes per second: QEMU sends a tenth of it per 100 ms window, here
	// one byte's worth, so about one page per window (a zero page too),
	// and cannot reach its switchover meanwhile. Under 10 it would be 0
	// per window, which QEMU reads as no limit.
	holdBandwidth = 16
	// livePoll is how often query-migrate is asked while waiting.
	livePoll = 2 * time.Millisecond
)

// QEMU is held back (holdBandwidth) once what is left of its first copy
// of the VM would take it at most holdAhead at the fastest pace it went
// so far (over windows of holdWindow: over a few milliseconds it jitters
// several-fold), or is at most holdMin bytes. At the end of that pass,
// with what the guest dirtied meanwhile under 1 ms of its bandwidth,
// QEMU would switch over; held, it cannot. Guest RAM that is zero costs
// QEMU a few bytes a page, so its pace through RAM is measured, not
// derived from its bandwidth. What is left at the hold, QEMU copies after
// the guest quiesced, inside the GPU stun: at 100 ms ahead that was
// 206-276 ms of the stun, at 40 ms 112-161 ms (bench/migrate, 256 and
// 16 MiB, low), with 20 polls still between the hold and the pass's end
// at QEMU's fastest pace.
const (
	holdAhead  = 40 * time.Millisecond
	holdMin    = 32 << 20
	holdWindow = 40 * time.Millisecond
)

// holdPoint decides, from query-migrate's answers in turn, when to hold
// QEMU's copy.
type holdPoint struct {
	since    time.Time // the current window's start
	sinceRem int64     // remaining bytes then
	rate     float64   // the fastest bytes per second over a window
}

// reached reports whether QEMU's copy is close enough to the end of its
// first pass to hold it, or already stopped before its switchover (the
// caller then fails the migration: the guest can no longer quiesce).
func (h *holdPoint) reached(i qmp.MigrationInfo, now time.Time) bool {
	if i.Status == qmp.MigrationPreSwitchover || (i.Status == qmp.MigrationActive && i.RAM.DirtySyncCount >= 2) {
		return true
	}
	if i.Status != qmp.MigrationActive || i.RAM.Total <= 0 {
		return false
	}
	switch dt := now.Sub(h.since); {
	case h.since.IsZero() || i.RAM.Remaining > h.sinceRem:
		h.since, h.sinceRem = now, i.RAM.Remaining
	case dt >= holdWindow:
		h.rate = max(h.rate, float64(h.sinceRem-i.RAM.Remaining)/dt.Seconds())
		h.since, h.sinceRem = now, i.RAM.Remaining
	}
	return i.RAM.Remaining <= holdMin || float64(i.RAM.Remaining) <= h.rate*holdAhead.Seconds()
}

// errConvergedEarly: QEMU stopped the VM for its switchover before the
// guest's programs were quiesced (its pace through RAM rose more than
// holdAhead/livePoll-fold between two polls, and the guest dirtied less
// than 1 ms of QEMU's bandwidth meanwhile); they cannot quiesce in a
// stopped VM.
var errConvergedEarly = errors.New("QEMU reached its switchover before the guest's programs quiesced")

// goLive turns the worker's guest log on and reports true where this
// migration keeps the vGPU running while QEMU copies the VM: the vGPU
// stays attached (inPlace), QEMU is driven here over QMP (not by the
// VM's manager), pre-copy ran, the destination takes guest pages and
// the instance's worker keeps the log. Otherwise it reports false and
// the guest is quiesced first.
func (o *outgoing) goLive(ctx context.Context, inPlace bool) (bool, error) {
	if !inPlace || o.opts.MoveVM != nil || o.opts.NoPrecopy || o.opts.QuiesceFirst {
		return false, nil
	}
	if !o.pages {
		o.log.Info("the destination takes no guest pages (an earlier release): quiescing the guest before QEMU copies the VM")
		return false, nil
	}
	if err := o.mig.GuestLog(ctx, true); err != nil {
		if errors.Is(err, worker.ErrNoGuestLog) {
			o.log.Info("quiescing the guest before QEMU copies the VM", "why", err)
			return false, nil
		}
		return false, err
	}
	o.rep.Live = true
	return true, nil
}

// runLive is the end of run for a live migration (goLive).
func (o *outgoing) runLive(ctx context.Context) error {
	o.phase("qemu")
	t := time.Now()
	if err := o.startQEMU(ctx); err != nil {
		return err
	}
	mc, cancelM := context.WithTimeout(ctx, o.qemuTimeout())
	defer cancelM()
	var hp holdPoint
	info, err := o.mon.WaitMigrationUntil(mc, livePoll, func(i qmp.MigrationInfo) bool { return hp.reached(i, time.Now()) })
	if err != nil {
		return fmt.Errorf("QEMU migration: %w", err)
	}
	if info.Status != qmp.MigrationPreSwitchover {
		if err := o.mon.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": holdBandwidth}); err != nil {
			return fmt.Errorf("hold QEMU's migration: %w", err)
		}
		info, err = o.mon.QueryMigrate(ctx)
		if err != nil {
			return fmt.Errorf("QEMU migration: %w", err)
		}
	}
	if info.Status == qmp.MigrationPreSwitchover {
		return errConvergedEarly
	}
	o.log.Info("QEMU's copy held for the guest's quiesce", "remaining", info.RAM.Remaining, "passes", info.RAM.DirtySyncCount, "pace", int64(hp.rate))
	o.rep.LiveCopy = time.Since(t)

	o.phase("quiesce")
	stunStart := time.Now()
	if err := o.quiesce(ctx, stunStart); err != nil {
		return err
	}
	if err := o.mon.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": o.bandwidth, "downtime-limit": o.downtime}); err != nil {
		return fmt.Errorf("release QEMU's migration: %w", err)
	}
	o.downtimeSet = false

	o.phase("qemu")
	tq := time.Now()
	if _, err := o.mon.WaitMigrationUntil(mc, livePoll, func(i qmp.MigrationInfo) bool {
		return i.Status == qmp.MigrationPreSwitchover
	}); err != nil {
		return fmt.Errorf("QEMU migration: %w", err)
	}
	o.rep.QEMU = time.Since(tq)

	o.phase("stop-and-copy")
	tf := time.Now()
	o.frozen = true
	err = o.finalRound(ctx)
	o.rep.Final = time.Since(tf)
	if err != nil {
		return err
	}

	o.phase("qemu")
	tc := time.Now()
	if err := o.mon.MigrateContinue(ctx, qmp.MigrationPreSwitchover); err != nil {
		return fmt.Errorf("QEMU migration: continue: %w", err)
	}
	info, err = o.mon.WaitMigration(mc, 5*time.Millisecond)
	if err != nil {
		return fmt.Errorf("QEMU migration: %w", err)
	}
	o.rep.QEMU += time.Since(tc)
	o.qemuCompleted(info)
	return o.commitAndGo(true, stunStart)
}

// startQEMU starts QEMU's migration of the VM to Options.URI with the
// vGPU running: QEMU stops before its switchover and waits there
// (pause-before-switchover) for the final round.
func (o *outgoing) startQEMU(ctx context.Context) error {
	o.bandwidth = o.qemuBandwidth()
	params, err := o.mon.QueryMigrateParameters(ctx)
	if err != nil {
		return fmt.Errorf("QEMU's migration parameters: %w", err)
	}
	o.downtime = params.DowntimeLimitMS
	if err := o.mon.MigrateSetCapabilities(ctx, map[string]bool{"pause-before-switchover": true}); err != nil {
		return fmt.Errorf("QEMU's pause before switchover: %w", err)
	}
	o.paused = true
	o.downtimeSet = true
	if err := o.mon.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": o.bandwidth, "downtime-limit": liveDowntimeMS}); err != nil {
		return fmt.Errorf("QEMU migration bandwidth and downtime: %w", err)
	}
	o.qemuStarted = true
	return o.mon.Migrate(ctx, o.opts.URI)
}

// stopQEMU is a live migration's rollback on the source QEMU: its
// migration cancelled unless it completed, the VM running again, and the
// capability and downtime limit it was started with undone, so that a
// later migration of this VM does not stop before its switchover.
func (o *outgoing) stopQEMU(ctx context.Context) {
	if o.qemuStarted && !o.qemu {
		if err := cancelAndRun(ctx, o.mon); err != nil {
			o.log.Error("rollback: QEMU's migration", "err", err)
		}
	}
	var downtime any
	if o.downtimeSet {
		downtime = o.downtime
	}
	if err := restoreQEMU(ctx, o.mon, o.paused, downtime); err != nil {
		o.log.Warn("rollback: QEMU's migration settings", "err", err)
	}
}

// cancelAndRun cancels the source QEMU's migration unless it is over and
// runs the VM if the cancel left it stopped (stopped before its
// switchover).
func cancelAndRun(ctx context.Context, mon *qmp.Monitor) error {
	info, err := mon.QueryMigrate(ctx)
	if err != nil {
		return err
	}
	if info.Status != qmp.MigrationNone && !info.Status.Done() {
		if err := mon.MigrateCancel(ctx); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		if _, err := mon.WaitMigrationUntil(ctx, 10*time.Millisecond, func(i qmp.MigrationInfo) bool { return i.Status.Done() }); err != nil {
			return err
		}
	}
	st, err := mon.QueryStatus(ctx)
	if err != nil {
		return err
	}
	if st.Status == qmp.RunStatePaused || st.Status == qmp.RunStateFinishMigrate {
		if err := mon.Cont(ctx); err != nil {
			return fmt.Errorf("cont: %w", err)
		}
	}
	return nil
}

// restoreQEMU clears pause-before-switchover (if pause) and sets the
// downtime limit back (if downtime is not nil).
func restoreQEMU(ctx context.Context, mon *qmp.Monitor, pause bool, downtime any) error {
	var errs []error
	if pause {
		errs = append(errs, mon.MigrateSetCapabilities(ctx, map[string]bool{"pause-before-switchover": false}))
	}
	if downtime != nil {
		errs = append(errs, mon.MigrateSetParameters(ctx, map[string]any{"downtime-limit": downtime}))
	}
	return errors.Join(errs...)
}

// qemuDowntimeMS is QEMU's default downtime-limit: what a source QEMU is
// given back when the limit it had before a live migration is not known
// (AbandonLive).
const qemuDowntimeMS = 300

// AbandonLive ends a live migration that a vgpud which then died or
// restarted left under way on a VM's QEMU (mon): one is recognized by
// the pause-before-switchover capability, which only this path sets.
// QEMU would otherwise go on copying the VM at a 1 ms downtime limit, or
// keep the VM stopped before its switchover, forever; and the vGPU's
// state went with the old daemon, so the migration cannot complete.
// It cancels the migration unless it completed (then the destination
// holds the VM: left alone), runs the VM if the cancel left it stopped,
// and gives QEMU back its defaults (no pause, 300 ms). It reports whether
// there was such a migration.
//
// beforeRun, if not nil, is called when the migration holds the VM
// stopped, before anything lets it run (QEMU runs it again itself as the
// migration is cancelled): the caller waits there for the VM's agent
// channel to have reconnected (see Reattach). It bounds its own wait;
// the VM runs whatever it found.
func AbandonLive(ctx context.Context, mon *qmp.Monitor, beforeRun func(context.Context)) (bool, error) {
	caps, err := mon.QueryMigrateCapabilities(ctx)
	if err != nil {
		return false, fmt.Errorf("abandon a live migration: %w", err)
	}
	if !caps["pause-before-switchover"] {
		return false, nil
	}
	info, err := mon.QueryMigrate(ctx)
	if err != nil {
		return true, fmt.Errorf("abandon a live migration: %w", err)
	}
	if info.Status == qmp.MigrationCompleted {
		return true, nil
	}
	if beforeRun != nil {
		st, err := mon.QueryStatus(ctx)
		if err != nil {
			return true, fmt.Errorf("abandon a live migration: %w", err)
		}
		if st.Status != qmp.RunStateRunning {
			beforeRun(ctx)
		}
	}
	if err := cancelAndRun(ctx, mon); err != nil {
		return true, fmt.Errorf("abandon a live migration: %w", err)
	}
	if err := restoreQEMU(ctx, mon, true, qemuDowntimeMS); err != nil {
		return true, fmt.Errorf("abandon a live migration: %w", err)
	}
	return true, nil
}

package qmp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// MigrationStatus is a migration's state (QAPI MigrationStatus), on the
// source and, for an incoming migration, on the destination.
type MigrationStatus string

// QEMU 7.2's migration states.
const (
	// MigrationNone: no migration has started (query-migrate then has no
	// status member at all). A destination waiting on migrate-incoming
	// reports it until the source connects.
	MigrationNone       MigrationStatus = ""
	MigrationSetup      MigrationStatus = "setup"
	MigrationActive     MigrationStatus = "active"
	MigrationCancelling MigrationStatus = "cancelling"
	MigrationCancelled  MigrationStatus = "cancelled"
	MigrationCompleted  MigrationStatus = "completed"
	MigrationFailed     MigrationStatus = "failed"
	// MigrationPreSwitchover and MigrationDevice: with the
	// pause-before-switchover capability, the source waits for
	// migrate-continue, then saves device state.
	MigrationDevice         MigrationStatus = "device"
	MigrationPreSwitchover  MigrationStatus = "pre-switchover"
	MigrationWaitUnplug     MigrationStatus = "wait-unplug"
	MigrationPostcopyActive MigrationStatus = "postcopy-active"
	MigrationPostcopyPaused MigrationStatus = "postcopy-paused"
	MigrationPostcopyRecov  MigrationStatus = "postcopy-recover"
	MigrationColo           MigrationStatus = "colo"
)

// Done reports whether s is final: completed, failed or cancelled.
func (s MigrationStatus) Done() bool {
	return s == MigrationCompleted || s == MigrationFailed || s == MigrationCancelled
}

// MigrationInfo is query-migrate's answer (QAPI MigrationInfo), the members
// the migration code reads. QEMU leaves out what a state does not have (no
// downtime before completion, no ram during setup): those read as zero.
type MigrationInfo struct {
	Status MigrationStatus `json:"status"`
	// TotalTimeMS is the time since the migration started, or its whole
	// duration once completed, in milliseconds.
	TotalTimeMS int64 `json:"total-time"`
	// DowntimeMS is how long the VM was stopped, in milliseconds; set
	// once completed.
	DowntimeMS int64 `json:"downtime"`
	// SetupTimeMS is the time spent in setup, in milliseconds.
	SetupTimeMS int64 `json:"setup-time"`
	// ExpectedDowntimeMS is QEMU's estimate while active, in
	// milliseconds.
	ExpectedDowntimeMS int64        `json:"expected-downtime"`
	RAM                MigrationRAM `json:"ram"`
	// ErrorDesc is why a failed migration failed.
	ErrorDesc string `json:"error-desc"`
}

// MigrationRAM is the RAM part of MigrationInfo (QAPI MigrationStats).
type MigrationRAM struct {
	// Transferred is the bytes sent so far.
	Transferred int64 `json:"transferred"`
	// Total is the guest RAM size in bytes.
	Total int64 `json:"total"`
	// Remaining is the bytes still to send.
	Remaining int64 `json:"remaining"`
	// DirtyPagesRate is the pages dirtied per second.
	DirtyPagesRate int64 `json:"dirty-pages-rate"`
	// Mbps is the throughput in megabits per second.
	Mbps float64 `json:"mbps"`
	// DirtySyncCount is the number of dirty bitmap syncs (passes).
	DirtySyncCount int64 `json:"dirty-sync-count"`
}

// Migrate runs "migrate" {"uri": uri} on the source: start migrating to
// uri ("unix:PATH", "tcp:HOST:PORT", "fd:NAME" after GetFD, "exec:CMD").
// It returns once the migration has started; WaitMigration waits for its
// end. Errors connecting to uri show up later, as status failed.
func (m *Monitor) Migrate(ctx context.Context, uri string) error {
	args := struct {
		URI string `json:"uri"`
	}{uri}
	return m.Execute(ctx, "migrate", args, nil)
}

// MigrateIncoming runs "migrate-incoming" {"uri": uri} on a destination
// started with -incoming defer: listen on uri for the source's stream.
// Capabilities and parameters must be set before it.
func (m *Monitor) MigrateIncoming(ctx context.Context, uri string) error {
	args := struct {
		URI string `json:"uri"`
	}{uri}
	return m.Execute(ctx, "migrate-incoming", args, nil)
}

// MigrateCancel runs "migrate_cancel": cancel the source's migration; its
// status goes through cancelling to cancelled.
func (m *Monitor) MigrateCancel(ctx context.Context) error {
	return m.Execute(ctx, "migrate_cancel", nil, nil)
}

// QueryMigrate runs "query-migrate": the state of the current or last
// migration (outgoing on a source, incoming on a destination).
func (m *Monitor) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var info MigrationInfo
	err := m.Execute(ctx, "query-migrate", nil, &info)
	return info, err
}

type migrationCapability struct {
	Capability string `json:"capability"`
	State      bool   `json:"state"`
}

// MigrateSetCapabilities runs "migrate-set-capabilities" {"capabilities":
// [{"capability": NAME, "state": BOOL}, ...]} (in name order), for instance
// {"events": true} to have QEMU send MIGRATION events. The same
// capabilities must be set on source and destination before migrating.
func (m *Monitor) MigrateSetCapabilities(ctx context.Context, caps map[string]bool) error {
	list := make([]migrationCapability, 0, len(caps))
	for name, on := range caps {
		list = append(list, migrationCapability{Capability: name, State: on})
	}
	slices.SortFunc(list, func(a, b migrationCapability) int {
		return cmp.Compare(a.Capability, b.Capability)
	})
	args := struct {
		Capabilities []migrationCapability `json:"capabilities"`
	}{list}
	return m.Execute(ctx, "migrate-set-capabilities", args, nil)
}

// MigrateSetParameters runs "migrate-set-parameters" with params as its
// flat arguments, for instance {"downtime-limit": 300, "max-bandwidth":
// 1 << 30} (QAPI MigrateSetParameters names).
func (m *Monitor) MigrateSetParameters(ctx context.Context, params map[string]any) error {
	if params == nil {
		params = map[string]any{}
	}
	return m.Execute(ctx, "migrate-set-parameters", params, nil)
}

// defaultMigrationPoll is WaitMigration's poll interval when given none.
const defaultMigrationPoll = 50 * time.Millisecond

// finishPoll bounds WaitMigration's poll interval while a completed source
// is still in run state finish-migrate, a window of milliseconds.
const finishPoll = 5 * time.Millisecond

// WaitMigration waits until query-migrate's status is completed, failed
// or cancelled, and returns the last MigrationInfo it got. It queries
// every interval (50ms if 0), and at once on each MIGRATION event, which
// QEMU sends only with the "events" capability; it takes (consumes) those
// events. On a destination it waits through status "" until the source
// connects.
//
// QEMU 7.2 reports a source's migration completed while the source is
// still in run state finish-migrate, before it has filled in total-time
// and downtime (they read 0). So on completed WaitMigration also polls
// query-status until the run state is no longer finish-migrate (it becomes
// postmigrate), then queries once more: the info it returns has the final
// figures, and the source's run state is settled.
//
// It returns an error wrapping ErrMigrationFailed, with QEMU's error-desc,
// when the migration failed, and also wrapping ErrMigrationCancelled when
// it was cancelled; ctx's error when ctx ends first.
func (m *Monitor) WaitMigration(ctx context.Context, interval time.Duration) (MigrationInfo, error) {
	if interval <= 0 {
		interval = defaultMigrationPoll
	}
	info, err := m.WaitMigrationUntil(ctx, interval, func(i MigrationInfo) bool { return i.Status == MigrationCompleted })
	if err != nil {
		return info, err
	}
	return m.settleCompleted(ctx, info, min(interval, finishPoll))
}

// settleCompleted waits for a completed migration's source to leave run
// state finish-migrate and returns query-migrate's answer after that.
func (m *Monitor) settleCompleted(ctx context.Context, info MigrationInfo, interval time.Duration) (MigrationInfo, error) {
	for {
		st, err := m.QueryStatus(ctx)
		if err != nil {
			return info, err
		}
		if st.Status != RunStateFinishMigrate {
			break
		}
		select {
		case <-time.After(interval):
		case <-ctx.Done():
			return info, fmt.Errorf("qmp wait migration: %w", ctx.Err())
		}
	}
	final, err := m.QueryMigrate(ctx)
	if err != nil {
		return info, err
	}
	return final, nil
}

// MigrateContinue runs "migrate-continue" {"state": state}: a source
// paused in state (MigrationPreSwitchover, with the
// pause-before-switchover capability) goes on to save the devices and
// complete.
func (m *Monitor) MigrateContinue(ctx context.Context, state MigrationStatus) error {
	args := struct {
		State MigrationStatus `json:"state"`
	}{state}
	return m.Execute(ctx, "migrate-continue", args, nil)
}

// MigrationParameters is query-migrate-parameters' answer, the members
// the migration code sets and restores.
type MigrationParameters struct {
	// DowntimeLimitMS is the longest the VM may be stopped at the end,
	// in milliseconds: QEMU switches over once what is left to send
	// fits in it at the measured bandwidth.
	DowntimeLimitMS int64 `json:"downtime-limit"`
	// MaxBandwidth caps the migration, bytes per second.
	MaxBandwidth int64 `json:"max-bandwidth"`
}

// QueryMigrateParameters runs "query-migrate-parameters".
func (m *Monitor) QueryMigrateParameters(ctx context.Context) (MigrationParameters, error) {
	var p MigrationParameters
	err := m.Execute(ctx, "query-migrate-parameters", nil, &p)
	return p, err
}

// WaitMigrationUntil waits until reached(info) holds for query-migrate's
// answer, querying every interval (50ms if 0) and at once on each
// MIGRATION event, and returns that answer. A migration that ends
// (completed, failed, cancelled) before reached holds is an error
// wrapping ErrMigrationFailed (and ErrMigrationCancelled), or
// ErrMigrationEnded when it completed. With any error it returns the last
// answer it got (zero if none), so a caller whose ctx ends still learns
// where the migration was.
func (m *Monitor) WaitMigrationUntil(ctx context.Context, interval time.Duration, reached func(MigrationInfo) bool) (MigrationInfo, error) {
	if interval <= 0 {
		interval = defaultMigrationPoll
	}
	var last MigrationInfo
	for {
		info, err := m.QueryMigrate(ctx)
		if err != nil {
			return last, err
		}
		last = info
		if reached(info) {
			return info, nil
		}
		switch info.Status {
		case MigrationCompleted:
			return info, fmt.Errorf("qmp migration: %w", ErrMigrationEnded)
		case MigrationFailed:
			return info, fmt.Errorf("qmp migration: %w: %s", ErrMigrationFailed, info.ErrorDesc)
		case MigrationCancelled:
			return info, fmt.Errorf("qmp migration: %w: %w", ErrMigrationFailed, ErrMigrationCancelled)
		}
		wctx, cancel := context.WithTimeout(ctx, interval)
		_, err = m.WaitEvent(wctx, "MIGRATION", nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return info, err
		}
		if err := ctx.Err(); err != nil {
			return info, fmt.Errorf("qmp wait migration: %w", err)
		}
	}
}

// QueryMigrateCapabilities runs "query-migrate-capabilities": each
// migration capability this QEMU has, by name, and whether it is on.
func (m *Monitor) QueryMigrateCapabilities(ctx context.Context) (map[string]bool, error) {
	var list []migrationCapability
	if err := m.Execute(ctx, "query-migrate-capabilities", nil, &list); err != nil {
		return nil, err
	}
	caps := make(map[string]bool, len(list))
	for _, c := range list {
		caps[c.Capability] = c.State
	}
	return caps, nil
}

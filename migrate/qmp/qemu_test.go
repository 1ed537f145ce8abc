package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// These tests run a real qemu-system-x86_64 (paused with -S, or running
// SeaBIOS with no boot device: no kernel needed). They skip under -short
// and where QEMU is not installed, and fail otherwise.

// qemuArgs are vgpud's VM basics: RAM is a shared memfd, as vgpud maps it.
var qemuArgs = []string{
	"-accel", "tcg", "-nodefaults", "-no-user-config", "-display", "none", "-S",
	"-object", "memory-backend-memfd,id=mem,size=64M,share=on",
	"-machine", "pc,memory-backend=mem", "-m", "64M",
}

func requireQEMU(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts QEMU; skipped under -short")
	}
	path, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 is not installed")
	}
	return path
}

// startQEMU starts QEMU with a QMP socket in dir and returns a Monitor on
// it. QEMU is killed, and waited for, in t.Cleanup.
func startQEMU(t *testing.T, ctx context.Context, qemu, dir, name string, extra ...string) *Monitor {
	t.Helper()
	sock := filepath.Join(dir, name+".qmp")
	args := append(append([]string{}, qemuArgs...), "-name", name, "-qmp", "unix:"+sock+",server=on,wait=off")
	args = append(args, extra...)
	cmd := exec.Command(qemu, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", qemu, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var exitErr error
	waited := false
	t.Cleanup(func() {
		if !waited {
			cmd.Process.Kill()
			<-exited
		}
	})

	// Wait for the socket: dial until it answers, or QEMU exits.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := Dial(ctx, sock)
		if err == nil {
			t.Cleanup(func() { m.Close() })
			return m
		}
		select {
		case exitErr = <-exited:
			waited = true
			t.Fatalf("QEMU %s exited before its QMP socket answered: %v\n%s", name, exitErr, stderr.String())
		case <-ctx.Done():
			t.Fatalf("QEMU %s: QMP socket %s never answered: %v", name, sock, err)
		case <-tick.C:
		}
	}
}

func TestQEMUBasics(t *testing.T) {
	qemu := requireQEMU(t)
	ctx := testContext(t)
	dir := t.TempDir()
	m := startQEMU(t, ctx, qemu, dir, "basic")

	if g := m.Greeting(); g.Version.QEMU.Major < 7 {
		t.Errorf("Greeting().Version = %+v, want QEMU 7 or later", g.Version)
	}
	st, err := m.QueryStatus(ctx)
	if want := (StatusInfo{Running: false, Status: RunStatePrelaunch}); err != nil || st != want {
		t.Errorf("QueryStatus() = %+v, %v, want %+v", st, err, want)
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if err := m.GetFD(ctx, "pipe0", pw); err != nil {
		t.Fatalf("GetFD(pipe0) = %v", err)
	}
	if err := m.CloseFD(ctx, "pipe0"); err != nil {
		t.Errorf("CloseFD(pipe0) = %v", err)
	}
	var qe *Error
	if err := m.CloseFD(ctx, "pipe0"); !errors.As(err, &qe) || qe.Class != ClassGenericError {
		t.Errorf("CloseFD(pipe0) a second time = %v, want a GenericError", err)
	}
	// getfd without a descriptor is QEMU's error, not ours.
	if err := m.Execute(ctx, "getfd", map[string]string{"fdname": "none"}, nil); !errors.As(err, &qe) {
		t.Errorf("getfd without a file = %v, want a *Error", err)
	}

	info, err := m.QueryMigrate(ctx)
	if err != nil || info != (MigrationInfo{}) {
		t.Errorf("QueryMigrate() before any migration = %+v, %v, want zero", info, err)
	}
	if err := m.DeviceDel(ctx, "nope"); !errors.Is(err, ErrDeviceNotFound) {
		t.Errorf("DeviceDel(nope) = %v, want ErrDeviceNotFound", err)
	}
	if err := m.Execute(ctx, "x-no-such-command", nil, nil); !errors.Is(err, ErrCommandNotFound) {
		t.Errorf("Execute(x-no-such-command) = %v, want ErrCommandNotFound", err)
	}
	raw, err := m.Raw(ctx, []byte(`{"execute": "query-name"}`))
	if err != nil || !jsonEqual(raw, `{"name": "basic"}`) {
		t.Errorf("Raw(query-name) = %s, %v", raw, err)
	}

	// A migration to nowhere: QEMU accepts the command, then fails.
	if err := m.MigrateCancel(ctx); err != nil {
		t.Errorf("MigrateCancel() with no migration = %v", err)
	}
	if err := m.Migrate(ctx, "unix:"+filepath.Join(dir, "none.sock")); err != nil {
		t.Fatalf("Migrate(to no socket) = %v", err)
	}
	info, err = m.WaitMigration(ctx, time.Millisecond)
	if !errors.Is(err, ErrMigrationFailed) || info.Status != MigrationFailed || info.ErrorDesc == "" {
		t.Errorf("WaitMigration(to no socket) = %+v, %v, want failed with error-desc", info, err)
	}
	t.Logf("failed migration: %v", err)

	if err := m.Quit(ctx); err != nil {
		t.Errorf("Quit() = %v", err)
	}
	select {
	case <-m.Done():
	case <-ctx.Done():
		t.Fatal("QEMU did not hang up after quit")
	}
	if !errors.Is(m.Err(), ErrClosed) {
		t.Errorf("Err() after quit = %v, want ErrClosed", m.Err())
	}
	if ev, err := m.WaitEvent(ctx, "SHUTDOWN", nil); err != nil {
		t.Errorf("WaitEvent(SHUTDOWN) after quit = %v", err)
	} else {
		t.Logf("SHUTDOWN %s", ev.Data)
	}
}

func jsonEqual(b []byte, want string) bool {
	var x, y any
	return json.Unmarshal(b, &x) == nil && json.Unmarshal([]byte(want), &y) == nil &&
		bytes.Equal(mustMarshal(x), mustMarshal(y))
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// waitStatus polls query-status until it reports want.
func waitStatus(t *testing.T, ctx context.Context, m *Monitor, want RunState) {
	t.Helper()
	for {
		st, err := m.QueryStatus(ctx)
		if err != nil {
			t.Fatalf("QueryStatus() waiting for %s = %v", want, err)
		}
		if st.Status == want {
			return
		}
		if _, err := m.WaitEvent(ctx, "RESUME", nil); err != nil {
			t.Fatalf("waiting for status %s (now %s): %v", want, st.Status, err)
		}
	}
}

// migrationEvents takes MIGRATION events until one with status last.
func migrationEvents(ctx context.Context, m *Monitor, last MigrationStatus) ([]MigrationStatus, error) {
	var seen []MigrationStatus
	for {
		ev, err := m.WaitEvent(ctx, "MIGRATION", nil)
		if err != nil {
			return seen, err
		}
		var d struct {
			Status MigrationStatus `json:"status"`
		}
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return seen, err
		}
		seen = append(seen, d.Status)
		if d.Status == last {
			return seen, nil
		}
	}
}

func TestQEMUMigration(t *testing.T) {
	qemu := requireQEMU(t)
	ctx := testContext(t)
	dir := t.TempDir()
	src := startQEMU(t, ctx, qemu, dir, "src")
	dst := startQEMU(t, ctx, qemu, dir, "dst", "-incoming", "defer")

	if st, err := dst.QueryStatus(ctx); err != nil || st.Status != RunStateInMigrate {
		t.Errorf("destination QueryStatus() before migrating = %+v, %v, want %s", st, err, RunStateInMigrate)
	}
	for _, m := range []*Monitor{src, dst} {
		if err := m.MigrateSetCapabilities(ctx, map[string]bool{"events": true}); err != nil {
			t.Fatalf("MigrateSetCapabilities(events) = %v", err)
		}
	}
	if err := src.MigrateSetParameters(ctx, map[string]any{"downtime-limit": 300}); err != nil {
		t.Fatalf("MigrateSetParameters() = %v", err)
	}
	// Run the source (SeaBIOS, no boot device), as a live VM would be.
	if err := src.Cont(ctx); err != nil {
		t.Fatalf("Cont() = %v", err)
	}
	waitStatus(t, ctx, src, RunStateRunning)

	uri := "unix:" + filepath.Join(dir, "mig.sock")
	if err := dst.MigrateIncoming(ctx, uri); err != nil {
		t.Fatalf("MigrateIncoming(%s) = %v", uri, err)
	}
	if info, err := dst.QueryMigrate(ctx); err != nil {
		t.Errorf("destination QueryMigrate() before the source connects = %v", err)
	} else {
		t.Logf("destination before the source connects: %+v", info)
	}
	if err := src.Migrate(ctx, uri); err != nil {
		t.Fatalf("Migrate(%s) = %v", uri, err)
	}

	// The destination waits with WaitMigration (through status "" until
	// the source connects); the source's MIGRATION events are collected
	// meanwhile, then its WaitMigration returns at once.
	type result struct {
		info MigrationInfo
		err  error
	}
	dstDone := make(chan result, 1)
	go func() {
		info, err := dst.WaitMigration(ctx, 0)
		dstDone <- result{info, err}
	}()
	seen, err := migrationEvents(ctx, src, MigrationCompleted)
	if err != nil {
		t.Fatalf("source MIGRATION events: %v (saw %v)", err, seen)
	}
	t.Logf("source MIGRATION events: %v", seen)
	if seen[0] != MigrationSetup {
		t.Errorf("source MIGRATION events %v, want setup first", seen)
	}
	info, err := src.WaitMigration(ctx, 0)
	if err != nil {
		t.Fatalf("source WaitMigration() = %+v, %v", info, err)
	}
	t.Logf("source: %+v", info)
	if info.Status != MigrationCompleted || info.TotalTimeMS <= 0 || info.TotalTimeMS < info.DowntimeMS ||
		info.RAM.Total < 64<<20 || info.RAM.Transferred <= 0 || info.RAM.Remaining != 0 {
		t.Errorf("source QueryMigrate() after completion = %+v", info)
	}
	r := <-dstDone
	if r.err != nil || r.info.Status != MigrationCompleted {
		t.Errorf("destination WaitMigration() = %+v, %v", r.info, r.err)
	}
	t.Logf("destination: %+v", r.info)

	st, err := src.QueryStatus(ctx)
	if want := (StatusInfo{Running: false, Status: RunStatePostMigrate}); err != nil || st != want {
		t.Errorf("source QueryStatus() after migrating = %+v, %v, want %+v", st, err, want)
	}
	// Started with -S, the destination waits for cont, as libvirt's do.
	st, err = dst.QueryStatus(ctx)
	if want := (StatusInfo{Running: false, Status: RunStatePaused}); err != nil || st != want {
		t.Errorf("destination QueryStatus() after migrating = %+v, %v, want %+v", st, err, want)
	}
	if err := dst.Cont(ctx); err != nil {
		t.Fatalf("destination Cont() = %v", err)
	}
	waitStatus(t, ctx, dst, RunStateRunning)

	var events []string
	for _, m := range []*Monitor{src, dst} {
		var names []string
		for _, name := range []string{"STOP", "RESUME", "MIGRATION", "MIGRATION_PASS"} {
			for {
				short, cancel := context.WithTimeout(ctx, time.Millisecond)
				ev, err := m.WaitEvent(short, name, nil)
				cancel()
				if err != nil {
					break
				}
				names = append(names, ev.Name+string(ev.Data))
			}
		}
		events = append(events, fmtList(names))
	}
	t.Logf("events left: source %s; destination %s", events[0], events[1])
}

func fmtList(s []string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

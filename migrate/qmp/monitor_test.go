package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/migrate/qmp/qmptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testContext is a context that ends with the test, and after 10s at most
// so that a bug shows up as a failure, not a hung test binary.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newPair starts a fake server and dials it.
func newPair(t *testing.T) (*qmptest.Server, *Monitor) {
	t.Helper()
	s := qmptest.NewServer(t)
	m, err := Dial(testContext(t), s.Path())
	if err != nil {
		t.Fatalf("Dial(%q) = %v", s.Path(), err)
	}
	t.Cleanup(func() { m.Close() })
	return s, m
}

// normJSON decodes b for comparison; nil stays nil.
func normJSON(t *testing.T, b []byte) any {
	t.Helper()
	if b == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return v
}

func lastCommand(t *testing.T, s *qmptest.Server) qmptest.Command {
	t.Helper()
	cmds := s.Commands()
	if len(cmds) == 0 {
		t.Fatal("server received no command")
	}
	return cmds[len(cmds)-1]
}

func TestDialHandshake(t *testing.T) {
	s, m := newPair(t)
	g := m.Greeting()
	if g.Version.QEMU.Major != 7 || g.Version.QEMU.Minor != 2 || g.Version.Package != "qmptest" {
		t.Errorf("Greeting().Version = %+v, want 7.2 qmptest", g.Version)
	}
	if diff := cmp.Diff([]string{"oob"}, g.Capabilities); diff != "" {
		t.Errorf("Greeting().Capabilities (-want +got):\n%s", diff)
	}
	want := []qmptest.Command{{Name: "qmp_capabilities"}}
	if diff := cmp.Diff(want, s.Commands()); diff != "" {
		t.Errorf("commands after Dial (-want +got):\n%s", diff)
	}
}

func TestTypedCalls(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()

	s.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
		return json.RawMessage(`{"status": "inmigrate", "singlestep": false, "running": false}`), nil
	})
	s.Handle("query-migrate-parameters", func(json.RawMessage, []*os.File) (any, error) {
		return json.RawMessage(`{"downtime-limit": 300, "max-bandwidth": 134217728, "multifd-channels": 2}`), nil
	})
	s.Handle("query-migrate-capabilities", func(json.RawMessage, []*os.File) (any, error) {
		return json.RawMessage(`[{"capability": "events", "state": false}, {"capability": "pause-before-switchover", "state": true}]`), nil
	})
	s.Handle("query-migrate", func(json.RawMessage, []*os.File) (any, error) {
		return json.RawMessage(`{"status": "completed", "total-time": 120, "downtime": 7, "setup-time": 2,
			"expected-downtime": 300, "error-desc": "",
			"ram": {"transferred": 1000, "total": 67108864, "remaining": 0, "dirty-pages-rate": 5,
				"mbps": 12.5, "dirty-sync-count": 3, "duplicate": 16000}}`), nil
	})
	for _, name := range []string{"stop", "cont", "quit", "getfd", "closefd", "device_add", "device_del",
		"migrate", "migrate-incoming", "migrate_cancel", "migrate-set-capabilities", "migrate-set-parameters", "migrate-continue"} {
		s.Handle(name, func(json.RawMessage, []*os.File) (any, error) { return nil, nil })
	}

	tests := []struct {
		name      string
		call      func() error
		wantName  string
		wantArgs  string // "" for no arguments member
		wantFiles int
	}{
		{
			name: "QueryStatus",
			call: func() error {
				st, err := m.QueryStatus(ctx)
				if want := (StatusInfo{Running: false, Status: RunStateInMigrate}); err == nil && st != want {
					return fmt.Errorf("QueryStatus() = %+v, want %+v", st, want)
				}
				return err
			},
			wantName: "query-status",
		},
		{name: "Stop", call: func() error { return m.Stop(ctx) }, wantName: "stop"},
		{name: "Cont", call: func() error { return m.Cont(ctx) }, wantName: "cont"},
		{name: "Quit", call: func() error { return m.Quit(ctx) }, wantName: "quit"},
		{
			name:      "GetFD",
			call:      func() error { return m.GetFD(ctx, "mig0", pw) },
			wantName:  "getfd",
			wantArgs:  `{"fdname": "mig0"}`,
			wantFiles: 1,
		},
		{
			name:     "CloseFD",
			call:     func() error { return m.CloseFD(ctx, "mig0") },
			wantName: "closefd",
			wantArgs: `{"fdname": "mig0"}`,
		},
		{
			name: "DeviceAdd",
			call: func() error {
				return m.DeviceAdd(ctx, "x-pci-proxy-dev", "vgpu0",
					map[string]any{"bus": "pci.0", "addr": "0x5", "fd": "vgpu0sock", "multifunction": false})
			},
			wantName: "device_add",
			wantArgs: `{"driver": "x-pci-proxy-dev", "id": "vgpu0", "bus": "pci.0", "addr": "0x5",
				"fd": "vgpu0sock", "multifunction": false}`,
		},
		{
			name:     "DeviceAdd no id no props",
			call:     func() error { return m.DeviceAdd(ctx, "pci-bridge", "", nil) },
			wantName: "device_add",
			wantArgs: `{"driver": "pci-bridge"}`,
		},
		{
			name:     "DeviceDel",
			call:     func() error { return m.DeviceDel(ctx, "vgpu0") },
			wantName: "device_del",
			wantArgs: `{"id": "vgpu0"}`,
		},
		{
			name:     "Migrate",
			call:     func() error { return m.Migrate(ctx, "unix:/run/vgpud/mig.sock") },
			wantName: "migrate",
			wantArgs: `{"uri": "unix:/run/vgpud/mig.sock"}`,
		},
		{
			name:     "MigrateIncoming",
			call:     func() error { return m.MigrateIncoming(ctx, "fd:mig0") },
			wantName: "migrate-incoming",
			wantArgs: `{"uri": "fd:mig0"}`,
		},
		{name: "MigrateCancel", call: func() error { return m.MigrateCancel(ctx) }, wantName: "migrate_cancel"},
		{
			name:     "MigrateContinue",
			call:     func() error { return m.MigrateContinue(ctx, MigrationPreSwitchover) },
			wantName: "migrate-continue", wantArgs: `{"state":"pre-switchover"}`,
		},
		{
			name: "QueryMigrateParameters",
			call: func() error {
				p, err := m.QueryMigrateParameters(ctx)
				if want := (MigrationParameters{DowntimeLimitMS: 300, MaxBandwidth: 128 << 20}); err == nil && p != want {
					return fmt.Errorf("QueryMigrateParameters() = %+v, want %+v", p, want)
				}
				return err
			},
			wantName: "query-migrate-parameters",
		},
		{
			name: "QueryMigrateCapabilities",
			call: func() error {
				c, err := m.QueryMigrateCapabilities(ctx)
				if err == nil && (len(c) != 2 || c["events"] || !c["pause-before-switchover"]) {
					return fmt.Errorf("QueryMigrateCapabilities() = %v", c)
				}
				return err
			},
			wantName: "query-migrate-capabilities",
		},
		{
			name: "QueryMigrate",
			call: func() error {
				info, err := m.QueryMigrate(ctx)
				want := MigrationInfo{
					Status: MigrationCompleted, TotalTimeMS: 120, DowntimeMS: 7, SetupTimeMS: 2, ExpectedDowntimeMS: 300,
					RAM: MigrationRAM{Transferred: 1000, Total: 64 << 20, DirtyPagesRate: 5, Mbps: 12.5, DirtySyncCount: 3},
				}
				if diff := cmp.Diff(want, info); err == nil && diff != "" {
					return fmt.Errorf("QueryMigrate() (-want +got):\n%s", diff)
				}
				return err
			},
			wantName: "query-migrate",
		},
		{
			name: "MigrateSetCapabilities",
			call: func() error {
				return m.MigrateSetCapabilities(ctx, map[string]bool{"xbzrle": false, "events": true, "auto-converge": true})
			},
			wantName: "migrate-set-capabilities",
			wantArgs: `{"capabilities": [{"capability": "auto-converge", "state": true},
				{"capability": "events", "state": true}, {"capability": "xbzrle", "state": false}]}`,
		},
		{
			name: "MigrateSetParameters",
			call: func() error {
				return m.MigrateSetParameters(ctx, map[string]any{"downtime-limit": 300, "max-bandwidth": int64(1) << 30})
			},
			wantName: "migrate-set-parameters",
			wantArgs: `{"downtime-limit": 300, "max-bandwidth": 1073741824}`,
		},
		{
			name:     "MigrateSetParameters nil",
			call:     func() error { return m.MigrateSetParameters(ctx, nil) },
			wantName: "migrate-set-parameters",
			wantArgs: `{}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			got := lastCommand(t, s)
			if got.Name != tt.wantName || got.Files != tt.wantFiles {
				t.Errorf("sent %q with %d files, want %q with %d", got.Name, got.Files, tt.wantName, tt.wantFiles)
			}
			var want []byte
			if tt.wantArgs != "" {
				want = []byte(tt.wantArgs)
			}
			if diff := cmp.Diff(normJSON(t, want), normJSON(t, got.Args)); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
		})
	}
}

func TestErrorsMapped(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	s.Handle("device_del", func(args json.RawMessage, _ []*os.File) (any, error) {
		return nil, &qmptest.Error{Class: "DeviceNotFound", Desc: "Device 'nope' not found"}
	})
	s.Handle("migrate", func(json.RawMessage, []*os.File) (any, error) {
		return nil, errors.New("There's a migration process in progress")
	})

	tests := []struct {
		name     string
		call     func() error
		want     Error
		sentinel error
	}{
		{
			name:     "no such command",
			call:     func() error { return m.Execute(ctx, "x-nope", nil, nil) },
			want:     Error{Class: ClassCommandNotFound, Desc: "The command x-nope has not been found"},
			sentinel: ErrCommandNotFound,
		},
		{
			name:     "device not found",
			call:     func() error { return m.DeviceDel(ctx, "nope") },
			want:     Error{Class: ClassDeviceNotFound, Desc: "Device 'nope' not found"},
			sentinel: ErrDeviceNotFound,
		},
		{
			name: "generic",
			call: func() error { return m.Migrate(ctx, "unix:/x") },
			want: Error{Class: ClassGenericError, Desc: "There's a migration process in progress"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var qe *Error
			if !errors.As(err, &qe) {
				t.Fatalf("error %v is not a *Error", err)
			}
			if *qe != tt.want {
				t.Errorf("*Error = %+v, want %+v", *qe, tt.want)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.sentinel)
			}
			if errors.Is(err, ErrClosed) {
				t.Errorf("errors.Is(%v, ErrClosed) = true", err)
			}
		})
	}
	// The monitor is still usable after error replies.
	if _, err := m.QueryStatus(ctx); !errors.Is(err, ErrCommandNotFound) {
		t.Errorf("QueryStatus() without handler = %v, want ErrCommandNotFound", err)
	}

	before := len(s.Commands())
	if err := m.DeviceAdd(ctx, "virtio-net-pci", "net0", map[string]any{"id": "x"}); err == nil {
		t.Error(`DeviceAdd(props with "id") = nil, want error`)
	}
	if err := m.Execute(ctx, "stop", func() {}, nil); err == nil {
		t.Error("Execute(args that do not marshal) = nil, want error")
	}
	if n := len(s.Commands()); n != before {
		t.Errorf("refused calls sent %d commands", n-before)
	}
}

func TestContextCancelled(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	started := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	s.Handle("slow", func(json.RawMessage, []*os.File) (any, error) {
		close(started)
		<-release
		return map[string]string{"late": "reply"}, nil
	})
	s.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
		return map[string]any{"running": true, "status": "running"}, nil
	})

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- m.Execute(cctx, "slow", nil, nil) }()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute(slow) after cancel = %v, want context.Canceled", err)
	}
	// The late reply comes now; it must be discarded, not given to the
	// next command.
	close(release)
	st, err := m.QueryStatus(ctx)
	if err != nil || st.Status != RunStateRunning {
		t.Fatalf("QueryStatus() after a discarded reply = %+v, %v, want running", st, err)
	}

	// A context already done sends nothing.
	before := len(s.Commands())
	if err := m.Stop(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop(cancelled ctx) = %v, want context.Canceled", err)
	}
	if n := len(s.Commands()); n != before {
		t.Errorf("Stop(cancelled ctx) sent %d commands", n-before)
	}

	// A deadline while waiting.
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer dcancel()
	if _, err := m.WaitEvent(dctx, "NEVER", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitEvent(NEVER) = %v, want context.DeadlineExceeded", err)
	}
}

func TestReplyMatching(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	s.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
		// Events, a reply to nobody and an unknown id come before the
		// reply.
		s.Emit("STOP", nil)
		s.SendRaw([]byte(`{"return": {"status": "bogus", "running": true}, "id": 999999}`))
		s.Emit("RESUME", nil)
		return map[string]any{"running": false, "status": "paused"}, nil
	})
	st, err := m.QueryStatus(ctx)
	if want := (StatusInfo{Status: RunStatePaused}); err != nil || st != want {
		t.Fatalf("QueryStatus() = %+v, %v, want %+v", st, err, want)
	}
	for _, name := range []string{"STOP", "RESUME"} {
		ev, err := m.WaitEvent(ctx, name, nil)
		if err != nil || ev.Name != name || ev.Timestamp.IsZero() || ev.Data != nil {
			t.Errorf("WaitEvent(%s) = %+v, %v", name, ev, err)
		}
	}

	// Many goroutines at once: each gets its own reply.
	s.Handle("echo", func(args json.RawMessage, _ []*os.File) (any, error) {
		return args, nil
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				in := map[string]int{"g": g, "i": i}
				var out map[string]int
				if err := m.Execute(ctx, "echo", in, &out); err != nil {
					t.Errorf("Execute(echo %v) = %v", in, err)
					return
				}
				if diff := cmp.Diff(in, out); diff != "" {
					t.Errorf("Execute(echo %v) (-want +got):\n%s", in, diff)
					return
				}
			}
		})
	}
	wg.Wait()
}

func tickN(t *testing.T, ev Event) int {
	t.Helper()
	var d struct{ N int }
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatalf("event data %s: %v", ev.Data, err)
	}
	return d.N
}

func TestEventsBuffered(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	s.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
		return map[string]any{"running": true, "status": "running"}, nil
	})
	const n = eventBufferLen + 44
	for i := range n {
		s.Emit("TICK", map[string]int{"n": i})
	}
	// The events came before this reply, and nobody waited for them: the
	// command must not block on them.
	if _, err := m.QueryStatus(ctx); err != nil {
		t.Fatalf("QueryStatus() behind %d unread events = %v", n, err)
	}
	if got := m.DroppedEvents(); got != n-eventBufferLen {
		t.Errorf("DroppedEvents() = %d, want %d", got, n-eventBufferLen)
	}
	// The oldest kept comes first; a matcher picks from the middle; each
	// is taken once.
	ev, err := m.WaitEvent(ctx, "TICK", nil)
	if err != nil || tickN(t, ev) != n-eventBufferLen {
		t.Errorf("WaitEvent(TICK) = %s, %v, want n=%d", ev.Data, err, n-eventBufferLen)
	}
	last := func(ev Event) bool { return tickN(t, ev) == n-1 }
	if ev, err := m.WaitEvent(ctx, "TICK", last); err != nil || tickN(t, ev) != n-1 {
		t.Errorf("WaitEvent(TICK, n=%d) = %s, %v", n-1, ev.Data, err)
	}
	if ev, err := m.WaitEvent(ctx, "TICK", nil); err != nil || tickN(t, ev) != n-eventBufferLen+1 {
		t.Errorf("WaitEvent(TICK) = %s, %v, want n=%d", ev.Data, err, n-eventBufferLen+1)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if ev, err := m.WaitEvent(short, "TICK", last); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitEvent(TICK, n=%d) a second time = %s, %v, want deadline exceeded", n-1, ev.Data, err)
	}

	// A future event wakes a waiter.
	got := make(chan Event, 1)
	go func() {
		ev, err := m.WaitEvent(ctx, "LATER", nil)
		if err != nil {
			t.Errorf("WaitEvent(LATER) = %v", err)
		}
		got <- ev
	}()
	s.Emit("LATER", map[string]string{"x": "y"})
	if ev := <-got; string(ev.Data) != `{"x":"y"}` {
		t.Errorf("WaitEvent(LATER).Data = %s", ev.Data)
	}
}

func TestWaitDeviceDeleted(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	s.Handle("device_del", func(args json.RawMessage, _ []*os.File) (any, error) {
		var a struct{ ID string }
		json.Unmarshal(args, &a)
		s.Emit("DEVICE_DELETED", map[string]string{"path": "/machine/peripheral/" + a.ID + "/virtio-backend"})
		s.Emit("DEVICE_DELETED", map[string]string{"device": "other", "path": "/machine/peripheral/other"})
		s.Emit("DEVICE_DELETED", map[string]string{"device": a.ID, "path": "/machine/peripheral/" + a.ID})
		return nil, nil
	})
	if err := m.DeviceDel(ctx, "net0"); err != nil {
		t.Fatalf("DeviceDel(net0) = %v", err)
	}
	if err := m.WaitDeviceDeleted(ctx, "net0"); err != nil {
		t.Fatalf("WaitDeviceDeleted(net0) = %v", err)
	}
	// The others stay buffered.
	ev, err := m.WaitEvent(ctx, "DEVICE_DELETED", nil)
	if err != nil || !strings.Contains(string(ev.Data), "virtio-backend") {
		t.Errorf("WaitEvent(DEVICE_DELETED) = %s, %v, want the backend's", ev.Data, err)
	}
	if err := m.WaitDeviceDeleted(ctx, "other"); err != nil {
		t.Errorf("WaitDeviceDeleted(other) = %v", err)
	}
}

func TestFilePassing(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	s.Handle("getfd", func(_ json.RawMessage, files []*os.File) (any, error) {
		if len(files) != 1 {
			return nil, fmt.Errorf("got %d files", len(files))
		}
		_, err := files[0].WriteString("through qemu's copy")
		return nil, err
	})
	s.Handle("add-fd", func(_ json.RawMessage, files []*os.File) (any, error) {
		for i, f := range files {
			if _, err := fmt.Fprintf(f, "file %d", i); err != nil {
				return nil, err
			}
		}
		return map[string]int{"fdset-id": 0, "fd": 42}, nil
	})

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := m.GetFD(ctx, "p", pw); err != nil {
		t.Fatalf("GetFD(p) = %v", err)
	}
	// The caller's file is still its own: close it, and the server's copy
	// is gone too (closed after the handler), so the pipe reads EOF.
	pw.Close()
	b, err := io.ReadAll(pr)
	if err != nil || string(b) != "through qemu's copy" {
		t.Errorf("pipe read %q, %v", b, err)
	}
	if got := lastCommand(t, s); got.Files != 1 {
		t.Errorf("getfd arrived with %d files, want 1", got.Files)
	}

	// Two files in one command.
	dir := t.TempDir()
	var files []*os.File
	for i := range 2 {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	var res struct {
		FD int `json:"fd"`
	}
	if err := m.ExecuteFiles(ctx, "add-fd", map[string]int{"fdset-id": 0}, files, &res); err != nil || res.FD != 42 {
		t.Fatalf("ExecuteFiles(add-fd) = %+v, %v", res, err)
	}
	for i := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(i)))
		if want := fmt.Sprintf("file %d", i); err != nil || string(b) != want {
			t.Errorf("file %d holds %q, %v, want %q", i, b, err, want)
		}
	}
	if err := m.GetFD(ctx, "nil", nil); err == nil {
		t.Error("GetFD(nil file) = nil, want error")
	}
}

func TestHangup(t *testing.T) {
	t.Run("mid command", func(t *testing.T) {
		s, m := newPair(t)
		ctx := testContext(t)
		s.Handle("quit", func(json.RawMessage, []*os.File) (any, error) {
			s.Hangup() // before any reply
			return nil, nil
		})
		s.Emit("SHUTDOWN", map[string]any{"guest": false})
		err := m.Quit(ctx)
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Quit() with QEMU hanging up = %v, want ErrClosed", err)
		}
		<-m.Done()
		if err := m.Cont(ctx); !errors.Is(err, ErrClosed) {
			t.Errorf("Cont() after hangup = %v, want ErrClosed", err)
		}
		// Buffered events survive; then waits fail.
		if _, err := m.WaitEvent(ctx, "SHUTDOWN", nil); err != nil {
			t.Errorf("WaitEvent(SHUTDOWN) after hangup = %v", err)
		}
		if _, err := m.WaitEvent(ctx, "SHUTDOWN", nil); !errors.Is(err, ErrClosed) {
			t.Errorf("WaitEvent(SHUTDOWN) again after hangup = %v, want ErrClosed", err)
		}
		if err := m.Err(); !errors.Is(err, ErrClosed) || !errors.Is(err, io.EOF) {
			t.Errorf("Err() = %v, want ErrClosed and io.EOF", err)
		}
	})
	t.Run("pending calls", func(t *testing.T) {
		s, m := newPair(t)
		ctx := testContext(t)
		started := make(chan struct{})
		release := make(chan struct{})
		s.Handle("slow", func(json.RawMessage, []*os.File) (any, error) {
			close(started)
			<-release
			return nil, nil
		})
		errc := make(chan error, 2)
		go func() { errc <- m.Execute(ctx, "slow", nil, nil) }()
		<-started
		go func() { errc <- m.Stop(ctx) }() // queued behind slow
		waitc := make(chan error, 1)
		go func() { _, err := m.WaitEvent(ctx, "NEVER", nil); waitc <- err }()
		s.Hangup()
		for range 2 {
			if err := <-errc; !errors.Is(err, ErrClosed) {
				t.Errorf("pending call after hangup = %v, want ErrClosed", err)
			}
		}
		if err := <-waitc; !errors.Is(err, ErrClosed) {
			t.Errorf("pending WaitEvent after hangup = %v, want ErrClosed", err)
		}
		close(release)
	})
	t.Run("Close", func(t *testing.T) {
		s, m := newPair(t)
		ctx := testContext(t)
		started := make(chan struct{})
		release := make(chan struct{})
		defer close(release)
		s.Handle("slow", func(json.RawMessage, []*os.File) (any, error) {
			close(started)
			<-release
			return nil, nil
		})
		errc := make(chan error, 1)
		go func() { errc <- m.Execute(ctx, "slow", nil, nil) }()
		<-started
		if err := m.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if err := m.Close(); err != nil {
			t.Errorf("second Close() = %v", err)
		}
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Errorf("call pending at Close = %v, want ErrClosed", err)
		}
		if _, err := m.Raw(ctx, []byte(`{"execute": "stop"}`)); !errors.Is(err, ErrClosed) {
			t.Errorf("Raw after Close = %v, want ErrClosed", err)
		}
	})
}

func TestProtocolErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want string // in the error text
	}{
		{"malformed JSON", []byte(`{"return": oops}`), "malformed message"},
		{"not an object", []byte(`[1, 2]`), "malformed message"},
		{"reply without id", []byte(`{"return": {}}`), "reply without an id"},
		{"foreign id", []byte(`{"return": {}, "id": "abc"}`), "not one of ours"},
		{"neither reply nor event", []byte(`{"hello": 1}`), "neither reply nor event"},
		{"too long", []byte(`{"event": "BIG", "data": "` + strings.Repeat("a", MaxMessageSize) + `"}`), "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, m := newPair(t)
			ctx := testContext(t)
			s.Handle("slow", func(json.RawMessage, []*os.File) (any, error) {
				s.SendRaw(tt.raw)
				return nil, nil
			})
			err := m.Execute(ctx, "slow", nil, nil)
			if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Execute() = %v, want ErrProtocol, ErrClosed and %q", err, tt.want)
			}
			<-m.Done()
			if err := m.Stop(ctx); !errors.Is(err, ErrProtocol) {
				t.Errorf("Stop() after protocol error = %v, want ErrProtocol", err)
			}
		})
	}
}

func TestRaw(t *testing.T) {
	s, m := newPair(t)
	ctx := testContext(t)
	s.Handle("query-name", func(args json.RawMessage, _ []*os.File) (any, error) {
		return map[string]any{"name": "vm0", "args": args}, nil
	})
	got, err := m.Raw(ctx, []byte(`{"execute": "query-name", "arguments": {"a": 1}, "id": "mine"}`))
	if err != nil {
		t.Fatalf("Raw(query-name) = %v", err)
	}
	if diff := cmp.Diff(normJSON(t, []byte(`{"name": "vm0", "args": {"a": 1}}`)), normJSON(t, got)); diff != "" {
		t.Errorf("Raw(query-name) (-want +got):\n%s", diff)
	}
	if _, err := m.Raw(ctx, []byte(`{"execute": "x-nope"}`)); !errors.Is(err, ErrCommandNotFound) {
		t.Errorf("Raw(x-nope) = %v, want ErrCommandNotFound", err)
	}
	before := len(s.Commands())
	for _, bad := range []string{
		`not json`,
		`{"arguments": {}}`,
		`{"execute": 3}`,
		`{"execute": "stop", "exec-oob": "stop"}`,
		`{"execute": "stop", "arguments": [1]}`,
	} {
		if _, err := m.Raw(ctx, []byte(bad)); err == nil || errors.Is(err, ErrClosed) {
			t.Errorf("Raw(%s) = %v, want a local error", bad, err)
		}
	}
	if n := len(s.Commands()); n != before {
		t.Errorf("refused Raw commands sent %d commands", n-before)
	}
}

func TestWaitMigration(t *testing.T) {
	tests := []struct {
		name      string
		statuses  []string // query-migrate answers in turn; the last repeats
		runStates []string // query-status answers in turn; the last repeats
		wantErr   []error
		wantDesc  string
	}{
		{name: "completed", statuses: []string{`{}`, `{"status": "setup"}`, `{"status": "active"}`,
			`{"status": "completed", "total-time": 9}`}},
		{
			// QEMU 7.2: completed before the source leaves finish-migrate
			// and before total-time is filled in.
			name: "completed before postmigrate",
			statuses: []string{`{"status": "active"}`, `{"status": "completed", "total-time": 0}`,
				`{"status": "completed", "total-time": 9, "downtime": 2}`},
			runStates: []string{"finish-migrate", "finish-migrate", "postmigrate"},
		},
		{name: "failed", statuses: []string{`{"status": "setup"}`, `{"status": "failed", "error-desc": "Unable to write to socket: Broken pipe"}`},
			wantErr: []error{ErrMigrationFailed}, wantDesc: "Unable to write to socket: Broken pipe"},
		{name: "cancelled", statuses: []string{`{"status": "cancelling"}`, `{"status": "cancelled"}`},
			wantErr: []error{ErrMigrationFailed, ErrMigrationCancelled}},
		{name: "deadline", statuses: []string{`{"status": "active"}`}, wantErr: []error{context.DeadlineExceeded}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, m := newPair(t)
			ctx := testContext(t)
			interval := time.Hour // only MIGRATION events make it query again
			var deadline *expiringContext
			if tt.name == "deadline" {
				// The deadline passes when the second query arrives: the
				// first answer is in by then, whatever the machine's load.
				interval = 5 * time.Millisecond
				deadline = newExpiringContext(ctx)
				ctx = deadline
			}
			var mu sync.Mutex
			queries := 0
			s.Handle("query-migrate", func(json.RawMessage, []*os.File) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				i := min(queries, len(tt.statuses)-1)
				queries++
				if deadline != nil && queries == 2 {
					deadline.expire()
				}
				if i < len(tt.statuses)-1 {
					var st struct{ Status string }
					json.Unmarshal([]byte(tt.statuses[i+1]), &st)
					s.Emit("MIGRATION", map[string]string{"status": st.Status})
				}
				return json.RawMessage(tt.statuses[i]), nil
			})
			runStates := tt.runStates
			if runStates == nil {
				runStates = []string{"postmigrate"}
			}
			statusQueries := 0
			s.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				st := runStates[min(statusQueries, len(runStates)-1)]
				statusQueries++
				return map[string]any{"running": false, "status": st}, nil
			})
			info, err := m.WaitMigration(ctx, interval)
			mu.Lock()
			if tt.runStates != nil && statusQueries != len(tt.runStates) {
				t.Errorf("WaitMigration() ran query-status %d times, want %d", statusQueries, len(tt.runStates))
			}
			mu.Unlock()
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("WaitMigration() = %v, want %v", err, want)
				}
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Errorf("WaitMigration() = %v", err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantDesc) {
				t.Errorf("WaitMigration() = %v, want %q in it", err, tt.wantDesc)
			}
			var last MigrationInfo
			json.Unmarshal([]byte(tt.statuses[len(tt.statuses)-1]), &last)
			if diff := cmp.Diff(last, info); diff != "" {
				t.Errorf("WaitMigration() info (-want +got):\n%s", diff)
			}
		})
	}
}

// expiringContext is a context whose deadline passes when the test says,
// not after a wall-clock time a loaded machine may overrun.
type expiringContext struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiringContext(parent context.Context) *expiringContext {
	return &expiringContext{Context: parent, done: make(chan struct{})}
}

func (c *expiringContext) expire() { c.once.Do(func() { close(c.done) }) }

func (c *expiringContext) Done() <-chan struct{} { return c.done }

func (c *expiringContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func TestDialErrors(t *testing.T) {
	ctx := testContext(t)
	if _, err := Dial(ctx, filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("Dial(no socket) = nil, want error")
	}

	// A server that greets wrongly, or never.
	tests := []struct {
		name     string
		greeting string
		want     error
	}{
		{"not a greeting", `{"return": {}}`, ErrProtocol},
		{"garbage", `QEMU 7.2.0 monitor - type 'help' for more information`, ErrProtocol},
		{"silent", "", context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.sock")
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				if tt.greeting != "" {
					io.WriteString(c, tt.greeting+"\r\n")
				}
				io.Copy(io.Discard, c) // until the client hangs up
			}()
			defer func() { ln.Close(); <-done }()
			dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			m, err := Dial(dctx, path)
			if !errors.Is(err, tt.want) {
				t.Errorf("Dial() = %v, want %v", err, tt.want)
			}
			if m != nil {
				m.Close()
			}
		})
	}
}

// TestWaitMigrationUntil: it returns the first answer the predicate
// holds for, and an error when the migration ends first: completed
// (ErrMigrationEnded), failed or cancelled (ErrMigrationFailed).
func TestWaitMigrationUntil(t *testing.T) {
	second := func(i MigrationInfo) bool { return i.RAM.DirtySyncCount >= 2 }
	tests := []struct {
		name     string
		statuses []string
		wantErr  error
		wantSync int64
	}{
		{name: "reached", statuses: []string{`{"status": "setup"}`, `{"status": "active", "ram": {"dirty-sync-count": 1}}`,
			`{"status": "active", "ram": {"dirty-sync-count": 2}}`, `{"status": "active", "ram": {"dirty-sync-count": 3}}`}, wantSync: 2},
		{name: "completed first", statuses: []string{`{"status": "active", "ram": {"dirty-sync-count": 1}}`, `{"status": "completed"}`},
			wantErr: ErrMigrationEnded},
		{name: "failed first", statuses: []string{`{"status": "failed", "error-desc": "x"}`}, wantErr: ErrMigrationFailed},
		{name: "cancelled first", statuses: []string{`{"status": "cancelled"}`}, wantErr: ErrMigrationCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, m := newPair(t)
			ctx := testContext(t)
			var mu sync.Mutex
			n := 0
			s.Handle("query-migrate", func(json.RawMessage, []*os.File) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				i := min(n, len(tt.statuses)-1)
				n++
				return json.RawMessage(tt.statuses[i]), nil
			})
			info, err := m.WaitMigrationUntil(ctx, time.Millisecond, second)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("WaitMigrationUntil() = %+v, %v; want %v", info, err, tt.wantErr)
				}
				return
			}
			if err != nil || info.RAM.DirtySyncCount != tt.wantSync {
				t.Errorf("WaitMigrationUntil() = %+v, %v; want sync count %d", info, err, tt.wantSync)
			}
		})
	}
}

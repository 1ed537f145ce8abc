package migrate_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/migrate/qmp"
	"github.com/vgpud/vgpud/migrate/qmp/qmptest"
)

// TestAbandonLive: a live migration a dead vgpud left under way (the
// pause-before-switchover capability on) is cancelled, the VM stopped
// before its switchover runs again, and QEMU gets its defaults back; a
// completed one (the destination holds the VM) and a QEMU without the
// capability (not this path's migration) are left alone.
func TestAbandonLive(t *testing.T) {
	tests := []struct {
		name      string
		pause     bool
		status    string // query-migrate's status before the cancel
		runState  string // query-status after it
		ended     bool
		stopped   bool // the migration holds the VM stopped: wait for the agent channel first
		wantCmds  []string
		forbidden []string
	}{
		{name: "stopped before its switchover", pause: true, status: "pre-switchover", runState: "finish-migrate", ended: true, stopped: true,
			wantCmds: []string{"migrate_cancel", "cont", "migrate-set-capabilities", "migrate-set-parameters"}},
		{name: "copying", pause: true, status: "active", runState: "running", ended: true,
			wantCmds: []string{"migrate_cancel", "migrate-set-capabilities", "migrate-set-parameters"}, forbidden: []string{"cont"}},
		{name: "completed", pause: true, status: "completed", runState: "postmigrate", ended: true,
			forbidden: []string{"migrate_cancel", "cont", "migrate-set-capabilities"}},
		{name: "not ours", pause: false, status: "active", runState: "running",
			forbidden: []string{"migrate_cancel", "cont", "migrate-set-capabilities"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := qmptest.NewServer(t)
			var mu sync.Mutex
			status := tt.status
			q.Handle("query-migrate-capabilities", func(json.RawMessage, []*os.File) (any, error) {
				return []map[string]any{{"capability": "events", "state": true}, {"capability": "pause-before-switchover", "state": tt.pause}}, nil
			})
			q.Handle("query-migrate", func(json.RawMessage, []*os.File) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				return map[string]any{"status": status}, nil
			})
			q.Handle("migrate_cancel", func(json.RawMessage, []*os.File) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				status = "cancelled"
				return map[string]any{}, nil
			})
			q.Handle("query-status", func(json.RawMessage, []*os.File) (any, error) {
				return map[string]any{"running": tt.runState == "running", "status": tt.runState}, nil
			})
			for _, c := range []string{"cont", "migrate-set-capabilities", "migrate-set-parameters"} {
				q.Handle(c, func(json.RawMessage, []*os.File) (any, error) { return map[string]any{}, nil })
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			mon, err := qmp.Dial(ctx, q.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer mon.Close()
			// What QEMU had been told when the VM's agent channel was
			// waited for: nothing that lets the VM run yet.
			var before []string
			waited := 0
			ended, err := migrate.AbandonLive(ctx, mon, func(context.Context) {
				waited++
				before = names(q.Commands())
			})
			if err != nil || ended != tt.ended {
				t.Fatalf("AbandonLive = %v, %v; want %v", ended, err, tt.ended)
			}
			want := 0
			if tt.stopped {
				want = 1
			}
			if waited != want {
				t.Errorf("waited for the agent channel %d times, want %d: once, only for a VM the migration holds stopped", waited, want)
			}
			for _, c := range []string{"migrate_cancel", "cont"} {
				if slices.Contains(before, c) {
					t.Errorf("QEMU was told %s before the wait for the agent channel (%v): the VM may have run first", c, before)
				}
			}
			cmds := names(q.Commands())
			for _, c := range tt.wantCmds {
				if !slices.Contains(cmds, c) {
					t.Errorf("QEMU was told %v, want %s among them", cmds, c)
				}
			}
			for _, c := range tt.forbidden {
				if slices.Contains(cmds, c) {
					t.Errorf("QEMU was told %v, want no %s", cmds, c)
				}
			}
			for _, c := range q.Commands() {
				if c.Name == "migrate-set-parameters" && string(c.Args) != `{"downtime-limit":300}` {
					t.Errorf("parameters %s, want QEMU's default downtime limit", c.Args)
				}
			}
		})
	}
}

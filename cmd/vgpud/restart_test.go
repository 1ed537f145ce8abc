package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/runstate"
)

// TestRestartKeepsInstances: instances created at run time, with the
// share, limits, reuse domain and device policy an operator set, come
// back with the same UUIDs when vgpud restarts on the same run directory.
func TestRestartKeepsInstances(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	ctx := context.Background()
	sock, _, stop := daemonOn(t, runDir)
	c := control.NewClient(sock)
	a, err := c.Create(ctx, mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, mdev.CreateRequest{Profile: "vgpu-medium", ReuseDomain: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetShare(ctx, a.UUID, 6); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPolicy(ctx, 0, "fixed-share"); err != nil {
		t.Fatal(err)
	}
	before, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop()

	sock, _, _ = daemonOn(t, runDir)
	c = control.NewClient(sock)
	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := st.Instances
	if len(after) != 2 || after[0].UUID != a.UUID || after[1].UUID != b.UUID {
		t.Fatalf("after restart: %+v, want %s and %s", after, a.UUID, b.UUID)
	}
	for i := range after {
		was := before.Instances[i]
		if after[i].Profile.Name != was.Profile.Name || after[i].Reuse.Domain != was.Reuse.Domain ||
			after[i].Sched.Share != was.Sched.Share || after[i].Limits != was.Limits || after[i].Device != was.Device {
			t.Errorf("instance %s: before %+v\nafter %+v", after[i].UUID, was, after[i])
		}
		if _, err := os.Stat(after[i].Socket); err != nil {
			t.Errorf("instance %s has no socket after restart: %v", after[i].UUID, err)
		}
	}
	if after[0].Sched.Share != 6 || after[1].Reuse.Domain != "tenant-a" {
		t.Errorf("after restart: share %d, domain %q; want 6, tenant-a", after[0].Sched.Share, after[1].Reuse.Domain)
	}
	if p, err := c.Policy(ctx, 0); err != nil || p != "fixed-share" {
		t.Errorf("policy after restart %q, %v", p, err)
	}
}

// TestSecondDaemonRefused: a vgpud started on a run directory another one
// holds refuses to start, naming the holder, and leaves it serving.
func TestSecondDaemonRefused(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	sock, _, _ := daemonOn(t, runDir)
	err := run(context.Background(), []string{"-run-dir", runDir, "-metrics-addr", "", "-log-level", "error"}, io.Discard, io.Discard)
	if !errors.Is(err, runstate.ErrLocked) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second vgpud on %s: %v, want ErrLocked naming the holder", runDir, err)
	}
	if _, err := control.NewClient(sock).Instances(context.Background()); err != nil {
		t.Errorf("the first daemon stopped serving: %v", err)
	}
}

// TestCorruptStateRefused: a state file that cannot be read stops the
// start with the file named, rather than starting empty and overwriting it.
func TestCorruptStateRefused(t *testing.T) {
	runDir := t.TempDir()
	path := filepath.Join(runDir, runstate.StateFile)
	if err := os.WriteFile(path, []byte(`{"format":"vgpud-state","version":99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"-run-dir", runDir, "-metrics-addr", ""}, io.Discard, io.Discard)
	if !errors.Is(err, runstate.ErrBadState) || !strings.Contains(err.Error(), path) {
		t.Fatalf("vgpud on a bad state file: %v", err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "99") {
		t.Errorf("the state file was overwritten: %s", b)
	}
}

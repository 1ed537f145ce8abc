package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/internal/eventlog"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/definitions"
)

// TestCommandLine: -h prints the flags on stdout and succeeds, -version
// the build; a bad flag or an argument is one line with a hint
// (errBadUsage: exit 2).
func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // on stdout; "" with an error
		err  string
	}{
		{[]string{"-h"}, "-metrics-addr string", ""},
		{[]string{"--help"}, "-run-dir string", ""},
		{[]string{"-version"}, "vgpud ", ""},
		{[]string{"-bogus"}, "", "vgpud -h lists the flags"},
		{[]string{"extra"}, "", `unexpected argument "extra"`},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), c.args, &out, &errOut)
		if c.err == "" {
			if err != nil || !strings.Contains(out.String(), c.want) || errOut.Len() != 0 {
				t.Errorf("%q = %v, stdout %q, stderr %q", c.args, err, out.String(), errOut.String())
			}
			continue
		}
		if !errors.Is(err, errBadUsage) || !strings.Contains(err.Error(), c.err) || errOut.Len() != 0 {
			t.Errorf("%q = %v (stderr %q), want errBadUsage saying %q", c.args, err, errOut.String(), c.err)
		}
	}
}

// TestDaemonReadyAndEvents: the daemon's /readyz answers 200 once it
// serves; its events name what an operator did; a follower of the events
// ends when the daemon stops.
func TestDaemonReadyAndEvents(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	sock, metricsURL, stop := daemonOn(t, runDir, "-metrics-addr", "127.0.0.1:0")
	base := strings.TrimSuffix(metricsURL, "/metrics")
	hc := &http.Client{Transport: &http.Transport{}}
	for _, p := range []string{"/readyz", "/healthz"} {
		resp, err := hc.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d, want 200 from a serving daemon", p, resp.StatusCode)
		}
	}
	hc.CloseIdleConnections()
	c := control.NewClient(sock)
	ctx := context.Background()
	in, err := c.Create(ctx, mdev.CreateRequest{Profile: "vgpu-small", Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan eventlog.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- c.Events(ctx, 0, true, func(e eventlog.Event) error {
			select {
			case seen <- e:
			default:
			}
			return nil
		})
	}()
	for e := range seen {
		if e.Kind == "instance.created" && e.Instance == in.UUID {
			break
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("follower when the daemon stopped = %v", err)
	}
}

// TestDefinitionsAtStart: a definition file, and one vgpuctl define
// wrote, give their instances (UUID, name, labels) at every start, even
// with no state; undefine leaves the instance.
func TestDefinitionsAtStart(t *testing.T) {
	defs := t.TempDir()
	if err := os.WriteFile(filepath.Join(defs, "a.json"),
		[]byte(`{"profile": "vgpu-small", "uuid": "aaaaaaaa-2222-3333-4444-555555555555", "labels": {"team": "x"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sock, _, stop := daemonOn(t, filepath.Join(t.TempDir(), "run"), "-definitions", defs)
	c := control.NewClient(sock)
	in, err := c.Instance(ctx, "a")
	if err != nil || in.UUID != "aaaaaaaa-2222-3333-4444-555555555555" || in.Labels["team"] != "x" {
		t.Fatalf("instance a from its definition = %+v, %v", in, err)
	}
	rep, err := c.Define(ctx, definitions.Definition{Name: "b", Profile: "vgpu-small"}, false)
	if err != nil || rep.Created != "" {
		t.Fatalf("Define b = %+v, %v", rep, err)
	}
	if _, err := c.Instance(ctx, "b"); !errors.Is(err, mdev.ErrNotFound) {
		t.Errorf("b without -create exists: %v", err)
	}
	stop()

	// A new run directory: no state, the definitions only.
	sock, _, stop = daemonOn(t, filepath.Join(t.TempDir(), "run"), "-definitions", defs)
	defer stop()
	c = control.NewClient(sock)
	for name, id := range map[string]string{"a": "aaaaaaaa-2222-3333-4444-555555555555", "b": rep.Definition.UUID} {
		if in, err := c.Instance(ctx, name); err != nil || in.UUID != id {
			t.Errorf("instance %s at the second start = %+v, %v; want uuid %s", name, in, err, id)
		}
	}
	if err := c.Undefine(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if list, err := c.Definitions(ctx); err != nil || len(list.Definitions) != 1 || list.Definitions[0].Name != "a" {
		t.Errorf("Definitions after undefine b = %+v, %v", list, err)
	}
	if _, err := c.Instance(ctx, "b"); err != nil {
		t.Errorf("instance b after undefine: %v, want it still there", err)
	}
}

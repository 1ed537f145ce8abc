package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/keeper"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole()                 // a worker or executor of this test binary's pool
	keeper.EnterRole(keeperFarewells) // a test's vgpud's connection keeper
	runMainIfAsked()                  // a test's vgpud (inherit_test.go)
	goleak.VerifyTestMain(m)
}

// daemonOn runs vgpud in-process on runDir (quiet, no metrics unless args
// say otherwise) until stop is called, at the latest at the end of the
// test; it returns the control socket and the metrics URL ("" if none)
// once the daemon says it is ready. stop checks that run returned nil.
func daemonOn(t *testing.T, runDir string, args ...string) (sock, metricsURL string, stop func()) {
	t.Helper()
	ready, stop := daemonReady(t, runDir, args...)
	return ready["control"], ready["metrics"], stop
}

// daemonReady is daemonOn that returns the ready line's fields by name
// ("control", "metrics", "migrate").
func daemonReady(t *testing.T, runDir string, args ...string) (ready map[string]string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"-run-dir", runDir, "-log-level", "error", "-metrics-addr", ""}, args...), pw, io.Discard)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("vgpud run = %v", err)
		}
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(pr).ReadString('\n')
	go io.Copy(io.Discard, pr)
	if err != nil {
		stopped = true
		t.Fatalf("daemon did not get ready: %v (run: %v)", err, <-done)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "vgpud ready ")
	if !ok || !strings.HasPrefix(rest, "control=") {
		t.Fatalf("ready line = %q", line)
	}
	ready = map[string]string{}
	for _, f := range strings.Fields(rest) {
		if k, v, ok := strings.Cut(f, "="); ok {
			ready[k] = v
		}
	}
	return ready, stop
}

// startDaemon runs vgpud in-process with metrics on a free port and
// returns its control socket once it says it is ready; the daemon stops
// (and is checked to stop cleanly) at the end of the test.
func startDaemon(t *testing.T, args ...string) (sock, metricsURL string) {
	t.Helper()
	runDir := filepath.Join(t.TempDir(), "run")
	sock, metricsURL, stop := daemonOn(t, runDir, append([]string{"-log-level", "warn", "-metrics-addr", "127.0.0.1:0"}, args...)...)
	t.Cleanup(func() {
		stop()
		if _, err := os.Stat(filepath.Join(runDir, "control.sock")); !os.IsNotExist(err) {
			t.Errorf("control socket left behind: %v", err)
		}
	})
	return sock, metricsURL
}

func TestDaemonServesAPI(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "vgpud.json")
	if err := os.WriteFile(cfg, []byte(`{"profiles": [{"name": "p1", "mem_bytes": 16777216, "share": 1, "max_per_device": 2}],
		"instances": [{"profile": "p1", "uuid": "11111111-2222-3333-4444-555555555555"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, metricsURL := startDaemon(t, "-config", cfg)
	c := control.NewClient(sock)
	ctx := context.Background()
	insts, err := c.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].UUID != "11111111-2222-3333-4444-555555555555" || insts[0].Profile.Name != "p1" {
		t.Fatalf("instances from config = %+v", insts)
	}
	if _, err := os.Stat(insts[0].Socket); err != nil {
		t.Errorf("instance socket: %v", err)
	}
	devs, err := c.Devices(ctx)
	if err != nil || len(devs) != 1 || devs[0].Instances != 1 {
		t.Errorf("Devices() = %+v, %v", devs, err)
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatalf("GET %s: %v", metricsURL, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "11111111-2222-3333-4444-555555555555") {
		t.Errorf("/metrics does not mention the instance:\n%.2000s", body)
	}
}

func TestBadConfig(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, config string
		args         []string
	}{
		{"unknown field", `{"nope": 1}`, nil},
		{"bad profile", `{"profiles": [{"name": "x", "mem_bytes": 1, "share": 1, "max_per_device": 1}]}`, nil},
		{"unknown profile instance", `{"instances": [{"profile": "missing"}]}`, nil},
		{"bad device", `{}`, []string{"-device", "no-such-device"}},
		{"bad log level", `{"log_level": "loud"}`, nil},
		{"bad transport", `{"transport": "carrier-pigeon"}`, nil},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, "c.json")
		if err := os.WriteFile(p, []byte(tt.config), 0o600); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-run-dir", filepath.Join(dir, "run"), "-config", p}, tt.args...)
		args = append(args, "-metrics-addr", "")
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%s: run = nil, want an error", tt.name)
		}
	}
}

package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/sdnotify"
)

// TestServiceManagerAndSocketGroup: under a (fake) service manager vgpud
// says READY=1 once its control socket serves and STOPPING=1 when it
// stops; -socket-group opens the socket (0660) and the run directory
// (0750) to that group, and without it the socket stays root's (0600).
func TestServiceManagerAndSocketGroup(t *testing.T) {
	notify := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv(sdnotify.EnvSocket, notify)
	next := func() string {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("no message to the service manager: %v", err)
		}
		return string(buf[:n])
	}

	runDir := filepath.Join(t.TempDir(), "run")
	sock, _, stop := daemonOn(t, runDir, "-socket-group", "12345")
	if got := next(); !strings.HasPrefix(got, "READY=1\n") || !strings.Contains(got, sock) {
		t.Errorf("first message %q, want READY=1 and the socket", got)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{runDir, 0o750}, {sock, 0o660}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != c.mode || st.Gid != 12345 {
			t.Errorf("%s: mode %v gid %d, want %v gid 12345", c.path, fi.Mode().Perm(), st.Gid, c.mode)
		}
	}
	stop()
	if got := next(); got != "STOPPING=1" {
		t.Errorf("message at stop %q, want STOPPING=1", got)
	}

	// The default: root's alone.
	sock, _, stop = daemonOn(t, filepath.Join(t.TempDir(), "run"))
	next()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("default control socket mode %v, want 0600", fi.Mode().Perm())
	}
	stop()
	next()

	// An unknown group stops the start with a hint.
	err = run(t.Context(), []string{"-run-dir", t.TempDir(), "-metrics-addr", "", "-socket-group", "no-such-group-vgpud"}, os.Stdout, os.Stderr)
	if err == nil || !strings.Contains(err.Error(), "addgroup --system") {
		t.Errorf("unknown socket group: %v", err)
	}
}

package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/internal/sdnotify"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
)

// TestServiceManagerAndSocketGroup: under a (fake) service manager vgpud
// says READY=1 once its control socket serves and STOPPING=1 when it
// stops; -socket-group opens the socket (0660), the run directory (0750),
// the instances directory (0770: QEMU makes its monitor socket there) and
// an instance's sockets (0660) to that group, and without it they stay
// root's (0600, 0700).
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

	runDir := filepath.Join(shortDir(t), "run")
	sock, _, stop := daemonOn(t, runDir, "-socket-group", "12345")
	if got := next(); !strings.HasPrefix(got, "READY=1\n") || !strings.Contains(got, sock) {
		t.Errorf("first message %q, want READY=1 and the socket", got)
	}
	in, err := control.NewClient(sock).Create(t.Context(), mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	instDir := filepath.Join(runDir, "instances")
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{runDir, 0o750}, {sock, 0o660}, {instDir, 0o770}, {in.Socket, 0o660}, {filepath.Join(instDir, in.UUID+".agent.sock"), 0o660}} {
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
	sock, _, stop = daemonOn(t, filepath.Join(shortDir(t), "run"))
	next()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("default control socket mode %v, want 0600", fi.Mode().Perm())
	}
	in, err = control.NewClient(sock).Create(t.Context(), mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(in.Socket), 0o700}, {in.Socket, 0o600}, {filepath.Join(filepath.Dir(in.Socket), in.UUID+".agent.sock"), 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != c.mode {
			t.Errorf("default %s: mode %v, want %v", c.path, fi.Mode().Perm(), c.mode)
		}
	}
	stop()
	next()

	// An unknown group stops the start with a hint.
	err = run(t.Context(), []string{"-run-dir", t.TempDir(), "-metrics-addr", "", "-socket-group", "no-such-group-vgpud"}, os.Stdout, os.Stderr)
	if err == nil || !strings.Contains(err.Error(), "addgroup --system") {
		t.Errorf("unknown socket group: %v", err)
	}
}

// shortDir is a temporary directory with a short path: an instance's
// sockets under t.TempDir() would pass a sockaddr_un's 107 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "vs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

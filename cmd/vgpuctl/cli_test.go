package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/internal/eventlog"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/definitions"
	"github.com/vgpud/vgpud/mdev/mpqemu"
)

// TestHelpConventions: -h anywhere prints on stdout only and succeeds: the
// whole usage once for vgpuctl, a command's lines and its flags with their
// help for a command; an unknown command is one line with a hint, exit 2.
func TestHelpConventions(t *testing.T) {
	for _, c := range []struct {
		args     []string
		want     []string // on stdout
		code     int      // 0: success
		errWants string
	}{
		{args: []string{"--help"}, want: []string{"commands:"}},
		{args: []string{"-h"}, want: []string{"commands:"}},
		{args: []string{"list", "-h"}, want: []string{"list [-json]", "flags:", "-json", "print JSON instead of a table"}},
		{args: []string{"devices", "--help"}, want: []string{"flags:", "-json"}},
		{args: []string{"limits", "-h"}, want: []string{"-kernel-timeout duration", "-program-bytes uint"}},
		{args: []string{"limits", "UUID", "-h"}, want: []string{"-slice duration"}},
		{args: []string{"create", "-h"}, want: []string{"-profile string", "-device int"}},
		{args: []string{"overcommit", "-h"}, want: []string{"-timeout duration"}},
		{args: []string{"reuse", "-h"}, want: []string{"reuse set UUID", "-json"}},
		{args: []string{"show", "-h"}, want: []string{"show UUID", "(no flags)"}},
		{args: []string{"vm", "-h"}, want: []string{"vm -instance", "-kernel"}},
		{args: []string{"frobnicate"}, code: 2, errWants: `unknown command "frobnicate" (vgpuctl help`},
		{args: []string{"-bogus"}, code: 2, errWants: "-bogus"},
		{args: []string{}, code: 2, errWants: "no command"},
		{args: []string{"list", "-x"}, code: 2, errWants: "vgpuctl list -h shows its flags"},
		{args: []string{"help", "nosuch"}, code: 2, errWants: "nosuch"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), c.args, &out, &errOut)
		if errOut.Len() != 0 {
			t.Errorf("%q wrote to stderr: %q", c.args, errOut.String())
		}
		if c.code == 0 {
			if err != nil {
				t.Errorf("%q = %v", c.args, err)
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("%q printed %q, want %q", c.args, out.String(), w)
				}
			}
			if n := strings.Count(out.String(), "commands:"); n > 1 {
				t.Errorf("%q printed the usage %d times", c.args, n)
			}
			continue
		}
		if err == nil || exitCode(err) != c.code || !strings.Contains(err.Error(), c.errWants) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q = %v (exit %d), want one line with %q, exit %d", c.args, err, exitCode(err), c.errWants, c.code)
		}
		if out.Len() != 0 {
			t.Errorf("%q printed %q on an error", c.args, out.String())
		}
	}
}

// TestNoDaemonHint: a control socket nobody serves is said in one line
// with what to do.
func TestNoDaemonHint(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	_, err := ctl(t, sock, "list")
	if err == nil || exitCode(err) != 1 {
		t.Fatalf("list without vgpud = %v", err)
	}
	for _, want := range []string{sock, "start vgpud", "VGPUD_SOCKET", "-socket"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("list without vgpud = %q, want it to say %q", err, want)
		}
	}
}

// TestListingsJSON: every listing prints JSON with -json.
func TestListingsJSON(t *testing.T) {
	sock := daemon(t)
	if _, err := ctl(t, sock, "create", "-profile", "vgpu-small"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"devices", "-json"}, {"profiles", "-json"}, {"list", "-json"}, {"stats", "-json"},
		{"reuse", "-json"}, {"proposals", "-json"}, {"place", "-json"}} {
		out, err := ctl(t, sock, args...)
		if err != nil {
			t.Errorf("%q = %v", args, err)
			continue
		}
		if !json.Valid([]byte(out)) {
			t.Errorf("%q printed no JSON: %q", args, out)
		}
	}
}

// TestArgumentErrors: a command line vgpuctl cannot run is refused with
// the reason (exit 2); the daemon refuses a device it does not have
// without making up an instance.
func TestArgumentErrors(t *testing.T) {
	sock := daemon(t)
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"list", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"devices", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"limits", id, "-turn-timeout", "-5s"}, 2, "-turn-timeout -5s refused: a time budget must be positive"},
		{[]string{"limits", id, "-slice", "0s"}, 2, "-slice 0s refused"},
		{[]string{"limits", id, "-program-bytes", "0"}, 2, "-program-bytes 0 refused"},
		{[]string{"limits", id, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"create", "-profile", "vgpu-small", "-device", "-1"}, 2, "-device -1 refused"},
		{[]string{"create", "-profile", "vgpu-small", "-device", "9"}, 1, "no such device 9"},
		{[]string{"show", id, "extra"}, 2, "usage: show UUID"},
	} {
		_, err := ctl(t, sock, c.args...)
		if err == nil || exitCode(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q = %v (exit %d), want %q, exit %d", c.args, err, exitCode(err), c.want, c.code)
		}
	}
	out, err := ctl(t, sock, "list", "-json")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, `"uuid"`); n != 1 {
		t.Errorf("after the refused creates list -json shows %d instances, want 1:\n%s", n, out)
	}
}

// TestOvercommitShow: overcommit with no policy prints the current one.
func TestOvercommitShow(t *testing.T) {
	sock := daemon(t)
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	if out, err := ctl(t, sock, "overcommit", id); err != nil || !strings.Contains(out, id+": overcommit none") {
		t.Errorf("overcommit UUID = %q, %v", out, err)
	}
	if _, err := ctl(t, sock, "overcommit", id, "block", "-timeout", "5s"); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl(t, sock, "overcommit", id); err != nil || !strings.Contains(out, "overcommit block (timeout 5s)") {
		t.Errorf("overcommit UUID after block = %q, %v", out, err)
	}
	if out, err := ctl(t, sock, "overcommit", "-profile", "vgpu-small"); err != nil || !strings.Contains(out, "profile vgpu-small: overcommit") {
		t.Errorf("overcommit -profile = %q, %v", out, err)
	}
	if _, err := ctl(t, sock, "overcommit", "-profile", "nosuch"); !errors.Is(err, mdev.ErrUnknownProfile) {
		t.Errorf("overcommit -profile nosuch = %v", err)
	}
}

// TestSetProfileKeepsSettings: a share and limits an operator set survive
// set-profile; what they did not set follows the new profile.
func TestSetProfileKeepsSettings(t *testing.T) {
	sock := daemon(t)
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	if _, err := ctl(t, sock, "set-share", id, "7"); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl(t, sock, "limits", id, "-kernel-timeout", "3s"); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl(t, sock, "set-profile", id, "vgpu-medium"); err != nil {
		t.Fatal(err)
	}
	out, err := ctl(t, sock, "show", id)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Profile  mdev.Profile         `json:"profile"`
		Limits   mdev.Limits          `json:"limits"`
		Contexts control.ContextsInfo `json:"contexts"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if info.Contexts.Max != abi.MaxContexts || info.Contexts.Live != 0 {
		t.Errorf("contexts = %+v, want %d offered (the built-in profile's) and none live", info.Contexts, abi.MaxContexts)
	}
	if info.Limits.KernelTimeout.D().String() != "3s" {
		t.Errorf("kernel timeout after set-profile = %v, want the 3s set before", info.Limits.KernelTimeout.D())
	}
	if info.Limits.ProgramBytes != info.Profile.ProgramBytes && info.Profile.ProgramBytes != 0 {
		t.Errorf("program quota %d, want the new profile's %d", info.Limits.ProgramBytes, info.Profile.ProgramBytes)
	}
	st, err := ctl(t, sock, "stats", "-json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st, `"share": 7`) {
		t.Errorf("share after set-profile is not the 7 set before:\n%s", st)
	}
}

// TestVersion: version prints vgpuctl's build and the daemon's; -client
// needs no daemon.
func TestVersion(t *testing.T) {
	sock := daemon(t)
	out, err := ctl(t, sock, "version")
	if err != nil || !strings.Contains(out, "vgpuctl ") || !strings.Contains(out, "vgpud ") || !strings.Contains(out, "go1.") {
		t.Errorf("version = %q, %v", out, err)
	}
	out, err = ctl(t, sock, "version", "-json")
	var v struct {
		Client, Daemon struct {
			Program   string `json:"program"`
			GoVersion string `json:"go_version"`
		}
	}
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Client.Program != "vgpuctl" || v.Daemon.Program != "vgpud" || v.Daemon.GoVersion == "" {
		t.Errorf("version -json = %q, %v", out, err)
	}
	none := filepath.Join(t.TempDir(), "none.sock")
	if out, err := ctl(t, none, "version", "-client"); err != nil || !strings.HasPrefix(out, "vgpuctl ") {
		t.Errorf("version -client = %q, %v", out, err)
	}
}

// TestNamesAndLabels: create -name and -label; the name stands for the
// UUID in every command; list and list -json show both.
func TestNamesAndLabels(t *testing.T) {
	sock := daemon(t)
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small", "-name", "web", "-label", "team=a", "-label", "env=prod")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	if _, err := ctl(t, sock, "create", "-profile", "vgpu-small", "-name", "web"); !errors.Is(err, mdev.ErrExists) {
		t.Errorf("a second instance named web = %v, want ErrExists", err)
	}
	if _, err := ctl(t, sock, "create", "-profile", "vgpu-small", "-label", "novalue"); exitCode(err) != 2 {
		t.Errorf("create -label novalue = %v, want a usage error", err)
	}
	if out, err := ctl(t, sock, "list"); err != nil || !strings.Contains(out, "NAME") || !strings.Contains(out, id+"  web") {
		t.Errorf("list = %q, %v", out, err)
	}
	out, err := ctl(t, sock, "list", "-json")
	var insts []struct {
		UUID   string            `json:"uuid"`
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	}
	if err != nil || json.Unmarshal([]byte(out), &insts) != nil || len(insts) != 1 || insts[0].Name != "web" || insts[0].Labels["env"] != "prod" {
		t.Errorf("list -json = %q, %v", out, err)
	}
	for _, args := range [][]string{{"show", "web"}, {"set-share", "web", "3"}, {"limits", "web", "-slice", "100ms"},
		{"resources", "web"}, {"overcommit", "web"}, {"set-profile", "web", "vgpu-medium"}} {
		if out, err := ctl(t, sock, args...); err != nil || !strings.Contains(out, id) {
			t.Errorf("%q = %q, %v; want it to act on %s", args, out, err, id)
		}
	}
	if _, err := ctl(t, sock, "destroy", "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl(t, sock, "show", "web"); !errors.Is(err, mdev.ErrNotFound) {
		t.Errorf("show web after destroy = %v", err)
	}
}

// eventsDaemon is daemon with the event log vgpud keeps and a directory
// of definitions.
func eventsDaemon(t *testing.T) string {
	t.Helper()
	d, err := gpu.Open("")
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	l := eventlog.New(64)
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}, SocketDir: t.TempDir(), Transport: mpqemu.Transport{},
		Logger: slog.New(l.Handler(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: control.Handler(m, control.WithEvents(l), control.WithDefinitions(definitions.Dir(t.TempDir())))}
	srv.RegisterOnShutdown(l.Close)
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		<-done
		m.Close()
		d.Close()
	})
	return sock
}

// TestEvents: events prints the recent events as JSON lines; -follow
// then each new one until ctrl-c.
func TestEvents(t *testing.T) {
	sock := eventsDaemon(t)
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small", "-name", "e")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	out, err := ctl(t, sock, "events")
	if err != nil || !strings.Contains(out, `"kind":"instance.created"`) || !strings.Contains(out, `"instance":"`+id+`"`) {
		t.Fatalf("events = %q, %v", out, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-socket", sock, "events", "-follow", "-since", "1"}, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	destroyed := false
	for sc.Scan() {
		var e eventlog.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("events -follow printed %q: %v", sc.Text(), err)
		}
		if e.Kind == "instance.created" {
			if _, err := ctl(t, sock, "destroy", "e"); err != nil {
				t.Fatal(err)
			}
		}
		if e.Kind == "instance.destroyed" && e.Instance == id {
			destroyed = true
			cancel() // ctrl-c
		}
	}
	if err := <-done; err != nil || !destroyed {
		t.Errorf("events -follow = %v (saw the destroy: %v)", err, destroyed)
	}
}

// TestDefine: define writes a definition (-create makes the instance
// now), definitions lists it, undefine removes it and leaves the
// instance.
func TestDefine(t *testing.T) {
	sock := eventsDaemon(t)
	if out, err := ctl(t, sock, "definitions"); err != nil || !strings.Contains(out, "(none in ") {
		t.Errorf("definitions = %q, %v", out, err)
	}
	out, err := ctl(t, sock, "define", "-name", "db", "-profile", "vgpu-small", "-label", "tier=1", "-create")
	if err != nil || !strings.Contains(out, "defined db (uuid ") || !strings.Contains(out, "created ") {
		t.Fatalf("define -create = %q, %v", out, err)
	}
	if out, err := ctl(t, sock, "definitions"); err != nil || !strings.Contains(out, "db") || !strings.Contains(out, "tier=1") {
		t.Errorf("definitions = %q, %v", out, err)
	}
	if out, err := ctl(t, sock, "definitions", "-json"); err != nil || !json.Valid([]byte(out)) {
		t.Errorf("definitions -json = %q, %v", out, err)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"define", "-name", "x"}, 2},
		{[]string{"define", "-name", "x", "-profile", "vgpu-small", "-device", "-1"}, 2},
		{[]string{"define", "-name", "../x", "-profile", "vgpu-small"}, 1},
		{[]string{"undefine", "nosuch"}, 1},
	} {
		if _, err := ctl(t, sock, c.args...); exitCode(err) != c.code {
			t.Errorf("%q = %v, want exit %d", c.args, err, c.code)
		}
	}
	if out, err := ctl(t, sock, "undefine", "db"); err != nil || !strings.Contains(out, "undefined db") {
		t.Errorf("undefine = %q, %v", out, err)
	}
	if _, err := ctl(t, sock, "show", "db"); err != nil {
		t.Errorf("show db after undefine = %v, want the instance still there", err)
	}
}

// TestMissingFileIsNotAMissingDaemon: only a failed connection to the
// control socket is explained as an unreachable vgpud; any other error,
// an ENOENT of a file a command needs among them, is left as it is.
func TestMissingFileIsNotAMissingDaemon(t *testing.T) {
	for _, c := range []struct {
		err       error
		noDaemon  bool
		errnoText string
	}{
		{fmt.Errorf("read kernel /x: %w", syscall.ENOENT), false, ""},
		{fmt.Errorf("vm: %w", syscall.EACCES), false, ""},
		{fmt.Errorf("%w: %w", control.ErrUnreachable, syscall.ENOENT), true, "no such file"},
		{fmt.Errorf("%w: %w", control.ErrUnreachable, syscall.ECONNREFUSED), true, "refused"},
		{fmt.Errorf("%w: %w", control.ErrUnreachable, syscall.EACCES), true, "permission"},
	} {
		got := explain(c.err, "/run/vgpud/control.sock")
		var nd *noDaemonError
		if errors.As(got, &nd) != c.noDaemon {
			t.Errorf("explain(%v) = %v, want unreachable-vgpud %t", c.err, got, c.noDaemon)
			continue
		}
		if c.noDaemon && !strings.Contains(got.Error(), c.errnoText) {
			t.Errorf("explain(%v) = %q, want it to say %q", c.err, got, c.errnoText)
		}
		if !c.noDaemon && got != c.err {
			t.Errorf("explain(%v) = %v, want it unchanged", c.err, got)
		}
	}
}

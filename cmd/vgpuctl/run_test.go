package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/control"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// daemon serves the control API over a real manager and returns the
// socket; vgpuctl talks to it like to vgpud.
func daemon(t *testing.T) string {
	t.Helper()
	return daemonWith(t, mdev.Config{})
}

// daemonWith is daemon with a manager configured by cfg (its devices: the
// test device, once unless cfg names more).
func daemonWith(t *testing.T, cfg mdev.Config) string {
	t.Helper()
	d, err := gpu.Open("")
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	if len(cfg.Devices) == 0 {
		cfg.Devices = []gpu.Device{d}
	}
	cfg.SocketDir = t.TempDir()
	if cfg.Transport == nil {
		cfg.Transport = mpqemu.Transport{}
	}
	m, err := mdev.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: control.Handler(m)}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
		m.Close()
		d.Close()
	})
	return sock
}

func ctl(t *testing.T, sock string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"-socket", sock}, args...), &out, io.Discard)
	return out.String(), err
}

// ctlStep is one vgpuctl command line and what its output must contain.
type ctlStep struct {
	args []string
	want []string
}

// ctlSteps runs steps against the daemon at sock in order, reporting a
// command that fails or whose output lacks a wanted string, and goes on
// with the next step either way.
func ctlSteps(t *testing.T, sock string, steps []ctlStep) {
	t.Helper()
	for _, st := range steps {
		out, err := ctl(t, sock, st.args...)
		if err != nil {
			t.Errorf("vgpuctl %q = %v", st.args, err)
			continue
		}
		for _, w := range st.want {
			if !strings.Contains(out, w) {
				t.Errorf("vgpuctl %q = %q, want it to contain %q", st.args, out, w)
			}
		}
	}
}

func TestCommands(t *testing.T) {
	sock := daemon(t)
	out, err := ctl(t, sock, "profiles")
	if err != nil || !strings.Contains(out, "vgpu-small") {
		t.Fatalf("profiles = %q, %v", out, err)
	}
	if out, err := ctl(t, sock, "devices"); err != nil || !strings.Contains(out, "INSTANCES") {
		t.Errorf("devices = %q, %v", out, err)
	}
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	if out, err := ctl(t, sock, "list"); err != nil || !strings.Contains(out, id) {
		t.Errorf("list = %q, %v", out, err)
	}
	if out, err := ctl(t, sock, "show", id); err != nil || !strings.Contains(out, `"uuid": "`+id+`"`) {
		t.Errorf("show = %q, %v", out, err)
	}
	out, err = ctl(t, sock, "vm", "-instance", id, "-kernel", "/k", "-initrd", "/i", "-append", "vgpu.run=vgpu-suite", "-print")
	if err != nil {
		t.Fatalf("vm -print = %v", err)
	}
	for _, want := range []string{"qemu-system-x86_64", "-device x-pci-proxy-dev,id=vgpu0,fd=3", "share=on", "vgpu.run=vgpu-suite"} {
		if !strings.Contains(out, want) {
			t.Errorf("vm -print = %q, want it to contain %q", out, want)
		}
	}
	if out, err := ctl(t, sock, "set-profile", id, "vgpu-medium"); err != nil || !strings.Contains(out, "vgpu-medium (1024 MiB)") {
		t.Errorf("set-profile = %q, %v", out, err)
	}
	if _, err := ctl(t, sock, "set-profile", id, "no-such-profile"); err == nil {
		t.Errorf("set-profile to an unknown profile = nil error")
	}
	if out, err := ctl(t, sock, "limits", id, "-kernel-timeout", "3s", "-slice", "100ms", "-program-bytes", "1048576"); err != nil ||
		!strings.Contains(out, "kernel timeout 3s, slice 100ms, build timeout 1m0s, programs 0 of 1048576 bytes") {
		t.Errorf("limits = %q, %v", out, err)
	}
	// The former name of -kernel-timeout still sets it.
	if out, err := ctl(t, sock, "limits", id, "-turn-timeout", "4s"); err != nil || !strings.Contains(out, "kernel timeout 4s, slice 100ms") {
		t.Errorf("limits -turn-timeout = %q, %v", out, err)
	}
	for _, args := range [][]string{{"limits"}, {"limits", id, "-turn-timeout", "-1s"}, {"limits", id, "-slice", "1ms"}, {"limits", id, "extra"}} {
		if _, err := ctl(t, sock, args...); err == nil {
			t.Errorf("vgpuctl %q = nil error", args)
		}
	}
	if _, err := ctl(t, sock, "destroy", id); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"show", id}, {"create"}, {"bogus"}, {}, {"vm"}} {
		if _, err := ctl(t, sock, args...); err == nil {
			t.Errorf("vgpuctl %q = nil error", args)
		}
	}
	if _, err := ctl(t, sock, "vm", "-instance", id, "-snapshot", "-print"); err == nil || !strings.Contains(err.Error(), "-snapshot needs -disk") {
		t.Errorf("vgpuctl vm -snapshot without -disk = %v, want it refused", err)
	}
}

// TestGuestStatus: vgpuctl vm exits with the status of the guest's
// program, read from vgpu-init's last exit line.
func TestGuestStatus(t *testing.T) {
	for _, tt := range []struct {
		app   string
		lines []string
		code  int // 0: nil error
	}{
		{"vgpu.run=vgpu-suite", []string{"boot", "VGPU-INIT exit=0"}, 0},
		{"vgpu.run=vgpu-suite", []string{"VGPU-INIT exit=3"}, 3},
		{"vgpu.run=vgpu-suite", []string{"VGPU-INIT exit=-1"}, 1},
		{"vgpu.run=vgpu-suite", []string{"VGPU-INIT exit=0", "VGPU-INIT exit=2"}, 2},
		{"vgpu.run=vgpu-suite", []string{"no marker"}, 1},
		{"quiet", []string{"no program ran"}, 0},
	} {
		err := guestStatus(tt.app, tt.lines)
		if tt.code == 0 {
			if err != nil {
				t.Errorf("guestStatus(%q, %q) = %v, want nil", tt.app, tt.lines, err)
			}
			continue
		}
		if err == nil || exitCode(err) != tt.code {
			t.Errorf("guestStatus(%q, %q) = %v (exit %d), want exit %d", tt.app, tt.lines, err, exitCode(err), tt.code)
		}
	}
}

// TestVMVFIOUser: vgpuctl vm attaches an instance of a vgpud that speaks
// vfio-user with vfio-user-pci, on sealed memfd RAM, and runs QEMU 11.1
// from the VMM root unless -qemu names a QEMU; an mpqemu instance keeps
// x-pci-proxy-dev on the host's QEMU.
func TestVMVFIOUser(t *testing.T) {
	root, err := qemuvm.RepoVMMRoot()
	if err != nil {
		t.Fatalf("%v (make vmm-root builds it)", err)
	}
	sock := daemonWith(t, mdev.Config{Transport: vfiouser.Transport{}})
	id, err := ctl(t, sock, "create", "-profile", "vgpu-small")
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	const awaiting = "0f8fad5b-d9cb-469f-a165-70867728950e"
	if out, err := ctl(t, sock, "create", "-incoming", "-uuid", awaiting, "-profile", "vgpu-small"); err != nil {
		t.Fatalf("create -incoming: %v: %s", err, out)
	}
	vroot := []string{"-vmm-run", root.Script, "-vmm-root", root.Root}
	for _, tt := range []struct {
		name    string
		args    []string
		want    []string
		notWant []string
	}{
		{
			name: "from the VMM root",
			args: vroot,
			want: []string{
				// The kernel and initramfs are outside /tmp and build/:
				// bound into the root by name.
				"+ VMM_RUN_BINDS=/k:/i " + root.Script + " " + root.Root + " -- qemu-system-x86_64 -accel tcg ",
				"memory-backend-memfd,id=mem,size=256M,share=on,seal=on",
				`'{"driver":"vfio-user-pci","id":"vgpu0","addr":"0x10","socket":{"type":"unix","path":"`,
				id + `.vfio-user.sock"}}'`,
				"/" + id + ".qmp,server=on",
			},
			notWant: []string{"x-pci-proxy-dev", ".vfio-user.qmp", "VMM_RUN_BINDS=/ "},
		},
		{
			// The destination of an in-place migration: the instance
			// that awaits it is attached from the start.
			name: "incoming",
			args: append([]string{"-incoming", "tcp:0:4444"}, vroot...),
			want: []string{"-incoming tcp:0:4444", `"driver":"vfio-user-pci"`, awaiting + `.vfio-user.sock"}}'`,
				"/" + awaiting + ".qmp,server=on"},
			notWant: []string{"x-pci-proxy-dev"},
		},
		{
			name:    "a root disk",
			args:    append([]string{"-disk", "/d.ext4", "-snapshot", "-append", "root=/dev/vda rw"}, vroot...),
			want:    []string{"file=/d.ext4,format=raw,if=none,id=disk0,snapshot=on", "root=/dev/vda rw"},
			notWant: []string{"readonly=on"},
		},
		{
			name:    "a QEMU named",
			args:    append([]string{"-qemu", "/opt/qemu-11/bin/qemu-system-x86_64"}, vroot...),
			want:    []string{"+ /opt/qemu-11/bin/qemu-system-x86_64 -accel tcg ", "seal=on", `"driver":"vfio-user-pci"`},
			notWant: []string{"vmm-run.sh"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inst := id
			if tt.name == "incoming" {
				inst = awaiting
			}
			args := append([]string{"vm", "-instance", inst, "-kernel", "/k", "-initrd", "/i", "-print"}, tt.args...)
			out, err := ctl(t, sock, args...)
			if err != nil {
				t.Fatalf("vgpuctl %q = %v", args, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("vgpuctl %q = %q, want it to contain %q", args, out, w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(out, w) {
					t.Errorf("vgpuctl %q = %q, want no %q", args, out, w)
				}
			}
		})
	}
	// Without a built root, a vfio-user instance needs -qemu: the error
	// says how to get one.
	_, err = ctl(t, sock, "vm", "-instance", id, "-kernel", "/k", "-initrd", "/i", "-print", "-vmm-run", root.Script, "-vmm-root", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make vmm-root") || !strings.Contains(err.Error(), "-qemu") {
		t.Errorf("vm with no VMM root = %v, want an error naming make vmm-root and -qemu", err)
	}
}

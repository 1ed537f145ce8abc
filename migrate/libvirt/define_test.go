package libvirt

import (
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/vfiouser"
)

// vfioUserManager is manager with vfio-user instance sockets, in a short
// directory (a socket path must fit a Unix socket address).
func vfioUserManager(t *testing.T) *mdev.Manager {
	t.Helper()
	dir, err := os.MkdirTemp("", "lvu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dev := gputest.New(gputest.Config{Info: gpu.Info{GlobalMemBytes: 4 << 30, MaxAllocBytes: 64 << 20}})
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: dir, Transport: vfiouser.Transport{}, InProcess: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		dev.Close()
	})
	return m
}

func vfioUserDom(name, state string) *fakeDom {
	d := dom(name, state, nil)
	d.xml = strings.Replace(plainDomain, "web1", name, 1)
	return d
}

// TestAttachVFIOUserDefines: on a vfio-user vgpud, attach gives a
// shut-off domain the device and vgpud's monitor in its definition, then
// starts it (no start --paused, no device_add) and records the instance.
func TestAttachVFIOUserDefines(t *testing.T) {
	m := vfioUserManager(t)
	inst := instance(t, m)
	d := vfioUserDom("web1", StateShutOff)
	f := newFake(t, d)
	rep, err := attacher(m, f).Attach(t.Context(), "web1", inst.UUID())
	if err != nil {
		t.Fatalf("attach: %v (calls %v)", err, f.called())
	}
	if rep.Action != ActionDefined || rep.Slot != 0x10 {
		t.Errorf("report %+v, want defined at 0x10", rep)
	}
	want := []string{"dumpxml web1", "define web1", "start web1", "metadata-set web1"}
	if got := f.called(); !isSubsequence(got, want) || slices.Contains(got, "qemu-monitor-command web1") {
		t.Errorf("calls %v, want %v in order and no monitor command", got, want)
	}
	if !strings.Contains(d.xml, inst.Socket()) || !strings.Contains(d.xml, inst.QMPSocket()) || d.state != StateRunning {
		t.Errorf("domain %s after attach:\n%s", d.state, d.xml)
	}
	if md, _ := ParseMetadata([]byte(d.meta)); md.Instance != inst.UUID() {
		t.Errorf("metadata %q", d.meta)
	}
}

// TestAttachVFIOUserRefuses: a running domain gets no vfio-user vGPU
// (it would be outside its definition), and a domain whose start fails
// gets its old definition back.
func TestAttachVFIOUserRefuses(t *testing.T) {
	m := vfioUserManager(t)
	inst := instance(t, m)
	run := vfioUserDom("run1", StateRunning)
	bad := vfioUserDom("bad1", StateShutOff)
	bad.failStart = true
	old := bad.xml
	f := newFake(t, run, bad)
	a := attacher(m, f)
	if _, err := a.Attach(t.Context(), "run1", inst.UUID()); !errors.Is(err, ErrNeedsDefinition) {
		t.Errorf("running domain: %v, want ErrNeedsDefinition", err)
	}
	if _, err := a.Attach(t.Context(), "bad1", inst.UUID()); err == nil || !strings.Contains(err.Error(), "definition was restored") {
		t.Errorf("failed start: %v, want the definition restored", err)
	}
	if bad.xml != old {
		t.Errorf("definition after a failed start:\n%s", bad.xml)
	}
	for _, c := range f.called() {
		if c == "define run1" || strings.HasPrefix(c, "metadata-set") {
			t.Errorf("call %q after a refused attach", c)
		}
	}
}

// isSubsequence reports whether want appears in got in order.
func isSubsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestMoveVMChecks: MoveVM refuses a domain whose metadata names another
// instance, one without the device, and a destination run directory that
// cannot go into the XML as is; for a good one it runs virsh migrate
// --live --suspend with the socket paths rewritten.
func TestMoveVMChecks(t *testing.T) {
	m := vfioUserManager(t)
	inst := instance(t, m)
	other := instance(t, m)
	d := vfioUserDom("web1", StateShutOff)
	f := newFake(t, d)
	a := attacher(m, f)
	if _, err := a.Attach(t.Context(), "web1", inst.UUID()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MoveVM(t.Context(), other, Move{Domain: "web1", DestURI: "qemu:///system"}); !errors.Is(err, ErrNotTheDomain) {
		t.Errorf("another instance: %v, want ErrNotTheDomain", err)
	}
	for _, dir := range []string{"relative", "/a'b", "/a,b", "/a&b"} {
		if _, err := a.MoveVM(t.Context(), inst, Move{Domain: "web1", DestURI: "qemu:///system", DestRunDir: dir}); err == nil {
			t.Errorf("destination run directory %q accepted", dir)
		}
	}
	move, err := a.MoveVM(t.Context(), inst, Move{Domain: "web1", DestURI: "qemu:///system", DestRunDir: "/run/dest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := move(t.Context()); err != nil {
		t.Fatal(err)
	}
	calls := f.called()
	want := "migrate --live --suspend --domain web1 --desturi qemu:///system --xml /dev/fd/3"
	if calls[len(calls)-1] != want {
		t.Errorf("last call %q, want %q", calls[len(calls)-1], want)
	}
	for _, suffix := range []string{".vfio-user.sock", ".qmp"} {
		if p := "/run/dest/instances/" + inst.UUID() + suffix; !strings.Contains(d.migrateXML, p) {
			t.Errorf("the destination XML has no %s:\n%s", p, d.migrateXML)
		}
	}
	if strings.Contains(d.migrateXML, inst.Socket()) {
		t.Errorf("the destination XML still names the source's socket:\n%s", d.migrateXML)
	}
}

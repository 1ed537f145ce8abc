package libvirt

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
	"github.com/vgpud/vgpud/guestagent/agent"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/migrate"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

// manager is a manager with instance sockets over a fake device, its
// device work in process: what plugging needs, quickly.
func manager(t *testing.T) *mdev.Manager {
	t.Helper()
	dev := gputest.New(gputest.Config{Info: gpu.Info{GlobalMemBytes: 4 << 30, MaxAllocBytes: 64 << 20}})
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{dev}, SocketDir: t.TempDir(), Transport: mpqemu.Transport{}, InProcess: true,
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

func instance(t *testing.T, m *mdev.Manager) *mdev.Instance {
	t.Helper()
	inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

func attacher(m *mdev.Manager, f *fakeVirsh) *Attacher {
	return &Attacher{Manager: m, Virsh: f, Timeout: 30 * time.Second, PollEvery: time.Millisecond}
}

func dom(name, state string, inst *mdev.Instance) *fakeDom {
	d := &fakeDom{name: name, uuid: uuid.NewSHA1(uuid.NameSpaceOID, []byte(name)).String(), state: state, persistent: true}
	if inst != nil {
		d.meta = Metadata{Instance: inst.UUID()}.XML()
	}
	return d
}

// TestAttachShutOff: a shut-off domain is started paused, plugged over
// virsh (the instance socket passed as descriptor 3), resumed, and the
// instance recorded in its persistent definition.
func TestAttachShutOff(t *testing.T) {
	m := manager(t)
	inst := instance(t, m)
	d := dom("vm1", StateShutOff, nil)
	f := newFake(t, d)
	rep, err := attacher(m, f).Attach(t.Context(), "vm1", strings.ToUpper(inst.UUID()))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Action != ActionStarted || rep.Slot != migrate.DefaultSlot || rep.Domain != "vm1" || rep.Instance != inst.UUID() {
		t.Errorf("report %+v", rep)
	}
	if !inst.Attached() {
		t.Error("the instance is not attached")
	}
	want := []string{"dominfo vm1", "dominfo vm1", "metadata vm1", "start vm1", "query-pci vm1", "getfd vm1",
		"device_add vm1", "resume vm1", "metadata-set vm1"}
	if diff := cmp.Diff(want, f.called()); diff != "" {
		t.Errorf("virsh calls (-want +got):\n%s", diff)
	}
	if d.state != StateRunning || d.devs[migrate.DefaultDeviceID] == nil {
		t.Errorf("domain %s, devices %v", d.state, d.devs)
	}
	if md, err := ParseMetadata([]byte(d.meta)); err != nil || md.Instance != inst.UUID() || !slices.Equal(d.metaFlags, []string{"--live", "--config"}) {
		t.Errorf("metadata %q %v: %+v, %v", d.meta, d.metaFlags, md, err)
	}
	// Again: the instance is attached now.
	if _, err := attacher(m, f).Attach(t.Context(), "vm1", inst.UUID()); !errors.Is(err, migrate.ErrAttached) {
		t.Errorf("second attach: %v, want ErrAttached", err)
	}
}

// TestAttachRunning: a running transient domain gets a hot-plugged vGPU
// and its live metadata only.
func TestAttachRunning(t *testing.T) {
	m := manager(t)
	inst := instance(t, m)
	d := dom("vm1", StateRunning, nil)
	d.persistent = false
	f := newFake(t, d)
	rep, err := attacher(m, f).Attach(t.Context(), d.uuid, inst.UUID())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Action != ActionHotplugged || !inst.Attached() {
		t.Errorf("report %+v, attached %v", rep, inst.Attached())
	}
	if slices.Contains(f.called(), "start vm1") || !slices.Equal(d.metaFlags, []string{"--live"}) {
		t.Errorf("calls %q, metadata flags %q", f.called(), d.metaFlags)
	}
}

// TestAttachRefuses: what an operator's attach refuses, and that a
// failed plug into a domain started for it stops the domain again.
func TestAttachRefuses(t *testing.T) {
	m := manager(t)
	inst, other := instance(t, m), instance(t, m)
	crashed := dom("crashed", StateCrashed, nil)
	taken := dom("taken", StateShutOff, other)
	failing := dom("failing", StateShutOff, nil)
	f := newFake(t, crashed, taken, failing)
	a := attacher(m, f)
	if _, err := a.Attach(t.Context(), "nosuch", inst.UUID()); !errors.Is(err, ErrNoDomain) {
		t.Errorf("unknown domain: %v", err)
	}
	if _, err := a.Attach(t.Context(), "crashed", inst.UUID()); !errors.Is(err, ErrNotActive) {
		t.Errorf("crashed domain: %v", err)
	}
	if _, err := a.Attach(t.Context(), "crashed", "6f0c1c52-1111-4a3b-9c3e-00000000dead"); !errors.Is(err, mdev.ErrNotFound) {
		t.Errorf("unknown instance: %v", err)
	}
	if _, err := a.Attach(t.Context(), "-x", inst.UUID()); !errors.Is(err, ErrNoDomain) {
		t.Errorf("a name like an option: %v", err)
	}
	// taken's metadata names other, attached to a VM.
	if _, err := a.Attach(t.Context(), "taken", other.UUID()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Attach(t.Context(), "taken", inst.UUID()); !errors.Is(err, ErrDomainHasOther) {
		t.Errorf("domain with another attached instance: %v", err)
	}
	f.mu.Lock()
	f.failAdd = true
	f.mu.Unlock()
	_, err := a.Attach(t.Context(), "failing", inst.UUID())
	if err == nil || !strings.Contains(err.Error(), "stopped again") {
		t.Errorf("failed plug: %v", err)
	}
	if failing.state != StateShutOff || !slices.Contains(f.called(), "destroy failing") || failing.meta != "" {
		t.Errorf("after a failed plug the domain is %s, metadata %q; calls %q", failing.state, failing.meta, f.called())
	}
}

// lostHandler is a guest program that is told its device state was lost.
type lostHandler struct{ lost chan struct{} }

func (h *lostHandler) Quiesce(context.Context) error      { return nil }
func (h *lostHandler) Resume(context.Context, bool) error { return nil }
func (h *lostHandler) Lost(context.Context) error         { h.lost <- struct{}{}; return nil }

// guestAgent connects a guest agent to inst's channel, as QEMU's
// virtio-serial chardev would, and waits for vgpud to see it.
func guestAgent(t *testing.T, inst *mdev.Instance) *lostHandler {
	t.Helper()
	h := &lostHandler{lost: make(chan struct{}, 4)}
	c := agent.New(func() (io.ReadWriteCloser, error) { return net.Dial("unix", inst.AgentSocket()) }, agent.Options{Ident: "test"})
	c.HandleMigration(h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	if err := inst.Agent().WaitAgent(wctx); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestEnsureReattach: after vgpud restarted, a running domain whose
// metadata names the instance still has the proxy device, on a socket
// nobody serves. Ensure removes it, waits for the guest to eject it,
// plugs a fresh one at the same slot, and the guest is told its device
// state was lost.
func TestEnsureReattach(t *testing.T) {
	m := manager(t)
	inst := instance(t, m)
	d := dom("vm1", StateRunning, inst)
	d.devs = map[string]*fakeDev{migrate.DefaultDeviceID: {slot: 0x11, deleted: -1}}
	f := newFake(t, d)
	f.ejectPolls = 3
	h := guestAgent(t, inst)
	rep, err := attacher(m, f).Ensure(t.Context(), "vm1")
	if err != nil {
		t.Fatal(err)
	}
	if rep == nil || rep.Action != ActionReattached || rep.Slot != 0x11 || rep.Programs != 1 || rep.AgentErr != "" {
		t.Fatalf("report %+v", rep)
	}
	recv(t, h.lost, "Lost in the guest")
	if dv := d.devs[migrate.DefaultDeviceID]; dv == nil || dv.slot != 0x11 || dv.vm == nil || !inst.Attached() {
		t.Errorf("device %+v, attached %v", dv, inst.Attached())
	}
	calls := f.called()
	polls := 0
	for _, c := range calls {
		if c == "query-pci vm1" {
			polls++
		}
	}
	if !slices.Contains(calls, "device_del vm1") || polls < 2+f.ejectPolls {
		t.Errorf("calls %q: want device_del and query-pci until the device is gone", calls)
	}
	// Nothing more to do now.
	if rep, err := attacher(m, f).Ensure(t.Context(), "vm1"); rep != nil || err != nil {
		t.Errorf("Ensure of an attached domain: %+v, %v", rep, err)
	}
}

// TestEnsureSkips: what the watcher leaves alone, and what it reports.
func TestEnsureSkips(t *testing.T) {
	m := manager(t)
	inst := instance(t, m)
	bad := dom("bad", StateRunning, nil)
	bad.meta = `<vgpu instance="not-a-uuid"/>`
	unknown := dom("unknown", StateRunning, nil)
	unknown.meta = Metadata{Instance: "6f0c1c52-1111-4a3b-9c3e-00000000dead"}.XML()
	f := newFake(t, dom("plain", StateRunning, nil), dom("off", StateShutOff, inst), bad, unknown,
		dom("crashed", StateCrashed, inst))
	a := attacher(m, f)
	for _, name := range []string{"plain", "off", "gone"} {
		if rep, err := a.Ensure(t.Context(), name); rep != nil || err != nil {
			t.Errorf("Ensure(%s) = %+v, %v; want nothing done", name, rep, err)
		}
	}
	if _, err := a.Ensure(t.Context(), "bad"); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "bad") {
		t.Errorf("malformed metadata: %v", err)
	}
	if _, err := a.Ensure(t.Context(), "unknown"); !errors.Is(err, mdev.ErrNotFound) || !strings.Contains(err.Error(), "does not have") {
		t.Errorf("unknown instance: %v", err)
	}
	if _, err := a.Ensure(t.Context(), "crashed"); !errors.Is(err, ErrNotActive) {
		t.Errorf("crashed domain: %v", err)
	}
	for _, c := range f.called() {
		if strings.HasPrefix(c, "start") || strings.HasPrefix(c, "getfd") || strings.HasPrefix(c, "device_") {
			t.Errorf("Ensure did %q", c)
		}
	}
}

// TestWatcher: the watcher plugs the running domains it finds when its
// event child starts, each domain that starts later, restarts the child
// when it ends, and stops with its context; lines it does not
// understand change nothing.
func TestWatcher(t *testing.T) {
	m := manager(t)
	i1, i2, i3 := instance(t, m), instance(t, m), instance(t, m)
	d1 := dom("vm1", StateRunning, i1)
	d2 := dom("vm2", StateShutOff, i2)
	d3 := dom("vm3", StateShutOff, i3)
	f := newFake(t, d1, d2, d3, dom("plain", StateRunning, nil))
	w := &Watcher{Attacher: attacher(m, f), Resync: -1, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := recv(t, done, "Run's return"); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	s := recv(t, f.streams, "virsh event")
	if got := recv(t, f.plugged, "a plug"); got != "vm1" {
		t.Fatalf("plugged %s at start, want vm1", got)
	}
	s.send(t, "not an event")
	s.send(t, "event 'lifecycle' for domain 'vm1': Started Booted") // attached already: nothing
	s.send(t, strings.Repeat("x", 2*maxEventLine))
	f.mu.Lock()
	d2.state = StateRunning
	f.mu.Unlock()
	s.send(t, "event 'lifecycle' for domain 'vm2': Started Booted")
	if got := recv(t, f.plugged, "a plug"); got != "vm2" {
		t.Fatalf("plugged %s after its start event, want vm2", got)
	}
	// The child ends; vm3 starts while there is none: the restarted
	// child's first look finds it.
	f.mu.Lock()
	d3.state = StateRunning
	f.mu.Unlock()
	s.end()
	recv(t, f.streams, "virsh event, again")
	if got := recv(t, f.plugged, "a plug"); got != "vm3" {
		t.Fatalf("plugged %s after the restart, want vm3", got)
	}
	for _, in := range []*mdev.Instance{i1, i2, i3} {
		if !in.Attached() {
			t.Errorf("%s not attached", in.UUID())
		}
	}
	select {
	case got := <-f.plugged:
		t.Errorf("plugged %s again", got)
	default:
	}
}

package runstate

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
)

func newManager(t *testing.T, onChange func()) *mdev.Manager {
	t.Helper()
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}, OnChange: onChange})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		d.Close()
	})
	return m
}

// TestCaptureRestore: what an operator set at run time comes back in a
// new manager; a record the new manager refuses is kept, with the reason.
func TestCaptureRestore(t *testing.T) {
	m := newManager(t, nil)
	a, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(mdev.CreateRequest{Profile: "vgpu-medium", ReuseDomain: "tenant-a"}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		m.SetShare(a.UUID(), 5),
		m.SetLimits(a.UUID(), mdev.Limits{TurnTimeout: mdev.Duration(3 * time.Second), ProgramBytes: 2 << 20}),
		m.SetPolicy(0, "fixed-share"),
		m.SetReuseBudget("tenant-a", 1<<20),
		m.SetPlacement(mdev.PlaceRoundRobin, nil),
		m.SetOvercommit(a.UUID(), mdev.Overcommit{Policy: mdev.OvercommitSuspend}),
		m.SetProfileOvercommit("vgpu-medium", mdev.Overcommit{Policy: mdev.OvercommitBlock, Timeout: mdev.Duration(5 * time.Second)}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := Capture(m)
	if len(st.Instances) != 2 || st.Instances[0].Share != 5 || len(st.ReuseBudgets) != 1 || st.Placement == nil ||
		st.Instances[0].Overcommit.Policy != mdev.OvercommitSuspend || len(st.ProfileOvercommit) != 1 {
		t.Fatalf("Capture = %+v", st)
	}
	m.Close()

	gone := Instance{UUID: "99999999-2222-3333-4444-555555555555", Profile: "vgpu-gone"}
	in := st
	in.Instances = append(append([]Instance(nil), st.Instances...), gone)
	m2 := newManager(t, nil)
	kept, err := Restore(m2, in)
	if !errors.Is(err, mdev.ErrUnknownProfile) || len(kept) != 1 || kept[0].UUID != gone.UUID {
		t.Fatalf("Restore = %+v, %v; want the unknown profile's record kept", kept, err)
	}
	if d := cmp.Diff(st, Capture(m2)); d != "" {
		t.Errorf("restored state (-before +after):\n%s", d)
	}
}

// TestStoreSavesEveryChange: attached to a manager, the store writes the
// state file after each change, carrying the records Restore kept.
func TestStoreSavesEveryChange(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(dir, nil)
	m := newManager(t, s.Changed)
	kept := []Instance{{UUID: "99999999-2222-3333-4444-555555555555", Profile: "vgpu-gone"}}
	if err := s.Attach(m, kept); err != nil {
		t.Fatal(err)
	}
	in, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetShare(in.UUID(), 7); err != nil {
		t.Fatal(err)
	}
	st, ok, err := Load(dir)
	if !ok || err != nil || len(st.Instances) != 2 || st.Instances[0].UUID != in.UUID() || st.Instances[0].Share != 7 ||
		st.Instances[1].UUID != kept[0].UUID {
		t.Fatalf("after create and set-share the file holds %+v, %v, %v", st, ok, err)
	}
	if err := m.Destroy(in.UUID()); err != nil {
		t.Fatal(err)
	}
	if st, _, _ = Load(dir); len(st.Instances) != 1 {
		t.Errorf("after destroy the file holds %+v, want the kept record only", st.Instances)
	}
	// Closing the manager (a daemon stopping) is no change.
	m.Close()
	if st, _, _ = Load(dir); len(st.Instances) != 1 {
		t.Errorf("after Close the file holds %+v", st.Instances)
	}
	if s.Err() != nil {
		t.Errorf("Err() = %v", s.Err())
	}
}

// TestNamesSurvive: an instance's name and labels go into the state
// file and come back in a new manager, where the name still stands for
// the UUID.
func TestNamesSurvive(t *testing.T) {
	m := newManager(t, nil)
	a, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small", Name: "web-1", Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(Capture(m))
	if err != nil {
		t.Fatal(err)
	}
	st, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	m2 := newManager(t, nil)
	if _, err := Restore(m2, st); err != nil {
		t.Fatal(err)
	}
	id, err := m2.Resolve("web-1")
	if err != nil || id != a.UUID() {
		t.Fatalf("Resolve(web-1) after restore = %q, %v; want %s", id, err, a.UUID())
	}
	in, err := m2.Get(id)
	if err != nil || in.Name() != "web-1" || !cmp.Equal(in.Labels(), map[string]string{"team": "a"}) {
		t.Errorf("restored %v: name %q labels %v", err, in.Name(), in.Labels())
	}
}

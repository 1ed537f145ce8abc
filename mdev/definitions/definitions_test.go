package definitions

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/mdev"
)

// TestDir: Put writes a definition (a UUID made up once) that Get and
// List read back; a file that cannot be used is reported by List, not
// used; Delete removes it.
func TestDir(t *testing.T) {
	dir := Dir(filepath.Join(t.TempDir(), "instances.d"))
	if defs, bad, err := dir.List(); len(defs) != 0 || bad != nil || err != nil {
		t.Fatalf("List of a directory not there = %v, %v, %v", defs, bad, err)
	}
	dev := 0
	d, err := dir.Put(Definition{Name: "web", Profile: "vgpu-small", Device: &dev, Labels: map[string]string{"team": "a"}})
	if err != nil || d.UUID == "" {
		t.Fatalf("Put = %+v, %v", d, err)
	}
	got, err := dir.Get("web")
	if err != nil || !cmp.Equal(got, d) {
		t.Errorf("Get = %+v, %v; want %+v", got, err, d)
	}
	for name, body := range map[string]string{
		"unknown":  `{"profile": "vgpu-small", "uuid": "` + d.UUID + `", "color": "red"}`,
		"other":    `{"name": "web2", "profile": "vgpu-small", "uuid": "` + d.UUID + `"}`,
		"nouuid":   `{"profile": "vgpu-small"}`,
		"badjson":  `{`,
		"-badname": `{"profile": "vgpu-small", "uuid": "` + d.UUID + `"}`,
	} {
		if err := os.WriteFile(filepath.Join(string(dir), name+".json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defs, bad, err := dir.List()
	if err != nil || len(defs) != 1 || defs[0].Name != "web" || len(bad) != 5 {
		t.Errorf("List = %+v, %v, %v; want web and 5 refused", defs, bad, err)
	}
	for _, b := range bad {
		if !errors.Is(b, ErrBadDefinition) {
			t.Errorf("refused file: %v, want ErrBadDefinition", b)
		}
	}
	for _, bad := range []Definition{{Name: "../x", Profile: "p"}, {Name: "x"}, {Name: "x", Profile: "p", UUID: "nope"}} {
		if _, err := dir.Put(bad); !errors.Is(err, ErrBadDefinition) {
			t.Errorf("Put(%+v) = %v, want ErrBadDefinition", bad, err)
		}
	}
	if err := dir.Delete("web"); err != nil {
		t.Fatal(err)
	}
	if err := dir.Delete("web"); !errors.Is(err, ErrNoDefinition) {
		t.Errorf("second Delete = %v", err)
	}
}

// TestApply: each definition whose instance is missing is created with
// its UUID, name and labels; one that exists is left alone; one refused
// is said and the others go on.
func TestApply(t *testing.T) {
	d, err := gpu.Open("")
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	defer d.Close()
	m, err := mdev.NewManager(mdev.Config{Devices: []gpu.Device{d}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dir := Dir(t.TempDir())
	a, _ := dir.Put(Definition{Name: "a", Profile: "vgpu-small", Labels: map[string]string{"k": "v"}})
	b, _ := dir.Put(Definition{Name: "b", Profile: "nosuch"})
	defs, _, _ := dir.List()
	created, err := Apply(m, defs)
	if len(created) != 1 || created[0] != a.UUID || !errors.Is(err, mdev.ErrUnknownProfile) {
		t.Fatalf("Apply = %v, %v; want %s created and %s refused", created, err, a.UUID, b.Name)
	}
	in, err := m.Get(a.UUID)
	if err != nil || in.Name() != "a" || in.Labels()["k"] != "v" {
		t.Errorf("created %v: name %q labels %v", err, in.Name(), in.Labels())
	}
	if created, _ := Apply(m, defs[:1]); len(created) != 0 {
		t.Errorf("Apply again created %v", created)
	}
}

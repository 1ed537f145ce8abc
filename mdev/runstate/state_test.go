package runstate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/worker/child"
)

func TestMain(m *testing.M) {
	child.EnterRole() // a worker or executor of this test binary's pool
	goleak.VerifyTestMain(m)
}

func sample() State {
	return State{
		Instances: []Instance{
			{UUID: "11111111-2222-3333-4444-555555555555", Profile: "vgpu-small", Device: 0, Share: 3,
				Limits: mdev.Limits{TurnTimeout: mdev.Duration(2 * time.Second), ProgramBytes: 1 << 20}},
			{UUID: "11111111-2222-3333-4444-666666666666", Profile: "vgpu-medium", Device: 1,
				Reuse: mdev.ReuseSetting{Domain: "tenant-a"}},
		},
		Policies:     []Policy{{Device: 0, Policy: "fixed-share"}},
		ReuseBudgets: []ReuseBudget{{Domain: "tenant-a", Bytes: 1 << 20}},
		Placement:    &Placement{Policy: "round-robin"},
	}
}

func TestEncodeDecode(t *testing.T) {
	b, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(Encode()) = %v\n%s", err, b)
	}
	want := sample()
	want.Format, want.Version = Format, Version
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := `{"format":"vgpud-state","version":1,"instances":[]}`
	for _, tt := range []struct{ name, in, want string }{
		{"empty", ``, "EOF"},
		{"not json", `vgpud`, "invalid"},
		{"other format", `{"format":"x","version":1,"instances":[]}`, "format"},
		{"newer version", `{"format":"vgpud-state","version":2,"instances":[]}`, "version 2"},
		{"unknown field", `{"format":"vgpud-state","version":1,"instances":[],"extra":1}`, "unknown field"},
		{"trailing", good + `{}`, "trailing"},
		{"no uuid", `{"format":"vgpud-state","version":1,"instances":[{"profile":"p"}]}`, "no uuid"},
		{"twice", `{"format":"vgpud-state","version":1,"instances":[{"uuid":"a","profile":"p"},{"uuid":"a","profile":"p"}]}`, "twice"},
		{"negative device", `{"format":"vgpud-state","version":1,"instances":[{"uuid":"a","profile":"p","device":-1}]}`, "device -1"},
		{"negative kernel limit", `{"format":"vgpud-state","version":1,"instances":[{"uuid":"a","profile":"p","limits":{"kernel_timeout":"-1s"}}]}`, "negative limit"},
		{"negative slice", `{"format":"vgpud-state","version":1,"instances":[{"uuid":"a","profile":"p","limits":{"slice":"-1ms"}}]}`, "negative limit"},
		{"bad policy", `{"format":"vgpud-state","version":1,"instances":[],"policies":[{"device":0}]}`, "policy"},
		{"bad placement", `{"format":"vgpud-state","version":1,"instances":[],"placement":{"policy":"best"}}`, "placement policy"},
		{"bad placement dataset", `{"format":"vgpud-state","version":1,"instances":[],"placement":{"policy":"fewest","dataset":{"version":9}}}`, "dataset"},
	} {
		st, err := Decode([]byte(tt.in))
		if !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Decode = %+v, %v; want ErrBadState mentioning %q", tt.name, st, err, tt.want)
		}
	}
	if _, err := Decode([]byte(good)); err != nil {
		t.Errorf("Decode(%s) = %v", good, err)
	}
}

// FuzzDecode: no input panics; an accepted one encodes to a file that
// decodes to the same state.
func FuzzDecode(f *testing.F) {
	b, _ := Encode(sample())
	f.Add(b)
	f.Add([]byte(`{"format":"vgpud-state","version":1,"instances":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(st)
		if err != nil {
			t.Fatalf("Encode of a decoded state: %v", err)
		}
		st2, err := Decode(again)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(b))) = %v", err)
		}
		if d := cmp.Diff(st, st2, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("not stable (-first +second):\n%s", d)
		}
	})
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := Load(dir); ok || err != nil {
		t.Fatalf("Load(empty dir) = %v, %v; want none", ok, err)
	}
	for range 2 { // the second save replaces the first
		if err := Save(dir, sample()); err != nil {
			t.Fatal(err)
		}
	}
	st, ok, err := Load(dir)
	if !ok || err != nil || len(st.Instances) != 2 {
		t.Fatalf("Load = %+v, %v, %v", st, ok, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != StateFile {
		t.Errorf("the directory holds %v, want only %s", ents, StateFile)
	}
	if fi, _ := os.Stat(filepath.Join(dir, StateFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, want 0600", fi.Mode())
	}
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(dir); !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), StateFile) {
		t.Errorf("Load(corrupt) = %v, want ErrBadState naming the file", err)
	}
}

// TestLock: a second holder is refused with the first's PID; once the
// first releases it (or its process exits), it can be taken.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second Acquire = %v, want ErrLocked naming the holder's pid", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release = %v", err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release = %v", err)
	}
	l2.Release()
}

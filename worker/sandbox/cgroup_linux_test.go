package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCgroupTree makes a cgroup v2 tree in a temporary directory: a
// service cgroup whose subtree_control is ctl, and vgpud in its "main"
// leaf; it returns the tree and a /proc/self/cgroup naming the leaf.
func fakeCgroupTree(t *testing.T, ctl string) (root, self string) {
	t.Helper()
	root = t.TempDir()
	svc := filepath.Join(root, "system.slice", "vgpud.service")
	if err := os.MkdirAll(filepath.Join(svc, "main"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(svc, "cgroup.subtree_control"), []byte(ctl), 0o644); err != nil {
		t.Fatal(err)
	}
	self = filepath.Join(t.TempDir(), "cgroup")
	if err := os.WriteFile(self, []byte("0::/system.slice/vgpud.service/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, self
}

func TestDelegatedParent(t *testing.T) {
	tests := []struct {
		name, ctl, self string // self "": the fake tree's
		want            string // "" an error
	}{
		{"delegated", "cpu memory pids\n", "", "system.slice/vgpud.service"},
		{"no pids controller", "cpu memory\n", "", ""},
		{"no memory controller", "pids\n", "", ""},
		{"root cgroup", "memory pids\n", "0::/\n", ""},
		{"cgroup v1 only", "memory pids\n", "4:pids:/x\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, self := fakeCgroupTree(t, tt.ctl)
			if tt.self != "" {
				if err := os.WriteFile(self, []byte(tt.self), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := delegatedParent(self, root)
			switch {
			case tt.want == "" && err == nil:
				t.Errorf("delegatedParent() = %q, want an error", got)
			case tt.want != "" && (err != nil || got != filepath.Join(root, tt.want)):
				t.Errorf("delegatedParent() = %q, %v, want %q", got, err, filepath.Join(root, tt.want))
			}
		})
	}
}

// TestNewCgroup checks the bounds a worker's cgroup gets, in a fake tree
// (plain files stand for the controllers' files).
func TestNewCgroup(t *testing.T) {
	parent := t.TempDir()
	l := Limits{Processes: 300, DataBytes: 1 << 30, DirBytes: 64 << 20}.withDefaults()
	f, err := newCgroup(parent, l)
	if err != nil {
		t.Fatal(err)
	}
	dir := f.Name()
	if !strings.HasPrefix(filepath.Base(dir), cgroupPrefix) || filepath.Dir(dir) != parent {
		t.Errorf("newCgroup made %s, want %s%s...", dir, parent+"/", cgroupPrefix)
	}
	for file, want := range map[string]string{
		"pids.max":        "300",
		"memory.max":      "1409286144", // 1 GiB + 64 MiB + cgroupMemorySlack
		"memory.swap.max": "0",
	} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v, want %q", file, b, err, want)
		}
	}
	cgroupsMade.Lock()
	delete(cgroupsMade.dirs, dir)
	cgroupsMade.Unlock()
	f.Close()
}

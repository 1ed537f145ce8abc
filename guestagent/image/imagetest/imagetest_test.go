package imagetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuestDir(t *testing.T) {
	t.Setenv(EnvGuestDir, "")
	got, err := GuestDir()
	if err != nil {
		t.Fatalf("GuestDir() = %v", err)
	}
	root := filepath.Dir(filepath.Dir(got))
	if filepath.Base(got) != "guest" || filepath.Base(filepath.Dir(got)) != "build" {
		t.Errorf("GuestDir() = %s, want <repo>/build/guest", got)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Errorf("GuestDir() = %s: no go.mod at %s: %v", got, root, err)
	}

	dir := t.TempDir()
	t.Setenv(EnvGuestDir, dir)
	if got, err := GuestDir(); got != dir || err != nil {
		t.Errorf("GuestDir() with %s=%s = %s, %v, want %s, nil", EnvGuestDir, dir, got, err, dir)
	}
}

func TestFindKernel(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvGuestDir, dir)
	_, err := FindKernel()
	if err == nil || !strings.Contains(err.Error(), "fetch-kernel.sh") || !strings.Contains(err.Error(), "make kernel") {
		t.Errorf("FindKernel() in an empty dir = %v, want an error naming make kernel and fetch-kernel.sh", err)
	}
	for name, data := range map[string]string{"vmlinuz": "K", "kernel-version": "6.1.0-test\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := Kernel{Dir: dir, Vmlinuz: filepath.Join(dir, "vmlinuz"), Modules: filepath.Join(dir, "modules"), Release: "6.1.0-test"}
	if got, err := FindKernel(); got != want || err != nil {
		t.Errorf("FindKernel() = %+v, %v, want %+v, nil", got, err, want)
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/u-root/u-root/pkg/cpio"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	initBin := filepath.Join(dir, "init")
	bench := filepath.Join(dir, "bench")
	lib := filepath.Join(dir, "lib.so")
	for _, p := range []string{initBin, bench, lib} {
		if err := os.WriteFile(p, []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.cpio")
	args := []string{"-o", out, "-init", initBin, "-bin", "vgpu-mmiobench=" + bench, "-file", "/lib/vgpud/libvgpud-icd.so=" + lib}
	if err := run(context.Background(), args, io.Discard); err != nil {
		t.Fatalf("run(%q) = %v, want nil", args, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("read archive: %v", err)
	}
	a := cpio.ArchiveFromRecords(recs)
	for name, mode := range map[string]uint64{
		"init":                      cpio.S_IFREG | 0o755,
		"bin/vgpu-mmiobench":        cpio.S_IFREG | 0o755,
		"lib/vgpud/libvgpud-icd.so": cpio.S_IFREG | 0o755,
		"dev/console":               cpio.S_IFCHR | 0o600,
	} {
		r, ok := a.Get(name)
		if !ok || r.Mode != mode {
			t.Errorf("archive entry %s: present %v mode %#o, want present mode %#o", name, ok, r.Mode, mode)
		}
	}
}

func TestRunBadArgs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.cpio")
	for _, args := range [][]string{
		{},
		{"-o", out},
		{"-o", out, "-init", filepath.Join(dir, "absent")},
		{"-o", out, "-init", out, "-bin", "noequals"},
		{"-o", out, "-init", out, "-bin", "a/b=/x"},
		{"-o", out, "-init", out, "-file", "relative=" + out},
		{"-o", out, "-init", out, "-file", "/a/../b=" + out},
		{"-o", out, "-init", out, "-file", "/lib/x=" + filepath.Join(dir, "absent")},
		{"-o", out, "-init", out, "extra"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want error", args)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("stat %s after failed runs = %v, want not exist", out, err)
	}
}

package libvirt

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBinary writes a shell script standing in for the virsh binary.
func fakeBinary(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "virsh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExecRun: Exec runs the binary with the connection URI, quiet and in
// the C locale, hands the files over as descriptors 3, 4, ..., and turns
// a failure into a VirshError that says what virsh said.
func TestExecRun(t *testing.T) {
	bin := fakeBinary(t, `
echo "args: $*"
echo "lang: $LC_ALL"
[ -e /proc/self/fd/3 ] && echo "fd3: $(cat <&3)"
case "$*" in *nosuch*) echo "error: failed to get domain 'nosuch'" >&2; exit 1;; esac
case "$*" in *nometa*) printf 'error: metadata not found: Requested metadata element is not present\n' >&2; exit 1;; esac
case "$*" in *flood*) head -c 2000000 /dev/zero;; esac
exit 0`)
	e := Exec{Path: bin, URI: "qemu:///system?socket=/x"}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("through fd 3")
	w.Close()
	defer r.Close()
	out, err := e.Run(t.Context(), []*os.File{r}, "dominfo", "--domain", "vm1")
	if err != nil {
		t.Fatal(err)
	}
	want := "args: -c qemu:///system?socket=/x -q dominfo --domain vm1\nlang: C\nfd3: through fd 3\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	_, err = e.Run(t.Context(), nil, "dominfo", "--domain", "nosuch")
	var ve *VirshError
	if !errors.As(err, &ve) || ve.Code != 1 || ve.Message != "failed to get domain 'nosuch'" || !errors.Is(err, ErrNoDomain) || errors.Is(err, ErrNoMetadata) {
		t.Errorf("failure: %#v", err)
	}
	if _, err := e.Run(t.Context(), nil, "metadata", "nometa"); !errors.Is(err, ErrNoMetadata) {
		t.Errorf("no metadata: %v", err)
	}
	if _, err := e.Run(t.Context(), nil, "flood"); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("a flood of output: %v", err)
	}
	if _, err := (Exec{Path: filepath.Join(t.TempDir(), "none")}).Run(t.Context(), nil, "list"); err == nil {
		t.Error("a missing binary ran")
	}
}

// TestExecStart: a started command streams its output and is killed with
// its context.
func TestExecStart(t *testing.T) {
	bin := fakeBinary(t, `echo "event 'lifecycle' for domain 'vm1': Started Booted"; exec sleep 1000`)
	ctx, cancel := context.WithCancel(context.Background())
	out, wait, err := Exec{Path: bin}.Start(ctx, "event", "--loop")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(out, buf, 10)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "event 'lifecycle'") {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	cancel()
	io.Copy(io.Discard, out)
	if err := wait(); err == nil {
		t.Error("a killed command ended without error")
	}
}

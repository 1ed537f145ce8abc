// Package imagetest finds the test guest's kernel and builds initramfs
// images for tests that boot QEMU (docs/guest-image.md).
//
// The kernel comes from scripts/fetch-kernel.sh (make kernel) into the
// guest directory: $VGPUD_GUEST_DIR, or build/guest at the top of the
// repository. Tests that need it fail, not skip, when it is missing, except
// under -short, where they skip. The same holds for the Debian userland
// disk (RequireApps) that scripts/fetch-userland.sh (make guest-apps)
// builds into <guest dir>/apps.
package imagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/guestagent/image"
)

// EnvGuestDir overrides the guest directory.
const EnvGuestDir = "VGPUD_GUEST_DIR"

// InitPackage is the Go package built as the guest's /init.
const InitPackage = "github.com/vgpud/vgpud/guestagent/cmd/vgpu-init"

// Kernel is a fetched guest kernel.
type Kernel struct {
	Dir     string // the guest directory
	Vmlinuz string // kernel image
	Modules string // directory of the guest's *.ko
	Release string // kernel release (uname -r in the guest)
}

// GuestDir returns $VGPUD_GUEST_DIR, or build/guest under the repository
// root found by walking up from the working directory to go.mod.
func GuestDir() (string, error) {
	if d := os.Getenv(EnvGuestDir); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("guest dir: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "build", "guest"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("guest dir: no go.mod above the working directory; set %s", EnvGuestDir)
		}
		dir = parent
	}
}

// FindKernel returns the kernel in the guest directory, or an error saying
// how to fetch it.
func FindKernel() (Kernel, error) {
	dir, err := GuestDir()
	if err != nil {
		return Kernel{}, err
	}
	k := Kernel{Dir: dir, Vmlinuz: filepath.Join(dir, "vmlinuz"), Modules: filepath.Join(dir, "modules")}
	if _, err := os.Stat(k.Vmlinuz); err != nil {
		return Kernel{}, fmt.Errorf("guest kernel missing (%w): run `make kernel` or `scripts/fetch-kernel.sh %s` (or set %s)",
			err, dir, EnvGuestDir)
	}
	if _, err := os.Stat(k.Modules); err != nil {
		return Kernel{}, fmt.Errorf("guest modules missing (%w): rerun `scripts/fetch-kernel.sh %s`", err, dir)
	}
	rel, err := os.ReadFile(filepath.Join(dir, "kernel-version"))
	if err != nil {
		return Kernel{}, fmt.Errorf("guest kernel version missing (%w): rerun `scripts/fetch-kernel.sh %s`", err, dir)
	}
	k.Release = strings.TrimSpace(string(rel))
	return k, nil
}

// RequireKernel returns the guest kernel. It fails t when the kernel is
// missing, and skips under -short.
func RequireKernel(t testing.TB) Kernel {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest; skipped under -short")
	}
	k, err := FindKernel()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Initramfs builds, in a temporary directory, an initramfs holding
// vgpu-init as /init, the kernel's modules, and each Go package of progs as
// /bin/<last path element>, all built static. It returns the archive's
// path.
func Initramfs(t testing.TB, k Kernel, progs ...string) string {
	t.Helper()
	out, err := BuildInitramfs(t.Context(), t.TempDir(), k, progs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// BuildInitramfs is Initramfs into dir, for programs that are not tests
// (benchmarks).
func BuildInitramfs(ctx context.Context, dir string, k Kernel, progs ...string) (string, error) {
	return buildInitramfs(ctx, dir, k, nil, progs)
}

// buildInitramfs writes dir/initramfs.cpio: vgpu-init, k's modules, the
// files, and progs built static into /bin.
func buildInitramfs(ctx context.Context, dir string, k Kernel, files []image.File, progs []string) (string, error) {
	initBin, err := BuildStatic(ctx, dir, InitPackage)
	if err != nil {
		return "", err
	}
	spec := image.Spec{Init: initBin, Modules: k.Modules, Files: files}
	for _, p := range progs {
		bin, err := BuildStatic(ctx, dir, p)
		if err != nil {
			return "", err
		}
		spec.Files = append(spec.Files, image.File{Src: bin, Dst: image.BinDir + "/" + path.Base(p), Mode: 0o755})
	}
	out := filepath.Join(dir, "initramfs.cpio")
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	if err := image.Build(f, spec); err != nil {
		f.Close()
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return out, nil
}

// BuildStatic builds the Go package pkg with CGO_ENABLED=0 into dir and
// returns the binary's path (dir/<last path element of pkg>).
func BuildStatic(ctx context.Context, dir, pkg string) (string, error) {
	out := filepath.Join(dir, path.Base(pkg))
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	if _, err := os.Stat(out); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("go build %s: no binary at %s", pkg, out)
	}
	return out, nil
}

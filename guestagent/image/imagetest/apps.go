package imagetest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/vgpud/vgpud/guestagent/image"
)

// AppsProgram is the initramfs program (vgpu.run=AppsProgram) that mounts
// the userland disk and runs vgpu.args[0] in it with the rest of
// vgpu.args, chrooted, in /root. The initramfs's /bin is /vgpu/bin there.
const AppsProgram = "vgpu-apps"

// AppsBinDir is where the initramfs's /bin (vgpu-apps, busybox and the Go
// programs a test adds) appears inside the userland.
const AppsBinDir = "/vgpu/bin"

// Apps is the Debian userland image that scripts/fetch-userland.sh (make
// guest-apps) built into <guest dir>/apps (docs/guest-image.md).
type Apps struct {
	Kernel // the guest kernel the image's modules belong to
	// AppsDir is the image's directory.
	AppsDir string
	// Disk is the root file system (rootfs.ext4): qemuvm.Config.Disk.
	Disk string
	// Initrd is the tree the initramfs takes on top of vgpu-init's
	// (bin/vgpu-apps, bin/busybox, lib/modules/disk/).
	Initrd string
}

// FindApps returns the userland image in the guest directory, or an error
// saying how to build it.
func FindApps() (Apps, error) {
	k, err := FindKernel()
	if err != nil {
		return Apps{}, err
	}
	dir := filepath.Join(k.Dir, "apps")
	a := Apps{Kernel: k, AppsDir: dir, Disk: filepath.Join(dir, "rootfs.ext4"), Initrd: filepath.Join(dir, "initrd")}
	for _, p := range []string{
		a.Disk,
		filepath.Join(a.Initrd, "bin", AppsProgram),
		filepath.Join(a.Initrd, "bin", "busybox"),
		filepath.Join(a.Initrd, "lib", "modules", "disk", "order"),
		filepath.Join(dir, "stamp"), // written last
	} {
		if _, err := os.Stat(p); err != nil {
			return Apps{}, fmt.Errorf("guest userland image missing (%w): run `make guest-apps` or `scripts/fetch-userland.sh %s %s`",
				err, dir, k.Dir)
		}
	}
	// The disk modules must match the kernel they are loaded into.
	have, err := os.ReadFile(filepath.Join(dir, "kernel-package"))
	if err != nil {
		return Apps{}, fmt.Errorf("guest userland image in %s: %w: rerun `make guest-apps`", dir, err)
	}
	want, err := os.ReadFile(filepath.Join(k.Dir, "kernel-package"))
	if err != nil {
		return Apps{}, fmt.Errorf("guest kernel: %w: rerun `make kernel`", err)
	}
	if !bytes.Equal(have, want) {
		return Apps{}, fmt.Errorf("guest userland image in %s was built for kernel %q, the guest kernel is %q: rerun `make guest-apps`",
			dir, bytes.TrimSpace(have), bytes.TrimSpace(want))
	}
	return a, nil
}

// RequireApps returns the userland image. It fails t when the image (or
// the kernel) is missing, and skips under -short.
func RequireApps(t testing.TB) Apps {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest with the userland disk; skipped under -short")
	}
	a, err := FindApps()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// AppsInitramfs builds, in a temporary directory, the initramfs that
// boots the userland disk: what Initramfs holds (vgpu-init, the kernel's
// modules, each Go package of progs as /bin/<name>, built static), the
// image's Initrd tree, and extra files (e.g. a script a test runs in the
// guest, placed under /bin so that it is AppsBinDir/<name> there). It
// returns the archive's path; boot it with qemuvm.Config{Initrd: it,
// Disk: a.Disk, Append: "vgpu.run=vgpu-apps vgpu.args=PROG,ARGS"}.
func AppsInitramfs(t testing.TB, a Apps, extra []image.File, progs ...string) string {
	t.Helper()
	out, err := BuildAppsInitramfs(t.Context(), t.TempDir(), a, extra, progs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// BuildAppsInitramfs is AppsInitramfs into dir, for programs that are not
// tests.
func BuildAppsInitramfs(ctx context.Context, dir string, a Apps, extra []image.File, progs ...string) (string, error) {
	files, err := treeFiles(a.Initrd)
	if err != nil {
		return "", fmt.Errorf("userland initramfs: %w", err)
	}
	return buildInitramfs(ctx, dir, a.Kernel, append(files, extra...), progs)
}

// treeFiles lists the regular files under root as archive files at the
// same paths, with their own permissions.
func treeFiles(root string) ([]image.File, error) {
	var files []image.File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, image.File{Src: p, Dst: path.Join("/", filepath.ToSlash(rel))})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files under %s", root)
	}
	return files, nil
}

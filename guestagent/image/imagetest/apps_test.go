package imagetest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vgpud/vgpud/guestagent/image"
)

// fakeGuest writes a kernel and, with apps, a userland image built for
// appsKernel into a fresh guest directory.
func fakeGuest(t *testing.T, apps bool, appsKernel string) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv(EnvGuestDir, dir)
	files := map[string]string{
		"vmlinuz":        "K",
		"kernel-version": "6.1.0-test\n",
		"kernel-package": "linux-image-6.1.0-test 6.1.1-1\n",
		"modules/a.ko":   "M",
	}
	if apps {
		for name, data := range map[string]string{
			"apps/rootfs.ext4":                   "D",
			"apps/initrd/bin/vgpu-apps":          "#!/bin/busybox sh\n",
			"apps/initrd/bin/busybox":            "B",
			"apps/initrd/lib/modules/disk/order": "virtio_blk\n",
			"apps/kernel-package":                appsKernel,
			"apps/stamp":                         "S\n",
		} {
			files[name] = data
		}
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindAppsMissing(t *testing.T) {
	fakeGuest(t, false, "")
	_, err := FindApps()
	if err == nil || !strings.Contains(err.Error(), "make guest-apps") || !strings.Contains(err.Error(), "fetch-userland.sh") {
		t.Errorf("FindApps() without an image = %v, want an error naming make guest-apps and fetch-userland.sh", err)
	}
}

func TestFindAppsOtherKernel(t *testing.T) {
	fakeGuest(t, true, "linux-image-6.1.0-old 6.1.0-1\n")
	_, err := FindApps()
	if err == nil || !strings.Contains(err.Error(), "6.1.0-old") || !strings.Contains(err.Error(), "make guest-apps") {
		t.Errorf("FindApps() with a stale image = %v, want an error naming both kernels and make guest-apps", err)
	}
}

func TestFindApps(t *testing.T) {
	dir := fakeGuest(t, true, "linux-image-6.1.0-test 6.1.1-1\n")
	a, err := FindApps()
	if err != nil {
		t.Fatalf("FindApps() = %v", err)
	}
	apps := filepath.Join(dir, "apps")
	if a.Dir != dir || a.AppsDir != apps || a.Disk != filepath.Join(apps, "rootfs.ext4") || a.Initrd != filepath.Join(apps, "initrd") {
		t.Errorf("FindApps() = %+v, want the paths under %s", a, apps)
	}
	files, err := treeFiles(a.Initrd)
	if err != nil {
		t.Fatalf("treeFiles = %v", err)
	}
	want := []image.File{
		{Src: filepath.Join(a.Initrd, "bin/busybox"), Dst: "/bin/busybox"},
		{Src: filepath.Join(a.Initrd, "bin/vgpu-apps"), Dst: "/bin/vgpu-apps"},
		{Src: filepath.Join(a.Initrd, "lib/modules/disk/order"), Dst: "/lib/modules/disk/order"},
	}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("treeFiles mismatch (-want +got):\n%s", diff)
	}
}

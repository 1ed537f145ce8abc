//go:build guestos

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// guestOSDir is the ordinary Debian VM of scripts/guest-os.sh (make
// test-guest-deb builds it); debDir holds make deb's packages.
const (
	guestOSDir = "../build/guest-os"
	debDir     = "../build/deb"
)

// guestOSCheck is the check.sh the image's vgpud-check.service runs as
// root once the VM reached multi-user.target. It installs the packages as
// an operator would (apt, from files: the VM has no network), and runs
// Debian's clinfo and a pyopencl program as the unprivileged user tester.
// Each step is framed by USERLAND-BEGIN/END (userlandResults).
const guestOSCheck = "#!/bin/sh\nshare=/mnt/vgpudtest\n" + userlandCheckFunc + `user() { runuser -u tester -- env HOME=/home/tester "$@"; }
# vgpu-icdd serves once it opened the vGPU: wait for its socket, bounded.
icd_socket() {
	i=0
	while [ ! -S /run/vgpud/icd.sock ]; do
		i=$((i + 1))
		[ $i -gt 600 ] && { echo "no /run/vgpud/icd.sock after 60 s"; return 1; }
		sleep 0.1
	done
	echo "icd.sock after $i tries"
}
check init sh -c 'echo "pid1=$(readlink /proc/1/exe) cmdline=$(cat /proc/cmdline)"; systemctl is-system-running || true'
check install apt-get install -y --no-install-recommends $share/debs/*.deb
check services systemctl is-active vgpu-agent.service vgpu-icdd.service
check icd-socket icd_socket
check clinfo-user user clinfo
check vadd-user user python3 $share/vadd.py
check journal journalctl -b --no-pager -u vgpu-icdd.service -u vgpu-agent.service
echo VGPUD-CHECK done
`

// TestGuestPackage boots an ordinary Debian VM (scripts/guest-os.sh:
// Debian's kernel and initramfs, systemd as init, a user account; none of
// vgpud's guest image) with a vGPU of the host's QEMU 7.2 over mpqemu and
// the agent channel, installs the vgpud-guest package with apt inside it
// (its postinst starts vgpu-agent and vgpu-icdd under systemd), and checks
// that Debian's clinfo, installed beside it, lists the vGPU to an
// unprivileged user and that Debian's pyopencl computes correctly through
// it as that user.
func TestGuestPackage(t *testing.T) {
	for _, f := range []string{"vmlinuz", "initrd.img", "root.ext4"} {
		if _, err := os.Stat(filepath.Join(guestOSDir, f)); err != nil {
			t.Fatalf("%v: run `make guest-os` (scripts/guest-os.sh)", err)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(guestOSDir, "debs", "*.deb"))
	pkg, _ := filepath.Glob(filepath.Join(debDir, "vgpud-guest_*_amd64.deb"))
	if len(pkg) != 1 || len(debs) == 0 {
		t.Fatalf("want one vgpud-guest package in %s (make deb) and the VM's debs (make guest-os): %q %q", debDir, pkg, debs)
	}

	share := t.TempDir()
	if err := os.Mkdir(filepath.Join(share, "debs"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(debs, pkg[0]) {
		copyFile(t, f, filepath.Join(share, "debs", filepath.Base(f)))
	}
	copyFile(t, icdVadd, filepath.Join(share, "vadd.py"))
	if err := os.WriteFile(filepath.Join(share, "check.sh"), []byte(guestOSCheck), 0o755); err != nil {
		t.Fatal(err)
	}
	// The 9p server reads the share as QEMU's user; t.TempDir is 0700.
	if err := os.Chmod(share, 0o755); err != nil {
		t.Fatal(err)
	}

	m := hostOn(t, mpqemu.Transport{})
	inst := mustCreate(t, m, "vgpu-small")
	prof := profileOf(t, m, "vgpu-small")

	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*vmTimeout)
	defer cancel()
	start := time.Now()
	vm, err := bootVGPU(ctx, inst.Socket(), qemuvm.Config{
		Kernel: abs(filepath.Join(guestOSDir, "vmlinuz")), Initrd: abs(filepath.Join(guestOSDir, "initrd.img")),
		Disk: abs(filepath.Join(guestOSDir, "root.ext4")), DiskSnapshot: true,
		Append: "root=/dev/vda rw", MemMiB: 1024, CPUs: 2,
		AgentSocket: inst.AgentSocket(),
		Shares:      []qemuvm.Share{{Tag: "vgpudtest", Dir: share}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	console := func() string { return strings.Join(vm.Lines(), "\n") }
	if _, err := vm.WaitLine(ctx, "VGPUD-CHECK done"); err != nil {
		t.Fatalf("the VM's check did not finish: %v; console:\n%s", err, console())
	}
	checked := time.Since(start)
	if err := vm.Wait(); err != nil {
		t.Errorf("the VM did not power off cleanly: %v", err)
	}
	t.Logf("boot, install and checks: %v; power-off after %v", checked.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	out, codes := userlandResults(vm.Lines())
	for _, name := range []string{"init", "install", "services", "icd-socket", "clinfo-user", "vadd-user"} {
		c, ok := codes[name]
		if !ok {
			t.Fatalf("check %s did not finish; console:\n%s", name, console())
		}
		if c != 0 {
			t.Errorf("%s: exit %d, want 0; output:\n%s", name, c, out[name])
		}
	}
	t.Logf("init: %s", strings.TrimSpace(out["init"]))
	if !strings.Contains(out["init"], "pid1=/usr/lib/systemd/systemd") && !strings.Contains(out["init"], "pid1=/lib/systemd/systemd") {
		t.Errorf("the VM's init is not systemd: %s", out["init"])
	}
	if !regexp.MustCompile(`(?m)^Setting up vgpud-guest `).MatchString(out["install"]) {
		t.Errorf("apt did not set up vgpud-guest:\n%s", out["install"])
	}
	if regexp.MustCompile(`(?m)^Setting up (pocl|mesa)-opencl-icd`).MatchString(out["install"]) {
		t.Errorf("apt installed another OpenCL platform for pyopencl (vgpud-guest provides opencl-icd):\n%s", out["install"])
	}
	for _, want := range []string{
		`(?m)^Number of platforms\s+1\s*$`,
		`(?m)^\s*Platform Name\s+vgpud\s*$`,
		fmt.Sprintf(`(?m)^\s*Global memory size\s+%d\b`, prof.MemBytes),
		`(?m)^\s*Device Type\s+GPU\b`,
	} {
		if !regexp.MustCompile(want).MatchString(out["clinfo-user"]) {
			t.Errorf("clinfo as tester does not match %s:\n%s", want, out["clinfo-user"])
		}
	}
	t.Logf("pyopencl as tester: %s", strings.TrimSpace(out["vadd-user"]))
	if !strings.Contains(out["vadd-user"], "VADD OK platform=vgpud") {
		t.Errorf("pyopencl vector addition as tester: output:\n%s", out["vadd-user"])
	}
	if t.Failed() {
		t.Logf("services' journal:\n%s", out["journal"])
	}
}

// copyFile copies src to dst (0644).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

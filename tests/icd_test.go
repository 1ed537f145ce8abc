package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/image"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/qemuvm"
	"github.com/vgpud/vgpud/mdev/vfiouser"
	"github.com/vgpud/vgpud/tests/ffmpegcheck"
)

// icdLib is the guest ICD that `make icd` builds (docs/icd.md).
const icdLib = "../build/icd/libvgpud-icd.so"

// builtICD returns the absolute path of icdLib; the test fails when `make
// icd` has not built it.
func builtICD(t *testing.T) string {
	t.Helper()
	lib, err := filepath.Abs(icdLib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lib); err != nil {
		t.Fatalf("guest ICD missing (%v): run `make icd`", err)
	}
	return lib
}

// icdGuestCheck runs in the guest, chrooted into the Debian userland by
// vgpu-apps, with the vgpud ICD installed in /etc/OpenCL/vendors and
// vgpu-icdd serving the vGPU. The applications are Debian's, unmodified;
// "user" runs them as nobody (arguments without blanks), which can neither map the BAR nor read
// /proc/self/pagemap, so everything goes through vgpu-icdd.
const icdGuestCheck = "#!/bin/sh\n" + userlandCheckFunc + `user() { su -p -s /bin/sh -c "HOME=/tmp $*" nobody; }
check clinfo-root clinfo
check clinfo-user user clinfo
check vadd-user user python3 /vgpu/bin/vadd.py
check sleep-user user python3 /vgpu/bin/icd_sleep.py
check printf-user user python3 /vgpu/bin/icd_printf.py
check imbuf-user user python3 /vgpu/bin/icd_imbuf.py
for f in /vgpu/bin/ffmpeg-*.sh; do check "$(basename "$f" .sh)" user sh "$f"; done
`

// icdVadd is a pyopencl program: a vector addition on the first platform,
// checked on the CPU, with the kernel's profiled time (the README's demo
// runs it too).
const icdVadd = "../scripts/guest/vadd.py"

// icdSleep is a pyopencl program whose waits outlast vgpu-icdd's polling
// window: kernels of tens of milliseconds, waited for.
const icdSleep = "testdata/icd_sleep.py"

// icdPrintf is a pyopencl program whose kernel prints: the output must
// reach the program's standard output (docs/icd.md "printf").
const icdPrintf = "testdata/icd_printf.py"

// icdImbuf is a pyopencl program whose kernel takes images made from
// buffers (image1d_buffer_t): their bytes are the buffers' (ABI 1.10).
const icdImbuf = "testdata/icd_imbuf.py"

// TestGuestICD boots the userland guest with a vGPU, the vgpud ICD and
// vgpu-icdd, and checks that Debian's clinfo lists the vGPU with the
// profile's limits, as root and as an unprivileged user, that an
// unmodified pyopencl program computes correctly through it as that user,
// and that Debian's ffmpeg's four OpenCL filters give, as that user, the
// frames the host's ffmpeg gives on PoCL directly (issue 45: OpenCL
// images).
// On both transports: on QEMU 11.1 over vfio-user this is the Debian
// userland (1 GiB of RAM, a disk) of make demo's third VM.
func TestGuestICD(t *testing.T) {
	a := imagetest.RequireApps(t)
	lib := builtICD(t)
	for _, tt := range qemuTransports {
		t.Run(tt.name, func(t *testing.T) { guestICD(t, a, lib, hostOn(t, tt.tr)) })
	}
}

func guestICD(t *testing.T, a imagetest.Apps, lib string, m *mdev.Manager) {
	inst := mustCreate(t, m, "vgpu-small")
	prof := profileOf(t, m, "vgpu-small")

	dir := t.TempDir()
	files := []image.File{{Src: lib, Dst: "/lib/vgpud/libvgpud-icd.so", Mode: 0o755}}
	check := filepath.Join(dir, "icd-check")
	if err := os.WriteFile(check, []byte(icdGuestCheck), 0o755); err != nil {
		t.Fatal(err)
	}
	files = append(files, image.File{Src: check, Dst: image.BinDir + "/icd-check", Mode: 0o755},
		image.File{Src: icdVadd, Dst: image.BinDir + "/vadd.py", Mode: 0o644},
		image.File{Src: icdSleep, Dst: image.BinDir + "/icd_sleep.py", Mode: 0o644},
		image.File{Src: icdPrintf, Dst: image.BinDir + "/icd_printf.py", Mode: 0o644},
		image.File{Src: icdImbuf, Dst: image.BinDir + "/icd_imbuf.py", Mode: 0o644})
	files = append(files, ffmpegScripts(t, dir)...)
	reference := ffmpegReference(t)
	initrd := imagetest.AppsInitramfs(t, a, files, "github.com/vgpud/vgpud/guestagent/cmd/vgpu-icdd")

	out, codes, console := runAppsGuest(t, a, initrd, inst, imagetest.AppsBinDir+"/icd-check")
	if strings.HasSuffix(inst.Socket(), vfiouser.Transport{}.Suffix()) {
		checkICDDInterrupts(t, console)
	}
	checkGuestFFmpeg(t, out, codes, reference)
	for _, name := range []string{"clinfo-root", "clinfo-user", "vadd-user", "sleep-user", "printf-user", "imbuf-user"} {
		if _, ok := codes[name]; !ok {
			t.Fatalf("check %s did not finish; console:\n%s", name, console)
		}
		if codes[name] != 0 {
			t.Errorf("%s: exit %d, want 0; output:\n%s", name, codes[name], out[name])
		}
	}
	for _, name := range []string{"clinfo-root", "clinfo-user"} {
		text := out[name]
		for _, want := range []string{
			`(?m)^Number of platforms\s+1\s*$`,
			`(?m)^\s*Platform Name\s+vgpud\s*$`,
			fmt.Sprintf(`(?m)^\s*Global memory size\s+%d\b`, prof.MemBytes),
			`(?m)^\s*Device Type\s+GPU\b`,
		} {
			if !regexp.MustCompile(want).MatchString(text) {
				t.Errorf("%s: output does not match %s:\n%s", name, want, text)
			}
		}
	}
	if !strings.Contains(out["imbuf-user"], "IMBUF OK") {
		t.Errorf("pyopencl on images made from buffers: output:\n%s", out["imbuf-user"])
	}
	if !strings.Contains(out["sleep-user"], "SLEEP OK") {
		t.Errorf("pyopencl kernels waited for past the polling window: output:\n%s", out["sleep-user"])
	}
	// A kernel's printf, in the guest process that launched it, before
	// the program's own line (printed after queue.finish()).
	var lines []string
	for i := range 4 {
		lines = append(lines, fmt.Sprintf("kernel says 45 from %d", i))
	}
	var said []string
	done := -1
	for i, l := range strings.Split(out["printf-user"], "\n") {
		switch {
		case strings.HasPrefix(l, "kernel says "):
			said = append(said, l)
			if done >= 0 {
				t.Errorf("kernel output after the program's line %d: %q", done, l)
			}
		case l == "PRINTF DONE":
			done = i
		}
	}
	slices.Sort(said)
	if done < 0 || !slices.Equal(said, lines) {
		t.Errorf("a kernel's printf in the guest: output:\n%s", out["printf-user"])
	}
	t.Logf("pyopencl as nobody: %s", strings.TrimSpace(out["vadd-user"]))
	if !strings.Contains(out["vadd-user"], "VADD OK platform=vgpud") {
		t.Errorf("pyopencl vector addition as nobody: output:\n%s", out["vadd-user"])
	}
}

// ffmpegScripts writes, for each of ffmpeg's OpenCL filters, a shell
// script that runs Debian's ffmpeg on it (ffmpegcheck.Args), for the
// guest check to run as nobody.
func ffmpegScripts(t *testing.T, dir string) []image.File {
	t.Helper()
	var files []image.File
	for _, f := range ffmpegcheck.Filters {
		name := "ffmpeg-" + ffmpegcheck.Name(f)
		p := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(p, []byte("exec ffmpeg "+ffmpegcheck.ShellArgs(f)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, image.File{Src: p, Dst: image.BinDir + "/" + name + ".sh", Mode: 0o644})
	}
	return files
}

// ffmpegReference runs each filter with the host's ffmpeg on the host's
// PoCL directly (the same Debian release's ffmpeg as the guest's): the
// frames the guest must produce through the vGPU.
func ffmpegReference(t *testing.T) map[string][]string {
	t.Helper()
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatal("ffmpeg not installed on the host (scripts/install-deps.sh installs it): it gives the reference frames")
	}
	vendors := t.TempDir()
	if err := ffmpegcheck.PoCLVendors(vendors); err != nil {
		t.Fatal(err)
	}
	ref := map[string][]string{}
	for _, f := range ffmpegcheck.Filters {
		md5s, err := ffmpegcheck.OnPoCL(ffmpeg, f, vendors)
		if err != nil || len(md5s) != ffmpegcheck.Frames {
			t.Fatalf("the reference on PoCL: %d frames, %v", len(md5s), err)
		}
		ref["ffmpeg-"+ffmpegcheck.Name(f)] = md5s
	}
	return ref
}

// checkGuestFFmpeg: each filter ran in the guest as nobody through the
// vGPU, and its frames are the host's on PoCL directly, byte for byte.
func checkGuestFFmpeg(t *testing.T, out map[string]string, codes map[string]int, reference map[string][]string) {
	t.Helper()
	for name, want := range reference {
		code, ok := codes[name]
		got := ffmpegcheck.FrameMD5s(out[name])
		switch {
		case !ok:
			t.Errorf("%s did not finish in the guest", name)
		case code != 0:
			t.Errorf("%s in the guest: exit %d; output:\n%s", name, code, out[name])
		case !slices.Equal(got, want):
			t.Errorf("%s in the guest: frames\n%s\nwant (PoCL directly on the host)\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// checkICDDInterrupts: on vfio-user (which delivers INTx under TCG)
// vgpu-icdd serves with the vGPU's completion interrupts, and they
// arrived: icd_sleep.py's waits outlast the polling window, so each sleeps
// with the line armed until its kernel completes (docs/icd-protocol.md
// "Completion interrupts").
func checkICDDInterrupts(t *testing.T, console string) {
	t.Helper()
	if !strings.Contains(console, "vgpu completion interrupts through uio_pci_generic") {
		t.Errorf("vgpu-icdd did not take the vGPU's completion interrupts; console:\n%s", console)
		return
	}
	m := regexp.MustCompile(`prog=vgpu-icdd .*irq_wakes=(\d+) .*interrupts=(\d+) interrupt_arms=(\d+)`).FindStringSubmatch(console)
	if m == nil {
		t.Errorf("no interrupt counts in vgpu-icdd's stopping line; console:\n%s", console)
		return
	}
	if n, _ := strconv.Atoi(m[2]); n == 0 {
		t.Errorf("no completion interrupt reached vgpu-icdd (armed %s times)", m[3])
	}
	t.Logf("vgpu-icdd: %s completion interrupts for %s arms; reapers woken by %s", m[2], m[3], m[1])
}

// profileOf returns the manager's profile called name.
func profileOf(t *testing.T, m *mdev.Manager, name string) mdev.Profile {
	t.Helper()
	for _, p := range m.Profiles() {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no profile %s", name)
	return mdev.Profile{}
}

// runAppsGuest boots the userland guest with inst's vGPU attached,
// running prog (an initramfs path as the userland sees it), and returns
// each check's output and exit code (userlandResults) and the console.
func runAppsGuest(t *testing.T, a imagetest.Apps, initrd string, inst *mdev.Instance, prog string) (map[string]string, map[string]int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), vmTimeout)
	defer cancel()
	start := time.Now()
	console, err := bootApps(ctx, a, initrd, inst.Socket(), prog, 1024)
	if err != nil {
		t.Errorf("%v; console:\n%s", err, console)
	}
	t.Logf("boot and checks: %v", time.Since(start).Round(time.Millisecond))
	lines := strings.Split(console, "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "VGPU-INIT error") || strings.HasPrefix(l, "VGPU-APPS error") {
			t.Errorf("console: %s", l)
		}
	}
	out, codes := userlandResults(lines)
	return out, codes, console
}

// bootApps boots the userland guest (memMiB of memory) with the vGPU
// behind socket running prog and returns its console once it powered off:
// an error when it did not, or its init exited non-zero.
func bootApps(ctx context.Context, a imagetest.Apps, initrd, socket, prog string, memMiB int) (string, error) {
	vm, err := bootVGPU(ctx, socket, qemuvm.Config{
		Kernel: a.Vmlinuz, Initrd: initrd, Disk: a.Disk, MemMiB: memMiB,
		Append: "vgpu.run=" + imagetest.AppsProgram + " vgpu.args=" + prog,
	})
	if err != nil {
		return "", err
	}
	defer vm.Kill()
	console := func() string { return strings.Join(vm.Lines(), "\n") }
	exit, err := vm.WaitLine(ctx, "VGPU-INIT exit=")
	if err != nil {
		return console(), fmt.Errorf("guest did not finish: %w", err)
	}
	if exit != "VGPU-INIT exit=0" {
		return console(), fmt.Errorf("%s, want VGPU-INIT exit=0", exit)
	}
	return console(), vm.Wait()
}

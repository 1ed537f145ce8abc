package tests

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/image"
	"github.com/vgpud/vgpud/guestagent/image/imagetest"
	"github.com/vgpud/vgpud/mdev/qemuvm"
)

// userlandCheck runs in the guest, chrooted into the Debian userland disk
// by vgpu-apps (/bin/sh is busybox's). Each check prints
// "USERLAND-BEGIN name", the command's output, then
// "USERLAND-END name exit=N" (userlandCheckFunc).
const userlandCheck = "#!/bin/sh\n" + userlandCheckFunc + `check clinfo clinfo
check python python3 -c "import pyopencl, pytest; print('pyopencl', pyopencl.VERSION, 'pytest', pytest.__version__)"
check hashcat hashcat --version
check clpeak clpeak --version
# Any tuner will do; -platform 99 makes it stop at the platform lookup
# however many platforms there are, instead of tuning for minutes.
tuner=$(ls /usr/bin/clblast_tuner_* | head -n 1)
echo "USERLAND tuner $tuner"
check clblast "$tuner" -platform 99
check files ls /usr/share/doc/python-pyopencl-doc/examples/test_wrapper.py /usr/share/hashcat/OpenCL/inc_types.h /vgpu/bin/vgpu-agent
`

// TestGuestUserland boots the guest with the Debian userland disk
// (make guest-apps) and checks that the unmodified Debian OpenCL programs
// of issue 11 start in it. No vGPU is attached: there is no guest ICD yet.
func TestGuestUserland(t *testing.T) {
	a := imagetest.RequireApps(t)
	script := filepath.Join(t.TempDir(), "userland-check")
	if err := os.WriteFile(script, []byte(userlandCheck), 0o755); err != nil {
		t.Fatal(err)
	}
	initrd := imagetest.AppsInitramfs(t, a,
		[]image.File{{Src: script, Dst: image.BinDir + "/userland-check", Mode: 0o755}},
		"github.com/vgpud/vgpud/guestagent/cmd/vgpu-agent")

	ctx, cancel := context.WithTimeout(t.Context(), vmTimeout)
	defer cancel()
	start := time.Now()
	vm, err := qemuvm.Start(ctx, qemuvm.Config{
		Kernel: a.Vmlinuz, Initrd: initrd, Disk: a.Disk,
		Append: "vgpu.run=" + imagetest.AppsProgram + " vgpu.args=" + imagetest.AppsBinDir + "/userland-check",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	console := func() string { return strings.Join(vm.Lines(), "\n") }
	if _, err := vm.WaitLine(ctx, "VGPU-INIT run="); err != nil {
		t.Fatal(err)
	}
	t.Logf("boot to vgpu-apps: %v", time.Since(start).Round(time.Millisecond))
	exit, err := vm.WaitLine(ctx, "VGPU-INIT exit=")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot and checks: %v", time.Since(start).Round(time.Millisecond))
	if exit != "VGPU-INIT exit=0" {
		t.Fatalf("%s, want VGPU-INIT exit=0; console:\n%s", exit, console())
	}
	if err := vm.Wait(); err != nil {
		t.Errorf("Wait() = %v, want nil (guest powered off)", err)
	}

	out, codes := userlandResults(vm.Lines())
	for _, name := range []string{"clinfo", "python", "hashcat", "clpeak", "clblast", "files"} {
		if _, ok := codes[name]; !ok {
			t.Fatalf("check %s did not finish; console:\n%s", name, console())
		}
	}
	mustExit0 := func(name string) {
		t.Helper()
		if codes[name] != 0 {
			t.Errorf("%s: exit %d, want 0; output:\n%s", name, codes[name], out[name])
		}
	}

	// The ICD loader finds no ICD in /etc/OpenCL/vendors: 0 platforms
	// today. Once the vgpud ICD is installed there (issue 11) with a vGPU
	// attached, this becomes 1; either way clinfo must say how many.
	mustExit0("clinfo")
	m := regexp.MustCompile(`(?m)^Number of platforms\s+(\d+)\s*$`).FindStringSubmatch(out["clinfo"])
	if m == nil {
		t.Errorf("clinfo printed no \"Number of platforms N\"; output:\n%s", out["clinfo"])
	} else {
		n, _ := strconv.Atoi(m[1])
		t.Logf("clinfo: %d platforms", n)
	}

	mustExit0("python")
	if !regexp.MustCompile(`(?m)^pyopencl \(\d+, \d+, \d+\) pytest \d+\.`).MatchString(out["python"]) {
		t.Errorf("python3 did not print the pyopencl and pytest versions; output:\n%s", out["python"])
	}
	mustExit0("hashcat")
	if !regexp.MustCompile(`(?m)^v\d+\.\d+`).MatchString(out["hashcat"]) {
		t.Errorf("hashcat --version printed no version; output:\n%s", out["hashcat"])
	}
	mustExit0("clpeak")
	if !strings.Contains(out["clpeak"], "clpeak version:") {
		t.Errorf("clpeak --version printed no version; output:\n%s", out["clpeak"])
	}
	// The tuner fails (no platform 99), but only after it started: its
	// libraries loaded (a missing one is exit 127) and it printed its
	// options and CLBlast's own OpenCL error.
	if c := codes["clblast"]; c == 0 || c == 126 || c == 127 ||
		!strings.Contains(out["clblast"], "Options given/available") || !strings.Contains(out["clblast"], "CLBlast") {
		t.Errorf("clblast tuner: exit %d, want a CLBlast error after its options; output:\n%s", c, out["clblast"])
	}
	mustExit0("files")
	for _, l := range vm.Lines() {
		if strings.HasPrefix(l, "VGPU-INIT error") || strings.HasPrefix(l, "VGPU-APPS error") {
			t.Errorf("console: %s", l)
		}
	}
}

// userlandResults collects each check's output and exit code from the
// console lines userlandCheck printed.
func userlandResults(lines []string) (out map[string]string, codes map[string]int) {
	out, codes = map[string]string{}, map[string]int{}
	cur := ""
	var buf []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "USERLAND-BEGIN "):
			cur, buf = strings.TrimPrefix(l, "USERLAND-BEGIN "), nil
		case cur != "" && strings.HasPrefix(l, "USERLAND-END "+cur+" exit="):
			c, err := strconv.Atoi(strings.TrimPrefix(l, "USERLAND-END "+cur+" exit="))
			if err != nil {
				c = -1
			}
			out[cur], codes[cur] = strings.Join(buf, "\n"), c
			cur = ""
		case cur != "":
			buf = append(buf, l)
		}
	}
	return out, codes
}

// userlandCheckFunc is the guest scripts' shell function check NAME CMD...:
// it runs CMD framed as userlandResults reads it.
const userlandCheckFunc = `check() {
	name=$1
	shift
	echo "USERLAND-BEGIN $name"
	"$@" 2>&1
	echo "USERLAND-END $name exit=$?"
}
`

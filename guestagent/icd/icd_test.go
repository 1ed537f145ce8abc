package icd

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/internal/syncbuf"
)

// cflags are the flags of the Makefile's icd target: C11, every warning an
// error, only the loader's symbols exported.
var cflags = []string{"-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC", "-fvisibility=hidden"}

// needToolchain skips the test when what CI installs through
// scripts/install-deps.sh (gcc, ocl-icd-opencl-dev, opencl-headers) is
// missing here.
func needToolchain(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not installed (scripts/install-deps.sh installs it)")
	}
	cmd := exec.Command(gcc, "-fsyntax-only", "-x", "c", "-")
	cmd.Stdin = strings.NewReader("#define CL_TARGET_OPENCL_VERSION 300\n#include <CL/cl_icd.h>\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("OpenCL headers missing (opencl-headers, ocl-icd-opencl-dev; scripts/install-deps.sh installs them): %v\n%s", err, out)
	}
	return gcc
}

// buildICD compiles libvgpud-icd.so into a new directory and writes the
// vgpud.icd file naming it there; it returns the directory. extra flags
// are added to the compile (sanitizers).
func buildICD(t *testing.T, gcc string, extra ...string) string {
	t.Helper()
	srcs, err := filepath.Glob("src/*.c")
	if err != nil || len(srcs) == 0 {
		t.Fatalf("no sources in src/: %v", err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libvgpud-icd.so")
	args := append(append(append([]string{}, cflags...), extra...), "-I.", "-shared", "-Wl,-z,defs", "-o", lib)
	args = append(append(args, srcs...), "-lpthread")
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "vgpud.icd"), []byte(lib+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// regs is the register image of a fake vGPU's BAR0.
type regs struct {
	id, version   uint32
	mem, maxAlloc uint64
	computeUnits  uint32
	maxWorkGroup  uint32
	profile, name string
}

func (r regs) image() []byte {
	le := binary.LittleEndian
	b := make([]byte, abi.BAR0Size)
	le.PutUint32(b[abi.RegID:], r.id)
	le.PutUint32(b[abi.RegVersion:], r.version)
	le.PutUint32(b[abi.RegFeatures:], abi.Features)
	le.PutUint64(b[abi.RegMemSizeLo:], r.mem) // Lo then Hi: one little-endian 64-bit value
	le.PutUint64(b[abi.RegMaxAllocLo:], r.maxAlloc)
	le.PutUint32(b[abi.RegComputeUnits:], r.computeUnits)
	le.PutUint32(b[abi.RegMaxRingSlots:], abi.MaxRingSlots)
	le.PutUint32(b[abi.RegMaxWorkGroup:], r.maxWorkGroup)
	copy(b[abi.RegProfileName:abi.RegProfileName+abi.ProfileNameLen], r.profile)
	copy(b[abi.RegDeviceName:abi.RegDeviceName+abi.DeviceNameLen], r.name)
	return b
}

// small is the device of the tests: the profile of the example.
var small = regs{
	id: abi.IDMagic, version: abi.Version, mem: 256 << 20, maxAlloc: 64 << 20,
	computeUnits: 2, maxWorkGroup: 1024, profile: "vgpu-small", name: "pthread-test",
}

// addDevice creates the sysfs directory of a PCI function under root. A nil
// image makes a function without resource0.
func addDevice(t *testing.T, root, bdf string, vendor, device, class int, image []byte) {
	t.Helper()
	dir := filepath.Join(root, bdf)
	files := map[string]string{
		"vendor": hex(vendor, 4), "device": hex(device, 4), "class": hex(class, 6), "enable": "",
	}
	if image != nil {
		files["resource0"] = string(image)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func hex(v, digits int) string { return fmt.Sprintf("0x%0*x\n", digits, v) }

func addVGPU(t *testing.T, root, bdf string, r regs) {
	addDevice(t, root, bdf, abi.VendorID, abi.DeviceID, abi.ClassCode, r.image())
}

// env is the environment that makes the loader see only the ICD in icdDir
// and the ICD see only the fake tree.
func env(icdDir, sysfs string) []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OCL_ICD_") && !strings.HasPrefix(kv, "OPENCL_VENDOR_PATH=") &&
			!strings.HasPrefix(kv, "VGPUD_ICD_") {
			e = append(e, kv)
		}
	}
	return append(e, "OCL_ICD_VENDORS="+icdDir, "VGPUD_ICD_SYSFS="+sysfs)
}

// TestExports: the library exports what ICD loaders look up, nothing else.
func TestExports(t *testing.T) {
	dir := buildICD(t, needToolchain(t))
	f, err := elf.Open(filepath.Join(dir, "libvgpud-icd.so"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL && s.Name != "" {
			got = append(got, s.Name)
		}
	}
	slices.Sort(got)
	want := []string{"clGetExtensionFunctionAddress", "clGetPlatformInfo", "clIcdGetPlatformIDsKHR"}
	if !slices.Equal(got, want) {
		t.Errorf("exported symbols %v, want %v", got, want)
	}
}

// TestClinfo runs the real clinfo against one fake vGPU.
func TestClinfo(t *testing.T) {
	gcc := needToolchain(t)
	clinfo, err := exec.LookPath("clinfo")
	if err != nil {
		t.Skip("clinfo not installed (scripts/install-deps.sh installs it)")
	}
	icdDir := buildICD(t, gcc)
	sysfs := t.TempDir()
	addVGPU(t, sysfs, "0000:00:04.0", small)
	cmd := exec.Command(clinfo)
	cmd.Env = env(icdDir, sysfs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("clinfo: %v\n%s", err, out)
	}
	t.Logf("clinfo:\n%s", out)
	for _, re := range []string{
		`(?m)^Number of platforms\s+1$`,
		`(?m)^\s+Platform Name\s+vgpud$`,
		`(?m)^\s+Platform Version\s+OpenCL 3\.0 vgpud$`,
		`(?m)^\s+Platform Numeric Version\s+0xc00000 \(3\.0\.0\)$`,
		`(?m)^\s+Platform Extensions function suffix\s+vgpud$`,
		`(?m)^Number of devices\s+1$`,
		`(?m)^\s+Device Name\s+pthread-test$`,
		`(?m)^\s+Device Type\s+GPU$`,
		fmt.Sprintf(`(?m)^\s+Device Version\s+OpenCL 3\.0 vgpud ABI %d\.%d profile vgpu-small$`, abi.VersionMajor, abi.VersionMinor),
		`(?m)^\s+Global memory size\s+268435456 \(256MiB\)$`,
		`(?m)^\s+Max memory allocation\s+67108864 \(64MiB\)$`,
		`(?m)^\s+Max compute units\s+2$`,
		`(?m)^\s+Max work group size\s+1024$`,
		`(?m)^\s+Image support\s+No$`,
		`(?m)^\s+Device OpenCL C all versions\s+OpenCL C\s+0x400000 \(1\.0\.0\)$`,
		`(?m)^\s+OpenCL C\s+0xc00000 \(3\.0\.0\)$`,
		`(?m)^\s+Device OpenCL C features\s+__opencl_c_int64\s+0xc00000 \(3\.0\.0\)$`,
		`(?m)^\s+Shared Virtual Memory \(SVM\) capabilities\s+\(core\)$`,
		`(?m)^\s+Pipe support\s+No$`,
		// Without vgpu-icdd there is no device-information blob: the
		// conservative answers stay.
		`(?m)^\s+Double-precision Floating-point support\s+\(n/a\)$`,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("clinfo output does not match %s", re)
		}
	}
	if b, err := os.ReadFile(filepath.Join(sysfs, "0000:00:04.0", "enable")); err != nil || string(b) != "1" {
		t.Errorf("enable file holds %q (%v), want the ICD's \"1\"", b, err)
	}
}

// TestAPI runs testdata/apitest.c through the loader against a tree with
// two good vGPUs among functions the ICD must skip, then against a tree
// with none it can use.
func TestAPI(t *testing.T) {
	gcc := needToolchain(t)
	t.Run("plain", func(t *testing.T) { runAPITest(t, gcc) })
	t.Run("sanitized", func(t *testing.T) {
		san := []string{"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"}
		probe := exec.Command(gcc, append(san, "-x", "c", "-o", filepath.Join(t.TempDir(), "a"), "-")...)
		probe.Stdin = strings.NewReader("int main(void) { return 0; }\n")
		if out, err := probe.CombinedOutput(); err != nil {
			t.Skipf("gcc cannot build with sanitizers here: %v\n%s", err, out)
		}
		runAPITest(t, gcc, san...)
	})
}

// buildAPITest compiles the ICD and testdata/apitest.c; it returns the
// test program and the directory of the ICD.
func buildAPITest(t *testing.T, gcc string, extra ...string) (exe, icdDir string) {
	t.Helper()
	icdDir = buildICD(t, gcc, extra...)
	exe = filepath.Join(t.TempDir(), "apitest")
	args := append(append(append([]string{}, cflags...), extra...), "-o", exe, "testdata/apitest.c", "-lOpenCL", "-ldl")
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return exe, icdDir
}

func runAPITest(t *testing.T, gcc string, extra ...string) {
	exe, icdDir := buildAPITest(t, gcc, extra...)
	lib := filepath.Join(icdDir, "libvgpud-icd.so")

	full := t.TempDir()
	addDevice(t, full, "0000:00:03.0", 0x8086, 0x1237, 0x060000, nil) // a host bridge
	addVGPU(t, full, "0000:00:07.0", regs{id: abi.IDMagic, version: abi.Version, mem: 1 << 30, maxAlloc: 1 << 28,
		computeUnits: 4, maxWorkGroup: 256, profile: "vgpu-large",
		name: "second, a name of exactly sixty-four bytes, with no NUL at all!!"})
	addVGPU(t, full, "0000:00:04.0", small)
	bad := small
	bad.id = 0xffffffff // what a function with memory space disabled reads
	addVGPU(t, full, "0000:00:05.0", bad)
	v2 := small
	v2.version = 2 << 16
	addVGPU(t, full, "0000:00:06.0", v2)
	addDevice(t, full, "0000:00:08.0", abi.VendorID, abi.DeviceID, abi.ClassCode, make([]byte, 100)) // short BAR
	addDevice(t, full, "0000:00:09.0", abi.VendorID, abi.DeviceID, 0x038000, small.image())          // other class

	stderr := runAPI(t, exe, "full", lib, icdDir, full)
	for _, want := range []string{
		"vgpud ICD: skipping 0000:00:05.0: ID register reads 0xffffffff, want 0x55504756",
		"vgpud ICD: skipping 0000:00:06.0: ABI version 2.0, this ICD drives 1.x",
		"vgpud ICD: skipping 0000:00:08.0: ",
	} {
		if strings.Count(stderr, want) != 1 {
			t.Errorf("stderr has %q %d times, want once", want, strings.Count(stderr, want))
		}
	}
	if n := strings.Count(stderr, "vgpud ICD: 0000:00:04.0: no vgpu-icdd at "); n != 2 {
		t.Errorf("clCreateContext without the daemon said so %d times, want 2 for two calls", n)
	}
	if strings.Contains(stderr, "0000:00:03.0") || strings.Contains(stderr, "0000:00:09.0") {
		t.Errorf("a function that is not a vGPU was mentioned:\n%s", stderr)
	}

	none := t.TempDir()
	addVGPU(t, none, "0000:00:05.0", bad)
	runAPI(t, exe, "none", lib, icdDir, none)
}

// TestAPINonRoot: for a user who may not open resource0 (mode 0600 in
// sysfs) or write enable, the vGPU is skipped with a message and no
// platform is listed; nothing fails harder than that.
func TestAPINonRoot(t *testing.T) {
	gcc := needToolchain(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the test as another user")
	}
	exe, icdDir := buildAPITest(t, gcc)
	sysfs := t.TempDir()
	addVGPU(t, sysfs, "0000:00:04.0", small)
	for _, f := range []string{"resource0", "enable"} {
		if err := os.Chmod(filepath.Join(sysfs, "0000:00:04.0", f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Let the other user reach the program, the library and the tree: each
	// is in a t.TempDir, in the test's temporary directory, both mode 0700.
	for _, d := range []string{filepath.Dir(exe), icdDir, sysfs} {
		for _, p := range []string{d, filepath.Dir(d)} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	cred := &syscall.Credential{Uid: 65534, Gid: 65534} // nobody
	stderr := runAPIAs(t, cred, exe, "none", filepath.Join(icdDir, "libvgpud-icd.so"), icdDir, sysfs)
	want := "vgpud ICD: skipping 0000:00:04.0: open " + filepath.Join(sysfs, "0000:00:04.0", "resource0") + ": Permission denied"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q", want)
	}
}

func runAPI(t *testing.T, exe, mode, lib, icdDir, sysfs string) string {
	t.Helper()
	return runAPIAs(t, nil, exe, mode, lib, icdDir, sysfs)
}

func runAPIAs(t *testing.T, cred *syscall.Credential, exe, mode, lib, icdDir, sysfs string) string {
	t.Helper()
	cmd := exec.Command(exe, mode, lib)
	cmd.Env = env(icdDir, sysfs)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("apitest %s:\n%s%s", mode, stdout.String(), stderr.String())
	if err != nil {
		t.Errorf("apitest %s: %v\n%s%s", mode, err, stdout.String(), stderr.String())
	}
	return stderr.String()
}

// TestDocsListRefusals keeps docs/icd.md honest: every dispatch entry the
// ICD refuses is listed under the heading of its kind, every listed entry
// is refused, and every device query the ICD answers has a table row.
func TestDocsListRefusals(t *testing.T) {
	doc, err := os.ReadFile("../../docs/icd.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("src/dispatch.c")
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string][]string{}
	for _, m := range regexp.MustCompile(`REFUSE\((cl\w+), (ABSENT)\)`).FindAllStringSubmatch(string(src), -1) {
		refused[m[2]] = append(refused[m[2]], m[1])
	}
	for kind, heading := range map[string]string{"ABSENT": "## Not supported"} {
		section := sectionOf(string(doc), heading)
		if section == "" {
			t.Errorf("docs/icd.md has no section %q", heading)
			continue
		}
		var listed []string
		for _, m := range regexp.MustCompile("`(cl[A-Za-z0-9]+)`").FindAllStringSubmatch(section, -1) {
			listed = append(listed, m[1])
		}
		slices.Sort(listed)
		listed = slices.Compact(listed)
		want := slices.Clone(refused[kind])
		slices.Sort(want)
		if !slices.Equal(listed, want) {
			t.Errorf("docs/icd.md %q lists %v,\nsrc/dispatch.c refuses %v", heading, listed, want)
		}
	}
	dev, err := os.ReadFile("src/device.c")
	if err != nil {
		t.Fatal(err)
	}
	queries := sectionOf(string(doc), "## Device queries")
	for _, m := range regexp.MustCompile(`case (CL_\w+):`).FindAllStringSubmatch(string(dev), -1) {
		if !strings.Contains(queries, "`"+m[1]+"`") {
			t.Errorf("docs/icd.md \"Device queries\" has no row for %s", m[1])
		}
	}
}

// sectionOf returns the text under a "## " heading up to the next one.
func sectionOf(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		return ""
	}
	s := doc[i+1+len(heading):]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

// sanitize are the flags of the sanitized builds.
var sanitize = []string{"-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"}

// canSanitize reports whether gcc links sanitized programs here.
func canSanitize(t *testing.T, gcc string) bool {
	t.Helper()
	probe := exec.Command(gcc, append(sanitize, "-x", "c", "-o", filepath.Join(t.TempDir(), "a"), "-")...)
	probe.Stdin = strings.NewReader("int main(void) { return 0; }\n")
	if out, err := probe.CombinedOutput(); err != nil {
		t.Logf("gcc cannot build with sanitizers here: %v\n%s", err, out)
		return false
	}
	return true
}

// startHost builds tests/icdhost (a vgpu-icdd over a real vGPU backed by
// the host's OpenCL device, no VM) and serves it on a socket in a new
// directory until the test ends; it returns the socket's path.
func startHost(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts a vgpud instance on the host's OpenCL device")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "icdhost")
	if out, err := exec.Command("go", "build", "-o", bin, "../../tests/icdhost").CombinedOutput(); err != nil {
		t.Fatalf("go build tests/icdhost: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "icd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, append([]string{"-socket", sock}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	stdin, err := cmd.StdinPipe() // closed at the end: icdhost exits
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer // the process's stderr goroutine writes it, the test reads it
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("icdhost:\n%s", logs.String())
		}
	})
	ready := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if s.Text() == "ready" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("icdhost exited before it was ready:\n%s", logs.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("icdhost not ready after 2 minutes:\n%s", logs.String())
	}
	return sock
}

// buildProgram compiles one C test program against the loader.
func buildProgram(t *testing.T, gcc, src string, extra ...string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append(append(append([]string{}, cflags...), extra...), "-I.", "-o", exe, src, "-lOpenCL", "-lpthread")
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return exe
}

// runAgainst runs a test program with the loader seeing only the ICD in
// icdDir and the ICD the daemon at sock.
func runAgainst(t *testing.T, exe, icdDir, sock string, args ...string) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(env(icdDir, filepath.Join(t.TempDir(), "no-sysfs")), "VGPUD_ICD_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", filepath.Base(exe), out)
	if err != nil {
		t.Errorf("%s: %v", filepath.Base(exe), err)
	}
}

// TestDaemon runs OpenCL work through the ICD against vgpu-icdd serving a
// real vGPU (tests/icdhost): testdata/runtest.c (a vector addition whose
// header is found through -I, fills, copies, maps, rectangles, events with
// profiling, a user event holding commands back, callbacks, sub-buffers,
// binaries, compile and link, fork), testdata/misuse.c (malformed use
// with its exact errors, and a daemon that dies) and testdata/threezero.c
// (the OpenCL 3.0 entries: queues and buffers with properties, OpenCL C
// 3.0, cloned kernels, context destructor callbacks, the answers for
// absent features), testdata/images.c (images and samplers: every
// transfer, copy, fill and map, kernels with image and sampler
// arguments), testdata/il.c (SPIR-V programs: what the device reports,
// and on a device that takes SPIR-V, building, running, CL_PROGRAM_IL,
// binaries and refusals; on PoCL 3.1 the refusal, make test-platforms
// runs the rest on PoCL 6 and rusticl) and testdata/printf.c (kernels
// that print, against a
// vGPU whose kernels run in sandboxed executors: what they print reaches
// the program's standard output, each launch's whole and in queue order,
// before a wait on its event or clFinish returns; a launch that prints
// more than CL_DEVICE_PRINTF_BUFFER_SIZE gets exactly that much, and the
// rest is counted on stderr; a program that does not print prints
// nothing); all again with the ICD and the programs built with
// AddressSanitizer and UBSan.
func TestDaemon(t *testing.T) {
	gcc := needToolchain(t)
	sock := startHost(t)
	san := canSanitize(t, gcc)
	il := ilExpected(t)
	for _, c := range []struct {
		name  string
		flags []string
	}{{"plain", nil}, {"sanitized", sanitize}} {
		t.Run(c.name, func(t *testing.T) {
			if c.flags != nil && !san {
				t.Skip("gcc cannot build with sanitizers here")
			}
			icdDir := buildICD(t, gcc, c.flags...)
			t.Run("run", func(t *testing.T) {
				runAgainst(t, buildProgram(t, gcc, "testdata/runtest.c", c.flags...), icdDir, sock, t.TempDir())
			})
			t.Run("misuse", func(t *testing.T) {
				runAgainst(t, buildProgram(t, gcc, "testdata/misuse.c", c.flags...), icdDir, sock, t.TempDir())
			})
			t.Run("opencl30", func(t *testing.T) {
				runAgainst(t, buildProgram(t, gcc, "testdata/threezero.c", c.flags...), icdDir, sock, t.TempDir())
			})
			t.Run("images", func(t *testing.T) {
				runAgainst(t, buildProgram(t, gcc, "testdata/images.c", c.flags...), icdDir, sock, t.TempDir())
			})
			t.Run("il", func(t *testing.T) {
				runAgainst(t, buildProgram(t, gcc, "testdata/il.c", c.flags...), icdDir, sock, "../../gpu/iltest/testdata", il)
			})
			t.Run("printf", func(t *testing.T) {
				cmd := exec.Command(buildProgram(t, gcc, "testdata/printf.c", c.flags...))
				cmd.Env = append(env(icdDir, filepath.Join(t.TempDir(), "no-sysfs")), "VGPUD_ICD_SOCKET="+sock)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("printf: %v\nstderr:\n%s", err, stderr.String())
				}
				checkPrintout(t, stdout.String(), stderr.String())
			})
		})
	}
}

// ilExpected is testdata/il.c's second argument for the device
// tests/icdhost serves ($VGPUD_TEST_DEVICE): "il" where it builds SPIR-V
// (gpu.Caps.IL), else "none".
func ilExpected(t *testing.T) string {
	t.Helper()
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	defer d.Close()
	if d.Info().Caps.IL {
		return "il"
	}
	return "none"
}

// checkPrintout checks testdata/printf.c's standard output and error.
func checkPrintout(t *testing.T, out, errs string) {
	t.Helper()
	before, rest, ok := strings.Cut(out, "finished\n")
	if !ok || before != "first: 7 2.50 abc x\nwaited\nfirst: 7 2.50 abc x\nsecond\n" {
		t.Fatalf("before clFinish returned: %q (want the first launch's output before the wait on its event returned, then two launches' in order)", before)
	}
	items, rest, ok := strings.Cut(rest, "items done\n")
	lines := strings.Split(strings.TrimSuffix(items, "\n"), "\n")
	slices.Sort(lines)
	want := make([]string, 64)
	for i := range want {
		want[i] = fmt.Sprintf("item %d of 64", i)
	}
	slices.Sort(want)
	if !ok || !slices.Equal(lines, want) {
		t.Errorf("64 work-items printed %d lines: %q", len(lines), items)
	}
	flood, rest, ok := strings.Cut(rest, "\nflood done\n")
	if !ok || len(flood) != 1<<20 {
		t.Errorf("a launch printing 1280000 bytes: %d bytes reached stdout, want %d", len(flood), 1<<20)
	}
	line := regexp.MustCompile(`^flood [0-9]{8} x{16}$`)
	for i, l := range strings.Split(flood, "\n") {
		if !line.MatchString(l) && i < len(flood)/32-1 {
			t.Errorf("flood line %d: %q", i, l)
			break
		}
	}
	if dropped := fmt.Sprintf("%d more bytes were dropped", 1280000-(1<<20)); !strings.Contains(errs, dropped) {
		t.Errorf("stderr does not say %q:\n%s", dropped, errs)
	}
	if rest != "quiet done\n" {
		t.Errorf("after the flood: %q, want only the program's own line", rest)
	}
}

// TestDaemonDeviceLost runs testdata/lost.c through the ICD against
// vgpu-icdd over an instance with a 3 s turn budget: its kernel never
// ends, vgpud's watchdog ends the worker, and the application must get
// the kernel's event failed (clWaitForEvents returning
// CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) rather than wait for ever,
// and a new context must compute correctly afterwards. The program's run
// is bounded: a hang fails the test.
func TestDaemonDeviceLost(t *testing.T) {
	gcc := needToolchain(t)
	sock := startHost(t, "-turn-timeout", "3s")
	icdDir := buildICD(t, gcc)
	exe := buildProgram(t, gcc, "testdata/lost.c")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(env(icdDir, filepath.Join(t.TempDir(), "no-sysfs")), "VGPUD_ICD_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	t.Logf("lost:\n%s", out)
	if ctx.Err() != nil {
		t.Fatalf("lost did not end in 3 minutes: the application waits for a kernel of a lost device")
	}
	if err != nil {
		t.Errorf("lost: %v", err)
	}
}

// TestDaemonDeviceInfo runs Debian's clinfo through the ICD against
// vgpu-icdd serving a real vGPU: the device queries answer from the abi
// 1.4 device-information blob (PoCL's fp64, vector widths, local memory,
// clock, pass-through extensions plus the ICD's cl_khr_icd), and nothing
// the vGPU does not pass through (images, SPIR) is listed.
func TestDaemonDeviceInfo(t *testing.T) {
	gcc := needToolchain(t)
	clinfo, err := exec.LookPath("clinfo")
	if err != nil {
		t.Skip("clinfo not installed (scripts/install-deps.sh installs it)")
	}
	sock := startHost(t)
	icdDir := buildICD(t, gcc)
	cmd := exec.Command(clinfo)
	cmd.Env = append(env(icdDir, filepath.Join(t.TempDir(), "no-sysfs")), "VGPUD_ICD_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("clinfo: %v\n%s", err, out)
	}
	t.Logf("clinfo:\n%s", out)
	for _, re := range []string{
		`(?m)^\s+Device Extensions\s+cl_khr_byte_addressable_store cl_khr_fp64 .*cl_khr_icd$`,
		`(?m)^\s+Double-precision Floating-point support\s+\(cl_khr_fp64\)$`,
		`(?m)^\s+double\s+[1-9][0-9]* / [1-9][0-9]*\s+\(cl_khr_fp64\)$`,
		`(?m)^\s+Local memory size\s+[1-9][0-9]* `,
		`(?m)^\s+Max clock frequency\s+[1-9][0-9]*MHz$`,
		`(?m)^\s+Address bits\s+64, Little-Endian$`,
		`(?m)^\s+Max size of kernel argument\s+[1-9][0-9]*$`,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("clinfo output does not match %s", re)
		}
	}
	for _, bad := range []string{"cl_khr_spir", "cl_khr_3d_image_writes", "cl_khr_command_buffer"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("clinfo lists %s", bad)
		}
	}
}

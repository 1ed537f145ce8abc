package sandbox

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// nvidiaTree makes a file tree shaped like a host with NVIDIA's OpenCL
// (driver 580, as on the H100 of docs/isolation.md): the vendor file
// naming the library by name, found through ld.so.conf.d; the library a
// real x86-64 shared object that needs a sibling and, by DT_RUNPATH
// $ORIGIN, a library of a subdirectory; device nodes (plain files
// here), the driver's /proc directory and the GPU's PCI function.
func nvidiaTree(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Fatalf("a C compiler is needed to make the fake driver's libraries: %v", err)
	}
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lib := filepath.Join(root, "usr/local/nvidia/lib64")
	cc := func(out string, args ...string) {
		t.Helper()
		src := filepath.Join(t.TempDir(), "x.c")
		if err := os.WriteFile(src, []byte("int "+strings.NewReplacer(".", "_", "-", "_").Replace(filepath.Base(out))+"(void) { return 1; }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("cc", append([]string{"-shared", "-fPIC", "-nostdlib", "-o", out, src, "-Wl,-soname," + filepath.Base(out)}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, b)
		}
	}
	cc(filepath.Join(lib, "libnvidia-glcore.so.580.159.04"))
	cc(filepath.Join(lib, "tls/libnvidia-tls.so.580.159.04"))
	// A library the driver's needs and the host lacks: linked against,
	// left out of the tree.
	elsewhere := t.TempDir()
	cc(filepath.Join(elsewhere, "libnvidia-absent.so.1"))
	cc(filepath.Join(lib, "libnvidia-opencl.so.1"),
		"-L"+lib, "-L"+filepath.Join(lib, "tls"), "-L"+elsewhere, "-Wl,--no-as-needed", "-l:libnvidia-glcore.so.580.159.04", "-l:libnvidia-tls.so.580.159.04",
		"-l:libnvidia-absent.so.1", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/tls")
	write("etc/OpenCL/vendors/nvidia.icd", "libnvidia-opencl.so.1\n")
	write("etc/ld.so.conf", "# comment\ninclude /etc/ld.so.conf.d/*.conf\n")
	write("etc/ld.so.conf.d/000_nvidia.conf", "/usr/local/nvidia/lib64\n")
	for _, d := range []string{"nvidiactl", "nvidia0", "nvidia1", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps/nvidia-cap1", "nvidia-modeset", "null"} {
		write("dev/"+d, "")
	}
	write("proc/driver/nvidia/version", "NVRM version: 580.159.04\n")
	write("proc/driver/nvidia/gpus/0000:00:05.0/information", "Model: NVIDIA H100 80GB HBM3\n")
	write("sys/devices/pci0000:00/0000:00:05.0/numa_node", "-1\n")
	if err := os.MkdirAll(filepath.Join(root, "sys/bus/pci/devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../devices/pci0000:00/0000:00:05.0", filepath.Join(root, "sys/bus/pci/devices/0000:00:05.0")); err != nil {
		t.Fatal(err)
	}
	return root
}

func noEnv(string) string { return "" }

// TestNVIDIAPlatform: on an NVIDIA-shaped tree the platform is found as
// the loaders find it, with its libraries, their directory, its device
// nodes and its driver files, and the policy grants exactly those.
func TestNVIDIAPlatform(t *testing.T) {
	root := nvidiaTree(t)
	ps, err := FindPlatforms(Host{Root: root, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("FindPlatforms = %d platforms, want 1: %+v", len(ps), ps)
	}
	p := ps[0]
	lib := "/usr/local/nvidia/lib64"
	want := Platform{
		Vendor:  VendorNVIDIA,
		ICD:     "/etc/OpenCL/vendors/nvidia.icd",
		Library: lib + "/libnvidia-opencl.so.1",
		Libraries: []string{lib + "/libnvidia-opencl.so.1", lib + "/libnvidia-glcore.so.580.159.04",
			lib + "/tls/libnvidia-tls.so.580.159.04"},
		Dirs: []string{lib, lib + "/tls"},
		Devices: []string{"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
			"/dev/nvidia-caps/nvidia-cap1"},
		Read:    []string{"/proc/driver/nvidia", "/sys/bus/pci/devices/0000:00:05.0"},
		Missing: []string{"libnvidia-absent.so.1"},
	}
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"Libraries", p.Libraries, want.Libraries}, {"Dirs", p.Dirs, want.Dirs}, {"Devices", p.Devices, want.Devices},
		{"Read", p.Read, want.Read}, {"Missing", p.Missing, want.Missing}, {"Exec", p.Exec, nil},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if p.Vendor != want.Vendor || p.ICD != want.ICD || p.Library != want.Library {
		t.Errorf("platform = %s %s %s, want %s %s %s", p.Vendor, p.ICD, p.Library, want.Vendor, want.ICD, want.Library)
	}

	if got, want := ProgramLibraries(Host{Root: root, Getenv: noEnv}, want.Library), want.Libraries[1:]; !slices.Equal(got, want) {
		t.Errorf("ProgramLibraries(%s) = %q, want %q", want, got, want)
	}
	pol := PlatformPolicy("/var/cache/w", ps)
	for _, path := range slices.Concat(want.Libraries, want.Dirs, want.Read) {
		if !slices.Contains(pol.Read, path) {
			t.Errorf("policy does not let the worker read %s", path)
		}
	}
	if !slices.Equal(pol.Devices, want.Devices) {
		t.Errorf("policy devices = %q, want %q", pol.Devices, want.Devices)
	}
	if slices.Contains(pol.ReadExec, "/usr/bin/ld") {
		t.Errorf("an NVIDIA worker may execute the linker: %q", pol.ReadExec)
	}
	if slices.Contains(pol.Read, "/usr/share/pocl") {
		t.Errorf("an NVIDIA worker may read PoCL's headers")
	}
}

// TestPlatformEnvironment: the loaders' variables choose the vendor
// files or libraries, and LD_LIBRARY_PATH is searched first.
func TestPlatformEnvironment(t *testing.T) {
	root := nvidiaTree(t)
	lib := "/usr/local/nvidia/lib64"
	// Without ld.so.conf the library is found only by LD_LIBRARY_PATH.
	if err := os.Remove(filepath.Join(root, "etc/ld.so.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/OpenCL/vendors/other.icd"), []byte("/opt/x/libOther.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "srv/icds"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "srv/icds/n.icd"), []byte("libnvidia-opencl.so.1"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		env     map[string]string
		libs    []string
		missing []string
	}{
		{"no search path", nil, []string{"libnvidia-opencl.so.1", "/opt/x/libOther.so"}, []string{"libnvidia-opencl.so.1"}},
		{"LD_LIBRARY_PATH", map[string]string{"LD_LIBRARY_PATH": "/nowhere:" + lib},
			[]string{lib + "/libnvidia-opencl.so.1", "/opt/x/libOther.so"}, []string{"libnvidia-absent.so.1"}},
		{"OCL_ICD_VENDORS file", map[string]string{"OCL_ICD_VENDORS": "/etc/OpenCL/vendors/other.icd"},
			[]string{"/opt/x/libOther.so"}, []string{"/opt/x/libOther.so"}},
		{"OCL_ICD_VENDORS directory", map[string]string{"OCL_ICD_VENDORS": "/srv/icds", "LD_LIBRARY_PATH": lib},
			[]string{lib + "/libnvidia-opencl.so.1"}, nil},
		// Debian 12's ocl-icd does not read OCL_ICD_FILENAMES (this
		// tree's loader is not there yet): the vendor files count.
		{"OCL_ICD_FILENAMES, loader without it", map[string]string{"OCL_ICD_FILENAMES": lib + "/libnvidia-opencl.so.1"},
			[]string{"libnvidia-opencl.so.1", "/opt/x/libOther.so"}, nil},
		{"OCL_ICD_FILENAMES", map[string]string{"OCL_ICD_FILENAMES": lib + "/libnvidia-opencl.so.1"},
			[]string{lib + "/libnvidia-opencl.so.1"}, nil},
	} {
		if c.name == "OCL_ICD_FILENAMES" {
			// A loader that reads the variable (the Khronos loader).
			src := filepath.Join(t.TempDir(), "loader.c")
			if err := os.WriteFile(src, []byte("const char *vgpud_var = \"OCL_ICD_FILENAMES\";\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(root, "usr/lib/x86_64-linux-gnu/libOpenCL.so.1")
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command("cc", "-shared", "-fPIC", "-nostdlib", "-o", out, src).CombinedOutput(); err != nil {
				t.Fatalf("cc: %v\n%s", err, b)
			}
		}
		t.Run(c.name, func(t *testing.T) {
			ps, err := FindPlatforms(Host{Root: root, Getenv: func(k string) string { return c.env[k] }})
			if err != nil {
				t.Fatal(err)
			}
			var libs []string
			for _, p := range ps {
				libs = append(libs, p.Library)
			}
			if !slices.Equal(libs, c.libs) {
				t.Errorf("libraries = %q, want %q", libs, c.libs)
			}
			if c.missing != nil && !slices.Equal(ps[0].Missing, c.missing) {
				t.Errorf("missing = %q, want %q", ps[0].Missing, c.missing)
			}
		})
	}
	if _, err := FindPlatforms(Host{Root: t.TempDir(), Getenv: noEnv}); err == nil {
		t.Errorf("FindPlatforms of an empty tree = nil error, want ErrNoPlatform")
	}
}

// TestBadVendorFile: a vendor file that is not one library name is an
// error naming the file, not a guess.
func TestBadVendorFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/OpenCL/vendors")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "two.icd"), []byte("liba.so\nlibb.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindPlatforms(Host{Root: root, Getenv: noEnv}); err == nil || !strings.Contains(err.Error(), "two.icd") {
		t.Errorf("FindPlatforms = %v, want an error naming two.icd", err)
	}
}

// TestHostPlatform: on this host the platforms are found, their
// libraries and closures resolve, and the policy lets the worker execute
// itself (the ELF interpreter) and, with PoCL, run the linker.
func TestHostPlatform(t *testing.T) {
	ps, err := FindPlatforms(Host{})
	if err != nil {
		t.Fatal(err)
	}
	pol := PlatformPolicy("/w", ps)
	for _, p := range ps {
		if len(p.Missing) > 0 || len(p.Libraries) < 2 || !filepath.IsAbs(p.Library) {
			t.Errorf("%s = library %s, %d libraries, missing %q", p.Vendor, p.Library, len(p.Libraries), p.Missing)
		}
		if p.Vendor == VendorPoCL && (!slices.Contains(pol.ReadExec, "/usr/bin/ld") || !slices.Contains(pol.Read, "/usr/share/pocl")) {
			t.Errorf("PoCL's policy: read_exec %q, lacks the linker or its headers", pol.ReadExec)
		}
	}
	// Every worker executes itself, a dynamically linked program, again.
	if !slices.Contains(pol.ReadExec, "/lib64/ld-linux-x86-64.so.2") {
		t.Errorf("read_exec %q lacks the ELF interpreter", pol.ReadExec)
	}
}

// runFilter runs the assembled filter of pol on a system call, as the
// kernel's seccomp does, and returns its action.
func runFilter(t *testing.T, pol Policy, name string, args ...uint64) uint32 {
	t.Helper()
	sp, err := syscallPolicy(1, pol)
	if err != nil {
		t.Fatal(err)
	}
	insts, err := sp.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range insts {
		if r, ok := in.(bpf.RetConstant); ok && r.Val == uint32(notifyStandIn) {
			insts[i] = bpf.RetConstant{Val: unix.SECCOMP_RET_USER_NOTIF}
		}
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	nr, ok := info.SyscallNames[name]
	if !ok {
		t.Fatalf("no system call %s", name)
	}
	// struct seccomp_data: nr, arch, instruction pointer, six arguments,
	// each 64-bit one as its low then its high 32-bit word (little
	// endian). x/net/bpf's VM loads words big-endian (packets), so each
	// word is written so.
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], uint32(info.ID))
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[20+8*i:], uint32(a>>32))
	}
	got, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(got)
}

// TestDeviceIoctls: a policy with device nodes lets any ioctl request but
// Xen privcmd's through seccomp (Landlock keeps device ioctls to those
// nodes); without devices only the listed requests pass.
func TestDeviceIoctls(t *testing.T) {
	const nvRequest = 0xc020462a // NV_ESC_RM_ALLOC, _IOWR('F', 0x2a, 32 bytes)
	cases := []struct {
		name string
		pol  Policy
		req  uint64
		want uint32
	}{
		{"no devices, FIONBIO", Policy{}, 0x5421, unix.SECCOMP_RET_ALLOW},
		{"no devices, NVIDIA request", Policy{}, nvRequest, unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{"devices, NVIDIA request", Policy{Devices: []string{"/dev/nvidiactl"}}, nvRequest, unix.SECCOMP_RET_ALLOW},
		{"diagnosis, no devices", Policy{Diagnose: true}, nvRequest, unix.SECCOMP_RET_USER_NOTIF},
		// NVIDIA's UVM requests are plain numbers (type 0).
		{"devices, UVM_INITIALIZE", Policy{Devices: []string{"/dev/nvidia-uvm"}}, 0x30000001, unix.SECCOMP_RET_ALLOW},
		// Xen's privcmd stays closed but for the one mapping request:
		// the privcmd fd comes from outside, where Landlock does not look.
		{"devices, privcmd HYPERCALL", Policy{Devices: []string{"/dev/nvidiactl"}}, 0x305000, unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{"devices, privcmd DM_OP", Policy{Devices: []string{"/dev/nvidiactl"}}, 0x285005, unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{"devices, privcmd MMAPBATCH_V2", Policy{Devices: []string{"/dev/nvidiactl"}}, ioctlPrivcmdMmapBatchV2, unix.SECCOMP_RET_ALLOW},
	}
	for _, c := range cases {
		if got := runFilter(t, c.pol, "ioctl", 5, c.req); got != c.want {
			t.Errorf("%s: ioctl(5, %#x) -> %#x, want %#x", c.name, c.req, got, c.want)
		}
	}
	extra := Policy{Syscalls: []string{"mlock", "no_such_call"}}
	if got := runFilter(t, extra, "mlock", 0, 4096); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("Syscalls mlock: -> %#x, want allow", got)
	}
	if got := runFilter(t, Policy{}, "mlock", 0, 4096); got == unix.SECCOMP_RET_ALLOW {
		t.Errorf("mlock allowed without Syscalls")
	}
	if got := runFilter(t, Policy{Diagnose: true}, "openat", 0, 0); got != unix.SECCOMP_RET_USER_NOTIF {
		t.Errorf("diagnosis: openat -> %#x, want the supervisor", got)
	}
	if got := runFilter(t, Policy{Diagnose: true}, "read", 0, 0); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("diagnosis: read -> %#x, want allow", got)
	}
}

// FuzzPlatformFiles: whatever the vendor files and the dynamic loader's
// configuration hold (an operator's files, or a broken package's), the
// platforms are found or refused with an error, without a panic, and every
// path found is absolute.
func FuzzPlatformFiles(f *testing.F) {
	f.Add("libnvidia-opencl.so.1\n", "include /etc/ld.so.conf.d/*.conf\n/usr/local/lib\n", "/usr/local/nvidia/lib64\n")
	f.Add("/opt/x/libOther.so", "include ld.so.conf.d/*.conf\n# c\n", "include /etc/ld.so.conf\n")
	f.Add("", "", "")
	f.Add("a\nb", "include /etc/*\n", "../../etc")
	f.Fuzz(func(t *testing.T, icd, conf, included string) {
		root := t.TempDir()
		for name, text := range map[string]string{
			"etc/OpenCL/vendors/x.icd": icd, "etc/ld.so.conf": conf, "etc/ld.so.conf.d/a.conf": included,
		} {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ps, err := FindPlatforms(Host{Root: root, Getenv: noEnv})
		if err != nil {
			return
		}
		for _, p := range ps {
			for _, path := range slices.Concat(p.Libraries, p.Dirs, p.Devices, p.Read) {
				if !filepath.IsAbs(path) {
					t.Errorf("platform path %q is not absolute", path)
				}
			}
		}
	})
}

package sandbox

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultPolicy is what a worker needs to run the OpenCL platforms the
// ICD loader finds on this host (FindPlatforms, PlatformPolicy), with
// writeDir, its private directory (compiler cache, temporary files), the
// only place it may write besides /dev/null and the platform's device
// nodes. With no platform found it is BasePolicy: the worker will fail to
// find one too, and says so.
func DefaultPolicy(writeDir string) Policy {
	ps, err := FindPlatforms(Host{})
	return PolicyFor(writeDir, ps, err)
}

// PolicyFor is DefaultPolicy from platforms the caller found already
// (ps and err: what FindPlatforms(Host{}) returned), for a caller that
// also reports them, so that they are looked up once.
func PolicyFor(writeDir string, ps []Platform, err error) Policy {
	p := BasePolicy(writeDir)
	if err == nil {
		p = PlatformPolicy(writeDir, ps)
	}
	// The worker is this program run again in its view: the libraries
	// it loads from outside the system's directories must be there.
	p.Read = appendNew(p.Read, ProgramLibraries(Host{}, selfExe)...)
	return p
}

// PlatformPolicy is BasePolicy plus what each of ps needs: its libraries
// and their directories outside the system's (read), its files in /proc
// and /sys and data (read), its programs and the ELF interpreter
// (read and execute), its device nodes (read, write, ioctl) and its
// system calls.
func PlatformPolicy(writeDir string, ps []Platform) Policy {
	p := BasePolicy(writeDir)
	for _, pl := range ps {
		// The loader's vendor files where the environment moved them:
		// the worker's loader must find the same platforms, not the
		// ones of /etc/OpenCL/vendors (seen on an NVIDIA machine: a
		// worker without OCL_ICD_VENDORS's directory loaded PoCL).
		if pl.VendorDir != "" {
			p.Read = appendNew(p.Read, pl.VendorDir)
		} else if pl.ICD != "" {
			p.Read = appendNew(p.Read, pl.ICD)
		}
		p.Read = appendNew(p.Read, pl.Libraries...)
		p.Read = appendNew(p.Read, pl.Dirs...)
		p.Read = appendNew(p.Read, pl.Read...)
		p.ReadExec = appendNew(p.ReadExec, pl.Exec...)
		p.Devices = appendNew(p.Devices, pl.Devices...)
		p.Syscalls = appendNew(p.Syscalls, pl.Syscalls...)
		p.SharedMemory = p.SharedMemory || pl.SharedMemory
	}
	return p
}

// appendNew appends the values of vs that list lacks.
func appendNew(list []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}

// BasePolicy is what any worker needs whatever its OpenCL platform (the
// Go runtime, the C library, the ICD loader, and the system's libraries,
// which hold PoCL's and Mesa's compilers and their headers; docs/sandbox.md
// lists how each path was found), with writeDir its private directory.
func BasePolicy(writeDir string) Policy {
	return Policy{
		Read: append([]string{
			// Shared libraries (the ICD loader, PoCL, LLVM, hwloc), LLVM's
			// clang headers, PoCL's kernel library, and what the linker
			// links kernels with (libgcc, libc, libm); /lib and /lib64 are
			// links into /usr on merged-/usr systems, directories
			// elsewhere.
			"/usr/lib", "/usr/lib64", "/lib", "/lib64",
			// The ICD loader's list of platforms; the dynamic loader's
			// cache and configuration (dlopen of the platform's library).
			DefaultVendorDir, "/etc/ld.so.cache",
			// Clang's driver reads these to pick the linker's options.
			"/etc/os-release", "/etc/debian_version", "/etc/lsb-release", "/etc/redhat-release",
			// hwloc's and PoCL's view of the CPUs and memory (PoCL sizes
			// the device's memory from it), and the Go runtime's view of
			// huge pages.
			"/proc/cpuinfo", "/proc/meminfo", "/sys/devices/system/cpu", "/sys/devices/system/node",
			"/sys/kernel/mm/hugepages", "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size",
			// Not /dev/zero: a shared mapping of it is memory that
			// RLIMIT_DATA does not count.
			"/dev/urandom",
			// Local time for log lines.
			"/etc/localtime", "/usr/share/zoneinfo",
		}, append(procSelf(), cgroupFiles("/proc/self/cgroup")...)...),
		// The ELF interpreter, which the kernel opens for execution
		// whenever a dynamically linked program is executed: the worker
		// itself (Enter executes it again once confined), and PoCL's
		// linker.
		ReadExec: []string{"/lib64/ld-linux-x86-64.so.2"},
		Write:    []string{"/dev/null"},
		Private:  writeDir,
	}
}

// procSelfFiles are the worker's own /proc entries it may read: what the
// Go runtime, glibc, LLVM, PoCL and hwloc read there. Not mountinfo,
// mounts or mountstats (they show each mount's source within its file
// system and the host's block devices), nor task/ (each thread's copy of
// them).
var procSelfFiles = []string{
	"status", "stat", "statm", "maps", "smaps", "cpuset", "cgroup", "limits",
	"auxv", "cmdline", "comm", "environ", "fd", "fdinfo",
}

// procSelf lists procSelfFiles under /proc/self, which is resolved when
// the policy is applied, so no other process's entries are readable.
func procSelf() []string {
	out := make([]string, len(procSelfFiles))
	for i, f := range procSelfFiles {
		out[i] = "/proc/self/" + f
	}
	return out
}

// cgroupFiles are the files of this process's own cgroup that say which
// CPUs and how much CPU time it may use: hwloc reads the cpuset to learn
// the CPUs PoCL may run on, the Go runtime the CPU quota to size
// GOMAXPROCS. A worker inherits its parent's cgroup; naming the files
// rather than the cgroup tree keeps the names of other cgroups (other
// VMs, services) out of its sight.
func cgroupFiles(selfCgroup string) []string {
	f, err := os.Open(selfCgroup)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "hierarchy-id:controllers:path"; v2 is "0::path".
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := filepath.Clean("/" + parts[2])
		switch {
		case parts[1] == "":
			dir := filepath.Join("/sys/fs/cgroup", path)
			out = append(out, filepath.Join(dir, "cpuset.cpus.effective"), filepath.Join(dir, "cpuset.mems.effective"),
				filepath.Join(dir, "cpu.max"))
		case hasController(parts[1], "cpuset"):
			dir := filepath.Join("/sys/fs/cgroup/cpuset", path)
			out = append(out, filepath.Join(dir, "cpuset.cpus"), filepath.Join(dir, "cpuset.mems"))
		case hasController(parts[1], "cpu"):
			for _, mount := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
				dir := filepath.Join(mount, path)
				out = append(out, filepath.Join(dir, "cpu.cfs_quota_us"), filepath.Join(dir, "cpu.cfs_period_us"))
			}
		}
	}
	return out
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

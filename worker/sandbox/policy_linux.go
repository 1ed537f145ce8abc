package sandbox

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// DefaultPolicy is what a worker running the OpenCL runtime of this
// platform needs (PoCL 3.1 with LLVM 15 on Debian 12; docs/sandbox.md
// lists how each path was found), with writeDir, its private directory
// (compiler cache, temporary files), the only place it may write besides
// /dev/null.
func DefaultPolicy(writeDir string) Policy {
	return Policy{
		Read: append([]string{
			// Shared libraries (the ICD loader, PoCL, LLVM, hwloc), LLVM's
			// clang headers, PoCL's kernel library, and what the linker
			// links kernels with (libgcc, libc, libm); /lib and /lib64 are
			// links into /usr on merged-/usr systems, directories
			// elsewhere.
			"/usr/lib", "/usr/lib64", "/lib", "/lib64",
			// PoCL's OpenCL C headers.
			"/usr/share/pocl",
			// The ICD loader's list of platforms; the dynamic loader's
			// cache (dlopen of PoCL and its drivers, and the linker).
			"/etc/OpenCL/vendors", "/etc/ld.so.cache",
			// Clang's driver reads these to pick the linker's options.
			"/etc/os-release", "/etc/debian_version", "/etc/lsb-release", "/etc/redhat-release",
			// hwloc's and PoCL's view of the CPUs and memory (PoCL sizes
			// the device's memory from it), and the Go runtime's view of
			// huge pages.
			"/proc/cpuinfo", "/proc/meminfo", "/sys/devices/system/cpu", "/sys/devices/system/node",
			"/sys/kernel/mm/hugepages", "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size",
			// PoCL takes the CPU device's vendor id from the host bridge.
			"/sys/bus/pci/devices/0000:00:00.0/vendor",
			// Not /dev/zero: a shared mapping of it is memory that
			// RLIMIT_DATA does not count.
			"/dev/urandom",
			// Local time for log lines.
			"/etc/localtime", "/usr/share/zoneinfo",
		}, append(procSelf(), cgroupFiles("/proc/self/cgroup")...)...),
		ReadExec: []string{
			// PoCL 3.1 links every kernel into a shared object by running
			// GNU ld (through clang's driver) in a child process; the
			// kernel opens the ELF interpreter for execution too.
			"/usr/bin/ld", "/lib64/ld-linux-x86-64.so.2",
		},
		Write:   []string{"/dev/null"},
		Private: writeDir,
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

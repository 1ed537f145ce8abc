package sandbox

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/internal/guestmem"
)

// The test binary is its own sandboxed worker: the tests start it again
// with envHelper set, as the worker pool starts vgpud, and TestMain runs
// the helper instead of the tests.
const (
	envHelper  = "VGPUD_SANDBOX_TEST_HELPER" // helper mode: modeConfined or modeNamespaces
	envParent  = "VGPUD_SANDBOX_TEST_PARENT" // the test process's pid
	envOutside = "VGPUD_SANDBOX_TEST_OUTSIDE"
	envCache   = "VGPUD_SANDBOX_TEST_CACHE"   // "host:" and the worker's private directory's host path
	envSibling = "VGPUD_SANDBOX_TEST_SIBLING" // another worker's private directory
	envPort    = "VGPUD_SANDBOX_TEST_PORT"    // a TCP port the test listens on at 127.0.0.1
	envOpenCL  = "VGPUD_SANDBOX_TEST_OPENCL"  // the devices' gpu.Info, as the test process sees them
	envDevFD   = "VGPUD_SANDBOX_TEST_DEVFD"   // a character device's fd opened by the test process (as privcmd is)

	// modeConfined enters the sandbox (Enter) and tries what a guest might.
	modeConfined = "confined"
	// modeNamespaces only looks at the namespaces Apply gave it, without
	// Enter: what the network namespace alone allows.
	modeNamespaces = "namespaces"
	// modeWait enters the sandbox and waits.
	modeWait = "wait"
	// modeLandlock applies only Landlock, to its own thread, and tries
	// from that thread what seccomp and the namespaces would otherwise
	// refuse first.
	modeLandlock = "landlock"
)

func TestMain(m *testing.M) {
	EnterProbe() // Probe's probes run this test binary
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(helper(mode))
	}
	goleak.VerifyTestMain(m)
}

// helper runs in the sandboxed process: it writes one JSON line to
// stdout, each check's error ("" when it succeeded), then waits for a
// line on stdin and writes its data limits as a second JSON line.
func helper(mode string) int {
	if mode == modeExecutorIdle || mode == modeExecutorAttack {
		return executorHelper(mode)
	}
	if mode == modeExecutorOrphan {
		time.Sleep(time.Hour) // until its executor's group is killed
		return 0
	}
	if mode == modeConfined || mode == modeWait || mode == modeExecutors {
		pol, err := PolicyFromEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := enterOffMainThread(pol); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	var checks map[string]func() error
	switch mode {
	case modeConfined:
		checks = confinedChecks()
	case modeNamespaces:
		checks = namespaceChecks()
	case modeExecutors:
		return report(executorChecks())
	case modeLandlock:
		out, err := landlockOnly()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		return report(out)
	}
	return report(runChecks(checks))
}

func runChecks(checks map[string]func() error) map[string]string {
	out := map[string]string{}
	for name, check := range checks {
		out[name] = ""
		if err := check(); err != nil {
			out[name] = err.Error()
		}
	}
	return out
}

// report writes out, then waits for the test's line and writes the data
// limit.
func report(out map[string]string) int {
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		return 2
	}
	// The test moves the data limit now (SetDataLimit), then says go.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 2
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_DATA, &lim); err != nil {
		return 2
	}
	if err := enc.Encode(lim); err != nil {
		return 2
	}
	return 0
}

// enterOffMainThread calls Enter from a thread other than the process's
// first, the harder case: the worker's first image ends with the thread
// that executes the second, so what the kernel keeps per thread (the
// parent-death signal) must be on that one.
func enterOffMainThread(pol Policy) error {
	errc := make(chan error, 1)
	enter := func() {
		runtime.LockOSThread()
		_, err := Enter(pol)
		errc <- err
	}
	held := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			close(held)
			enter()
			return
		}
		// Hold the main thread while another enters.
		go enter()
		<-held
	}()
	err := <-errc
	select {
	case <-held:
	default:
		close(held)
	}
	return err
}

// landlockOnly restricts a locked thread with Landlock alone and runs,
// on that thread, what only Landlock refuses there: TCP to the host (no
// network namespace here) and signals out of the domain (no seccomp).
func landlockOnly() (map[string]string, error) {
	type result struct {
		out map[string]string
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is restricted
		pol, err := PolicyFromEnv()
		if err == nil {
			err = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
		}
		if err == nil {
			_, err = restrictThread(pol, selfExe)
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		parent, _ := strconv.Atoi(os.Getenv(envParent))
		port, _ := strconv.Atoi(os.Getenv(envPort))
		done <- result{out: runChecks(map[string]func() error{
			"connect host TCP": func() error {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				return unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
			},
			"signal parent":    func() error { return unix.Kill(parent, 0) },
			"read /etc/passwd": func() error { return readFile("/etc/passwd") },
		})}
	}()
	r := <-done
	return r.out, r.err
}

// confinedChecks are what a guest's code might try in a worker.
func confinedChecks() map[string]func() error {
	parent, _ := strconv.Atoi(os.Getenv(envParent))
	outside := os.Getenv(envOutside)
	cache, _ := os.Getwd()
	hostCache := strings.TrimPrefix(os.Getenv(envCache), "host:")
	return map[string]func() error{
		"read allowed file": func() error { return readFile("/usr/lib/os-release") },
		"read own status":   func() error { return readFile("/proc/self/status") },
		"read /etc/shadow":  func() error { return readFile("/etc/shadow") },
		"read /etc/passwd":  func() error { return readFile("/etc/passwd") },
		"read outside file": func() error { return readFile(filepath.Join(outside, "secret")) },
		"read another worker's cache": func() error {
			return readFile(filepath.Join(outside, "sibling", "kernel.so"))
		},
		"list /":                 func() error { _, err := os.ReadDir("/"); return err },
		"read parent's environ":  func() error { return readFile(fmt.Sprintf("/proc/%d/environ", parent)) },
		"host init out of reach": hostInitOutOfReach,
		"write outside dir":      func() error { return os.WriteFile(filepath.Join(outside, "new"), []byte("x"), 0o644) },
		"write /tmp":             func() error { return os.WriteFile("/tmp/vgpud-sandbox-escape", []byte("x"), 0o644) },
		"write cache": func() error {
			p := filepath.Join(cache, "sub", "f")
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(cache, "f"), []byte("x"), 0o600); err != nil {
				return err
			}
			if err := os.Rename(filepath.Join(cache, "f"), p); err != nil {
				return err
			}
			return os.RemoveAll(filepath.Join(cache, "sub"))
		},
		"write over file size limit": func() error {
			return os.WriteFile(filepath.Join(cache, "big"), make([]byte, 2*testLimits.FileBytes), 0o600)
		},
		"symlink in cache":  func() error { return os.Symlink("/etc/shadow", filepath.Join(cache, "link")) },
		"chmod cache":       func() error { return os.Chmod(cache, 0o777) },
		"socket AF_INET":    func() error { return socket(unix.AF_INET, unix.SOCK_STREAM) },
		"socket AF_UNIX":    func() error { return socket(unix.AF_UNIX, unix.SOCK_STREAM) },
		"socket AF_NETLINK": func() error { return socket(unix.AF_NETLINK, unix.SOCK_RAW) },
		"dial host 127.0.0.1": func() error {
			c, err := net.Dial("tcp", "127.0.0.1:"+os.Getenv(envPort))
			if err == nil {
				c.Close()
			}
			return err
		},
		"ptrace parent": func() error { return unix.PtraceAttach(parent) },
		"process_vm_readv parent": func() error {
			b := make([]byte, 8)
			_, err := unix.ProcessVMReadv(parent, []unix.Iovec{{Base: &b[0], Len: 8}}, []unix.RemoteIovec{{Base: 0x400000, Len: 8}}, 0)
			return err
		},
		"signal parent": func() error { return unix.Kill(parent, 0) },
		"signal self":   func() error { return unix.Kill(os.Getpid(), 0) },
		"mount tmpfs":   func() error { return unix.Mount("none", cache, "tmpfs", 0, "") },
		"unshare user":  func() error { return unix.Unshare(unix.CLONE_NEWUSER) },
		"setns":         func() error { return errnoOf(unix.Syscall(unix.SYS_SETNS, ^uintptr(0), 0, 0)) },
		// The kernel refuses CLONE_NEWUSER with CLONE_FS (EINVAL), so only
		// the filter can answer EPERM, and no process is ever made.
		"clone new user": func() error { return errnoOf(unix.RawSyscall(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS, 0, 0)) },
		"bpf":            func() error { return errnoOf(unix.Syscall(unix.SYS_BPF, ^uintptr(0), 0, 0)) },
		"perf_event_open": func() error {
			return errnoOf(unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0))
		},
		"keyctl":         func() error { return errnoOf(unix.Syscall(unix.SYS_KEYCTL, ^uintptr(0), 0, 0)) },
		"io_uring_setup": func() error { return errnoOf(unix.Syscall(unix.SYS_IO_URING_SETUP, 1, 0, 0)) },
		"memfd_create":   func() error { fd, err := unix.MemfdCreate("x", 0); unix.Close(fd); return err },
		// Lowering a limit is always allowed by the kernel: only the
		// filter refuses.
		"set data limit": func() error {
			return unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: testLimits.DataBytes - 1, Max: testLimits.DataMax})
		},
		// Process creation: only threads, and the linker's spawn.
		"fork":           func() error { return rawClone(uintptr(unix.SIGCHLD)) },
		"fork syscall":   func() error { return rawClone(0) },
		"clone3 process": clone3Process,
		"start threads":  startThreads,
		"clone shared, no thread": func() error {
			// A process sharing the signal handlers (the kernel wants
			// CLONE_VM with it: EINVAL past the filter, never a process).
			return errnoOf(unix.RawSyscall(unix.SYS_CLONE, unix.CLONE_SIGHAND|uintptr(unix.SIGCHLD), 0, 0))
		},
		"mountinfo shows no host path": func() error { return noHostMounts(hostCache) },
		"fill private dir":             func() error { return fillDir(cache) },
		"exec /bin/true":               func() error { return exec.Command("/bin/true").Run() },
		"exec the linker":              func() error { return exec.Command("/usr/bin/ld", "--version").Run() },
		"map 3 GiB private":            func() error { return mapAnon(3<<30, unix.MAP_PRIVATE) },
		"map 3 GiB shared":             func() error { return mapAnon(3<<30, unix.MAP_SHARED) },
		"map a file shared": func() error {
			f, err := os.Create(filepath.Join(cache, "mapped"))
			if err != nil {
				return err
			}
			defer f.Close()
			if err := f.Truncate(1 << 20); err != nil {
				return err
			}
			b, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				return err
			}
			return unix.Munmap(b)
		},
		"map /dev/zero shared": func() error {
			f, err := os.Open("/dev/zero")
			if err != nil {
				return err
			}
			defer f.Close()
			b, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return err
			}
			return unix.Munmap(b)
		},
		// In the file view, what the policy does not list does not exist.
		"stat /etc/passwd":                 func() error { return stat("/etc/passwd") },
		"stat /root":                       func() error { return stat("/root") },
		"stat /home":                       func() error { return stat("/home") },
		"stat /run":                        func() error { return stat("/run") },
		"stat /tmp":                        func() error { return stat("/tmp") },
		"stat /usr/bin/env":                func() error { return stat("/usr/bin/env") },
		"stat private dir's parent":        func() error { return stat(filepath.Dir(hostCache)) },
		"stat private dir's host path":     func() error { return stat(hostCache) },
		"stat another worker's dir":        func() error { return stat(os.Getenv(envSibling)) },
		"stat the private dir":             func() error { return stat(cache) },
		"stat /lib64/ld-linux-x86-64.so.2": func() error { return stat("/lib64/ld-linux-x86-64.so.2") },
		"limits":                           checkLimits,
		"opencl":                           runKernel,
		// A guest may paste tokens (ABI 1.4), and so form __has_include:
		// in the file view it finds no host file outside the policy.
		"pasted __has_include": func() error {
			if _, ok := os.LookupEnv(envOpenCL); !ok {
				return errors.New("no OpenCL device")
			}
			for path, want := range map[string]bool{"/etc/passwd": false, "/usr/lib/os-release": true} {
				found, err := pastedHasInclude(path)
				if err != nil {
					return err
				}
				if found != want {
					return fmt.Errorf("pasted __has_include(%q) = %v, want %v", path, found, want)
				}
			}
			return nil
		},
		// A device fd the main process opened and passed (privcmd, for
		// Xen guest RAM): Landlock checks ioctl on devices at open, so
		// the request reaches the driver (/dev/null: ENOTTY); seccomp
		// allows MMAPBATCH_V2 and no other privcmd request.
		"ioctl TCGETS on a passed device": func() error { return devIoctl(unix.TCGETS) },
		// A device node of the policy's (Policy.Devices, as a GPU's):
		// opened read-write, and an ioctl request reaches its driver,
		// which has none (ENOTTY), past seccomp and Landlock.
		"ioctl a policy device": func() error {
			f, err := os.OpenFile("/dev/full", os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			var arg [64]byte
			return errnoOf(unix.Syscall(unix.SYS_IOCTL, f.Fd(), 0xc0204600, uintptr(unsafe.Pointer(&arg[0]))))
		},
		"open an unlisted device": func() error {
			f, err := os.OpenFile("/dev/zero", os.O_RDWR, 0)
			if err == nil {
				f.Close()
			}
			return err
		},
		"ioctl MMAPBATCH_V2 on a passed device": func() error {
			return devIoctl(guestmem.IoctlPrivcmdMmapBatchV2)
		},
		"ioctl privcmd DM_OP":         func() error { return devIoctl('P'<<8 | 5 | 16<<16) },
		"ioctl privcmd MMAP_RESOURCE": func() error { return devIoctl('P'<<8 | 7 | 32<<16) },
		"ioctl privcmd RESTRICT":      func() error { return devIoctl('P'<<8 | 6 | 2<<16) },
		"ioctl privcmd HYPERCALL":     func() error { return devIoctl('P'<<8 | 0 | 40<<16) },
		"ioctl privcmd MMAPBATCH":     func() error { return devIoctl('P'<<8 | 3 | 32<<16) },
	}
}

// devIoctl makes request on the passed device fd, with a zeroed argument.
func devIoctl(req uintptr) error {
	fd, err := strconv.Atoi(os.Getenv(envDevFD))
	if err != nil {
		return fmt.Errorf("no device fd passed: %w", err)
	}
	var arg [64]byte
	return errnoOf(unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&arg[0]))))
}

// namespaceChecks look at the namespaces alone.
func namespaceChecks() map[string]func() error {
	return map[string]func() error{
		"dial host 127.0.0.1": func() error {
			c, err := net.Dial("tcp", "127.0.0.1:"+os.Getenv(envPort))
			if err == nil {
				c.Close()
			}
			return err
		},
		"interfaces": func() error {
			ifs, err := net.Interfaces()
			if err != nil {
				return err
			}
			for _, i := range ifs {
				if i.Name != "lo" || i.Flags&net.FlagUp != 0 {
					return fmt.Errorf("interface %s is %v", i.Name, i.Flags)
				}
			}
			return nil
		},
		"pid": func() error {
			if os.Getpid() != 1 {
				return fmt.Errorf("pid %d", os.Getpid())
			}
			return nil
		},
		"uid": func() error {
			want := os.Getuid()
			if os.Getenv(envParent+"_ROOT") == "1" {
				want = NobodyID
			}
			if os.Getuid() != want || os.Geteuid() != want {
				return fmt.Errorf("uid %d euid %d, want %d", os.Getuid(), os.Geteuid(), want)
			}
			return nil
		},
	}
}

func readFile(p string) error { _, err := os.ReadFile(p); return err }

func stat(p string) error {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	return nil
}

// hostInitOutOfReach fails if this process can read the host's init's
// /proc entry. In a worker's own /proc, pid 1 is the worker itself; in
// the host's, Landlock refuses it.
func hostInitOutOfReach() error {
	err := readFile("/proc/1/status")
	if err != nil {
		return nil
	}
	a, errA := os.Stat("/proc/1")
	b, errB := os.Stat("/proc/self")
	if errA == nil && errB == nil && os.SameFile(a, b) {
		return nil
	}
	return errors.New("the host's init is readable")
}

func socket(domain, typ int) error {
	fd, err := unix.Socket(domain, typ, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func errnoOf(_, _ uintptr, e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

func mapAnon(n int, flags int) error {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, flags|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	return unix.Munmap(b)
}

// checkLimits compares the process's limits with those the test set
// (testLimits).
func checkLimits() error {
	want := map[string]struct {
		res      int
		cur, max uint64
	}{
		"core":   {unix.RLIMIT_CORE, 0, 0},
		"nofile": {unix.RLIMIT_NOFILE, testLimits.OpenFiles, testLimits.OpenFiles},
		"fsize":  {unix.RLIMIT_FSIZE, testLimits.FileBytes, testLimits.FileBytes},
		"data":   {unix.RLIMIT_DATA, testLimits.DataBytes, testLimits.DataMax},
	}
	if ownUserNamespace() {
		want["nproc"] = struct {
			res      int
			cur, max uint64
		}{unix.RLIMIT_NPROC, testLimits.Processes, testLimits.Processes}
	}
	for name, w := range want {
		var got unix.Rlimit
		if err := unix.Getrlimit(w.res, &got); err != nil {
			return err
		}
		if got.Cur != w.cur || got.Max != w.max {
			return fmt.Errorf("%s limit %d/%d, want %d/%d", name, got.Cur, got.Max, w.cur, w.max)
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if !strings.Contains(string(status), "\n"+set+":\t0000000000000000\n") {
			return fmt.Errorf("capabilities left (%s):\n%s", set, status)
		}
	}
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		return fmt.Errorf("dumpable %d (%v)", d, err)
	}
	return nil
}

// pastedHasInclude reports whether path exists for the OpenCL compiler
// of device 0, as a guest can learn it: a __has_include formed by token
// pasting, in a kernel whose result depends on it.
func pastedHasInclude(path string) (bool, error) {
	dev, err := gpu.Open("0")
	if err != nil {
		return false, err
	}
	defer dev.Close()
	q, err := dev.NewQueue()
	if err != nil {
		return false, err
	}
	defer q.Close()
	prog, buildLog, err := q.Build(`#define CAT(a, b) a##b
#if CAT(__has_, include)("`+path+`")
#define FOUND 7
#else
#define FOUND 3
#endif
__kernel void probe(__global int *v) { v[0] = FOUND; }`, "")
	if err != nil {
		return false, fmt.Errorf("%w: %s", err, buildLog)
	}
	k, err := prog.Kernel("probe")
	if err != nil {
		return false, err
	}
	buf, err := q.Alloc(4)
	if err != nil {
		return false, err
	}
	if _, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{1}}, []gpu.Arg{{Buffer: buf}}); err != nil {
		return false, err
	}
	data := make([]byte, 4)
	if err := q.Read(buf, 0, data); err != nil {
		return false, err
	}
	switch v := binary.LittleEndian.Uint32(data); v {
	case 7:
		return true, nil
	case 3:
		return false, nil
	default:
		return false, fmt.Errorf("probe kernel wrote %d", v)
	}
}

// runKernel builds and launches a kernel on every device: the OpenCL
// runtime (loading, compiler, linker, threads) under the whole sandbox.
func runKernel() error {
	infos, ok := os.LookupEnv(envOpenCL)
	if !ok {
		return errors.New("no OpenCL device")
	}
	var want []gpu.Info
	if err := json.Unmarshal([]byte(infos), &want); err != nil {
		return err
	}
	for i, w := range want {
		if err := runKernelOn(i, w); err != nil {
			return fmt.Errorf("device %d (%s): %w", i, w.Name, err)
		}
	}
	return nil
}

func runKernelOn(index int, want gpu.Info) error {
	dev, err := gpu.Open(strconv.Itoa(index))
	if err != nil {
		return err
	}
	defer dev.Close()
	// The device must look the same from inside (the main process checks
	// its name and gives guests its limits), but for its memory: PoCL
	// sizes a CPU device's memory to fit RLIMIT_DATA; rusticl's llvmpipe
	// reports the host's whatever the limit (docs/platforms.md), and a
	// GPU's is its own.
	got := dev.Info()
	limit := want.GlobalMemBytes
	if want.CPU && want.Platform == "Portable Computing Language" {
		limit = min(limit, testLimits.DataBytes)
	}
	if got.GlobalMemBytes == 0 || got.GlobalMemBytes > limit || got.MaxAllocBytes > got.GlobalMemBytes {
		return fmt.Errorf("device memory in the sandbox %d (max alloc %d), outside %d, limit %d",
			got.GlobalMemBytes, got.MaxAllocBytes, want.GlobalMemBytes, testLimits.DataBytes)
	}
	got.GlobalMemBytes, got.MaxAllocBytes = want.GlobalMemBytes, want.MaxAllocBytes
	// PoCL sizes its largest images from its memory too: 8192 pixels
	// wide inside, 16384 outside; images made from buffers 2^25 pixels
	// inside, 2^28 outside.
	gi, wi := &got.Caps.Images, &want.Caps.Images
	for i := range gi.Max2D {
		if gi.Max2D[i] > wi.Max2D[i] || gi.MaxBufferSize > wi.MaxBufferSize {
			return fmt.Errorf("images in the sandbox up to %v, from buffers %d; outside %v, %d", gi.Max2D, gi.MaxBufferSize, wi.Max2D, wi.MaxBufferSize)
		}
	}
	gi.Max2D, gi.MaxBufferSize = wi.Max2D, wi.MaxBufferSize
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("device in the sandbox %+v, outside %+v", got, want)
	}
	q, err := dev.NewQueue()
	if err != nil {
		return err
	}
	defer q.Close()
	prog, buildLog, err := q.Build(`__kernel void twice(__global int *v, int add) {
		size_t i = get_global_id(0);
		v[i] = 2 * v[i] + add;
	}`, "")
	if err != nil {
		return fmt.Errorf("%w: %s", err, buildLog)
	}
	k, err := prog.Kernel("twice")
	if err != nil {
		return err
	}
	buf, err := q.Alloc(4 * 4)
	if err != nil {
		return err
	}
	data := make([]byte, 16)
	for i := range 4 {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(i))
	}
	if err := q.Write(buf, 0, data); err != nil {
		return err
	}
	add := binary.LittleEndian.AppendUint32(nil, 1)
	if _, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{4}}, []gpu.Arg{{Buffer: buf}, {Scalar: add}}); err != nil {
		return err
	}
	if err := q.Read(buf, 0, data); err != nil {
		return err
	}
	for i := range 4 {
		if got := binary.LittleEndian.Uint32(data[4*i:]); got != uint32(2*i+1) {
			return fmt.Errorf("v[%d] = %d, want %d", i, got, 2*i+1)
		}
	}
	return nil
}

// rawClone makes a process by clone(flags), or by fork if flags is 0;
// the new process exits at once and is reaped.
func rawClone(flags uintptr) error {
	var pid uintptr
	var e unix.Errno
	if flags == 0 {
		pid, _, e = unix.RawSyscall(unix.SYS_FORK, 0, 0, 0)
	} else {
		pid, _, e = unix.RawSyscall6(unix.SYS_CLONE, flags, 0, 0, 0, 0, 0)
	}
	return exitAndReap(pid, e)
}

// exitAndReap follows a raw fork or clone that returned pid and e: the
// new process (pid 0) exits at once, the parent reaps it; e, if the call
// failed. The new process runs it too, on the stack it was forked with:
// nosplit, so that it never asks the runtime for more.
//
//go:nosplit
func exitAndReap(pid uintptr, e unix.Errno) error {
	if e != 0 {
		return e
	}
	if pid == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(int(pid), &ws, 0, nil)
	return nil
}

// clone3Process asks clone3 for a process (no CLONE_THREAD).
func clone3Process() error {
	args := make([]uint64, 11)     // struct clone_args (CLONE_ARGS_SIZE_VER2)
	args[4] = uint64(unix.SIGCHLD) // exit_signal
	pid, _, e := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args[0])), uintptr(len(args)*8), 0)
	return exitAndReap(pid, e)
}

// startThreads makes the Go runtime start new threads (clone with
// CLONE_THREAD), as PoCL's pthread_create does: n goroutines each hold
// a thread at once.
func startThreads() error {
	const n = 8
	tids := make(chan int, n)
	release := make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids <- unix.Gettid()
			<-release
		}()
	}
	seen := map[int]bool{}
	for range n {
		seen[<-tids] = true
	}
	close(release)
	if len(seen) != n {
		return fmt.Errorf("%d goroutines locked to %d threads", n, len(seen))
	}
	return nil
}

// noHostMounts fails if this process's mount table, as /proc shows it
// to it, names hostDir (its private directory's host path) or a cgroup
// or block device of the host.
func noHostMounts(hostDir string) error {
	paths := []string{"/proc/self/mountinfo", "/proc/self/mounts", "/proc/self/mountstats",
		"/proc/thread-self/mountinfo", fmt.Sprintf("/proc/self/task/%d/mountinfo", unix.Gettid())}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, host := range []string{hostDir, "/dev/sd", "/dev/nvme", "/dev/vd", "/sys/fs/cgroup"} {
			if strings.Contains(string(b), host) {
				return fmt.Errorf("%s names %s:\n%s", p, host, b)
			}
		}
	}
	return nil
}

// fillDir writes files of just under the file size limit into dir until
// a write fails, then removes them: the error says what stopped it.
func fillDir(dir string) error {
	if dir != PrivateView {
		return nil // the host's directory, without a file view: not filled
	}
	block := make([]byte, testLimits.FileBytes-1)
	var made []string
	defer func() {
		for _, p := range made {
			os.Remove(p)
		}
	}()
	for i := range 64 { // 256 MiB at most
		p := filepath.Join(dir, fmt.Sprintf("fill%d", i))
		made = append(made, p)
		if err := os.WriteFile(p, block, 0o600); err != nil {
			return err
		}
	}
	return nil
}

package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/gpu"
)

// testLimits are the helper's limits: small enough to hit, large enough
// for PoCL to build a kernel (its preprocessed source is about 1 MiB).
var testLimits = Limits{OpenFiles: 128, FileBytes: 4 << 20, DataBytes: 2 << 30, DataMax: 2 << 30, Processes: 200, DirBytes: 64 << 20}

// helperResult is what a helper process reported.
type helperResult struct {
	checks map[string]string // check name -> error ("" when it succeeded)
	data   unix.Rlimit       // RLIMIT_DATA after the test moved it
}

// helperProc is a running helper.
type helperProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	dec    *json.Decoder
	stderr *bytes.Buffer
}

// startHelper starts this test binary as a worker in mode, with the
// test's values in its environment, set up by setup (a Policy's Apply, as
// the worker pool does), and reads the results of its checks.
func startHelper(mode string, setup func(*exec.Cmd) error, cache, outside string, port int) (*helperProc, map[string]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{"vgpud-worker"}
	cmd.Dir = cache
	cmd.Env = []string{
		envHelper + "=" + mode,
		envParent + "=" + fmt.Sprint(os.Getpid()),
		envOutside + "=" + outside,
		// Not a path, or Enter would point it at the view's name.
		envCache + "=host:" + cache,
		envPort + "=" + fmt.Sprint(port),
		"PATH=/usr/bin:/bin", "HOME=" + cache, "TMPDIR=" + cache, "POCL_CACHE_DIR=" + cache,
	}
	if sibling, err := os.Readlink(filepath.Join(outside, "sibling")); err == nil {
		cmd.Env = append(cmd.Env, envSibling+"="+sibling)
	}
	if os.Geteuid() == 0 {
		cmd.Env = append(cmd.Env, envParent+"_ROOT=1")
	}
	if devs, err := gpu.Devices(); err == nil && len(devs) > 0 {
		b, err := json.Marshal(devs)
		if err != nil {
			return nil, nil, err
		}
		cmd.Env = append(cmd.Env, envOpenCL+"="+string(b))
	}
	// The platform's variables, as worker.Pool passes them: the helper
	// must load the platform this process sees (on a GPU machine the ICD
	// loader is pointed at the GPU's vendor file).
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "POCL_CACHE_DIR=") {
			continue
		}
		for _, prefix := range []string{"POCL_", "OCL_ICD_", "OPENCL_", "RUSTICL_", "MESA_", "LP_", "GALLIUM_", "CUDA_", "LD_LIBRARY_PATH="} {
			if strings.HasPrefix(kv, prefix) {
				cmd.Env = append(cmd.Env, kv)
				break
			}
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := PrepareDir(cache); err != nil {
		return nil, nil, err
	}
	if err := setup(cmd); err != nil {
		return nil, nil, err
	}
	h := &helperProc{cmd: cmd, stderr: &bytes.Buffer{}}
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	h.dec = json.NewDecoder(bufio.NewReader(stdout))
	var checks map[string]string
	if err := h.dec.Decode(&checks); err != nil {
		h.stdin.Close()
		return nil, nil, fmt.Errorf("helper's checks: %w (wait: %v)\n%s", err, cmd.Wait(), h.stderr)
	}
	return h, checks, nil
}

// runHelper runs a helper (startHelper); once it has run its checks it
// moves the helper's data limit to newData (if not 0), and returns what
// the helper saw.
func runHelper(t *testing.T, mode string, setup func(*exec.Cmd) error, cache, outside string, port int, newData uint64) helperResult {
	t.Helper()
	h, checks, err := startHelper(mode, setup, cache, outside, port)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		h.stdin.Close()
		if err := h.cmd.Wait(); err != nil {
			t.Errorf("helper: %v\n%s", err, h.stderr)
		}
	}()
	res := helperResult{checks: checks}
	if newData != 0 {
		if err := SetDataLimit(h.cmd.Process.Pid, newData); err != nil {
			t.Errorf("SetDataLimit: %v", err)
		}
	}
	if _, err := h.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := h.dec.Decode(&res.data); err != nil {
		t.Fatalf("helper's limit: %v\n%s", err, h.stderr)
	}
	return res
}

// testDirs returns a cache directory the worker's uid can reach (under
// the system's temporary directory, as the pool makes them) and an
// outside directory whose modes let anyone read and write, so that only
// the sandbox can keep the worker out; and a TCP port listening on the
// host's 127.0.0.1.
func testDirs(t *testing.T) (cache, outside string, port int) {
	t.Helper()
	mk := func(prefix string) string {
		d, err := os.MkdirTemp("", prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	cache, outside = mk("vgpud-sandbox-cache-"), mk("vgpud-sandbox-outside-")
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Another worker's private directory: owned by the same uid when
	// vgpud is root, so only Landlock keeps workers out of each other's.
	sibling := mk("vgpud-sandbox-sibling-")
	if err := os.WriteFile(filepath.Join(sibling, "kernel.so"), []byte("another domain's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrepareDir(sibling); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(sibling, "kernel.so"), probeHost().uid, probeHost().gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sibling, filepath.Join(outside, "sibling")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return cache, outside, ln.Addr().(*net.TCPAddr).Port
}

// TestConfinedWorker starts a real confined worker (this binary) and
// checks what it can and cannot do, the OpenCL runtime included.
func TestConfinedWorker(t *testing.T) {
	rep := Probe()
	if rep.LandlockABI < 2 || !rep.Seccomp {
		t.Skipf("this kernel lacks Landlock (ABI %d) or seccomp (%v)", rep.LandlockABI, rep.Seccomp)
	}
	cache, outside, port := testDirs(t)
	pol := DefaultPolicy(cache)
	pol.Limits = testLimits
	// Paths a policy may list that this host lacks: the worker starts
	// without them, and a link on the way to one (outside/sibling) is not
	// made in the file view either.
	// A device node as a GPU platform's policy lists one.
	pol.Devices = append(pol.Devices, "/dev/full")
	pol.Read = append(pol.Read, "/usr/lib/vgpud-absent", "/etc/vgpud-absent/file",
		filepath.Join(outside, "sibling", "absent"), "/lib64/vgpud-absent")
	// With CAP_SYS_RESOURCE the test may raise the hard limit; without,
	// it may only move the soft one below it.
	newData := uint64(3 << 30)
	if !hasCapability(unix.CAP_SYS_RESOURCE) {
		newData = 1 << 30
	}
	devNull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	setup := func(cmd *exec.Cmd) error {
		cmd.ExtraFiles = append(cmd.ExtraFiles, devNull)
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", envDevFD, 2+len(cmd.ExtraFiles)))
		return pol.Apply(cmd)
	}
	res := runHelper(t, modeConfined, setup, cache, outside, port, newData)

	const (
		ok     = ""
		denied = "permission denied"         // Landlock (EACCES)
		eperm  = "operation not permitted"   // seccomp (EPERM)
		noent  = "no such file or directory" // not in the file view
	)
	// Outside the policy's paths: absent in the file view, else refused
	// by Landlock; a path the view hides is a name stat can probe
	// without it.
	hidden, statHidden := denied, ok
	// The private directory is a tmpfs of DirBytes in a file view; the
	// host's directory (whose file system this test does not fill)
	// without.
	noSpace := "no space left on device"
	if rep.View {
		hidden, statHidden = noent, noent
	} else {
		noSpace = ok
	}
	// Shared anonymous memory only where the platform needs it (NVIDIA).
	sharedAnon := eperm
	if pol.SharedMemory {
		sharedAnon = ok
	}
	// Only PoCL's workers may run the linker: the policy is the
	// platform's (platform.go).
	linker := hidden
	if slices.Contains(pol.ReadExec, "/usr/bin/ld") {
		linker = ok
	}
	tests := []struct {
		check string
		want  string // "" success, else a part of the error
	}{
		{"read allowed file", ok},
		{"read own status", ok},
		{"read /etc/shadow", hidden},
		{"read /etc/passwd", hidden},
		{"read outside file", hidden},
		{"read another worker's cache", hidden},
		{"list /", denied},
		{"read parent's environ", hidden + "|" + denied}, // the host's /proc if the kernel refused a new one
		{"host init out of reach", ok},
		{"write outside dir", hidden},
		{"write /tmp", hidden},
		{"write cache", ok},
		{"write over file size limit", "file too large"},
		{"symlink in cache", eperm},
		{"chmod cache", eperm},
		{"socket AF_INET", eperm},
		{"socket AF_UNIX", eperm},
		{"socket AF_NETLINK", eperm},
		{"dial host 127.0.0.1", eperm},
		{"ptrace parent", eperm},
		{"process_vm_readv parent", eperm},
		// The filter refuses it (EPERM), or, where the worker is its PID
		// namespace's init and may signal what it can name (its
		// executor), the namespace hides the parent (ESRCH).
		{"signal parent", eperm + "|no such process"},
		{"signal self", ok},
		{"mount tmpfs", eperm},
		{"unshare user", eperm},
		{"setns", eperm},
		{"clone new user", eperm},
		{"bpf", eperm},
		{"perf_event_open", eperm},
		{"keyctl", eperm},
		{"io_uring_setup", eperm},
		{"memfd_create", eperm},
		{"set data limit", eperm},
		{"fork", eperm},
		{"fork syscall", eperm},
		{"clone3 process", unix.ENOSYS.Error()}, // seccomp answers clone3 with ENOSYS
		{"start threads", ok},
		{"clone shared, no thread", eperm},
		{"mountinfo shows no host path", ok},
		{"fill private dir", noSpace},
		{"exec /bin/true", hidden},
		{"exec the linker", linker},
		{"map 3 GiB private", "cannot allocate memory"},
		{"map 3 GiB shared", sharedAnon},
		{"map a file shared", ok},
		{"map /dev/zero shared", hidden},
		{"stat /etc/passwd", statHidden},
		{"stat /root", statHidden},
		{"stat /home", statHidden},
		{"stat /run", statHidden},
		{"stat /tmp", statHidden},
		{"stat /usr/bin/env", statHidden},
		{"stat private dir's parent", statHidden},
		{"stat private dir's host path", statHidden},
		{"stat another worker's dir", statHidden},
		{"stat the private dir", ok},
		{"stat /lib64/ld-linux-x86-64.so.2", ok},
		{"limits", ok},
		{"opencl", ok},
		{"pasted __has_include", ok},
		{"ioctl TCGETS on a passed device", "inappropriate ioctl"},
		{"ioctl a policy device", "inappropriate ioctl"},
		{"open an unlisted device", hidden},
		{"ioctl MMAPBATCH_V2 on a passed device", "inappropriate ioctl"},
		{"ioctl privcmd DM_OP", eperm},
		{"ioctl privcmd MMAP_RESOURCE", eperm},
		{"ioctl privcmd RESTRICT", eperm},
		{"ioctl privcmd HYPERCALL", eperm},
		{"ioctl privcmd MMAPBATCH", eperm},
	}
	for _, tt := range tests {
		t.Run(tt.check, func(t *testing.T) {
			got, ran := res.checks[tt.check]
			switch {
			case !ran:
				t.Fatal("the helper did not run this check")
			case got == "no OpenCL device":
				t.Skip(got)
			case tt.want == ok && got != ok:
				t.Errorf("failed: %s", got)
			case tt.want != ok && got == ok:
				t.Errorf("succeeded, want an error containing %q", tt.want)
			case tt.want != ok && !slices.ContainsFunc(strings.Split(tt.want, "|"), func(w string) bool { return strings.Contains(got, w) }):
				t.Errorf("error %q, want one containing %q", got, tt.want)
			}
		})
	}
	// The probe means something only if the compiler evaluates a pasted
	// __has_include: outside the sandbox it finds /etc/passwd.
	if _, err := gpu.Devices(); err == nil {
		if found, err := pastedHasInclude("/etc/passwd"); err != nil || !found {
			t.Errorf("outside the sandbox, pasted __has_include(\"/etc/passwd\") = %v, %v; want true", found, err)
		}
	}
	if res.data.Cur != newData {
		t.Errorf("data limit after SetDataLimit = %d, want %d", res.data.Cur, newData)
	}
}

// TestWorkerNamespaces checks the namespaces and ids Apply gives a worker,
// before Enter: the network namespace alone keeps it off the host's
// network.
func TestWorkerNamespaces(t *testing.T) {
	rep := Probe()
	cache, outside, port := testDirs(t)
	res := runHelper(t, modeNamespaces, DefaultPolicy(cache).Apply, cache, outside, port, 0)
	tests := []struct {
		check, ns string // the check and the namespace it needs
		want      string
	}{
		{"dial host 127.0.0.1", "network", "network is unreachable"},
		{"interfaces", "network", ""},
		{"pid", "pid", ""},
		{"uid", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.check, func(t *testing.T) {
			if tt.ns != "" && !slices.Contains(rep.Namespaces, tt.ns) {
				t.Skipf("no %s namespace on this host", tt.ns)
			}
			got := res.checks[tt.check]
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("%s: got %q, want %q", tt.check, got, tt.want)
			}
		})
	}
}

// TestLandlockAlone checks what Landlock refuses by itself, in a process
// with neither namespaces nor seccomp: TCP and signals out of its domain.
func TestLandlockAlone(t *testing.T) {
	if abi := landlockABI(); abi < 6 {
		t.Skipf("Landlock ABI %d: no TCP rules or signal scoping", abi)
	}
	cache, outside, port := testDirs(t)
	// No Apply: the policy travels, but no namespace and no uid change.
	pol := DefaultPolicy(cache)
	kv, err := pol.env()
	if err != nil {
		t.Fatal(err)
	}
	res := runHelper(t, modeLandlock, func(cmd *exec.Cmd) error {
		cmd.Env = append(cmd.Env, kv)
		return nil
	}, cache, outside, port, 0)
	tests := []struct{ check, want string }{
		{"connect host TCP", "permission denied"},
		{"signal parent", "operation not permitted"},
		{"read /etc/passwd", "permission denied"},
	}
	for _, tt := range tests {
		if got := res.checks[tt.check]; !strings.Contains(got, tt.want) || got == "" {
			t.Errorf("%s: got %q, want an error containing %q", tt.check, got, tt.want)
		}
	}
}

// TestWorkerDiesWithItsParentThread checks that a confined worker still
// gets SIGKILL when the thread that started it ends (Pdeathsig), across
// Enter's second execve and in its PID namespace.
func TestWorkerDiesWithItsParentThread(t *testing.T) {
	cache, outside, port := testDirs(t)
	type started struct {
		h   *helperProc
		err error
	}
	ch := make(chan started, 1)
	start := func() {
		// Never unlocked: the thread ends with this goroutine.
		runtime.LockOSThread()
		h, _, err := startHelper(modeWait, DefaultPolicy(cache).Apply, cache, outside, port)
		ch <- started{h, err}
	}
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			start()
			return
		}
		// The Go runtime never ends the main thread: hold it, so that
		// the helper is started from another.
		done := make(chan struct{})
		go func() {
			defer close(done)
			start()
		}()
		<-done
		runtime.UnlockOSThread()
	}()
	s := <-ch
	if s.err != nil {
		t.Fatal(s.err)
	}
	waited := make(chan error, 1)
	go func() { waited <- s.h.cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
	case <-time.After(30 * time.Second):
		// Not killed: end the helper by closing its input.
		s.h.stdin.Close()
		err = <-waited
	}
	s.h.stdin.Close()
	var ee *exec.ExitError
	ws, _ := s.h.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !errors.As(err, &ee) || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("helper ended with %v, want SIGKILL\n%s", err, s.h.stderr)
	}
}

func TestProbeReportsWhatIsMissing(t *testing.T) {
	rep := Probe()
	if rep.UID == 0 {
		t.Errorf("workers would run as root")
	}
	for _, ns := range namespaces {
		missing := !slices.Contains(rep.Namespaces, ns.name)
		said := slices.ContainsFunc(rep.Weak, func(w string) bool {
			return strings.Contains(w, "no "+ns.name+" namespace") ||
				ns.name != "user" && strings.Contains(w, "no user namespace: an unprivileged")
		})
		if missing && !said {
			t.Errorf("no %s namespace, and the report does not say so: %q", ns.name, rep.Weak)
		}
	}
	if rep.LandlockABI == 0 && !slices.ContainsFunc(rep.Weak, func(w string) bool { return strings.HasPrefix(w, "no Landlock") }) {
		t.Errorf("no Landlock, and the report does not say so: %q", rep.Weak)
	}
	if !rep.View && !slices.ContainsFunc(rep.Weak, func(w string) bool { return strings.HasPrefix(w, "no file view") }) {
		t.Errorf("no file view, and the report does not say so: %q", rep.Weak)
	}
	if slices.Contains(rep.Namespaces, "user") && slices.Contains(rep.Namespaces, "mount") && !rep.View {
		t.Errorf("user and mount namespaces but no file view: %q", rep.Weak)
	}
	if rep.Cgroup == "" && !slices.ContainsFunc(rep.Weak, func(w string) bool { return strings.HasPrefix(w, "no delegated cgroup v2") }) {
		t.Errorf("no cgroup for workers, and the report does not say so: %q", rep.Weak)
	}
	if !rep.Seccomp && !slices.ContainsFunc(rep.Weak, func(w string) bool { return strings.HasPrefix(w, "no seccomp") }) {
		t.Errorf("no seccomp, and the report does not say so: %q", rep.Weak)
	}
}

func TestPrepareDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root vgpud hands directories to the worker's uid")
	}
	tests := []struct {
		name       string
		parentMode os.FileMode
		wantErr    bool
	}{
		{"searchable parent", 0o711, false},
		{"closed parent", 0o700, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent, err := os.MkdirTemp("", "vgpud-sandbox-prepare-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(parent) })
			if err := os.Chmod(parent, tt.parentMode); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(parent, "worker")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			err = PrepareDir(dir)
			if got := err != nil; got != tt.wantErr {
				t.Fatalf("PrepareDir: %v, want an error: %v", err, tt.wantErr)
			}
			st, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if uid := st.Sys().(*syscall.Stat_t).Uid; uid != NobodyID {
				t.Errorf("owner %d, want %d", uid, NobodyID)
			}
		})
	}
}

// hasCapability reports whether this thread has capability c in effect.
func hasCapability(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

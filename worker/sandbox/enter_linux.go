package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/internal/procname"
)

// envConfined carries, as JSON, the Report of a worker's first image to
// the image Enter executes once it is confined: its presence says the
// process is confined already.
const envConfined = "VGPUD_WORKER_CONFINED"

// Enter confines this process, a worker, by p, for good, and must run
// before the worker loads the OpenCL runtime or serves any request.
//
// It works in two steps. The first call builds the worker's file view
// (p.View: its root then holds only p's paths, buildView), drops every
// capability, sets the resource limits and no_new_privs, restricts the
// calling thread with Landlock (files and network; signals and abstract
// sockets out of the process) and installs
// the seccomp allowlist (on every thread), then executes this program
// again from that thread; it returns only on error. Everything is
// inherited across execve and by every thread the new image starts, so
// the worker's second image runs confined from its first instruction. In
// that image the second call checks that no_new_privs and the filter are
// in place, makes the process non-dumpable (no core dump; no ptrace and
// no reading of its /proc files by other processes of its uid, which all
// workers share when vgpud is root) and returns what was applied.
//
// What this kernel cannot enforce is skipped and listed in Report.Weak;
// an error means a protection the kernel offers failed to apply, and the
// worker must not go on.
func Enter(p Policy) (Report, error) {
	r := Report{UID: os.Getuid(), GID: os.Getgid()}
	if p.Off {
		r.weak("sandbox off: this worker runs unconfined")
		return r, nil
	}
	if v, ok := os.LookupEnv(envConfined); ok {
		return confined(r, v)
	}
	// This thread is restricted and executes the worker again: the
	// goroutine keeps it to the end.
	runtime.LockOSThread()
	// The parent-death signal is a property of the thread the kernel set
	// it on, the process's first; execve from another thread ends that
	// one and keeps this one's, so this one needs it too. (Had the parent
	// gone before this, the first thread's signal has ended the process
	// already.)
	if p.ParentDeath != 0 {
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(p.ParentDeath), 0, 0, 0); err != nil {
			return r, fmt.Errorf("sandbox: parent-death signal: %w", err)
		}
	}
	// The file view needs the capability Apply left the worker in its
	// own user namespace; nothing after it does.
	if p.View {
		if err := buildView(p); err != nil {
			return r, err
		}
		r.View = true
	}
	if err := dropCapabilities(); err != nil {
		return r, err
	}
	if err := setLimits(p.Limits); err != nil {
		return r, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return r, fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	abi, err := restrictThread(p, selfExe)
	if err != nil {
		return r, err
	}
	r.LandlockABI = abi
	weakLandlock(&r, landlockABI())
	if seccomp.Supported() {
		if err := restrictSyscalls(os.Getpid(), p); err != nil {
			return r, err
		}
		r.Seccomp = true
	} else {
		r.weak("no seccomp: every system call is open to guest code")
	}
	b, err := json.Marshal(r)
	if err != nil {
		return r, fmt.Errorf("sandbox: %w", err)
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, envConfined+"=") })
	if p.View {
		env = viewEnv(env, p.Private)
	}
	env = append(env, envConfined+"="+string(b))
	err = unix.Exec(selfExe, os.Args, env)
	return r, fmt.Errorf("sandbox: execute the confined worker: %w", err)
}

// confined is Enter in the worker's confined image: rep is the first
// image's Report.
func confined(r Report, rep string) (Report, error) {
	if err := json.Unmarshal([]byte(rep), &r); err != nil {
		return r, fmt.Errorf("sandbox: %s: %w", envConfined, err)
	}
	r.UID, r.GID = os.Getuid(), os.Getgid()
	if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || nnp != 1 {
		return r, fmt.Errorf("sandbox: confined worker without no_new_privs (%d, %v)", nnp, err)
	}
	if r.Seccomp {
		if mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil || mode != unix.SECCOMP_MODE_FILTER {
			return r, fmt.Errorf("sandbox: confined worker without its seccomp filter (mode %d, %v)", mode, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return r, fmt.Errorf("sandbox: make the worker non-dumpable: %w", err)
	}
	// The process's name is the file it was executed by, "exe" of
	// /proc/self/exe: give it its argv[0] for ps and top (init runs on
	// the main thread, whose name is the process's).
	procname.Set(filepath.Base(os.Args[0]))
	// Load the local time zone now: the worker's log lines carry local
	// times, and a failure to read it is better met here than mid-run.
	_, _ = time.Now().Zone()
	return r, nil
}

// setLimits applies l (with defaults) to this process.
func setLimits(l Limits) error {
	l = l.withDefaults()
	limits := []struct {
		name     string
		resource int
		cur, max uint64
	}{
		{"RLIMIT_CORE", unix.RLIMIT_CORE, 0, 0},
		{"RLIMIT_NOFILE", unix.RLIMIT_NOFILE, l.OpenFiles, l.OpenFiles},
		{"RLIMIT_FSIZE", unix.RLIMIT_FSIZE, orInfinity(l.FileBytes), orInfinity(l.FileBytes)},
		{"RLIMIT_DATA", unix.RLIMIT_DATA, orInfinity(l.DataBytes), orInfinity(l.DataMax)},
	}
	if ownUserNamespace() {
		limits = append(limits, struct {
			name     string
			resource int
			cur, max uint64
		}{"RLIMIT_NPROC", unix.RLIMIT_NPROC, l.Processes, l.Processes})
	}
	for _, lim := range limits {
		if err := unix.Setrlimit(lim.resource, &unix.Rlimit{Cur: lim.cur, Max: lim.max}); err != nil {
			return fmt.Errorf("sandbox: set %s to %d (hard %d): %w", lim.name, lim.cur, lim.max, err)
		}
	}
	return nil
}

// orInfinity is n, or no limit for 0.
func orInfinity(n uint64) uint64 {
	if n == 0 {
		return unix.RLIM_INFINITY
	}
	return n
}

// ownUserNamespace reports whether this process is in a user namespace of
// its own rather than the host's (whose uid map is the identity over all
// ids), where RLIMIT_NPROC counts only its own tasks.
func ownUserNamespace() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return strings.Join(strings.Fields(string(b)), " ") != "0 0 4294967295"
}

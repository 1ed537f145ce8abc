package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	seccomp "github.com/elastic/go-seccomp-bpf"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Probe's roles: the first argument of this program when Probe starts
// it (EnterProbe) in the namespaces a worker would get, to learn whether
// the kernel allows them (roleProbe), and whether a file view can be
// built in them (roleProbeView: it builds one of nothing and says why it
// failed on stderr). Like worker/child's roles, flags no program defines.
const (
	roleProbe     = "-vgpud-role=sandbox-probe"
	roleProbeView = "-vgpud-role=sandbox-view"
)

// EnterProbe runs this process as one of Probe's probes, and exits, if
// its command line names one; otherwise it returns. A program that
// probes (a worker pool does, at its start) calls it first thing in main
// or TestMain: worker/child's EnterRole does. Nothing takes a process
// over from an init function.
func EnterProbe() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case roleProbe:
		os.Exit(0)
	case roleProbeView:
		if err := buildView(Policy{View: true}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// NobodyID is the host uid and gid workers run as when vgpud runs as
// root: they own nothing on the host but their private directory.
const NobodyID = 65534

// selfExe runs this very program: the file the main process was started
// from, even if it was replaced since, reached without searching the
// directories on its path (a program may sit in a directory the worker's
// uid cannot enter, as go test's binaries do).
const selfExe = "/proc/self/exe"

// namespaces are those a worker is started in where the kernel allows.
var namespaces = []struct {
	name string
	flag uintptr
}{
	{"user", unix.CLONE_NEWUSER},
	{"mount", unix.CLONE_NEWNS},
	{"network", unix.CLONE_NEWNET},
	{"pid", unix.CLONE_NEWPID},
	{"ipc", unix.CLONE_NEWIPC},
	{"uts", unix.CLONE_NEWUTS},
}

// host is what this host lets the main process do for its workers.
type host struct {
	root     bool
	uid, gid int     // the host ids a worker runs as
	flags    uintptr // the namespaces a worker is started in
	view     bool    // workers get a file view (Policy.View)
	cgroup   string  // the delegated cgroup v2 directory workers' cgroups go in; "" none
	report   Report
}

var probed struct {
	once sync.Once
	h    *host
}

// Probe returns what confinement workers get on this host; Report.Weak
// lists every protection weaker than designed, for the main process to
// log at start-up. The host is probed once (it starts this program a few
// times in candidate namespaces); later calls return the same result.
// Probe never fails: a worker gets what the host allows.
func Probe() Report {
	r := probeHost().report
	r.Namespaces = slices.Clone(r.Namespaces)
	r.Weak = slices.Clone(r.Weak)
	return r
}

func probeHost() *host {
	probed.once.Do(func() { probed.h = newHost() })
	return probed.h
}

func newHost() *host {
	h := &host{root: os.Geteuid() == 0, uid: os.Getuid(), gid: os.Getgid()}
	if h.root {
		h.uid, h.gid = NobodyID, NobodyID
	}
	h.flags = chooseNamespaces(h.tryNamespaces)
	r := &h.report
	r.UID, r.GID = h.uid, h.gid
	for _, ns := range namespaces {
		if h.flags&ns.flag != 0 {
			r.Namespaces = append(r.Namespaces, ns.name)
		}
	}
	h.weakNamespaces()
	h.view, r.View = h.tryView()
	if v, err := ll.LandlockGetABIVersion(); err == nil {
		r.LandlockABI = v
	}
	weakLandlock(r, r.LandlockABI)
	r.Seccomp = seccomp.Supported()
	if !r.Seccomp {
		r.weak("no seccomp: guest code in a worker may make any system call its uid and namespaces allow (mount, ptrace, sockets, io_uring...)")
	}
	h.weakBounds()
	if !h.root {
		r.weak("vgpud is not root: workers run as its own uid %d and keep its supplementary groups (DAC does not separate them from vgpud's files; Landlock does)", h.uid)
	}
	return h
}

// weakBounds finds the delegated cgroup v2 directory for workers'
// cgroups, and notes which of a worker's bounds (processes, memory, its
// private directory's size) are weaker than designed.
func (h *host) weakBounds() {
	r := &h.report
	parent, err := cgroupParent("/proc/self/cgroup", cgroupRoot)
	if err == nil {
		h.cgroup, r.Cgroup = parent, parent
	} else {
		r.weak("no delegated cgroup v2 (%v): a worker's tasks are bounded by RLIMIT_NPROC, its memory by RLIMIT_DATA (not its private directory's tmpfs, shared mappings or kernel memory), per worker, not together", err)
	}
	if h.flags&unix.CLONE_NEWUSER == 0 && h.cgroup == "" {
		r.weak("no user namespace and no cgroup: a worker's tasks are not bounded (RLIMIT_NPROC would count every worker's tasks together); only seccomp (no fork) and the PID namespace (its tasks die with it) contain them")
	}
	if !h.view {
		r.weak("no file view: a worker's private directory is the host's, bounded only by RLIMIT_FSIZE per file and the file system that holds it (put the pool's directory on one with a size limit)")
	}
}

// chooseNamespaces returns the namespaces to start workers in: all where
// try accepts them, else the user namespace (if try accepts it) with
// every other one try accepts beside it.
func chooseNamespaces(try func(flags uintptr) error) uintptr {
	var all uintptr
	for _, ns := range namespaces {
		all |= ns.flag
	}
	if try(all) == nil {
		return all
	}
	var base uintptr
	if try(unix.CLONE_NEWUSER) == nil {
		base = unix.CLONE_NEWUSER
	}
	flags := base
	for _, ns := range namespaces {
		if ns.flag != unix.CLONE_NEWUSER && try(base|ns.flag) == nil {
			flags |= ns.flag
		}
	}
	if flags != base && try(flags) != nil {
		return base
	}
	return flags
}

// tryNamespaces starts this program in the namespaces of flags, as a
// worker would be started, and waits for it to exit.
func (h *host) tryNamespaces(flags uintptr) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, selfExe)
	cmd.Args = []string{"vgpud-sandbox-probe", roleProbe}
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h.setAttr(cmd.SysProcAttr, flags, false)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start in namespaces %#x: %w", flags, err)
	}
	return nil
}

// viewFlags are the namespaces a file view needs: the capability to mount
// comes from the worker's own user namespace.
const viewFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS

// tryView reports whether workers can get a file view here: it starts
// this program as a worker, which builds one (of nothing). A failure is
// noted in the report.
func (h *host) tryView() (bool, bool) {
	if h.flags&viewFlags != viewFlags {
		h.report.weak("no file view (it needs user and mount namespaces): workers see the host's whole file tree, the names and metadata of every path (Landlock keeps them from opening or listing what the policy does not grant)")
		return false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, selfExe)
	cmd.Args = []string{"vgpud-sandbox-probe", roleProbeView}
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h.setAttr(cmd.SysProcAttr, h.flags, true)
	if out, err := cmd.CombinedOutput(); err != nil {
		h.report.weak("no file view (%v: %s): workers see the host's whole file tree, the names and metadata of every path (Landlock keeps them from opening or listing what the policy does not grant)",
			err, strings.TrimSpace(string(out)))
		return false, false
	}
	return true, true
}

// setAttr adds the namespaces of flags and the worker's ids to a, and,
// with view, the capability to build its file view: CAP_SYS_ADMIN, in
// its own user namespace only (flags must hold viewFlags), as an ambient
// capability, which survives the worker's execve as an unprivileged
// uid; Enter drops it once the view is built.
func (h *host) setAttr(a *syscall.SysProcAttr, flags uintptr, view bool) {
	if view && flags&viewFlags == viewFlags {
		a.AmbientCaps = append(a.AmbientCaps, unix.CAP_SYS_ADMIN)
	}
	a.Cloneflags |= flags
	if flags&unix.CLONE_NEWUSER != 0 {
		// The worker's id is the same inside and out: a non-zero uid
		// inside, so execve leaves it no capability in its namespace.
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: h.uid, HostID: h.uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: h.gid, HostID: h.gid, Size: 1}}
		// Only a privileged parent may let the child call setgroups,
		// which it needs to drop root's supplementary groups.
		a.GidMappingsEnableSetgroups = h.root
	}
	if h.root {
		a.Credential = &syscall.Credential{Uid: uint32(h.uid), Gid: uint32(h.gid), Groups: []uint32{}}
	}
}

func (h *host) weakNamespaces() {
	r := &h.report
	missing := func(flag uintptr) bool { return h.flags&flag == 0 }
	if missing(unix.CLONE_NEWUSER) {
		if h.root {
			r.weak("no user namespace: workers run as uid %d in the host's user namespace", h.uid)
		} else {
			r.weak("no user namespace: an unprivileged vgpud cannot give workers any namespace")
		}
	}
	if missing(unix.CLONE_NEWNET) {
		r.weak("no network namespace: workers share the host's network; only seccomp (no socket) and Landlock (no TCP) keep them off it")
	}
	if missing(unix.CLONE_NEWPID) {
		r.weak("no PID namespace: workers can name the host's processes; only seccomp (signals to self only, no ptrace) and Landlock (no /proc of others) keep them apart")
	}
	if missing(unix.CLONE_NEWNS) {
		r.weak("no mount namespace: workers share the host's mount table")
	}
	if missing(unix.CLONE_NEWIPC) {
		r.weak("no IPC namespace: workers share the host's System V IPC and POSIX message queues (seccomp refuses their calls)")
	}
	if missing(unix.CLONE_NEWUTS) {
		r.weak("no UTS namespace: workers share the host name")
	}
}

// weakLandlock notes what Landlock ABI abi cannot enforce.
func weakLandlock(r *Report, abi int) {
	switch {
	case abi == 0:
		r.weak("no Landlock: workers may read, and write, every file their uid may (only DAC, the mount namespace and seccomp confine them)")
		return
	case abi < 2:
		r.weak("Landlock ABI %d cannot let the compiler cache move files between its directories: no Landlock at all (as without Landlock)", abi)
		return
	}
	if abi < 3 {
		r.weak("Landlock ABI %d: truncating files is not restricted", abi)
	}
	if abi < 4 {
		r.weak("Landlock ABI %d: TCP is not restricted by Landlock (the network namespace and seccomp still are)", abi)
	}
	if abi < 5 {
		r.weak("Landlock ABI %d: ioctl on device files is not restricted by Landlock (seccomp still is)", abi)
	}
	if abi < 6 {
		r.weak("Landlock ABI %d: signals and abstract Unix sockets out of the worker are not scoped by Landlock (seccomp and the PID and network namespaces still are)", abi)
	}
}

// Apply sets cmd up to start a worker confined by p: the policy in its
// environment (for Enter), the namespaces Probe found, the worker's ids,
// and, when cmd runs this program, execution through /proc/self/exe. It
// keeps what cmd.SysProcAttr already holds (Pdeathsig, Setpgid). With
// p.Off only the policy is set.
func (p Policy) Apply(cmd *exec.Cmd) error {
	if cmd.SysProcAttr != nil {
		p.ParentDeath = cmd.SysProcAttr.Pdeathsig
	}
	p.View = !p.Off && probeHost().view
	kv, err := p.env()
	if err != nil {
		return err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = slices.DeleteFunc(cmd.Env, func(e string) bool { return strings.HasPrefix(e, EnvPolicy+"=") })
	cmd.Env = append(cmd.Env, kv)
	if p.Off {
		return nil
	}
	h := probeHost()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	h.setAttr(cmd.SysProcAttr, h.flags, h.view)
	if h.cgroup != "" {
		f, err := newCgroup(h.cgroup, p.Limits.withDefaults())
		if err != nil {
			return err
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
	}
	if isSelf(cmd.Path) {
		cmd.Path = selfExe
	}
	return nil
}

// isSelf reports whether path is this program's file.
func isSelf(path string) bool {
	a, err := os.Stat(path)
	if err != nil {
		return false
	}
	b, err := os.Stat(selfExe)
	return err == nil && os.SameFile(a, b)
}

// PrepareDir makes dir, a worker's private directory, the worker's own:
// when vgpud is root it is handed to the worker's uid, and every directory
// above it must let that uid through (ErrUnreachable otherwise).
func PrepareDir(dir string) error {
	h := probeHost()
	if !h.root {
		return nil
	}
	if err := os.Chown(dir, h.uid, h.gid); err != nil {
		return fmt.Errorf("hand %s to the worker's uid: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("worker directory %s: %w", dir, err)
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("worker directory %s: %w", dir, err)
		}
		if !h.canSearch(st) {
			return fmt.Errorf("%s (mode %v) does not let uid %d through to %s; make it searchable by others (chmod o+x) or choose another directory: %w",
				d, st.Mode().Perm(), h.uid, dir, ErrUnreachable)
		}
		if d == "/" {
			return nil
		}
	}
}

// canSearch reports whether the worker's ids may search directory st.
func (h *host) canSearch(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := st.Mode().Perm()
	switch {
	case int(sys.Uid) == h.uid:
		return perm&0o100 != 0
	case int(sys.Gid) == h.gid:
		return perm&0o010 != 0
	}
	return perm&0o001 != 0
}

// SetDataLimit sets the soft RLIMIT_DATA of worker pid to bytes (the main
// process calls it when a worker's instances change). The hard limit is
// kept when bytes is below it and raised to bytes otherwise, which needs
// CAP_SYS_RESOURCE (Limits.DataMax leaves room to raise without it). The
// main process may set the limits of a worker in a user namespace it
// created even when the worker's uid differs from its own.
func SetDataLimit(pid int, bytes uint64) error {
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, nil, &old); err != nil {
		return fmt.Errorf("read memory limit of worker %d: %w", pid, err)
	}
	lim := unix.Rlimit{Cur: bytes, Max: max(old.Max, bytes)}
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &lim, nil); err != nil {
		if errors.Is(err, unix.EPERM) && bytes > old.Max {
			return fmt.Errorf("raise memory limit of worker %d to %d bytes over its hard limit of %d (needs root): %w", pid, bytes, old.Max, err)
		}
		return fmt.Errorf("set memory limit of worker %d to %d bytes: %w", pid, bytes, err)
	}
	return nil
}

// PrivateDir is where the main process finds the private directory of
// the running worker pid whose policy named hostDir: in a file view
// (Report.View) the worker's own tmpfs, reached through its root in
// /proc, else hostDir. What the worker wrote there is its own: read it
// as untrusted.
func PrivateDir(pid int, hostDir string) string {
	if !probeHost().view || pid <= 0 {
		return hostDir
	}
	return filepath.Join("/proc", strconv.Itoa(pid), "root", strings.TrimPrefix(PrivateView, "/"))
}

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
)

// Denial is one kind of thing a diagnosed worker (Policy.Diagnose) was
// refused, with how often.
type Denial struct {
	// Kind is "syscall" (seccomp refused it), "ioctl" (seccomp refused
	// the request), "file" (not in the worker's file view, though the
	// host has it) or "landlock" (in the view, but no Landlock rule
	// grants opening it so: refused with EACCES).
	Kind string `json:"kind"`
	// Syscall is the system call's name.
	Syscall string `json:"syscall"`
	// Path is the file, as the worker named it (made absolute).
	Path string `json:"path,omitempty"`
	// Detail says more: the arguments that made seccomp refuse, or why
	// the file was refused.
	Detail string `json:"detail,omitempty"`
	Count  int    `json:"count"`
}

func (d Denial) String() string {
	s := d.Kind + " " + d.Syscall
	if d.Path != "" {
		s += " " + d.Path
	}
	if d.Detail != "" {
		s += " (" + d.Detail + ")"
	}
	if d.Count > 1 {
		s += fmt.Sprintf(" x%d", d.Count)
	}
	return s
}

// ReceiveListener reads the seccomp listener a diagnosed worker sends on
// its end of sock (restrictSyscalls), once it has installed its filter.
// It fails when the worker ends first.
func ReceiveListener(sock *os.File) (*os.File, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("receive the worker's seccomp listener: %w", err)
	}
	if n == 0 {
		return nil, errors.New("receive the worker's seccomp listener: the worker closed its socket first")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("receive the worker's seccomp listener: bad control message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("receive the worker's seccomp listener: want one descriptor (%v)", err)
	}
	return os.NewFile(uintptr(fds[0]), "seccomp-listener"), nil
}

// Supervisor answers a diagnosed worker's seccomp notifications and
// records what it was refused (Denial). It is the main process's side of
// Policy.Diagnose: the worker stays confined as ever (the view and
// Landlock are the kernel's, and what seccomp would refuse is answered
// EPERM), it only reports.
type Supervisor struct {
	listener *os.File
	pol      Policy
	names    map[int]string
	exe      string            // this program: the worker's binary
	resolved map[string]string // policy paths resolved on the host (loop only)
	stopR    *os.File
	stopW    *os.File
	done     chan struct{}

	mu      sync.Mutex
	denials []Denial
	index   map[Denial]int // by the key fields, Count zero
	err     error
}

// Supervise starts answering listener's notifications for a worker
// confined by pol; Stop ends it.
func Supervise(listener *os.File, pol Policy) (*Supervisor, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("supervise: seccomp architecture: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("supervise: %w", err)
	}
	s := &Supervisor{listener: listener, pol: pol, names: map[int]string{}, stopR: r, stopW: w,
		done: make(chan struct{}), index: map[Denial]int{}, resolved: map[string]string{}}
	s.exe, _ = os.Executable()
	for name, nr := range info.SyscallNames {
		s.names[nr] = name
	}
	go s.loop()
	return s, nil
}

// Stop ends the supervisor (a worker still running is left blocked in
// its next notified call until it dies) and returns what it recorded, in
// the order first seen.
func (s *Supervisor) Stop() ([]Denial, error) {
	s.stopW.Close()
	<-s.done
	s.stopR.Close()
	s.listener.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.denials), s.err
}

func (s *Supervisor) loop() {
	defer close(s.done)
	fd := int(s.listener.Fd())
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(s.stopR.Fd()), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			s.fail(fmt.Errorf("supervise: poll: %w", err))
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			return // POLLHUP: every task of the filter has ended
		}
		var n seccompNotif
		if err := notifRecv(fd, &n); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
				continue // the task died or was interrupted meanwhile
			}
			s.fail(fmt.Errorf("supervise: receive: %w", err))
			return
		}
		resp := s.answer(fd, &n)
		if err := notifSend(fd, &resp); err != nil && !errors.Is(err, unix.ENOENT) {
			s.fail(fmt.Errorf("supervise: answer: %w", err))
			return
		}
	}
}

func (s *Supervisor) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// answer records n and says what the kernel does with it: a call that
// names a file goes on (the view and Landlock decide), anything else is
// refused with EPERM, as the worker's filter outside a diagnosis does.
func (s *Supervisor) answer(fd int, n *seccompNotif) seccompNotifResp {
	name := s.names[int(n.NR)]
	if name == "" {
		name = "syscall " + strconv.Itoa(int(n.NR))
	}
	if slices.Contains(pathSyscalls, name) {
		if d, ok := s.file(n, name); ok && notifValid(fd, n.ID) {
			s.record(d)
		}
		return seccompNotifResp{ID: n.ID, Flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	}
	s.record(s.refused(n, name))
	return seccompNotifResp{ID: n.ID, Error: -int32(unix.EPERM)}
}

func (s *Supervisor) record(d Denial) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[d]; ok {
		s.denials[i].Count++
		return
	}
	s.index[d] = len(s.denials)
	d.Count = 1
	s.denials = append(s.denials, d)
}

// refused describes a call seccomp refuses, with the arguments that
// decide it where the filter looks at them.
func (s *Supervisor) refused(n *seccompNotif, name string) Denial {
	d := Denial{Kind: "syscall", Syscall: name}
	a := n.Args
	switch name {
	case "ioctl":
		d.Kind = "ioctl"
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", n.PID, int32(a[0])))
		d.Path = target
		d.Detail = fmt.Sprintf("request %#x", uint32(a[1]))
	case "clone":
		d.Detail = fmt.Sprintf("flags %#x", a[0])
	case "mmap":
		d.Detail = fmt.Sprintf("flags %#x", a[3])
	case "prctl":
		d.Detail = fmt.Sprintf("option %d", a[0])
	case "socket":
		d.Detail = fmt.Sprintf("domain %d type %#x", a[0], a[1])
	case "kill", "tgkill":
		d.Detail = fmt.Sprintf("pid %d", int32(a[0]))
	case "prlimit64":
		d.Detail = fmt.Sprintf("resource %d, setting %t", a[1], a[2] != 0)
	}
	return d
}

// file describes a call that names a file the worker cannot have: one
// the host has and the worker's view lacks, or one in the view that no
// Landlock rule lets it open (judged by name against the policy's paths).
// ok is false for anything else, a file it may have or that nobody has.
func (s *Supervisor) file(n *seccompNotif, name string) (Denial, bool) {
	dirfd, pathArg, flagsArg := int32(unix.AT_FDCWD), 0, -1
	switch name {
	case "open":
		flagsArg = 1
	case "openat":
		dirfd, pathArg, flagsArg = int32(n.Args[0]), 1, 2
	case "openat2", "newfstatat", "statx", "faccessat", "faccessat2", "readlinkat":
		dirfd, pathArg = int32(n.Args[0]), 1
	}
	path, err := readString(int(n.PID), n.Args[pathArg])
	if err != nil || path == "" {
		return Denial{}, false
	}
	if !filepath.IsAbs(path) {
		base := fmt.Sprintf("/proc/%d/cwd", n.PID)
		if dirfd != unix.AT_FDCWD {
			base = fmt.Sprintf("/proc/%d/fd/%d", n.PID, dirfd)
		}
		dir, err := os.Readlink(base)
		if err != nil {
			return Denial{}, false
		}
		path = dir + "/" + path
	}
	// Not filepath.Clean: "/lib/x86_64-linux-gnu/../../share" is
	// /usr/share where /lib is a link to usr/lib. The kernel resolves
	// the name as the worker gave it, in the view and on the host, and
	// the report names what the host resolves it to.
	raw := path
	path = filepath.Clean(path)
	if strings.HasPrefix(path, "/proc/") {
		// The worker's own /proc: resolved here it would be this
		// process's.
	} else if resolved, err := filepath.EvalSymlinks(raw); err == nil {
		path = resolved
	}
	if path == s.exe {
		return Denial{}, false // the worker's own binary, by its host name
	}
	d := Denial{Syscall: name, Path: path}
	inView := existsIn(int(n.PID), raw) || existsIn(int(n.PID), filepath.Clean(raw))
	if !inView {
		if strings.HasPrefix(path, "/proc/") {
			return Denial{}, false // the worker's own /proc, not the host's
		}
		if _, err := os.Stat(raw); err != nil {
			return Denial{}, false
		}
		d.Kind, d.Detail = "file", "not in the worker's file view"
		return d, true
	}
	opens := name == "open" || name == "openat" || name == "openat2" || name == "creat" || name == "execve"
	if !opens {
		return Denial{}, false
	}
	write := name == "creat" || flagsArg >= 0 && n.Args[flagsArg]&(unix.O_WRONLY|unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC) != 0
	if why := s.landlockRefuses(path, write, name == "execve"); why != "" {
		d.Kind, d.Detail = "landlock", why
		return d, true
	}
	return Denial{}, false
}

// landlockRefuses says why no rule of the policy lets the worker open
// path so ("" if one does), by name: a path beneath one of the policy's.
func (s *Supervisor) landlockRefuses(path string, write, exec bool) string {
	p := s.pol
	private := []string{p.Private, PrivateView} // at PrivateView in a view
	// Rules land on the targets of links (Landlock), and path is
	// resolved on the host: a policy path counts by its name and by
	// what it resolves to.
	beneath := func(list ...string) bool {
		for _, l := range list {
			if l == "" {
				continue
			}
			for _, name := range []string{l, s.resolve(l)} {
				if path == name || strings.HasPrefix(path, strings.TrimSuffix(name, "/")+"/") {
					return true
				}
			}
		}
		return false
	}
	if rest, ok := strings.CutPrefix(path, "/proc/"); ok {
		// The worker's own entries, by whatever name it reached them.
		who, file, _ := strings.Cut(rest, "/")
		if _, err := strconv.Atoi(who); err == nil || who == "self" || who == "thread-self" {
			first, _, _ := strings.Cut(file, "/")
			if slices.Contains(procSelfFiles, first) && !write && !exec {
				return ""
			}
			return "no rule for this /proc entry"
		}
	}
	switch {
	case exec && !beneath(p.ReadExec...) && !beneath(selfExe):
		return "not executable: not in the policy's read_exec"
	case write && !beneath(slices.Concat(p.Write, p.Devices, private)...):
		return "not writable: not in the policy's write or devices"
	case !beneath(slices.Concat(p.Read, p.ReadExec, p.Write, p.Devices, private, []string{selfExe})...):
		return "no rule: not in the policy"
	}
	return ""
}

// resolve is the host's resolution of a policy path (remembered), or the
// path itself.
func (s *Supervisor) resolve(p string) string {
	if r, ok := s.resolved[p]; ok {
		return r
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		r = p
	}
	s.resolved[p] = r
	return r
}

// existsIn reports whether path exists in process pid's file view,
// resolved inside its root (symbolic links too).
func existsIn(pid int, path string) bool {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, strings.TrimPrefix(path, "/"), &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// readString reads a NUL-terminated string of at most unix.PathMax bytes
// at addr in process pid's memory.
func readString(pid int, addr uint64) (string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return "", err
	}
	defer f.Close()
	var out []byte
	buf := make([]byte, 256)
	for len(out) < unix.PathMax {
		// Read up to the page's end first: the next page may be unmapped.
		want := min(len(buf), int(4096-(addr+uint64(len(out)))%4096))
		n, err := f.ReadAt(buf[:want], int64(addr)+int64(len(out)))
		if i := slices.Index(buf[:n], 0); i >= 0 {
			return string(append(out, buf[:i]...)), nil
		}
		out = append(out, buf[:n]...)
		if err != nil {
			return "", err
		}
	}
	return "", errors.New("path longer than PATH_MAX")
}

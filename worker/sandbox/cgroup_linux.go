package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the cgroup v2 hierarchy is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupPrefix names the cgroups Apply makes for workers.
const cgroupPrefix = "vgpud-worker-"

// cgroupMemorySlack is memory a worker's cgroup allows beyond its data
// limit and its private directory: page tables, the kernel's own
// allocations charged to it, page cache of what it reads.
const cgroupMemorySlack = 256 << 20

// cgroupParent returns the cgroup v2 directory under which workers'
// cgroups can be made, or why there is none. selfCgroup is this
// process's /proc/self/cgroup and root the cgroup2 mount. Workers go
// beside vgpud's own cgroup, in its parent, which must be delegated to
// vgpud (writable, with the pids and memory controllers enabled for its
// children): systemd gives that with Delegate=yes and
// DelegateSubgroup=, which starts the service in a leaf of its own
// cgroup. vgpud's own cgroup cannot hold them: a cgroup with processes
// cannot enable controllers for its children.
func cgroupParent(selfCgroup, root string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return "", fmt.Errorf("%s: %w", root, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", fmt.Errorf("%s is not a cgroup v2 mount (cgroup v1 or hybrid)", root)
	}
	return delegatedParent(selfCgroup, root)
}

// delegatedParent is cgroupParent once root is known to be cgroup v2.
func delegatedParent(selfCgroup, root string) (string, error) {
	f, err := os.Open(selfCgroup)
	if err != nil {
		return "", err
	}
	defer f.Close()
	own := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			own = filepath.Clean("/" + p)
		}
	}
	if own == "" {
		return "", fmt.Errorf("%s names no cgroup v2 path", selfCgroup)
	}
	if own == "/" {
		return "", errors.New("vgpud is in the root cgroup: no delegated cgroup to put workers beside it")
	}
	parent := filepath.Join(root, filepath.Dir(own))
	ctl, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return "", err
	}
	enabled := strings.Fields(string(ctl))
	for _, c := range []string{"pids", "memory"} {
		if !slices.Contains(enabled, c) {
			return "", fmt.Errorf("%s does not enable the %s controller for its children (delegate it to vgpud)", parent, c)
		}
	}
	if err := unix.Access(parent, unix.W_OK|unix.X_OK); err != nil {
		return "", fmt.Errorf("%s is not writable by vgpud (delegate it): %w", parent, err)
	}
	return parent, nil
}

var cgroupSeq atomic.Uint64

// cgroupsMade are the open directories of the cgroups newCgroup made,
// by path: a worker's is kept open until its cgroup is swept, since
// Apply cannot know when the caller has started the worker.
var cgroupsMade struct {
	sync.Mutex
	dirs map[string]*os.File
}

// cgroupSweepAge is how long a cgroup newCgroup made is left alone
// before an empty one is taken for a worker that has ended: the caller
// starts the worker right after Apply.
const cgroupSweepAge = time.Minute

// newCgroup makes a cgroup for one worker under parent with l's bounds
// (l with defaults): pids.max is l.Processes, memory.max the data limit,
// the private directory's tmpfs (its pages are charged to the worker)
// and cgroupMemorySlack. It returns the cgroup's directory, opened, for
// SysProcAttr.CgroupFD (clone3 starts the worker in it); it stays open
// until the cgroup is swept. It first removes the empty cgroups of
// workers that have ended (sweepCgroups).
func newCgroup(parent string, l Limits) (*os.File, error) {
	sweepCgroups()
	dir := filepath.Join(parent, fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("worker cgroup: %w", err)
	}
	mem := "max"
	if l.DataMax != 0 {
		mem = strconv.FormatUint(l.DataMax+l.DirBytes+cgroupMemorySlack, 10)
	}
	for _, kv := range [][2]string{{"pids.max", strconv.FormatUint(l.Processes, 10)}, {"memory.max", mem}, {"memory.swap.max", "0"}} {
		if err := os.WriteFile(filepath.Join(dir, kv[0]), []byte(kv[1]), 0); err != nil && !(kv[0] == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			os.Remove(dir)
			return nil, fmt.Errorf("worker cgroup: %w", err)
		}
	}
	f, err := os.Open(dir)
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("worker cgroup: %w", err)
	}
	cgroupsMade.Lock()
	if cgroupsMade.dirs == nil {
		cgroupsMade.dirs = map[string]*os.File{}
	}
	cgroupsMade.dirs[dir] = f
	cgroupsMade.Unlock()
	return f, nil
}

// sweepCgroups removes the cgroups newCgroup made that are older than
// cgroupSweepAge and hold no process any more (their worker ended; rmdir
// fails on the others).
func sweepCgroups() {
	cgroupsMade.Lock()
	defer cgroupsMade.Unlock()
	for dir, f := range cgroupsMade.dirs {
		st, err := f.Stat()
		if err != nil || time.Since(st.ModTime()) < cgroupSweepAge {
			continue
		}
		if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
			f.Close()
			delete(cgroupsMade.dirs, dir)
		}
	}
}

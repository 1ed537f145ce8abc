package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// oldRoot is where the host's root is while the view is built; it is
// detached before anything else runs.
const oldRoot = "/.host"

// viewKind is how a path is mounted in the view.
type viewKind int

const (
	viewRead   viewKind = iota // read-only, no set-id, no devices
	viewDevice                 // read-only device node
	viewWrite                  // read-write (a device node if under /dev)
)

// viewEntry is one name in the view: a bind mount of the host's file or
// directory of the same name, or a symbolic link with the host's text.
type viewEntry struct {
	path string
	link string // the link's text; "" for a bind mount
	dir  bool
	kind viewKind
}

// buildView makes the calling process's root a new file system holding
// only p's paths, and its private directory at PrivateView. The process
// must be in its own user and mount namespaces with CAP_SYS_ADMIN there
// (Apply's ambient capability). What it builds:
//
//   - a tmpfs as the root, read-only once built;
//   - each path of p.Read and p.ReadExec that exists on the host, bound
//     read-only (no set-id, no devices but device nodes listed under
//     /dev) at its own name; each symbolic link on the way to it (/lib ->
//     usr/lib, /usr/bin/ld -> x86_64-linux-gnu-ld) made again with the
//     same text, and its target bound, so names resolve as on the host;
//   - each path of p.Write bound read-write, and at PrivateView, for
//     p.Private, a tmpfs of p.Limits.DirBytes (mountPrivate);
//   - /proc: a new proc file system of the worker's PID namespace where
//     the kernel allows, else the host's bound (read-only);
//
// then it detaches the host's root. The host's paths under /proc in p are
// not bound: the whole /proc is mounted.
func buildView(p Policy) error {
	plan, err := planView(p)
	if err != nil {
		return err
	}
	wd, _ := os.Getwd()
	// Nothing done here may reach the host's mount table.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("sandbox: view: make / private: %w", err)
	}
	base, err := viewBase()
	if err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return fmt.Errorf("sandbox: view: tmpfs on %s: %w", base, err)
	}
	if err := os.Mkdir(filepath.Join(base, oldRoot), 0o700); err != nil {
		return fmt.Errorf("sandbox: view: %w", err)
	}
	// The tmpfs becomes the root and the host's root moves beneath it,
	// where the sources are reached: base is the host's again there.
	if err := unix.PivotRoot(base, filepath.Join(base, oldRoot)); err != nil {
		return fmt.Errorf("sandbox: view: pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("sandbox: view: %w", err)
	}
	for _, e := range plan {
		if err := e.make(); err != nil {
			return err
		}
	}
	if p.Private != "" {
		if err := mountPrivate(p.Limits.withDefaults().DirBytes); err != nil {
			return err
		}
	}
	if err := mountProc(); err != nil {
		return err
	}
	if err := unix.Mount("", oldRoot, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("sandbox: view: %w", err)
	}
	if err := unix.Unmount(oldRoot, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("sandbox: view: detach the host's root: %w", err)
	}
	if err := os.Remove(oldRoot); err != nil {
		return fmt.Errorf("sandbox: view: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("sandbox: view: read-only root: %w", err)
	}
	// The worker starts in its private directory (the pool's choice): it
	// stays there, under its new name.
	if wd = viewPath(wd, p.Private); strings.HasPrefix(wd, PrivateView) {
		if err := unix.Chdir(wd); err != nil {
			return fmt.Errorf("sandbox: view: %w", err)
		}
	}
	return nil
}

// privateInodes bounds the files and directories of a worker's private
// directory (PoCL's cache makes a few per program and kernel size).
const privateInodes = 1 << 16

// mountPrivate mounts the worker's private directory at PrivateView: a
// tmpfs of size bytes, its own, so that no write of the worker (or of
// guest code in it) fills a host file system, and no host path of it
// shows. It lives as long as the worker's mount namespace.
func mountPrivate(size uint64) error {
	if err := os.MkdirAll(PrivateView, 0o755); err != nil {
		return fmt.Errorf("sandbox: view: %w", err)
	}
	opts := fmt.Sprintf("mode=0700,size=%d,nr_inodes=%d", size, privateInodes)
	if err := unix.Mount("tmpfs", PrivateView, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("sandbox: view: tmpfs of %d bytes on %s: %w", size, PrivateView, err)
	}
	return nil
}

// viewBase is a directory of the host to mount the view's tmpfs on: any
// will do, as the tmpfs leaves it when it becomes the root.
func viewBase() (string, error) {
	for _, d := range []string{"/tmp", "/mnt", "/dev"} {
		if st, err := os.Lstat(d); err == nil && st.IsDir() {
			return d, nil
		}
	}
	return "", errors.New("sandbox: view: no directory to build it in (/tmp, /mnt, /dev)")
}

// planView lists the view's names, parents before children, without the
// names beneath a bound directory (the bind holds them).
func planView(p Policy) ([]viewEntry, error) {
	byPath := map[string]viewEntry{}
	add := func(paths []string, kind viewKind) error {
		for _, path := range paths {
			if path == p.Private {
				continue
			}
			k := kind
			if strings.HasPrefix(path, "/dev/") && k == viewRead {
				k = viewDevice
			}
			es, err := resolveView(path, k)
			if err != nil {
				return err
			}
			for _, e := range es {
				if old, ok := byPath[e.path]; ok && old.kind > e.kind {
					e.kind = old.kind
				}
				byPath[e.path] = e
			}
		}
		return nil
	}
	for _, set := range []struct {
		paths []string
		kind  viewKind
	}{{p.Read, viewRead}, {p.ReadExec, viewRead}, {p.Write, viewWrite}, {p.Devices, viewWrite}} {
		if err := add(set.paths, set.kind); err != nil {
			return nil, err
		}
	}
	paths := slices.Sorted(func(yield func(string) bool) {
		for k := range byPath {
			if !yield(k) {
				return
			}
		}
	})
	var plan []viewEntry
	var dirs []string // bound directories
	for _, path := range paths {
		if slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(path, d+"/") }) {
			continue
		}
		e := byPath[path]
		if e.link == "" && e.dir {
			dirs = append(dirs, path)
		}
		plan = append(plan, e)
	}
	return plan, nil
}

// resolveView returns the names path needs in the view: every symbolic
// link on the way to it, and the file or directory it ends at; nothing if
// it does not exist on the host (nor does a link to it), or is under
// /proc (mounted whole).
func resolveView(path string, kind viewKind) ([]viewEntry, error) {
	var out []viewEntry
	for range 40 {
		path = filepath.Clean("/" + path)
		if path == "/proc" || strings.HasPrefix(path, "/proc/") {
			return out, nil
		}
		link, text, rest, err := firstLink(path)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			// Not even the links on the way: they would name host
			// directories the worker has no use for.
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("sandbox: view: %s: %w", path, err)
		}
		if link == "" {
			st, err := os.Stat(path)
			if err != nil {
				return nil, nil
			}
			if path == "/" {
				return nil, errors.New("sandbox: view: the host's root may not be in a policy")
			}
			return append(out, viewEntry{path: path, dir: st.IsDir(), kind: kind}), nil
		}
		out = append(out, viewEntry{path: link, link: text, kind: kind})
		target := text
		if !filepath.IsAbs(text) {
			target = filepath.Join(filepath.Dir(link), text)
		}
		path = filepath.Join(target, rest)
	}
	return nil, fmt.Errorf("sandbox: view: %s: %w", path, unix.ELOOP)
}

// firstLink returns the first symbolic link on path (a clean absolute
// path), its text, and what of path follows it; "" if there is none.
func firstLink(path string) (link, text, rest string, err error) {
	parts := strings.Split(path[1:], "/")
	cur := ""
	for i, part := range parts {
		cur += "/" + part
		st, err := os.Lstat(cur)
		if err != nil {
			return "", "", "", err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			text, err := os.Readlink(cur)
			if err != nil {
				return "", "", "", err
			}
			return cur, text, strings.Join(parts[i+1:], "/"), nil
		}
	}
	return "", "", "", nil
}

// make creates e in the view (the root), from the host's root at oldRoot.
func (e viewEntry) make() error {
	if err := os.MkdirAll(filepath.Dir(e.path), 0o755); err != nil {
		return fmt.Errorf("sandbox: view: %w", err)
	}
	if e.link != "" {
		if err := os.Symlink(e.link, e.path); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("sandbox: view: %w", err)
		}
		return nil
	}
	return e.bind(filepath.Join(oldRoot, e.path))
}

// bind mounts src (under oldRoot) at e.path with e's rights.
func (e viewEntry) bind(src string) error {
	if e.dir {
		if err := os.MkdirAll(e.path, 0o755); err != nil {
			return fmt.Errorf("sandbox: view: %w", err)
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(e.path), 0o755); err != nil {
			return fmt.Errorf("sandbox: view: %w", err)
		}
		f, err := os.OpenFile(e.path, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("sandbox: view: %w", err)
		}
		f.Close()
	}
	if err := unix.Mount(src, e.path, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("sandbox: view: bind %s: %w", e.path, err)
	}
	var attr uint64
	switch {
	case e.kind == viewRead:
		attr = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	case e.kind == viewDevice:
		attr = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID
	case strings.HasPrefix(e.path, "/dev/"):
		attr = unix.MOUNT_ATTR_NOSUID
	default:
		attr = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	}
	if err := setMountAttr(e.path, attr); err != nil {
		return fmt.Errorf("sandbox: view: restrict %s: %w", e.path, err)
	}
	return nil
}

// setMountAttr adds attr (MOUNT_ATTR_*) to the mounts at and beneath path.
// Before Linux 5.12 (no mount_setattr) only the mount at path gets them,
// by a remount that keeps the flags it had (in a user namespace, the
// flags a mount inherited from the host may not be cleared).
func setMountAttr(path string, attr uint64) error {
	err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr})
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return err
	}
	flags := uintptr(st.Flags) & (unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC |
		unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
	for _, a := range []struct {
		attr uint64
		flag uintptr
	}{{unix.MOUNT_ATTR_RDONLY, unix.MS_RDONLY}, {unix.MOUNT_ATTR_NOSUID, unix.MS_NOSUID}, {unix.MOUNT_ATTR_NODEV, unix.MS_NODEV}} {
		if attr&a.attr != 0 {
			flags |= a.flag
		}
	}
	return unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|flags, "")
}

// mountProc gives the view a /proc: a new one of the worker's PID
// namespace (it holds only the worker and its linker processes), or, where
// the kernel refuses that (no PID namespace of the worker's own, or a
// host /proc partly covered), the host's, read-only. Landlock lets the
// worker read only its own entries, cpuinfo and meminfo in either.
func mountProc() error {
	if err := os.Mkdir("/proc", 0o555); err != nil {
		return fmt.Errorf("sandbox: view: %w", err)
	}
	err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, "")
	if err == nil {
		return nil
	}
	e := viewEntry{path: "/proc", dir: true, kind: viewRead}
	if berr := e.bind(filepath.Join(oldRoot, "proc")); berr != nil {
		return fmt.Errorf("sandbox: view: /proc: %w (a new one: %w)", berr, err)
	}
	return nil
}

// dropCapabilities empties this process's capability sets, the ambient
// one included: the view is built, and nothing after needs privilege.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("sandbox: clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("sandbox: drop capabilities: %w", err)
	}
	return nil
}

// viewEnv points the environment entries that name the private directory
// (or a path in it) at PrivateView.
func viewEnv(env []string, private string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			kv = k + "=" + viewPath(v, private)
		}
		out = append(out, kv)
	}
	return out
}

// viewPath is path's name in the view if it is private or beneath it,
// else path unchanged.
func viewPath(path, private string) string {
	if private == "" || !filepath.IsAbs(path) {
		return path
	}
	rest, ok := strings.CutPrefix(filepath.Clean(path), filepath.Clean(private))
	if !ok || rest != "" && rest[0] != '/' {
		return path
	}
	return PrivateView + rest
}

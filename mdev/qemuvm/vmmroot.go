package qemuvm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Where the modern VMM root lives in the repository (docs/vmm-root.md).
const (
	// VMMRunScript runs a program from the root.
	VMMRunScript = "scripts/vmm-run.sh"
	// VMMRootDir is the root make vmm-root builds: Debian trixie with
	// QEMU 11.1 (vfio-user-pci).
	VMMRootDir = "build/vmm-root"
	// vmmStamp marks a finished root.
	vmmStamp = ".vmm-root-stamp"
)

// VMMRoot is a built VMM root and the script that runs QEMU from it
// (scripts/vmm-run.sh ROOT -- qemu-system-x86_64 ...).
type VMMRoot struct {
	// Script is scripts/vmm-run.sh, absolute.
	Script string
	// Root is the root's directory, absolute.
	Root string
}

// NewVMMRoot checks that script exists and that root is a finished VMM
// root (it holds the build's stamp) and returns them, made absolute.
func NewVMMRoot(script, root string) (VMMRoot, error) {
	var r VMMRoot
	var err error
	if r.Script, err = filepath.Abs(script); err != nil {
		return VMMRoot{}, fmt.Errorf("vmm root: %w", err)
	}
	if r.Root, err = filepath.Abs(root); err != nil {
		return VMMRoot{}, fmt.Errorf("vmm root: %w", err)
	}
	// %v, not %w: a missing file here is not a missing daemon or socket
	// to a caller that tells ENOENT apart.
	if _, err := os.Stat(r.Script); err != nil {
		return VMMRoot{}, fmt.Errorf("vmm root: run script: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.Root, vmmStamp)); err != nil {
		return VMMRoot{}, fmt.Errorf("vmm root %s is not built (%v): run `make vmm-root` (docs/vmm-root.md)", r.Root, err)
	}
	return r, nil
}

// RepoVMMRoot is NewVMMRoot for the repository holding the working
// directory (found by walking up to go.mod): its scripts/vmm-run.sh and
// build/vmm-root.
func RepoVMMRoot() (VMMRoot, error) {
	dir, err := os.Getwd()
	if err != nil {
		return VMMRoot{}, fmt.Errorf("vmm root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return NewVMMRoot(filepath.Join(dir, VMMRunScript), filepath.Join(dir, VMMRootDir))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return VMMRoot{}, fmt.Errorf("vmm root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Apply makes c run QEMU from the root: c.Prefix is the run script, the
// root and "--", c.Modern is set, and c.Env's VMM_RUN_BINDS names c's
// files (kernel, initramfs, disk) and the directories of its sockets
// (which QEMU may create) that the script does not bind anyway (/tmp and
// the repository's build/), so that every path means the same inside the
// root. Files are bound one by one so that a kernel in /boot, say, does
// not hide the root's own directory. Call it once c is complete.
func (r VMMRoot) Apply(c *Config) {
	c.Prefix = []string{r.Script, r.Root, "--"}
	c.Modern = true
	if binds := r.binds(*c); len(binds) > 0 {
		c.Env = append(c.Env, "VMM_RUN_BINDS="+strings.Join(binds, ":"))
	}
}

// binds lists the directories c's files are in, outside what vmm-run.sh
// binds itself.
func (r VMMRoot) binds(c Config) []string {
	files := []string{c.Kernel, c.Initrd, c.Disk}
	var dirs []string
	for _, p := range []string{c.QMPSocket, c.AgentSocket} {
		if p != "" {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	for _, d := range c.VFIOUser {
		dirs = append(dirs, filepath.Dir(d.Socket))
	}
	if p, ok := strings.CutPrefix(c.Incoming, "unix:"); ok {
		dirs = append(dirs, filepath.Dir(p))
	}
	covered := []string{"/tmp", filepath.Dir(r.Root)} // the repository's build/
	var out []string
	for _, p := range append(files, dirs...) {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil || abs == "/" || strings.Contains(abs, ":") {
			continue // unusable in the list; QEMU will say what it misses
		}
		if slices.ContainsFunc(covered, func(c string) bool { return within(abs, c) }) {
			continue
		}
		if !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	return out
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

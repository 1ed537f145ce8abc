package sandbox

import (
	"errors"
	"fmt"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Landlock rights of the policy's three kinds of path. Directories may be
// listed; files in writable directories may be made, written, truncated,
// renamed (PoCL moves a built kernel from the cache's root into its
// program's directory: "refer") and removed. Nothing grants making
// devices, sockets, pipes or symbolic links, or connecting to Unix sockets
// by path; ioctl on devices only on the policy's device nodes.
const (
	rightsReadFile  = ll.AccessFSReadFile
	rightsReadDir   = rightsReadFile | ll.AccessFSReadDir
	rightsExecFile  = rightsReadFile | ll.AccessFSExecute
	rightsExecDir   = rightsReadDir | ll.AccessFSExecute
	rightsWriteFile = rightsReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
	rightsWriteDir  = rightsReadDir | rightsWriteFile | ll.AccessFSMakeReg | ll.AccessFSMakeDir |
		ll.AccessFSRemoveFile | ll.AccessFSRemoveDir | ll.AccessFSRefer
	// A device node of Policy.Devices: opened read-write and driven with
	// ioctl (handled from ABI 5; before, Landlock does not restrict ioctl).
	rightsDevice = rightsReadFile | ll.AccessFSWriteFile | ll.AccessFSIoctlDev
)

// landlockABIs are the rights each Landlock ABI version handles, from 1.
var landlockABIs = []landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// landlockABI returns the kernel's Landlock ABI version; 0: none.
func landlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// restrictThread applies Landlock to the calling thread, which must be
// locked to its goroutine and have no_new_privs: p's paths with their
// rights, and exe (this program, run again by Enter) readable and
// executable, and nothing else of the file system; no TCP or UDP bind or
// connect; no signal to, and no abstract Unix socket of, a process outside
// the thread's domain. Every right the kernel handles is denied unless a
// rule grants it. It returns the ABI version it used; 0 (no Landlock, or
// ABI 1, which cannot let the compiler cache move files between its
// directories) restricts nothing.
//
// Only this thread: the domain reaches the whole worker because Enter
// then executes the worker again from this thread, and every thread of
// the new image descends from it. (Restricting the other threads of a
// running Go program needs libpsx, which finds threads by the process id
// getpid returns; in a PID namespace with the host's /proc mounted that
// is another process's.)
func restrictThread(p Policy, exe string) (int, error) {
	abi := landlockABI()
	if abi < 2 {
		return 0, nil
	}
	cfg := landlockABIs[min(abi, len(landlockABIs))-1]
	attr := ll.RulesetAttr{
		HandledAccessFS:  uint64(cfg.HandledAccessFS),
		HandledAccessNet: uint64(cfg.HandledAccessNet),
		Scoped:           uint64(cfg.Scoped),
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return abi, fmt.Errorf("sandbox: landlock ruleset: %w", err)
	}
	defer unix.Close(fd)
	for _, set := range []struct {
		paths            []string
		dirRights, files uint64
	}{
		{p.Read, rightsReadDir, rightsReadFile},
		{p.ReadExec, rightsExecDir, rightsExecFile},
		{p.Write, rightsWriteDir, rightsWriteFile},
		{p.Devices, rightsReadDir, rightsDevice},
		{[]string{p.privatePath()}, rightsWriteDir, rightsWriteFile},
		{[]string{exe}, rightsExecDir, rightsExecFile},
	} {
		for _, path := range set.paths {
			if err := addPathRule(fd, path, set.dirRights, set.files, attr.HandledAccessFS); err != nil {
				return abi, err
			}
		}
	}
	if err := ll.LandlockRestrictSelf(fd, 0); err != nil {
		return abi, fmt.Errorf("sandbox: landlock_restrict_self: %w", err)
	}
	return abi, nil
}

// privatePath is where the worker reaches its private directory: in its
// file view, or at its host path; "" if it has none.
func (p Policy) privatePath() string {
	if p.View && p.Private != "" {
		return PrivateView
	}
	return p.Private
}

// addPathRule grants path (its target, if a symbolic link) dirRights if
// it is a directory, fileRights otherwise, as far as the ruleset handles
// them; a path that does not exist is skipped.
func addPathRule(ruleset int, path string, dirRights, fileRights, handled uint64) error {
	if path == "" {
		return nil
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: landlock path %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("sandbox: landlock path %s: %w", path, err)
	}
	rights := fileRights
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		rights = dirRights
	}
	rule := ll.PathBeneathAttr{ParentFd: fd, AllowedAccess: rights & handled}
	if err := ll.LandlockAddPathBeneathRule(ruleset, &rule, 0); err != nil {
		return fmt.Errorf("sandbox: landlock rule for %s: %w", path, err)
	}
	return nil
}

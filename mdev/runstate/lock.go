package runstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile is the lock's name in the run directory.
const LockFile = "vgpud.lock"

// ErrLocked: another process holds the run directory.
var ErrLocked = errors.New("run directory in use by another vgpud")

// Lock is a held run directory: an exclusive flock on <dir>/vgpud.lock,
// which holds the owner's PID. The kernel releases it when the process
// exits, however it exits.
type Lock struct {
	f *os.File
}

// Acquire takes dir's lock without waiting. When another process holds it
// the error wraps ErrLocked and names that process's PID.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "vgpud pid " + strconv.Itoa(pid)
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is held by %s (lock %s): %w", dir, holder, path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up. It is idempotent.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// AdoptLock takes over the lock an earlier vgpud handed over in an
// upgrade in place (its open file carries the flock) and writes this
// process's PID into it.
func AdoptLock(fd int) (*Lock, error) {
	if fd < 0 {
		return nil, errors.New("adopt run directory lock: no descriptor handed over")
	}
	f := os.NewFile(uintptr(fd), LockFile)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("adopt run directory lock: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Fd is the lock file's descriptor (to hand over).
func (l *Lock) Fd() int { return int(l.f.Fd()) }

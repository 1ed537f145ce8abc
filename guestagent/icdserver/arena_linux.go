package icdserver

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/guestagent/icdproto"
)

// maxArenaSize bounds one arena's mapping (address space, not memory): a
// connection's arenas together are bounded by maxArenaBytes anyway.
const maxArenaSize = maxArenaBytes

// mapArena maps size bytes of the memfd fd shared, read-write. It refuses
// (with icdproto.ErrArena) a file that is not sealed against shrinking: a
// client that truncated a mapped file would make the daemon's next access
// to it fault (SIGBUS). It does not close fd.
func mapArena(fd int, size uint64) ([]byte, error) {
	if size == 0 || size > maxArenaSize {
		return nil, icdproto.Errorf(icdproto.ErrArena, "arena of %d bytes", size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, icdproto.Errorf(icdproto.ErrArena, "F_GET_SEALS: %v (not a memfd?)", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, icdproto.Errorf(icdproto.ErrArena, "memfd not sealed with F_SEAL_SHRINK (seals %#x)", seals)
	}
	// Only shmem (a plain memfd): a hugetlbfs file, say, can fault (SIGBUS)
	// when the huge page pool runs dry, and other file systems can be
	// truncated behind the seal's back or fail I/O.
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		return nil, icdproto.Errorf(icdproto.ErrArena, "not a plain memfd (file system %#x, %v)", sfs.Type, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, icdproto.Errorf(icdproto.ErrArena, "fstat: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, icdproto.Errorf(icdproto.ErrArena, "not a regular file (mode %#o)", st.Mode)
	}
	if st.Size < 0 || uint64(st.Size) < size {
		return nil, icdproto.Errorf(icdproto.ErrArena, "memfd of %d bytes, arena of %d", st.Size, size)
	}
	b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, icdproto.Errorf(icdproto.ErrArena, "mmap %d bytes: %v", size, err)
	}
	return b, nil
}

func unmapArena(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("munmap arena: %w", err)
	}
	return nil
}

// peerCred returns the pid, uid and gid of the process that connected c
// (SO_PEERCRED), or -1s when it cannot tell.
func peerCred(c *net.UnixConn) (pid, uid, gid int) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, -1, -1
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || serr != nil {
		return -1, -1, -1
	}
	return int(cred.Pid), int(cred.Uid), int(cred.Gid)
}

// monoNow is CLOCK_MONOTONIC in nanoseconds, the clock of event records
// (the ICD stamps its own with clock_gettime(CLOCK_MONOTONIC)). It is the
// runtime's monotonic clock, which is CLOCK_MONOTONIC read through the
// vDSO, offset once (monoBase): two events a command, and a system call
// each for unix.ClockGettime was 9% of the daemon's CPU in a burst of
// launches (bench/README.md, issue 43).
func monoNow() int64 { return monoBase.ns + int64(time.Since(monoBase.at)) }

// monoBase pairs a CLOCK_MONOTONIC reading with the runtime's clock: ns is
// CLOCK_MONOTONIC at at, within slack.
var monoBase = newMonoBase()

type monoPair struct {
	ns    int64
	at    time.Time
	slack time.Duration
}

// newMonoBase reads CLOCK_MONOTONIC on both sides of time.Now and keeps
// the midpoint of the tightest of a few tries (a preemption between the
// reads only widens the slack).
func newMonoBase() monoPair {
	best := monoPair{slack: time.Duration(1<<63 - 1)}
	for range 5 {
		var a, b unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &a) != nil {
			break
		}
		at := time.Now()
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &b) != nil {
			break
		}
		if slack := time.Duration(b.Nano()-a.Nano()) / 2; slack < best.slack {
			best = monoPair{ns: a.Nano() + int64(slack), at: at, slack: slack}
		}
	}
	return best
}

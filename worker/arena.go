package worker

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/gpu/remote"
)

// arenaFile makes the memory file a worker and its executor share for
// the executor's buffers (docs/executor-protocol.md "Shared buffer
// memory"): bytes bytes, sparse (a page is memory only once touched),
// sealed so that neither end can grow, shrink or reseal it. The main
// process makes it because the sandbox refuses both ends memfd_create
// and shared anonymous memory, which RLIMIT_DATA does not count: this
// file's size is the bound on what the executor can hold in it.
func arenaFile(bytes uint64) (*os.File, error) {
	bytes = (bytes + remote.ArenaPage - 1) &^ (remote.ArenaPage - 1)
	if bytes == 0 || bytes > 1<<46 {
		return nil, fmt.Errorf("executor arena of %d bytes: out of range", bytes)
	}
	fd, err := unix.MemfdCreate("vgpud-executor-arena", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("executor arena: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "executor-arena")
	if err := f.Truncate(int64(bytes)); err != nil {
		f.Close()
		return nil, fmt.Errorf("executor arena: size %d: %w", bytes, err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("executor arena: seal: %w", err)
	}
	return f, nil
}

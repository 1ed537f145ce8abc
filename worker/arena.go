package worker

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu/remote"
	"github.com/vgpud/vgpud/worker/wire"
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

// arena serves a worker's Arena request: the memory a device context's
// executor shares with the worker, made here because the worker may not
// make shared memory. It is sized to the instance's memory quota at most,
// the most the context's buffers can hold; every request gets a file of
// its own (a context made again after a destroy gets a fresh one, never
// the previous context's pages). What a compromised worker could hoard
// this way is bounded by its open-file limit, each file by the quota,
// and is memory only once touched (docs/executor-protocol.md "Shared
// buffer memory").
func (pr *process) arena(id uint32, m *wire.Arena) {
	inst := pr.slotFor(id, m.Slot)
	if inst == nil {
		return
	}
	inst.mu.Lock()
	quota := inst.limits.MemBytes
	inst.mu.Unlock()
	if m.Bytes > quota {
		go pr.reply(id, abi.StatusInvalidArgument, fmt.Sprintf("arena of %d bytes for an instance whose quota is %d", m.Bytes, quota), nil)
		return
	}
	f, err := arenaFile(m.Bytes)
	if err != nil {
		go pr.reply(id, abi.StatusOutOfResources, err.Error(), nil)
		return
	}
	go func() {
		defer f.Close()
		if err := pr.conn.Send(id, &wire.Reply{Status: uint32(abi.StatusOK), File: true}, int(f.Fd())); err != nil && pr.ctx.Err() == nil {
			pr.log.Warn("reply to worker", "err", err)
		}
	}()
}

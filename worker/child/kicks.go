package child

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/irqfd"
)

// Kicks straight to the worker (wire.Kicks, docs/worker.md "Kicks
// straight to the worker"): where a transport backs abi.RegRingKick with
// an eventfd (vfio-user's ioeventfd, signalled by KVM or QEMU for each
// store the guest makes there), the main process hands the worker that
// eventfd, and the worker reads it itself. A kick then wakes the process
// that runs the ring, with no hop through vgpud's main process (its
// register file, its doorbell eventfd) in between.

// takeKicks makes fd the slot's kick eventfd, in place of the last one;
// fd is closed here whatever happens (the watcher reads a copy).
func (sl *slot) takeKicks(fd int) error {
	defer unix.Close(fd)
	if err := irqfd.Check(fd); err != nil {
		return abi.Errorf(abi.StatusInternal, "kick eventfd: %v", err)
	}
	sl.kickMu.Lock()
	defer sl.kickMu.Unlock()
	if sl.kicksClosed {
		return abi.Errorf(abi.StatusNotFound, "instance %s is being removed", sl.id)
	}
	sl.kickW.Stop()
	sl.kickW = nil
	w, err := irqfd.Watch(fd, sl.kicked, sl.log)
	if err != nil {
		return fmt.Errorf("kick eventfd: %w", err)
	}
	sl.kickW = w
	return nil
}

// stopKicks stops reading the kick eventfd, after the kick being applied
// (if any); closing marks the slot as being removed, so that no Kicks
// starts another watcher.
func (sl *slot) stopKicks(closing bool) {
	sl.kickMu.Lock()
	defer sl.kickMu.Unlock()
	sl.kickW.Stop()
	sl.kickW = nil
	sl.kicksClosed = sl.kicksClosed || closing
}

// kicked applies one signal of the kick eventfd (signals that came
// before the read are one) as the main process's register file applies
// a write of abi.RegRingKick: the tail is read from the shadow whose
// address the guest programmed. A ring with a poll word (ABI 1.6) has
// its latched shadow looked at too, as after any doorbell signal.
func (sl *slot) kicked() {
	sl.applyMu.Lock()
	defer sl.applyMu.Unlock()
	sh := sl.in.Shared()
	sh.DirectKicks.Add(1)
	if err := sl.in.PollShadows(); err != nil {
		sl.in.LatchError(abi.StatusOf(err))
	}
	if err := sl.in.Kick(sh.KickShadow.Load()); err != nil {
		sl.in.LatchError(abi.StatusOf(err))
	}
}

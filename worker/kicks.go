package worker

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/internal/irqfd"
	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/worker/wire"
)

// Kicks straight to the worker (mmio.KickTaker; docs/worker.md "Kicks
// straight to the worker"). A transport that backs abi.RegRingKick with
// an eventfd (vfio-user's ioeventfd: under KVM the vCPU's store signals
// it in the kernel) hands it to the instance, and the instance's worker
// reads it: a kick wakes the process that runs the ring, not vgpud's
// main process, its register file and then the worker's doorbell.
//
// At any time exactly one reader takes the eventfd's signals: the worker
// the instance is bound to, while doorbells reach it (not during a
// relocation's freeze) and if its release reads kicks
// (wire.FeatureKicks); otherwise this process, whose watcher applies each
// signal as the register file applies a write of abi.RegRingKick, so that
// a kick while the instance moves is recorded and replayed where it lands
// and one while it is lost latches what any doorbell would. A reader
// stops before the next starts (the worker's StopKicks is answered after
// the last kick it read was applied); signals in between wait in the
// eventfd's counter.

var _ mmio.KickTaker = (*procInstance)(nil)

// TakeKicks makes fd (a copy of it) the instance's kick eventfd; -1 lets
// go of the last one.
func (in *procInstance) TakeKicks(fd int) error {
	nfd := -1
	if fd >= 0 {
		if err := irqfd.Check(fd); err != nil {
			return err
		}
		var err error
		if nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			return fmt.Errorf("kick eventfd: %w", err)
		}
	}
	in.kickMu.Lock()
	defer in.kickMu.Unlock()
	if nfd >= 0 && in.isClosed() {
		unix.Close(nfd)
		return aggregator.ErrClosed
	}
	in.stopKicksLocked()
	if in.kickFD >= 0 {
		unix.Close(in.kickFD)
	}
	in.kickFD = nfd
	in.routeKicksLocked()
	return nil
}

// TailShadow publishes the tail shadow's address for the kicks a worker
// takes itself, and keeps it for those this process takes.
func (in *procInstance) TailShadow(addr uint64) {
	in.kickShadow.Store(addr)
	in.sh.KickShadow.Store(addr)
}

// routeKicks gives the kick eventfd to the reader it should have now
// (after the instance was bound to a worker, lost it, or began or ended
// a relocation's freeze).
func (in *procInstance) routeKicks() {
	in.kickMu.Lock()
	defer in.kickMu.Unlock()
	in.routeKicksLocked()
}

func (in *procInstance) routeKicksLocked() {
	if in.kickFD < 0 {
		return
	}
	pr, slot := in.kickTarget()
	switch {
	case pr != nil && pr == in.kickAt && slot == in.kickSlot:
		return
	case pr == nil && in.kickW != nil:
		return
	}
	in.stopKicksLocked()
	if pr != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		_, err := pr.call(ctx, &wire.Kicks{Slot: slot}, in.kickFD)
		cancel()
		if err == nil {
			in.kickAt, in.kickSlot = pr, slot
			return
		}
		in.pool.log.Warn("kick eventfd: the worker did not take it; kicks go through the main process", "instance", in.cfg.ID, "err", err)
	}
	w, err := irqfd.Watch(in.kickFD, in.kickedHere, in.pool.log)
	if err != nil {
		in.pool.log.Error("kick eventfd: not watched: the guest's kicks are lost", "instance", in.cfg.ID, "err", err)
		return
	}
	in.kickW = w
}

// kickTarget is the worker (and slot) that should read the kick eventfd,
// or nil for this process.
func (in *procInstance) kickTarget() (*process, uint32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	live := in.moving == nil || in.bellsLive
	if in.closed || in.proc == nil || !live || in.proc.info.Features&wire.FeatureKicks == 0 {
		return nil, 0
	}
	return in.proc, in.slot
}

// stopKicksLocked stops the reader of the kick eventfd, if any. A worker
// that does not answer in time is past caring: it is being ended, or its
// slot is gone with it.
func (in *procInstance) stopKicksLocked() {
	if pr := in.kickAt; pr != nil {
		in.kickAt = nil
		ctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		_, _ = pr.call(ctx, &wire.StopKicks{Slot: in.kickSlot})
		cancel()
	}
	in.kickW.Stop()
	in.kickW = nil
}

// kickedHere applies a signal of the kick eventfd in this process, as the
// register file applies a write of abi.RegRingKick.
func (in *procInstance) kickedHere() {
	in.sh.RelayedKicks.Add(1)
	if err := in.Kick(in.kickShadow.Load()); err != nil {
		in.LatchError(abi.StatusOf(err))
	}
}

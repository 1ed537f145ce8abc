package aggregator

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
)

// Device contexts (docs/ABI.md "Device contexts", ABI 1.5). A context is
// an Instance of its own: its own ring (enabled at creation, rung by
// ContextKick with the tail read from its shadow word), handle tables,
// worker goroutine and queue, on a device of its own (OpenContext) so
// that its kernels reach only its buffers. It belongs to the instance
// whose default ring made it: it takes turns and device memory under the
// instance's id (schedID), charges its buffers to the instance's quota
// as well as to its own limit, and ends with the instance, at a reset or
// at context-destroy; a migration or a move between devices carries it
// (ExtractRound, InjectContext). It never takes part in result reuse (its domain
// stays nil): a hit would hand one process the bytes another one
// computed, and tell it that the other computed them.

// ContextStats describes one live device context (vgpuctl show).
type ContextStats struct {
	ID       uint32
	MemUsed  uint64 // device bytes its buffers hold
	MemLimit uint64 // 0: only the instance's quota
	Objects  int64  // buffers and programs
	Commands uint64
	Errors   uint64
	Lost     bool // its device state was lost; it completes everything StatusDeviceLost
}

// MaxContexts is the most device contexts the instance offers
// (abi.RegMaxContexts).
func (in *Instance) MaxContexts() uint32 { return in.maxContexts }

// Contexts describes the instance's live device contexts, by id.
func (in *Instance) Contexts() []ContextStats {
	in.ctxMu.Lock()
	out := make([]ContextStats, 0, len(in.contexts))
	for id, c := range in.contexts {
		out = append(out, ContextStats{ID: id, MemUsed: c.state.used.Load(), MemLimit: c.memLimit,
			Objects: c.state.objects.Load(), Commands: c.sh.Stats.Commands.Load(), Errors: c.sh.Stats.Errors.Load(),
			Lost: c.lost.Load()})
	}
	in.ctxMu.Unlock()
	slices.SortFunc(out, func(a, b ContextStats) int { return int(a.ID) - int(b.ID) })
	return out
}

// ContextKick is the doorbell of device context id (abi.RegContextKick):
// its tail is read from its shadow word.
func (in *Instance) ContextKick(id uint32) error {
	in.ctxMu.Lock()
	c := in.contexts[id]
	in.ctxMu.Unlock()
	if c == nil {
		return abi.Errorf(abi.StatusNotFound, "kick of context %d, which is not live", id)
	}
	return c.Kick(c.ctxShadow)
}

// contextCreate serves abi.OpContextCreate on the default ring.
func (in *Instance) contextCreate(_ *abi.Command, cc *abi.ContextCreate) (uint64, error) {
	if in.parent != nil {
		return 0, abi.Errorf(abi.StatusInvalidOpcode, "context-create on context %d's ring", in.ctxID)
	}
	if cc.ID > in.maxContexts {
		return 0, abi.Errorf(abi.StatusInvalidArgument, "context %d, the instance offers %d", cc.ID, in.maxContexts)
	}
	in.ctxMu.Lock()
	_, taken := in.contexts[cc.ID]
	in.ctxMu.Unlock()
	if taken {
		return 0, abi.Errorf(abi.StatusExists, "context %d", cc.ID)
	}
	if _, err := in.newContext(cc, true); err != nil {
		return 0, err
	}
	in.log.Info("device context created", "context", cc.ID, "slots", cc.Slots, "mem_limit", cc.MemLimit)
	return 0, nil
}

// newContext makes device context cc.ID on its own device and registers
// it. With enable its ring starts fetching at index 0 (context-create);
// without, it is frozen with its ring unset, for a migration's records
// to fill (InjectContext).
func (in *Instance) newContext(cc *abi.ContextCreate, enable bool) (*Instance, error) {
	var (
		dev gpu.Device
		q   gpu.Queue
		err error
	)
	if in.openContext != nil {
		mem := ContextMemory{Device: cc.MemLimit, Programs: in.progBytes.Load()}
		if mem.Device == 0 || mem.Device > in.memBytes.Load() {
			mem.Device = in.memBytes.Load()
		}
		if dev, err = in.openContext(cc.ID, mem); err != nil {
			return nil, abi.Errorf(abi.StatusOutOfResources, "context %d: open its device: %v", cc.ID, err)
		}
		q, err = dev.NewQueue()
	} else {
		q, err = in.dev.gpu.NewQueue()
	}
	if err != nil {
		if dev != nil {
			dev.Close()
		}
		return nil, abi.Errorf(abi.StatusOutOfResources, "context %d: queue: %v", cc.ID, err)
	}
	lim := in.Limits()
	c := in.dev.newInstance(InstanceConfig{
		ID: in.id + "#" + strconv.Itoa(int(cc.ID)), Memory: in.mem, Notify: in.notify,
		ProgramBytes: in.progBytes.Load(), TurnHold: in.hold,
	}, lim, in.devInfo, q, in.dev.log.With("context", cc.ID))
	c.schedID, c.parent, c.ctxID, c.ctxDev, c.memLimit, c.ctxShadow = in.schedID, in, cc.ID, dev, cc.MemLimit, cc.Shadow
	c.maxKeep = in.maxKeep
	// Its buffers' bytes are counted where the operator sees them.
	c.state.used = &in.sh.CtxMem[cc.ID-1]
	c.state.used.Store(0)
	if enable {
		rc := RingConfig{Base: cc.Ring, ComplBase: cc.Compl, Slots: cc.Slots}
		if cc.PollWord != 0 {
			rc.Shadow, rc.PollWord = cc.Shadow, cc.PollWord
		}
		if err := c.EnableRing(rc); err != nil {
			// The geometry was checked when the payload was decoded:
			// what is left is overlap and memory that is not guest RAM.
			go c.worker() // Close waits for it
			c.closeContext()
			return nil, abi.Errorf(abi.StatusBadAddress, "context %d: %v", cc.ID, err)
		}
	} else {
		c.frozen = true
	}
	in.ctxMu.Lock()
	if in.contexts == nil {
		in.contexts = make(map[uint32]*Instance)
	}
	in.contexts[cc.ID] = c
	in.publishContextsLocked()
	in.ctxMu.Unlock()
	go c.worker()
	return c, nil
}

// contextDestroy serves abi.OpContextDestroy on the default ring.
func (in *Instance) contextDestroy(_ *abi.Command, cd *abi.ContextDestroy) (uint64, error) {
	if in.parent != nil {
		return 0, abi.Errorf(abi.StatusInvalidOpcode, "context-destroy on context %d's ring", in.ctxID)
	}
	in.ctxMu.Lock()
	c := in.contexts[cd.ID]
	delete(in.contexts, cd.ID)
	in.publishContextsLocked()
	in.ctxMu.Unlock()
	if c == nil {
		return 0, abi.Errorf(abi.StatusNotFound, "context %d", cd.ID)
	}
	c.Reset() // no record of its is written from now on
	c.closeContext()
	in.log.Info("device context destroyed", "context", cd.ID)
	return 0, nil
}

// detachContexts takes every context out of the instance (so that kicks
// find none) and stops their rings writing to guest RAM; the caller
// closes them (closeContexts). Used by Reset, which must not wait.
func (in *Instance) detachContexts() {
	in.ctxMu.Lock()
	for id, c := range in.contexts {
		c.Reset()
		in.dying = append(in.dying, c)
		delete(in.contexts, id)
	}
	in.publishContextsLocked()
	in.ctxMu.Unlock()
}

// publishContextsLocked mirrors the live contexts into the instance's
// shared state. Caller holds ctxMu.
func (in *Instance) publishContextsLocked() {
	var live uint64
	for id := range in.contexts {
		live |= 1 << (id - 1)
	}
	in.sh.CtxLive.Store(live)
	in.sh.CtxLost.And(live)
}

// closeContexts closes the contexts detachContexts took out.
func (in *Instance) closeContexts() {
	in.ctxMu.Lock()
	dying := in.dying
	in.dying = nil
	in.ctxMu.Unlock()
	for _, c := range dying {
		c.closeContext()
	}
}

// aborter is a context's device served by a process the instance can
// end at once (an executor, worker/child): Abort kills it, and every call
// waiting on it then fails with gpu.ErrContextLost.
type aborter interface{ Abort() }

// contextStopWait bounds how long closing a context may wait on its
// device (its worker goroutine in a call, its buffers' release, its
// queue's close) when that device answers nothing (a stopped or hung
// executor), before it aborts the device.
const contextStopWait = 2 * time.Second

// closeContext ends a device context: its worker, its buffers (their
// bytes given back to the instance's quota), its queue and its device.
// A destroy or a reset never waits on a stuck device without a bound: a
// device that can be aborted is, if closing has not got past it within
// contextStopWait.
func (in *Instance) closeContext() {
	if a, ok := in.ctxDev.(aborter); ok {
		closed := make(chan struct{})
		defer close(closed)
		t := time.AfterFunc(contextStopWait, func() {
			select {
			case <-closed:
			default:
				in.log.Warn("device context stuck on its device: aborting it", "waited", contextStopWait)
				a.Abort()
			}
		})
		defer t.Stop()
	}
	if err := in.Close(); err != nil && !in.lost.Load() {
		in.log.Warn("close device context", "err", err)
	}
	if in.ctxDev != nil {
		if err := in.ctxDev.Close(); err != nil {
			in.log.Warn("close device context's device", "err", err)
		}
	}
}

// charge counts a new buffer of n bytes against the quotas: the
// instance's and, for a device context, also its own limit and the
// instance's quota through the instance's counter.
func (in *Instance) charge(n uint64) error {
	s := in.state
	if in.parent == nil {
		if used := s.used.Add(n); used < n || used > in.memBytes.Load() {
			s.used.Add(^(n - 1))
			return abi.Errorf(abi.StatusQuotaExceeded, "buffer of %d bytes with %d of %d in use", n, used-n, in.memBytes.Load())
		}
		return nil
	}
	if used := s.used.Add(n); used < n || (in.memLimit != 0 && used > in.memLimit) {
		s.used.Add(^(n - 1))
		return abi.Errorf(abi.StatusQuotaExceeded, "buffer of %d bytes with %d of the context's %d in use", n, used-n, in.memLimit)
	}
	if err := in.parent.charge(n); err != nil {
		s.used.Add(^(n - 1))
		return err
	}
	return nil
}

// uncharge gives back what charge counted.
func (in *Instance) uncharge(n uint64) {
	if n == 0 {
		return
	}
	in.state.used.Add(^(n - 1))
	if in.parent != nil {
		in.parent.state.used.Add(^(n - 1))
	}
}

// freeAll frees every device object of the instance and gives their
// memory back.
func (in *Instance) freeAll() {
	held := in.state.freeAll()
	if in.parent != nil && held > 0 {
		in.parent.state.used.Add(^(held - 1))
	}
	in.unreserve(held)
}

// contextLost marks a device context whose device state is gone: from
// now on every command completes StatusDeviceLost, as the ABI says; the
// other contexts and the default one go on.
func (in *Instance) contextLost(err error) error {
	if in.lost.CompareAndSwap(false, true) {
		in.parent.sh.CtxLost.Or(1 << (in.ctxID - 1))
		in.log.Error("device context lost: its commands complete StatusDeviceLost until it is destroyed", "err", fmt.Sprint(err))
	}
	return abi.Errorf(abi.StatusDeviceLost, "context %d: %v", in.ctxID, err)
}

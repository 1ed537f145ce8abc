package worker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/devmem"
	"github.com/vgpud/vgpud/worker/wire"
)

// ShortagePlan is what a reservation that does not fit its device does
// (docs/overcommit.md): the answer of Config.Shortage.
type ShortagePlan struct {
	// Wait: the reservation waits up to this long for room, then fails
	// with abi.StatusOutOfResources (the "block" policy).
	Wait time.Duration
	// Relocate: the caller is moving the instance (to a device with room,
	// or out to host memory until its device has room); the command
	// that asked waits in the ring and runs where the instance lands. The
	// caller must finish or roll back the move: the ring stays frozen
	// until then.
	Relocate bool
	// Why is logged with the decision.
	Why string
}

// memCounters count one device's overcommit decisions.
type memCounters struct {
	refused, waited, waitTimeouts, relocated atomic.Uint64
}

// MemoryStats is one device's memory ledger and overcommit decisions.
type MemoryStats struct {
	Capacity, Used uint64
	// Refused: reservations refused at once; Waited: reservations that
	// waited for room (WaitTimeouts of them in vain); Relocated:
	// reservations answered by moving the instance.
	Refused, Waited, WaitTimeouts, Relocated uint64
}

// Memory returns device dev's ledger: capacity, what is held, by whom.
func (p *Pool) Memory(dev int) *devmem.Ledger { return p.mem[dev] }

// MemoryStats returns device dev's ledger totals and decision counts.
func (p *Pool) MemoryStats(dev int) MemoryStats {
	c := &p.memSt[dev]
	return MemoryStats{Capacity: p.mem[dev].Capacity(), Used: p.mem[dev].Used(),
		Refused: c.refused.Load(), Waited: c.waited.Load(), WaitTimeouts: c.waitTimeouts.Load(), Relocated: c.relocated.Load()}
}

// reserve serves a worker's Reserve: the device's ledger, then the
// shortage policy.
func (pr *process) reserve(id uint32, m *wire.Reserve) {
	inst := pr.slotFor(id, m.Slot)
	if inst == nil {
		return
	}
	dev := pr.key.device
	if pr.pool.mem[dev].TryReserve(inst.cfg.ID, m.Bytes) {
		go pr.reply(id, abi.StatusOK, "", (&wire.ReserveReply{}).EncodeBody())
		return
	}
	// The policy may take the daemon's locks and start a move: not on
	// the reader, which must go on reading the worker's replies.
	go pr.short(id, m, inst, dev)
}

// slotFor returns the instance in slot for request id of the worker, or
// answers the request with StatusNotFound (a race with a removal, or a
// lie) and returns nil.
func (pr *process) slotFor(id, slot uint32) *procInstance {
	pr.mu.Lock()
	inst := pr.slots[slot]
	pr.mu.Unlock()
	if inst == nil {
		go pr.reply(id, abi.StatusNotFound, fmt.Sprintf("no instance in slot %d", slot), nil)
	}
	return inst
}

// short answers a Reserve that did not fit, by the shortage policy.
func (pr *process) short(id uint32, m *wire.Reserve, inst *procInstance, dev int) {
	p, who, l := pr.pool, inst.cfg.ID, pr.pool.mem[dev]
	var plan ShortagePlan
	if p.cfg.Shortage != nil {
		plan = p.cfg.Shortage(dev, who, m.Bytes)
	}
	c := &p.memSt[dev]
	log := p.log.With("instance", who, "device", dev, "bytes", m.Bytes, "free", l.Free(), "capacity", l.Capacity())
	switch {
	case plan.Relocate:
		c.relocated.Add(1)
		log.Info("device memory short: moving the instance", "why", plan.Why)
		pr.reply(id, abi.StatusOK, "", (&wire.ReserveReply{Relocate: true}).EncodeBody())
	case plan.Wait > 0:
		c.waited.Add(1)
		log.Info("device memory short: the allocation waits for room", "timeout", plan.Wait, "why", plan.Why)
		ctx, cancel := context.WithTimeout(pr.ctx, plan.Wait)
		err := l.Reserve(ctx, who, m.Bytes)
		cancel()
		if err != nil {
			c.waitTimeouts.Add(1)
			log.Warn("device memory short: the allocation waited in vain", "err", err)
			pr.reply(id, abi.StatusOutOfResources, err.Error(), nil)
			return
		}
		pr.mu.Lock()
		still := pr.slots[m.Slot] == inst
		pr.mu.Unlock()
		if !still { // removed while it waited: its holdings were forgotten
			l.Release(who, m.Bytes)
		}
		log.Info("device memory short: the allocation got its room")
		pr.reply(id, abi.StatusOK, "", (&wire.ReserveReply{}).EncodeBody())
	default:
		c.refused.Add(1)
		why := plan.Why
		if why == "" {
			why = "no overcommit policy"
		}
		log.Info("device memory short: allocation refused", "why", why)
		pr.reply(id, abi.StatusOutOfResources, fmt.Sprintf("device %d has %d of %d bytes free (%s)", dev, l.Free(), l.Capacity(), why), nil)
	}
}

// unreserve serves a worker's Unreserve.
func (pr *process) unreserve(m *wire.Unreserve) {
	pr.mu.Lock()
	inst := pr.slots[m.Slot]
	pr.mu.Unlock()
	if inst != nil {
		pr.pool.mem[pr.key.device].Release(inst.cfg.ID, m.Bytes)
	}
}

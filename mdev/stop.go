package mdev

import (
	"context"
	"time"
)

// StopReport says what Drain did.
type StopReport struct {
	Told     int // guest agents told that vgpud is stopping
	Drained  int // instances whose fetched commands all completed
	Cut      int // instances still busy when the drain time ran out
	Instance int // instances in all
}

// Drain prepares a graceful stop (docs/operating.md "Stopping"): it tells
// every instance's guest agent that vgpud is stopping (agentmsg.Stopping),
// stops fetching commands (each ring is frozen: later doorbells wait in
// guest RAM), and waits until every command already fetched has completed,
// for at most drain. It never waits longer: a kernel that does not end is
// cut off by the Close that follows (its worker is stopped). The state
// stays recorded; a restarted vgpud re-plugs the VMs without it.
func (m *Manager) Drain(ctx context.Context, drain time.Duration) StopReport {
	insts := m.List()
	rep := StopReport{Instance: len(insts)}
	for _, in := range insts {
		if a := in.Agent(); a != nil && a.Stopping(drain) {
			rep.Told++
		}
	}
	ctx, cancel := context.WithTimeout(ctx, drain)
	defer cancel()
	for _, in := range insts {
		if mig, err := in.Migrator(); err == nil {
			if err := mig.Freeze(ctx); err != nil {
				in.log.Warn("stop: could not freeze the ring", "err", err)
			}
		}
	}
	for _, in := range insts {
		for in.Done() != in.Head() && !in.Lost() && ctx.Err() == nil {
			t := time.NewTimer(2 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if in.Done() == in.Head() || in.Lost() {
			rep.Drained++
		} else {
			rep.Cut++
			in.log.Warn("stop: commands still running when the drain time ran out", "fetched", in.Head(), "done", in.Done())
		}
	}
	return rep
}

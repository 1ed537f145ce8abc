package aggregator

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// scheduler is a Device's turn arbiter: schedCore under a mutex, with a
// channel per waiting request and a timer for timeslice reservations.
type scheduler struct {
	now func() time.Time

	mu     sync.Mutex
	core   *schedCore
	timer  *time.Timer
	closed bool
}

func newScheduler(p Policy) *scheduler {
	return &scheduler{now: time.Now, core: newSchedCore(p)}
}

// acquire waits for c's turn. The caller must call release with the
// returned request.
func (s *scheduler) acquire(ctx context.Context, id string, w work) (*request, error) {
	r := &request{cost: w.cost, bytes: w.bytes, ready: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	r.c = s.core.client(id)
	if err := s.core.enqueue(r, s.now()); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if !s.core.busy {
		s.grantLocked()
	}
	s.mu.Unlock()
	select {
	case <-r.ready:
		return r, nil
	case <-ctx.Done():
		s.mu.Lock()
		if !r.granted {
			s.core.cancel(r)
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		s.mu.Unlock()
		// Granted while we gave up: pass the turn on.
		s.release(r, 0)
		return nil, ctx.Err()
	}
}

// grantLocked hands the idle device to the next request, or arms the
// timer when a timeslice reservation holds it.
func (s *scheduler) grantLocked() {
	r, retry := s.core.grant(s.now())
	if r != nil {
		close(r.ready)
		return
	}
	if !retry.IsZero() && !s.closed {
		d := max(retry.Sub(s.now()), 0)
		if s.timer == nil {
			s.timer = time.AfterFunc(d, s.retry)
		} else {
			s.timer.Reset(d)
		}
	}
}

func (s *scheduler) retry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.core.busy {
		s.grantLocked()
	}
}

// release ends r's turn: dev is the device time measured during it (0:
// charge the wall time of the turn).
func (s *scheduler) release(r *request, dev time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	held := now.Sub(r.start)
	if dev <= 0 {
		dev = held
	}
	s.core.charge(r.c, dev, held, now)
	if r.bytes > 0 {
		a := r.c.kernel(copyKey)
		a.nsPerItem = ewma(a.nsPerItem, float64(dev)/float64(r.bytes))
	}
	s.grantLocked()
}

func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

// work describes a request for a turn.
type work struct {
	cost  time.Duration // expected device time; 0: unknown
	bytes uint64        // bytes copied, for a copy
}

// run executes f while holding a device turn granted to in by the
// scheduler. f returns the device time it measured; 0 charges in with the
// wall time f took.
func (d *Device) run(ctx context.Context, in *Instance, w work, f func() (time.Duration, error)) error {
	r, err := d.sched.acquire(ctx, in.id, w)
	if err != nil {
		return fmt.Errorf("wait for device turn: %w", err)
	}
	var dev time.Duration
	defer func() { d.sched.release(r, dev) }()
	dev, err = f()
	return err
}

// ClientStats are one instance's scheduling counters on its device.
type ClientStats struct {
	ID          string `json:"id"`
	Share       uint32 `json:"share"`
	DeviceNanos uint64 `json:"device_ns"` // measured device time charged
	WaitNanos   uint64 `json:"wait_ns"`   // time spent waiting for turns
	HeldNanos   uint64 `json:"held_ns"`   // wall time holding the device
	Turns       uint64 `json:"turns"`
	Slices      uint64 `json:"slices"` // launch slices cut by the scheduler
	Queued      int    `json:"queued"`
}

// SchedStats is a device's scheduler state.
type SchedStats struct {
	Policy    Policy        `json:"policy"`
	HeldNanos uint64        `json:"held_ns"` // wall time the device was held by any instance
	Turns     uint64        `json:"turns"`
	Clients   []ClientStats `json:"clients"`
}

// SchedStats returns the scheduler's counters.
func (d *Device) SchedStats() SchedStats {
	s := d.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SchedStats{Policy: s.core.policy, HeldNanos: s.core.heldNanos, Turns: s.core.grants}
	for _, c := range s.core.clients {
		st.Clients = append(st.Clients, ClientStats{
			ID: c.id, Share: c.share, DeviceNanos: c.devNanos, WaitNanos: c.waitNanos, HeldNanos: c.heldNanos,
			Turns: c.turns, Slices: c.slices, Queued: len(c.queue),
		})
	}
	return st
}

// Policy returns the device's scheduling policy.
func (d *Device) Policy() Policy {
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	return d.sched.core.policy
}

// SetPolicy switches the device's policy at once; work in flight finishes
// its turn. Share accounting restarts from zero.
func (d *Device) SetPolicy(p Policy) error {
	if _, err := ParsePolicy(string(p)); err != nil {
		return err
	}
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	d.sched.core.setPolicy(p)
	return nil
}

// SetShare sets instance id's weight under PolicyFixedShare (1..1000).
// The instance need not have run yet.
func (d *Device) SetShare(id string, share uint32) error {
	if share == 0 || share > MaxShare {
		return fmt.Errorf("share %d: want 1..%d", share, MaxShare)
	}
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	d.sched.core.client(id).share = share
	return nil
}

// MaxShare bounds an instance's weight.
const MaxShare = 1000

// SchedStats returns the instance's scheduling counters.
func (in *Instance) SchedStats() ClientStats {
	s := in.dev.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.core.lookup(in.id)
	if c == nil {
		return ClientStats{ID: in.id, Share: 1}
	}
	return ClientStats{ID: c.id, Share: c.share, DeviceNanos: c.devNanos, WaitNanos: c.waitNanos, HeldNanos: c.heldNanos,
		Turns: c.turns, Slices: c.slices, Queued: len(c.queue)}
}

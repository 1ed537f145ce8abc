package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/vgpud/vgpud/gpu"
)

// ErrClosed is returned by operations on a closed Device or Instance.
var ErrClosed = errors.New("closed")

// Device is one physical device shared by the instances placed on it.
type Device struct {
	gpu  gpu.Device
	info gpu.Info
	log  *slog.Logger

	turns turnQueue

	mu        sync.Mutex
	instances map[string]*Instance
	closed    bool
}

// NewDevice wraps a physical device. The Device does not take ownership of
// g: the caller closes g after closing the Device.
func NewDevice(g gpu.Device, log *slog.Logger) *Device {
	if log == nil {
		log = slog.Default()
	}
	info := g.Info()
	return &Device{
		gpu:       g,
		info:      info,
		log:       log.With("device", info.Name),
		instances: make(map[string]*Instance),
	}
}

// Info describes the physical device.
func (d *Device) Info() gpu.Info { return d.info }

// Instances returns the number of instances placed on d.
func (d *Device) Instances() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.instances)
}

// Close closes every instance still on the device.
func (d *Device) Close() error {
	d.mu.Lock()
	d.closed = true
	insts := make([]*Instance, 0, len(d.instances))
	for _, in := range d.instances {
		insts = append(insts, in)
	}
	d.mu.Unlock()
	var errs []error
	for _, in := range insts {
		errs = append(errs, in.Close())
	}
	return errors.Join(errs...)
}

func (d *Device) remove(id string) {
	d.mu.Lock()
	delete(d.instances, id)
	d.mu.Unlock()
}

// run executes f while holding the device turn. Turns are granted in
// request order, so instances that each ask for one operation at a time
// share the device round-robin.
func (d *Device) run(ctx context.Context, f func() error) error {
	if err := d.turns.acquire(ctx); err != nil {
		return fmt.Errorf("wait for device turn: %w", err)
	}
	defer d.turns.release()
	return f()
}

// turnQueue is a FIFO mutex: waiters are served in arrival order and can
// give up when their context ends.
type turnQueue struct {
	mu      sync.Mutex
	busy    bool
	waiters []chan struct{}
}

func (q *turnQueue) acquire(ctx context.Context) error {
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	q.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		for i, w := range q.waiters {
			if w == ch {
				q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
				q.mu.Unlock()
				return ctx.Err()
			}
		}
		q.mu.Unlock()
		// The turn was handed to us while we gave up: pass it on.
		<-ch
		q.release()
		return ctx.Err()
	}
}

func (q *turnQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) == 0 {
		q.busy = false
		return
	}
	ch := q.waiters[0]
	q.waiters = q.waiters[1:]
	close(ch)
}

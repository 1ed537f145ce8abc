package aggregator

import (
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/gpu"
)

// Pipelined launches (the fast command path, docs/architecture.md).
//
// A launch waited for on its own costs the device's launch overhead and
// completion wake-up, and on an executor a socket round trip, however
// short its kernel. When the instance's queue is a gpu.Pipeliner and the
// launch runs under a kept turn (turns.go), the worker enqueues it and
// fetches the next command at once; the launches so enqueued are waited
// for together (syncLaunches), and only then are their completion
// records written, in ring order, with each one's device time. They are
// synced before any other command executes (the ring's order is the
// guest's order: a copy after a launch sees its result), before the kept
// turn goes back (the scheduler is told the device time of every launch
// run under it), when maxPipelined are pending, and when the ring is
// empty. A launch reuse may answer or record, or one that may be cut in
// slices, is run and waited for on its own as before.

// maxPipelined bounds the launches enqueued and not yet synced.
const maxPipelined = 64

// errPipelined is a launch handler's report that the launch was
// enqueued: its completion is written by syncLaunches.
var errPipelined = errors.New("launch enqueued")

// pipelined is a launch enqueued and not yet completed.
type pipelined struct {
	f     fetched
	key   kernelKey
	items uint64
}

// enqueueLaunch enqueues k over r when the launch can be pipelined and
// reports whether it did; err is a failure to get a turn or to enqueue.
func (in *Instance) enqueueLaunch(key kernelKey, k gpu.Kernel, r gpu.NDRange, args []gpu.Arg, items uint64) (bool, error) {
	pl, ok := in.queue.(gpu.Pipeliner)
	if !ok || in.hold <= 0 {
		return false, nil
	}
	_, done, err := in.acquire(time.Duration(in.lengths.of(key).nanos))
	if err != nil {
		return false, fmt.Errorf("wait for device turn: %w", err)
	}
	if in.held == nil {
		done(0, 0)
		return false, nil
	}
	if err := pl.Enqueue(k, r, args); err != nil {
		done(0, 0)
		return false, err
	}
	in.pending = append(in.pending, pipelined{f: in.cur, key: key, items: items})
	// done may find the turn's time spent and give it back, which syncs.
	done(0, 1)
	if len(in.pending) >= maxPipelined {
		in.syncLaunches()
	}
	return true, nil
}

// syncLaunches waits for the launches enqueued and completes them in
// order; their device time goes to the kept turn.
func (in *Instance) syncLaunches() {
	if len(in.pending) == 0 {
		return
	}
	pending := in.pending
	in.pending = nil
	res := in.queue.(gpu.Pipeliner).Sync()
	var total time.Duration
	for i, p := range pending {
		r := gpu.LaunchResult{Err: fmt.Errorf("no outcome for an enqueued launch: %w", gpu.ErrDevice)}
		if i < len(res) {
			r = res[i]
		}
		var err error
		dur := uint64(max(r.Device.Nanoseconds(), 0))
		if r.Err != nil {
			err = in.execErr(fmt.Errorf("launch %q: %w", p.key.name, r.Err))
			dur = 0
		} else {
			in.lengths.launched(p.key, p.items, r.Device)
			in.sh.Stats.Launches.Add(1)
			in.sh.Stats.KernelNanos.Add(dur)
			in.sh.Kernels.Observe(dur, p.items)
			total += r.Device
		}
		in.finish(p.f, dur, err)
	}
	if in.held != nil {
		in.held.dev += total
	}
}

package aggregator

import (
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/abi"
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
// records written, in ring order, with each one's device time, followed
// by one completion notice for them all (InstanceConfig.Notify). They are
// synced before any other command executes (the ring's order is the
// guest's order: a copy after a launch sees its result), before the kept
// turn goes back (the scheduler is told the device time of every launch
// run under it), when maxPipelined are pending, and when the ring is
// empty. A launch reuse may record, one whose reuse decision needs the
// device (host-held content, a pending fill, an output to capture), or
// one that may be cut in slices, runs and is waited for on its own as
// before, after the launches enqueued before it.

// maxPipelined bounds the launches enqueued and not yet synced.
const maxPipelined = 64

// errPipelined is a launch handler's report that the launch was
// enqueued: its completion is written by syncLaunches.
var errPipelined = errors.New("launch enqueued")

// errPipelineFailed undoes the reuse naming of the launches enqueued at or
// after one that failed.
var errPipelineFailed = errors.New("an earlier enqueued launch failed")

// pipelined is a launch enqueued and not yet completed.
type pipelined struct {
	f     fetched
	key   kernelKey
	items uint64
	rl    reuseLaunch // its outputs, named (or forgotten) at enqueue
}

// pipelines reports whether launches may be enqueued: the queue takes
// them without waiting, and turns are kept across commands.
func (in *Instance) pipelines() bool {
	_, ok := in.queue.(gpu.Pipeliner)
	return ok && in.hold > 0
}

// reuseQuiet reports whether reuseBefore can decide on launch d without
// touching the device: no buffer argument has host-held content, a fill
// not yet written or a recorded producer whose output it might capture.
// (A launch it then finds eligible and not to be recorded has its
// outputs named after its key at once, as if it had run: see
// syncLaunches for what a failure undoes.)
func (in *Instance) reuseQuiet(d *abi.LaunchDesc) bool {
	for _, a := range d.Args {
		h, ok := a.BufferHandle()
		if !ok {
			continue
		}
		b := in.state.buffers[h] // checked by the caller
		if b.host != nil || b.fill != nil || b.producer != nil {
			return false
		}
	}
	return true
}

// enqueueLaunch enqueues k over r under a kept turn (the caller checked
// pipelines(), so acquire keeps the turn it returns) and reports whether
// it did; err is a failure to get a turn or to enqueue. rl is the
// launch's reuse decision: its outputs are named (eligible) or forgotten
// now, in ring order, as reuseAfter does for a launch that ran.
func (in *Instance) enqueueLaunch(key kernelKey, k gpu.Kernel, r gpu.NDRange, args []gpu.Arg, items uint64, rl reuseLaunch) (bool, error) {
	_, done, err := in.acquire(time.Duration(in.lengths.of(key).nanos))
	if err != nil {
		return false, fmt.Errorf("wait for device turn: %w", err)
	}
	if err := in.queue.(gpu.Pipeliner).Enqueue(k, r, args); err != nil {
		done(0, 0)
		return false, err
	}
	in.reuseAfter(rl, 0, nil)
	in.pending = append(in.pending, pipelined{f: in.cur, key: key, items: items, rl: rl})
	in.sh.Pipelined.Add(1)
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
	failed := false
	for i, p := range pending {
		var r gpu.LaunchResult
		if i < len(res) {
			r = res[i]
		} else {
			r.Err = fmt.Errorf("no outcome for an enqueued launch: %w", gpu.ErrDevice)
		}
		var err error
		dur := uint64(max(r.Device.Nanoseconds(), 0))
		if r.Err != nil {
			err = in.execErr(fmt.Errorf("launch %q: %w", p.key.name, r.Err))
			dur = 0
			failed = true
		}
		if failed {
			// Its outputs were named as if it had run, and the
			// launches after it keyed on them: forget theirs too.
			in.reuseAfter(p.rl, 0, errPipelineFailed)
		}
		if r.Err == nil {
			in.lengths.launched(p.key, p.items, r.Device)
			in.sh.Stats.Launches.Add(1)
			in.sh.Stats.KernelNanos.Add(dur)
			in.sh.Kernels.Observe(dur, p.items)
			total += r.Device
		}
		in.record(p.f, dur, err)
	}
	// One notice for the batch (its records went out back to back): on a
	// worker each is an eventfd write that wakes vgpud's main process.
	if in.notify != nil {
		in.notify(pending[len(pending)-1].f.idx)
	}
	if in.held != nil {
		in.held.dev += total
	}
}

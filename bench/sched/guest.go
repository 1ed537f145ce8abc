package main

import (
	"context"
	"errors"
	"time"

	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/sched"
)

// spinSource's kernel takes device time proportional to iters per item.
// It is sliceable (docs/scheduler.md): only get_global_id.
const spinSource = `__kernel void spin(__global float *out, uint iters) {
	size_t i = get_global_id(0);
	float x = (float)i * 0.001f;
	for (uint k = 0; k < iters; k++) x = x * 0.999f + sin(x);
	out[i] = x;
}`

const (
	local     = 64
	copyBytes = 4 << 20 // one copy-guest write, then read
	ramBytes  = 48 << 20
)

// work is what a guest does in a loop.
type work struct {
	name   string
	global uint64 // spin items; 0: copy
	iters  uint32
}

func (w work) isCopy() bool { return w.global == 0 }

// guest is one QEMU-less VM with a vGPU instance.
type guest struct {
	b    *bench
	inst *mdev.Instance
	host.Guest
	out  driver.Buffer
	cbuf driver.Buffer
	data []byte
}

func (b *bench) newGuest(share uint32) (g *guest, err error) {
	inst, err := b.mgr.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		return nil, err
	}
	g = &guest{b: b, inst: inst}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.close())
		}
	}()
	if err := b.mgr.SetShare(inst.UUID(), share); err != nil {
		return nil, err
	}
	if err = g.Open(inst.Socket(), ramBytes, spinSource); err != nil {
		return nil, err
	}
	if g.out, err = g.D.CreateBuffer(4 * maxGlobal); err != nil {
		return nil, err
	}
	if g.cbuf, err = g.D.CreateBuffer(copyBytes); err != nil {
		return nil, err
	}
	g.data = make([]byte, copyBytes)
	return g, g.D.Finish()
}

func (g *guest) close() error {
	return errors.Join(g.Guest.Close(), g.b.mgr.Destroy(g.inst.UUID()))
}

// op runs one unit of w and waits for it.
func (g *guest) op(w work) error {
	if w.isCopy() {
		if err := g.D.Write(g.cbuf, 0, g.data); err != nil {
			return err
		}
		return g.D.Read(g.cbuf, 0, g.data)
	}
	if err := g.D.Launch(g.Prog, "spin", driver.Range1(w.global, local), driver.BufferArg(g.out), driver.Uint32Arg(w.iters)); err != nil {
		return err
	}
	return host.WaitLast(g.D)
}

func (g *guest) sched() sched.ClientStats { return g.inst.Sched() }

// result is one guest's part of a run.
type result struct {
	ops     int
	latency time.Duration // mean wall time per op, as the guest saw it
	devNS   uint64        // device time charged in the window
	waitNS  uint64
	slices  uint64
}

// runAll runs each guest's work in a loop for window and returns what
// each did. Every guest first does one op (not counted) so that the
// scheduler knows its lengths.
func runAll(ctx context.Context, gs []*guest, ws []work, window time.Duration) ([]result, time.Duration, error) {
	for i, g := range gs {
		if err := g.op(ws[i]); err != nil {
			return nil, 0, err
		}
	}
	before := make([]sched.ClientStats, len(gs))
	for i, g := range gs {
		before[i] = g.sched()
	}
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	res := make([]result, len(gs))
	errs := make(chan error, len(gs))
	start := time.Now()
	for i, g := range gs {
		go func() {
			var total time.Duration
			for ctx.Err() == nil {
				t := time.Now()
				if err := g.op(ws[i]); err != nil {
					errs <- err
					return
				}
				total += time.Since(t)
				res[i].ops++
			}
			if res[i].ops > 0 {
				res[i].latency = total / time.Duration(res[i].ops)
			}
			errs <- nil
		}()
	}
	var err error
	for range gs {
		err = errors.Join(err, <-errs)
	}
	elapsed := time.Since(start)
	for i, g := range gs {
		s := g.sched()
		res[i].devNS = s.DeviceNanos - before[i].DeviceNanos
		res[i].waitNS = s.WaitNanos - before[i].WaitNanos
		res[i].slices = s.Slices - before[i].Slices
	}
	return res, elapsed, err
}

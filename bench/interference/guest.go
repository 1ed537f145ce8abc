package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
)

const ramBytes = 64 << 20

// guest is one QEMU-less VM running one workload on its own instance.
type guest struct {
	w    workload
	mgr  *mdev.Manager
	inst *mdev.Instance
	host.Guest
	bufs []driver.Buffer
	// data is what copies upload, scratch where reads land.
	data, scratch []byte
	// busy is the guest CPU time spent on the workload's own work (not
	// waiting for the device); sink keeps that work from being optimised
	// away.
	busy time.Duration
	sink float64
}

func newGuest(mgr *mdev.Manager, w workload) (g *guest, err error) {
	inst, err := mgr.Create(mdev.CreateRequest{Profile: profileName, NoReuse: true})
	if err != nil {
		return nil, err
	}
	g = &guest{w: w, mgr: mgr, inst: inst}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("%s: %w", w.name, err), g.close())
		}
	}()
	if err = g.Open(inst.Socket(), ramBytes, kernelSource); err != nil {
		return nil, err
	}
	var most uint64
	for _, n := range w.bufs {
		most = max(most, n)
	}
	g.data, g.scratch = floats(int(most/4), 1), make([]byte, most)
	for _, n := range w.bufs {
		b, err := g.D.CreateBuffer(n)
		if err != nil {
			return nil, err
		}
		if err := g.D.Write(b, 0, g.data[:n]); err != nil {
			return nil, err
		}
		g.bufs = append(g.bufs, b)
	}
	return g, g.D.Finish()
}

func (g *guest) close() error {
	return errors.Join(g.Guest.Close(), g.mgr.Destroy(g.inst.UUID()))
}

// wait flushes and waits for the last command (host.WaitLast).
func (g *guest) wait() error { return host.WaitLast(g.D) }

// spin launches the spin kernel over items work items of iters steps on
// buffer 0 and waits for it.
func (g *guest) spin(items uint64, iters uint32) error {
	if err := g.D.Launch(g.Prog, "spin", driver.Range1(items, min(items, 64)), driver.BufferArg(g.bufs[0]), driver.Uint32Arg(iters)); err != nil {
		return err
	}
	return g.wait()
}

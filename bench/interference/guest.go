package main

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

const ramBytes = 64 << 20

// guest is one QEMU-less VM running one workload on its own instance.
type guest struct {
	w    workload
	mgr  *mdev.Manager
	inst *mdev.Instance
	vm   *mpqemutest.VM
	d    *driver.Device
	prog driver.Program
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
	if g.vm, err = mpqemutest.Dial(inst.Socket(), ramBytes); err != nil {
		return nil, err
	}
	if g.d, err = driver.Open(g.vm, g.vm, driver.Options{}); err != nil {
		return nil, err
	}
	if g.prog, _, err = g.d.Build(kernelSource, ""); err != nil {
		return nil, err
	}
	var most uint64
	for _, n := range w.bufs {
		most = max(most, n)
	}
	g.data, g.scratch = floats(int(most/4), 1), make([]byte, most)
	for _, n := range w.bufs {
		b, err := g.d.CreateBuffer(n)
		if err != nil {
			return nil, err
		}
		if err := g.d.Write(b, 0, g.data[:n]); err != nil {
			return nil, err
		}
		g.bufs = append(g.bufs, b)
	}
	return g, g.d.Finish()
}

func (g *guest) close() error {
	var errs []error
	if g.d != nil {
		errs = append(errs, g.d.Close())
	}
	if g.vm != nil {
		errs = append(errs, g.vm.Close())
	}
	return errors.Join(append(errs, g.mgr.Destroy(g.inst.UUID()))...)
}

// wait flushes and waits for the last command. It polls in short sleeps:
// the driver's own poll backs off to 1 ms sleeps, which would quantise
// every short kernel, and spinning would steal the CPU PoCL computes on.
func (g *guest) wait() error {
	if err := g.d.Flush(); err != nil {
		return err
	}
	idx := g.d.Tail() - 1
	for i := 0; ; i++ {
		if _, ok := g.d.Completion(idx); ok {
			break
		}
		if i < 20 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return g.d.Finish()
}

// spin launches the spin kernel over items work items of iters steps on
// buffer 0 and waits for it.
func (g *guest) spin(items uint64, iters uint32) error {
	if err := g.d.Launch(g.prog, "spin", driver.Range1(items, min(items, 64)), driver.BufferArg(g.bufs[0]), driver.Uint32Arg(iters)); err != nil {
		return err
	}
	return g.wait()
}

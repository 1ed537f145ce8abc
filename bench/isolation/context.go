package main

import (
	"context"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/bench/stats"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// creation is one repetition of the context table: how long one ring
// took to open, to complete its first nop, and to close.
type creation struct {
	open, nop, close time.Duration
}

// contextTable measures making a device context against opening the
// default ring, on a vgpu-small instance of its own on m's vgpud (the
// default configuration: sandboxed worker, executors). Each repetition
// opens the default ring (driver.Open) and runs a nop on it, then opens
// device context contextID on it (OpenContext) and runs a nop on that,
// then closes the context and the ring.
func contextTable(ctx context.Context, cfg config, m *mode) (*table.Table, error) {
	// The harness's guest RAM is never given back: each repetition takes
	// a default ring's and a context's pages anew.
	perRep := uint64(driver.DefaultStagingBytes + driver.DefaultContextStagingBytes + 6*abi.PageSize)
	ram := (16<<20 + uint64(cfg.runs)*perRep + 1<<20 - 1) &^ (1<<20 - 1)
	vm, err := newGuest(m.h, ram)
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	var rings, ctxs []creation
	for r := 0; r < cfg.runs; r++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ring, c creation
		start := time.Now()
		d, err := driver.Open(vm, vm, driver.Options{})
		if err != nil {
			return nil, fmt.Errorf("default ring, repetition %d: %w", r, err)
		}
		ring.open = time.Since(start)
		if err := nop(d); err != nil {
			d.Close()
			return nil, fmt.Errorf("default ring, repetition %d: %w", r, err)
		}
		ring.nop = time.Since(start) - ring.open

		start = time.Now()
		cd, err := openContext(d)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("context %d, repetition %d: %w", contextID, r, err)
		}
		c.open = time.Since(start)
		if err := nop(cd); err != nil {
			cd.Close()
			d.Close()
			return nil, fmt.Errorf("context %d, repetition %d: %w", contextID, r, err)
		}
		c.nop = time.Since(start) - c.open

		start = time.Now()
		err = cd.Close()
		c.close = time.Since(start)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("context %d, repetition %d: close: %w", contextID, r, err)
		}
		start = time.Now()
		err = d.Close()
		ring.close = time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("default ring, repetition %d: close: %w", r, err)
		}
		rings, ctxs = append(rings, ring), append(ctxs, c)
	}
	t := &table.Table{
		Title:  fmt.Sprintf("Context creation: from the open call to its ring's first nop completed, then Close, %d repetitions, in ms (median, min-max)", cfg.runs),
		Header: []string{"ring", "open call", "first nop", "open -> first nop done", "(min-max)", "Close"},
	}
	row := func(name string, cs []creation) float64 {
		total := func(c creation) time.Duration { return c.open + c.nop }
		open, nop, tot, cls := medianOf(cs, func(c creation) time.Duration { return c.open }), medianOf(cs, func(c creation) time.Duration { return c.nop }),
			medianOf(cs, total), medianOf(cs, func(c creation) time.Duration { return c.close })
		lo, hi := total(cs[0]), total(cs[0])
		for _, c := range cs {
			lo, hi = min(lo, total(c)), max(hi, total(c))
		}
		t.Add(name, ms(open), ms(nop), ms(tot), ms(lo)+"-"+ms(hi), ms(cls))
		return float64(tot)
	}
	cx := row(fmt.Sprintf("device context (OpenContext, id %d)", contextID), ctxs)
	dr := row("default ring (driver.Open)", rings)
	t.Note("device context / default ring, open -> first nop done: %.1fx by median", cx/dr)
	t.Note("device context: OpenContext is a context-create command on the default ring, which the worker completes once the")
	t.Note("context's device is open: on a CPU device that is an executor process started for the context (fork+exec of")
	t.Note("vgpud-executor, the OpenCL platform and device opened in it) and a queue on it; Close is context-destroy (the executor ends)")
	t.Note("default ring: driver.Open resets the instance and sets up and enables its ring (register writes over the harness's")
	t.Note("socket); no process starts: the instance's worker and executor run since the instance was made. Close disables the ring")
	t.Note("first nop: submitted, rung, waited for on the new ring (the worker serves it; it reaches no executor); each column")
	t.Note("is its own median (open -> first nop done: the median of the repetitions' sums, its range beside it)")
	t.Note("each repetition: driver.Open, nop, OpenContext, nop, context Close, ring Close, on one vgpu-small instance of")
	t.Note("worker/context's vgpud made for this table")
	return t, nil
}

// nop submits a nop on d, rings and waits for its completion.
func nop(d *driver.Device) error {
	idx, err := d.SubmitRaw(abi.NewCommand(&abi.Nop{}, 0, 1))
	if err != nil {
		return err
	}
	if err := d.Flush(); err != nil {
		return err
	}
	rec, err := d.WaitIndex(idx)
	if err == nil && rec.Status != abi.StatusOK {
		err = fmt.Errorf("nop: %v", rec.Status)
	}
	return err
}

// medianOf is the median of f over cs.
func medianOf(cs []creation, f func(creation) time.Duration) time.Duration {
	ds := make([]time.Duration, len(cs))
	for i, c := range cs {
		ds[i] = f(c)
	}
	return stats.Median(ds)
}

// ms formats d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

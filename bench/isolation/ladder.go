package main

import (
	"context"
	"fmt"
	"time"

	"github.com/vgpud/vgpud/bench/stats"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// The ladder (issue 32's profile, -sections ladder): the same small
// commands on the host's device directly and through vgpud with one more
// hop at each rung, measured in rotating blocks like the command table, so
// that the difference between two rungs is what the hop between them
// costs:
//
//	direct           a gpu.Queue of this process (OpenCL, no vgpud)
//	in-process       + the vGPU: the harness's doorbell (an MMIO write, a
//	                   socket round trip), the register file, the ring, the
//	                   aggregator, the driver polling the completion
//	worker/kernels   + the worker process: the doorbell's eventfd wake, a
//	                   device turn's request and grant on its socket (none
//	                   for a turn taken from the free one parked at an idle
//	                   instance alone on its device: -request-every-turn
//	                   measures the ladder as before)
//	worker/executor  + the executor process: a socket round trip per device
//	                   call (vgpud's default on a CPU device)
//
// The ICD and vgpu-icdd above the driver are bench/apps's small table.

// ladderRungs are the command table's modes on the ladder, in order.
var ladderRungs = []string{"in-process", "worker/kernels", "worker/executor"}

// ladderBurst is how many launches the queued-launches op queues before
// it waits.
const ladderBurst = 16

// ladderOp is one command as the ladder measures it: through a mode's
// driver, and directly on a queue.
type ladderOp struct {
	name   string
	driver func(m *mode, scratch []byte) error
	direct func(d *ladderDirect, scratch []byte) error
	// idle: every path rests this long, untimed, before each op
	idle time.Duration
}

// ladderIdle is how long the idle op's paths rest before each launch:
// past a worker's poll window (200 us by default) and a kept turn's hold
// (500 us), so that through vgpud the launch finds its worker blocked
// and its turn given back, as an application's launch after a stretch
// of CPU work does.
const ladderIdle = 2 * time.Millisecond

var ladderOps = []ladderOp{
	{"launch of 1 item, waited for",
		launchDriver, launchDirect, 0},
	{fmt.Sprintf("%d launches queued, then waited for", ladderBurst),
		func(m *mode, _ []byte) error {
			for range ladderBurst {
				if err := m.d.Launch(m.prog, "touch", driver.Range1(1, 0), driver.BufferArg(m.buf)); err != nil {
					return err
				}
			}
			return m.d.Finish()
		},
		func(d *ladderDirect, _ []byte) error {
			pl := d.q.(gpu.Pipeliner)
			for range ladderBurst {
				if err := pl.Enqueue(d.k, gpu.NDRange{Dims: 1, Global: [3]uint64{1, 1, 1}}, []gpu.Arg{{Buffer: d.buf}}); err != nil {
					return err
				}
			}
			for _, r := range pl.Sync() {
				if r.Err != nil {
					return r.Err
				}
			}
			return nil
		}, 0},
	{fmt.Sprintf("launch of 1 item after %v idle, waited for", ladderIdle),
		launchDriver, launchDirect, ladderIdle},
	{"read of 64 bytes",
		func(m *mode, scratch []byte) error { return m.d.Read(m.buf, 0, scratch[:64]) },
		func(d *ladderDirect, scratch []byte) error { return d.q.Read(d.buf, 0, scratch[:64]) }, 0},
	{"write + read 4 KiB",
		func(m *mode, scratch []byte) error { return ops[2].do(m, scratch) },
		func(d *ladderDirect, scratch []byte) error {
			if err := d.q.Write(d.buf, 0, scratch); err != nil {
				return err
			}
			return d.q.Read(d.buf, 0, scratch)
		}, 0},
}

// launchDriver and launchDirect launch the touch kernel over one item and
// wait for it: through a mode's driver, and directly.
func launchDriver(m *mode, _ []byte) error { return ops[1].do(m, nil) }

func launchDirect(d *ladderDirect, _ []byte) error {
	_, err := d.q.Launch(d.k, gpu.NDRange{Dims: 1, Global: [3]uint64{1, 1, 1}}, []gpu.Arg{{Buffer: d.buf}})
	return err
}

// ladderDirect is the ladder's bottom rung: the touch kernel and a 4 KiB
// buffer on a queue of this process.
type ladderDirect struct {
	*direct
	prog gpu.Program
	k    gpu.Kernel
	buf  gpu.Buffer
}

func newLadderDirect(selector string) (_ *ladderDirect, err error) {
	d := &ladderDirect{}
	if d.direct, err = newDirect(selector); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.prog, _, err = d.q.Build(emptySource, ""); err != nil {
		return nil, fmt.Errorf("direct: build: %w", err)
	}
	if d.k, err = d.prog.Kernel("touch"); err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	if d.buf, err = d.q.Alloc(4096); err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	if _, ok := d.q.(gpu.Pipeliner); !ok {
		return nil, fmt.Errorf("direct: the device's queue enqueues no launches without waiting (gpu.Pipeliner)")
	}
	return d, nil
}

func (d *ladderDirect) close() {
	if d.buf != nil {
		d.buf.Release()
	}
	if d.k != nil {
		d.k.Release()
	}
	if d.prog != nil {
		d.prog.Release()
	}
	d.direct.close()
}

// ladderTable measures each op directly and on each rung, block by block
// with the rungs rotating, and prints the medians and the differences.
func ladderTable(ctx context.Context, cfg config, modes []*mode) (*table.Table, error) {
	d, err := newLadderDirect(cfg.device)
	if err != nil {
		return nil, err
	}
	defer d.close()
	var rungs []*mode
	for _, name := range ladderRungs {
		i := indexOf(modes, name)
		if i < 0 {
			return nil, fmt.Errorf("ladder: no mode %s", name)
		}
		rungs = append(rungs, modes[i])
	}
	header := []string{"command", "direct"}
	for _, m := range rungs {
		header = append(header, m.name)
	}
	prev := "direct"
	for _, m := range rungs {
		header = append(header, "+ "+m.name+" (vs "+prev+")")
		prev = m.name
	}
	header = append(header, "worker/executor / direct")
	t := &table.Table{
		Title: fmt.Sprintf("Where a small command's time goes, hop by hop: median latency of %d ops per rung (blocks of %d, rungs rotating); "+
			"a + column is the median's difference from the rung below", cfg.ops, cfg.block),
		Header: header,
	}
	scratch := make([]byte, 4096)
	for _, o := range ladderOps {
		run := func(i int) error {
			if i == 0 {
				return o.direct(d, scratch)
			}
			return o.driver(rungs[i-1], scratch)
		}
		c := cfg
		var rest func()
		if o.idle > 0 {
			// Resting costs wall time, not the op's: fewer ops.
			c.ops, c.block = max(cfg.ops/4, 1), max(cfg.block/4, 1)
			rest = func() { time.Sleep(o.idle) }
		}
		lat, _, err := measureBlocksRest(ctx, c, 1+len(rungs), rest, run)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.name, err)
		}
		med := make([]time.Duration, len(lat))
		row := []string{o.name}
		for i := range lat {
			med[i] = stats.Median(lat[i])
			row = append(row, us(med[i]))
		}
		for i := 1; i < len(med); i++ {
			row = append(row, fmt.Sprintf("%+.1f", float64(med[i]-med[i-1])/1e3))
		}
		row = append(row, fmt.Sprintf("%.2fx", float64(med[len(med)-1])/float64(max(med[0], 1))))
		t.Add(row...)
	}
	t.Note("times in us; direct: a gpu.Queue of this process (the %d queued launches enqueued with gpu.Pipeliner and synced once)", ladderBurst)
	t.Note("+ in-process: the vGPU itself: the doorbell (an MMIO write over the harness's socket), the register file, ring fetch and")
	t.Note("  decode, DMA through guest RAM, the completion record and the driver's poll of it; a worker's polling loop says so in")
	t.Note("  the guest's poll word and reads its tail shadow, so the guest rings no doorbell then (ABI 1.6; -no-notify: it rings)")
	t.Note("+ worker/kernels: the worker process: the doorbell's eventfd wakes it, each device turn a request and a grant on its socket")
	t.Note("  (a run of queued commands shares one turn; on a device free of others, the free turn parked in the instance page is")
	t.Note("  taken without either: -request-every-turn measures without), the completion written by another process")
	t.Note("+ worker/executor: the executor process: each device call a round trip on its socket (queued launches: one per run),")
	t.Note("  but a write or read of a buffer of a page or more, a memory copy in the worker (the executor's arena)")
	t.Note("after %v idle: every path rests %v, untimed, before each launch (%d ops per path): through vgpud the worker has", ladderIdle, ladderIdle, max(cfg.ops/4, 1))
	t.Note("  blocked and given its turn back; directly, the OpenCL runtime's threads may have gone to sleep too")
	t.Note("the ICD and vgpu-icdd above the driver: bench/apps -sections small (an OpenCL program through them against PoCL)")
	return t, nil
}

// us formats d in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e3) }

// measureBlocks runs do(i) for each of n paths cfg.ops times, in blocks of
// cfg.block with the paths rotating (which goes first moves by one each
// block), and returns each path's latencies and mean latency per block.
func measureBlocks(ctx context.Context, cfg config, n int, do func(i int) error) (lat [][]time.Duration, blocks [][]float64, err error) {
	return measureBlocksRest(ctx, cfg, n, nil, do)
}

// measureBlocksRest is measureBlocks with rest, if not nil, called before
// each op, untimed (a block's mean then includes it).
func measureBlocksRest(ctx context.Context, cfg config, n int, rest func(), do func(i int) error) (lat [][]time.Duration, blocks [][]float64, err error) {
	lat, blocks = make([][]time.Duration, n), make([][]float64, n)
	for done := 0; done < cfg.ops; done += cfg.block {
		b := min(cfg.block, cfg.ops-done)
		for k := range n {
			i := (done/cfg.block + k) % n
			start := time.Now()
			for range b {
				if err := ctx.Err(); err != nil {
					return nil, nil, err
				}
				if rest != nil {
					rest()
				}
				s := time.Now()
				if err := do(i); err != nil {
					return nil, nil, fmt.Errorf("path %d: %w", i, err)
				}
				lat[i] = append(lat[i], time.Since(s))
			}
			blocks[i] = append(blocks[i], time.Since(start).Seconds()/float64(b))
		}
	}
	return lat, blocks, nil
}

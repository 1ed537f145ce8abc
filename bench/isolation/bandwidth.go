package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/bench/stats"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
)

// The copy-bandwidth table (issue 42, -sections bandwidth): one contiguous
// upload (memory -> device buffer) and download (device buffer -> memory)
// of each -bwsizes size, directly on a gpu.Queue of this process (one
// blocking clEnqueueWriteBuffer / clEnqueueReadBuffer of the whole size)
// and through vgpud on each ladder rung: first with the paths rotating
// repetition by repetition (each transfer finds its guest's worker
// asleep), then each path's repetitions back to back (a stream of copies,
// the worker still polling). Through vgpud the bytes are, with -bwguest dma (the
// default), in the guest's DMA memory, where an application's data lies
// when it maps a buffer and the driver hands the device those pages
// (driver.Device.WriteFrom then Finish; driver.Device.ReadInto); with
// -bwguest staged, in the benchmark's own memory, which the driver copies
// through its staging pool (driver.Device.Write then Finish;
// driver.Device.Read). Its
// profile columns say what one transfer became on the way: the ring
// commands the instance executed (mdev.Instance.Stats), the driver's
// doorbells and the device turns the scheduler granted.

// defaultBWSizes are -bwsizes' default: issue 42's sizes.
const defaultBWSizes = "4K,1M,16M,256M"

// bwBudget bounds the bytes one path moves per size and direction: the
// repetitions of a size are -bwreps, fewer where that would move more
// than bwBudget (256 MiB: 3), at least one.
const bwBudget = 768 << 20

// bwProfile is the profile that the bandwidth table's guests run on: its
// 1 GiB quota holds a 256 MiB buffer (vgpu-small's 256 MiB quota cannot
// hold one beside anything else).
const bwProfile = "vgpu-medium"

// bwGuestRAM is the harness RAM of a bandwidth guest besides its DMA
// source and destination (-bwguest dma: twice the largest size): the
// driver's ring, completion and fence pages and its staging pool
// (driver.DefaultStagingBytes).
const bwGuestRAM = 32 << 20

// Guest sides of the bandwidth table (-bwguest).
const (
	bwGuestDMA    = "dma"
	bwGuestStaged = "staged"
)

// parseSizes parses a comma-separated list of byte counts, each a number
// with an optional K, M or G (KiB, MiB, GiB) suffix.
func parseSizes(list string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		unit := uint64(1)
		switch {
		case strings.HasSuffix(f, "K"):
			unit = 1 << 10
		case strings.HasSuffix(f, "M"):
			unit = 1 << 20
		case strings.HasSuffix(f, "G"):
			unit = 1 << 30
		}
		num := f
		if unit > 1 {
			num = f[:len(f)-1]
		}
		n, err := strconv.ParseUint(num, 10, 32)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("size %q: want a positive number with an optional K, M or G suffix", f)
		}
		out = append(out, n*unit)
	}
	return out, nil
}

// sizeName is n in the largest binary unit that divides it.
func sizeName(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// bwReps is how many times each path moves size bytes each way.
func bwReps(cfg config, size uint64) int {
	return max(1, min(cfg.bwReps, int(bwBudget/size)))
}

// bwGuest is a guest of the bandwidth table: a bwProfile instance of its
// own on one rung's vgpud, a harness VM and the driver on it.
type bwGuest struct {
	src, dst driver.DMA // -bwguest dma: the guest's data, where the device moves it
	name     string
	inst     *mdev.Instance
	vm       host.VM
	d        *driver.Device
}

// newBWGuest attaches a guest to a new instance on m's vgpud; dma > 0
// gives it DMA memory of that many bytes for the data each way.
func newBWGuest(m *mode, dma uint64) (_ *bwGuest, err error) {
	g := &bwGuest{name: m.name}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	if g.inst, g.vm, err = newInstanceGuest(m.h, bwProfile, bwGuestRAM+2*dma); err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	if g.d, err = driver.Open(g.vm, g.vm, driver.Options{}); err != nil {
		return nil, fmt.Errorf("%s: %w", m.name, err)
	}
	if dma > 0 {
		if g.src, err = g.vm.Alloc(int(dma)); err == nil {
			g.dst, err = g.vm.Alloc(int(dma))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: guest DMA memory: %w", m.name, err)
		}
	}
	return g, nil
}

func (g *bwGuest) close() {
	if g.d != nil {
		g.d.Close()
	}
	if g.vm != nil {
		g.vm.Close()
	}
}

// bwCount is a snapshot of the counters of the profile columns.
type bwCount struct {
	commands  uint64 // ring commands the instance executed
	driver    uint64 // commands the driver wrote into the ring
	doorbells uint64 // the driver's doorbells, rung or skipped (ABI 1.6 poll word)
	rung      uint64 // of them, those rung
	turns     uint64 // device turns the scheduler granted the instance
}

func (g *bwGuest) count() bwCount {
	ds := g.d.Stats()
	return bwCount{commands: g.inst.Stats().Commands.Load(), driver: ds.Commands, doorbells: ds.Doorbells + ds.Suppressed,
		rung: ds.Doorbells + ds.Rekicks, turns: g.inst.Sched().Turns}
}

func (c bwCount) sub(o bwCount) bwCount {
	return bwCount{c.commands - o.commands, c.driver - o.driver, c.doorbells - o.doorbells, c.rung - o.rung, c.turns - o.turns}
}

func (c bwCount) add(o bwCount) bwCount {
	return bwCount{c.commands + o.commands, c.driver + o.driver, c.doorbells + o.doorbells, c.rung + o.rung, c.turns + o.turns}
}

// bwDirs are the table's directions, in its row order.
var bwDirs = []string{"upload", "download"}

// bwOrders are the orders in which a size's transfers are measured, in
// the table's row order: rotating, each path's transfer pair after the
// other paths' (a guest's worker has slept since its last command, so the
// pair pays the kick that wakes it); back-to-back, each path's pairs one
// after the other (the worker is still in its poll window, issue 42 item
// 2's busy worker, and a stream of copies finds it awake).
var bwOrders = []string{"rotating", "back-to-back"}

// bwResult is one size's measurements: per order, direction and path (0
// is direct, i the rung i-1) the transfer times, per order, direction and
// rung the counters summed over its transfers, and how many downloads were
// checked.
type bwResult struct {
	reps   int
	times  [2][2][][]time.Duration
	counts [2][2][]bwCount
	checks int
}

// bwSize holds one size's buffers: the direct queue's and each guest's.
type bwSize struct {
	size   uint64
	direct gpu.Buffer
	bufs   []driver.Buffer
}

func allocSize(d *direct, guests []*bwGuest, size uint64) (*bwSize, error) {
	s := &bwSize{size: size}
	var err error
	if s.direct, err = d.q.Alloc(size); err != nil {
		return nil, fmt.Errorf("direct: alloc %d bytes: %w", size, err)
	}
	for _, g := range guests {
		b, err := g.d.CreateBuffer(size)
		if err == nil {
			err = g.d.Finish() // the allocation's status (a quota, the device's limit)
		}
		if err != nil {
			s.free(guests)
			return nil, fmt.Errorf("%s: create a buffer of %d bytes: %w", g.name, size, err)
		}
		s.bufs = append(s.bufs, b)
	}
	return s, nil
}

// free releases the buffers: the device memory of a 256 MiB size is not
// kept while the next is measured.
func (s *bwSize) free(guests []*bwGuest) error {
	s.direct.Release()
	var first error
	for i, b := range s.bufs {
		if err := guests[i].d.Free(b); err != nil && first == nil {
			first = err
		}
		if err := guests[i].d.Finish(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// stamp writes v into the first 8 bytes of every 4 KiB of p, so that each
// upload differs from the one before it and a download that returned a
// stale buffer fails the check.
func stamp(p []byte, v uint64) {
	for off := 0; off+8 <= len(p); off += 4096 {
		binary.LittleEndian.PutUint64(p[off:], v)
	}
}

// measureSize moves s.size bytes up and down each path reps times in
// each of bwOrders. Rotating: the paths take turns (which goes first
// moves by one each repetition), each upload stamped anew and each
// download compared byte for byte with it. Back-to-back: each path in
// turn moves its reps pairs with nothing in between, its data stamped
// once before and its last download compared after. Each upload and the
// download after it are timed on their own.
func measureSize(ctx context.Context, d *direct, guests []*bwGuest, s *bwSize, reps int, src, dst []byte, dma bool) (*bwResult, error) {
	n := 1 + len(guests)
	r := &bwResult{reps: reps}
	for order := range bwOrders {
		for dir := range bwDirs {
			r.times[order][dir] = make([][]time.Duration, n)
			r.counts[order][dir] = make([]bwCount, len(guests))
		}
	}
	src, dst = src[:s.size], dst[:s.size]
	m := bwMeasure{r: r, d: d, guests: guests, s: s, src: src, dst: dst, dma: dma}
	for rep := range reps {
		for k := range n {
			i := (rep + k) % n
			if err := m.pairs(ctx, 0, i, uint64(rep*n+i+1), 1); err != nil {
				return nil, fmt.Errorf("repetition %d: %w", rep, err)
			}
		}
	}
	for i := range n {
		if err := m.pairs(ctx, 1, i, uint64(reps*n+i+1), reps); err != nil {
			return nil, fmt.Errorf("back to back: %w", err)
		}
	}
	return r, nil
}

// bwMeasure is what measureSize's transfers share.
type bwMeasure struct {
	r        *bwResult
	d        *direct
	guests   []*bwGuest
	s        *bwSize
	src, dst []byte
	dma      bool
}

// pairs stamps the data with v, moves it up and down path i count times
// in a row, timing each transfer into the order's columns, and compares
// the last download with the upload.
func (m *bwMeasure) pairs(ctx context.Context, order, i int, v uint64, count int) error {
	stamp(m.src, v)
	clear(m.dst)
	var up, down func() error
	if i == 0 {
		up = func() error { return m.d.q.Write(m.s.direct, 0, m.src) }
		down = func() error { return m.d.q.Read(m.s.direct, 0, m.dst) }
	} else {
		up, down = guestTransfers(m.guests[i-1], m.s.bufs[i-1], m.src, m.dst, m.dma)
	}
	for range count {
		if err := ctx.Err(); err != nil {
			return err
		}
		for dir, f := range []func() error{up, down} {
			var before bwCount
			if i > 0 {
				before = m.guests[i-1].count()
			}
			start := time.Now()
			if err := f(); err != nil {
				return fmt.Errorf("%s, path %d: %w", bwDirs[dir], i, err)
			}
			m.r.times[order][dir][i] = append(m.r.times[order][dir][i], time.Since(start))
			if i > 0 {
				c := &m.r.counts[order][dir][i-1]
				*c = c.add(m.guests[i-1].count().sub(before))
			}
		}
	}
	if i > 0 && m.dma {
		copy(m.dst, m.guests[i-1].dst.Buf[:m.s.size]) // untimed: to compare
	}
	if !bytes.Equal(m.dst, m.src) {
		at := 0
		for at < len(m.dst) && m.dst[at] == m.src[at] {
			at++
		}
		return fmt.Errorf("path %d: the %d bytes downloaded differ from those uploaded at byte %d", i, m.s.size, at)
	}
	m.r.checks++
	return nil
}

// guestTransfers returns g's upload of src into b and download of b into
// dst: through the guest's DMA memory, which the application's data is
// put into before the upload is timed, or staged by the driver.
func guestTransfers(g *bwGuest, b driver.Buffer, src, dst []byte, dma bool) (up, down func() error) {
	n := len(src)
	if !dma {
		up = func() error {
			if err := g.d.Write(b, 0, src); err != nil {
				return err
			}
			return g.d.Finish()
		}
		return up, func() error { return g.d.Read(b, 0, dst) }
	}
	copy(g.src.Buf, src) // the application wrote its data in place
	clear(g.dst.Buf[:n])
	up = func() error {
		if err := g.d.WriteFrom(b, 0, g.src, 0, n); err != nil {
			return err
		}
		return g.d.Finish()
	}
	return up, func() error { return g.d.ReadInto(b, 0, g.dst, 0, n) }
}

// bandwidthTable measures every size, each on buffers of its own, and
// prints a row per size and direction.
func bandwidthTable(ctx context.Context, cfg config, modes []*mode) (*table.Table, error) {
	d, err := newDirect(cfg.device)
	if err != nil {
		return nil, err
	}
	defer d.close()
	var guests []*bwGuest
	defer func() {
		for _, g := range guests {
			g.close()
		}
	}()
	largest := uint64(0)
	for _, s := range cfg.bwSizes {
		largest = max(largest, s)
	}
	dma := cfg.bwGuest == bwGuestDMA
	for _, name := range ladderRungs {
		var in uint64
		if dma {
			in = largest
		}
		g, err := newBWGuest(modes[indexOf(modes, name)], in)
		if err != nil {
			return nil, err
		}
		guests = append(guests, g)
	}
	src, dst := make([]byte, largest), make([]byte, largest)
	rand.NewChaCha8([32]byte{42}).Read(src)
	t := newBandwidthTable(cfg, guests)
	checks := 0
	for _, size := range cfg.bwSizes {
		s, err := allocSize(d, guests, size)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sizeName(size), err)
		}
		r, err := measureSize(ctx, d, guests, s, bwReps(cfg, size), src, dst, dma)
		if ferr := s.free(guests); err == nil && ferr != nil {
			err = fmt.Errorf("free: %w", ferr)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sizeName(size), err)
		}
		if err := addBandwidthRows(t, guests, size, r); err != nil {
			return nil, fmt.Errorf("%s: %w", sizeName(size), err)
		}
		checks += r.checks
	}
	bandwidthNotes(t, checks, dma)
	return t, nil
}

func newBandwidthTable(cfg config, guests []*bwGuest) *table.Table {
	header := []string{"size", "direction", "order", "reps", "direct MB/s"}
	for _, g := range guests {
		header = append(header, g.name+" MB/s")
	}
	for _, g := range guests {
		header = append(header, g.name+" %")
	}
	header = append(header, "commands", "doorbells", "rung by rung", "turns by rung")
	return &table.Table{
		Title: fmt.Sprintf("Copy bandwidth: one contiguous upload or download of each size, directly and through vgpud, "+
			"median of the reps (at most %d, fewer past %d MiB moved), paths rotating and back to back", cfg.bwReps, bwBudget>>20),
		Header: header,
	}
}

// addBandwidthRows adds r's rows, a direction in an order each.
func addBandwidthRows(t *table.Table, guests []*bwGuest, size uint64, r *bwResult) error {
	for order := range bwOrders {
		for dir := range bwDirs {
			if err := addBandwidthRow(t, guests, size, r, order, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// addBandwidthRow adds one row. The profile columns are per transfer; the
// commands must be the same on every rung (the driver decides them), and
// the instance must have executed what the driver submitted.
func addBandwidthRow(t *table.Table, guests []*bwGuest, size uint64, r *bwResult, order, dir int) error {
	name := bwDirs[dir]
	med := make([]time.Duration, len(r.times[order][dir]))
	row := []string{sizeName(size), name, bwOrders[order], strconv.Itoa(r.reps)}
	for i, ts := range r.times[order][dir] {
		med[i] = max(stats.Median(ts), 1)
		row = append(row, figure(float64(size)/med[i].Seconds()/1e6))
	}
	for i := 1; i < len(med); i++ {
		row = append(row, figure(100*float64(med[0])/float64(med[i]))+"%")
	}
	cs := r.counts[order][dir]
	reps := uint64(r.reps)
	var turns, rung []string
	for i, c := range cs {
		if c.commands != cs[0].commands || c.doorbells != cs[0].doorbells {
			return fmt.Errorf("%s: %d ring commands and %d doorbells on %s, %d and %d on %s", name, c.commands, c.doorbells, guests[i].name, cs[0].commands, cs[0].doorbells, guests[0].name)
		}
		if c.commands != c.driver {
			return fmt.Errorf("%s on %s: the instance executed %d commands, the driver submitted %d", name, guests[i].name, c.commands, c.driver)
		}
		turns = append(turns, perTransfer(c.turns, reps))
		rung = append(rung, perTransfer(c.rung, reps))
	}
	commands := perTransfer(cs[0].commands, reps)
	if name == "upload" {
		// Finish's fence (driver.Device.Finish) is one command of each.
		commands = perTransfer(cs[0].commands-reps, reps) + "+1"
	}
	row = append(row, commands, perTransfer(cs[0].doorbells, reps), strings.Join(rung, "/"), strings.Join(turns, "/"))
	t.Add(row...)
	return nil
}

// perTransfer is n/reps, as an integer when it is one.
func perTransfer(n, reps uint64) string {
	if n%reps == 0 {
		return strconv.FormatUint(n/reps, 10)
	}
	return fmt.Sprintf("%.1f", float64(n)/float64(reps))
}

func bandwidthNotes(t *table.Table, checks int, dma bool) {
	t.Note("direct: a gpu.Queue of this process on the same device (gpu.OpenPlain: buffers as an application has them), one")
	t.Note("  blocking clEnqueueWriteBuffer (upload) or clEnqueueReadBuffer (download) of the whole size")
	if dma {
		t.Note("vgpud (-bwguest dma): driver.Device.WriteFrom then Finish (upload), driver.Device.ReadInto (download) of the whole")
		t.Note("  size between the buffer and the guest's DMA memory, where the data lies (put there before the upload is timed, as")
		t.Note("  an application that maps its buffer writes it): the driver stages nothing")
	} else {
		t.Note("vgpud (-bwguest staged): driver.Device.Write then Finish (upload), driver.Device.Read (download) of the whole size")
		t.Note("  of the benchmark's memory, which the driver copies through its staging pool")
	}
	t.Note("  from a harness guest on a %s instance of its own (reuse off) on each rung's vgpud", bwProfile)
	t.Note("MB/s: size / the median transfer time, 1 MB = 10^6 bytes; %%: direct's median time / the rung's (100%% = as fast as")
	t.Note("  direct; issue 42's goal: >= 90%% from 1 MiB up)")
	t.Note("commands: ring commands one transfer became, as the instance counted them (mdev.Instance.Stats, the same as the")
	t.Note("  driver's count on every rung): with -bwguest dma one command each way, as many scatter-gather entries as half its")
	t.Note("  %d KiB pool holds as tables (guestagent/driver inPlaceEntries: 261,121 with the default, 1020 MiB of scattered",
		driver.DefaultStagingBytes>>10)
	t.Note("  pages); staged, commands of half the pool less their table pages (chunkBytes); +1: the fence of the upload's Finish. The aggregator")
	t.Note("  then moves each command in batches of at most 4 MiB (16 MiB where the queue streams). Into or out of a CPU device's host-backed buffers (PoCL, every")
	t.Note("  rung; the executor's buffers lie on memory its worker maps too) a batch is memory copies between guest RAM and the")
	t.Note("  buffer, with no device call, no turn and nothing on the executor's socket (aggregator/exec.go moveInPlace), stored")
	t.Note("  past the caches from 2 MiB (aggregator/bulkcopy); otherwise it runs under one turn: runs of guest RAM of 256 KiB or")
	t.Note("  more straight, the rest (the harness scatters its RAM in 64 KiB runs, as a fragmented guest) streamed through the")
	t.Note("  queue's pinned 2 MiB pieces where it streams (gpu.Streamer: a GPU's), the gather of one overlapping the others'")
	t.Note("  transfers, else through a 1 MiB staging buffer, one device call per MiB")
	t.Note("doorbells: the driver's doorbells per transfer; rung by rung: the kicks it sent (the others it skipped, the worker's")
	t.Note("  loop saying in the guest's poll word that it polled: ABI 1.6; plus one before a wait that sleeps after a skip); turns by rung: device turns the scheduler granted the instance per")
	t.Note("  transfer (mdev.Instance.Sched), in-process/worker/kernels/worker/executor: 0 where batches moved in place, else one")
	t.Note("  per batch, fewer in a worker, whose kept turn is renewed while no other instance waits (aggregator/turns.go)")
	t.Note("order: rotating, each path's upload and download after the other paths' (a guest's worker has slept since, and its")
	t.Note("  kick wakes it: a lone copy); back-to-back, each path's pairs in a row (a stream of copies: the worker polls between")
	t.Note("  them for its poll window, worker.DefaultPollWindow, and the driver skips the kick)")
	t.Note("data: rotating, every download compared byte for byte with the upload before it on the same path, each upload")
	t.Note("  stamped anew; back-to-back, each path's last download (%d checks, all equal)", checks)
}

// sizeList is sizes as sizeName writes them, comma-separated.
func sizeList(sizes []uint64) string {
	names := make([]string, len(sizes))
	for i, n := range sizes {
		names[i] = sizeName(n)
	}
	return strings.Join(names, ", ")
}

// figure formats a rate or a percentage: whole numbers from 100 up, three
// significant digits below, so that a slow transfer on a loaded machine
// never reads as 0.
func figure(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

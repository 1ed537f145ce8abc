package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/sched"
)

func main() {
	benchmain.Main("sched", benchmain.Stdout(run))
}

const (
	sectionThroughput   = "throughput"
	sectionFairness     = "fairness"
	sectionInterference = "interference"
	maxGlobal           = 65536 // items of the long kernel
)

var allSections = []string{sectionThroughput, sectionFairness, sectionInterference}

type config struct {
	sections []string
	window   time.Duration
	device   string
	guests   []int
	shortT   time.Duration // target device time of each kernel kind
	mediumT  time.Duration
	longT    time.Duration
}

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("sched", flag.ContinueOnError)
	fs.SetOutput(out)
	c := config{guests: []int{1, 2, 4, 8}}
	sections := fs.String("sections", strings.Join(allSections, ","), "comma-separated `list` of tables: "+strings.Join(allSections, ", "))
	fs.DurationVar(&c.window, "window", 2*time.Second, "how long every configuration runs")
	fs.StringVar(&c.device, "device", os.Getenv("VGPUD_TEST_DEVICE"), "OpenCL device: index or name substring")
	fs.DurationVar(&c.shortT, "short", 250*time.Microsecond, "device time of a short kernel")
	fs.DurationVar(&c.mediumT, "medium", 2*time.Millisecond, "device time of the throughput and fairness kernel")
	fs.DurationVar(&c.longT, "long", 20*time.Millisecond, "device time of a long kernel")
	if err := benchmain.Parse(fs, args); err != nil {
		return c, err
	}
	var err error
	if c.sections, err = table.ParseSections(*sections, allSections); err != nil {
		return c, err
	}
	if c.window < 10*time.Millisecond || c.window > time.Hour {
		return c, fmt.Errorf("-window %v: want 10ms..1h", c.window)
	}
	for _, d := range []time.Duration{c.shortT, c.mediumT, c.longT} {
		if d < 10*time.Microsecond || d > 10*time.Second {
			return c, fmt.Errorf("kernel length %v: want 10us..10s", d)
		}
	}
	return c, nil
}

type bench struct {
	cfg config
	mgr *mdev.Manager
	out io.Writer
	// Calibrated kernels.
	short, medium, long, copy work
}

func run(ctx context.Context, args []string, stdout io.Writer) (err error) {
	cfg, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	h, err := host.Start(cfg.device, "vgpud-sched-")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	dev, mgr := h.Dev, h.Mgr
	b := &bench{cfg: cfg, mgr: mgr, out: stdout, copy: work{name: "copy"}}

	in := dev.Info()
	fmt.Fprintf(stdout, "vgpud scheduler benchmark, %s, %s\n", time.Now().Format(time.RFC3339), runtime.Version())
	fmt.Fprintf(stdout, "  host CPUs:     %d\n", runtime.NumCPU())
	fmt.Fprintf(stdout, "  OpenCL device: %s (%s, %d compute units)\n", in.Name, in.Platform, in.ComputeUnits)
	fmt.Fprintf(stdout, "  guests:        QEMU-less harness (mpqemutest) + guest driver library, one vgpu-small instance each\n")
	fmt.Fprintf(stdout, "  window:        %v per configuration\n", cfg.window)

	if err := b.calibrate(ctx); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	for _, s := range cfg.sections {
		var t *table.Table
		switch s {
		case sectionThroughput:
			t, err = b.throughput(ctx)
		case sectionFairness:
			t, err = b.fairness(ctx)
		case sectionInterference:
			t, err = b.interference(ctx)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		t.Print(stdout)
	}
	return nil
}

// calibrate sizes the spin kernels to their target device times on this
// device, measured alone through one guest.
func (b *bench) calibrate(ctx context.Context) error {
	g, err := b.newGuest(1)
	if err != nil {
		return err
	}
	defer g.close()
	size := func(name string, global uint64, target time.Duration) (work, error) {
		w := work{name: name, global: global, iters: 64}
		for range 8 {
			before := g.sched().DeviceNanos
			const n = 3
			for range n {
				if err := g.op(w); err != nil {
					return w, err
				}
			}
			per := float64(g.sched().DeviceNanos-before) / n
			next := uint32(min(max(float64(w.iters)*float64(target)/max(per, 1), 1), 1e7))
			if per > 0 && next <= w.iters*11/10 && next >= w.iters*9/10 {
				return w, nil
			}
			w.iters = next
		}
		return w, ctx.Err()
	}
	if b.short, err = size("short", 1024, b.cfg.shortT); err != nil {
		return err
	}
	if b.medium, err = size("medium", 8192, b.cfg.mediumT); err != nil {
		return err
	}
	if b.long, err = size("long", maxGlobal, b.cfg.longT); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "  kernels:       spin (sliceable), %d/%d/%d items x %d/%d/%d iterations for ~%v/%v/%v of device time; copy guest: %d MiB write + read\n",
		b.short.global, b.medium.global, b.long.global, b.short.iters, b.medium.iters, b.long.iters,
		b.cfg.shortT, b.cfg.mediumT, b.cfg.longT, copyBytes>>20)
	return nil
}

// withGuests creates one guest per share, runs f, and closes them.
func (b *bench) withGuests(shares []uint32, f func([]*guest) error) (err error) {
	var gs []*guest
	defer func() {
		for _, g := range gs {
			err = errors.Join(err, g.close())
		}
	}()
	for _, s := range shares {
		g, err := b.newGuest(s)
		if err != nil {
			return err
		}
		gs = append(gs, g)
	}
	return f(gs)
}

func (b *bench) setPolicy(p sched.Policy) error { return b.mgr.SetPolicy(0, string(p)) }

func (b *bench) throughput(ctx context.Context) (*table.Table, error) {
	t := &table.Table{
		Title:  fmt.Sprintf("Aggregate throughput: N guests each launching the %v kernel back to back (%s); ratio to 1 guest", b.cfg.mediumT, sched.DefaultPolicy),
		Header: []string{"guests", "launches/s", "vs 1 guest", "device busy", "per guest min-max launches/s", "mean queue wait/launch"},
	}
	if err := b.setPolicy(sched.DefaultPolicy); err != nil {
		return nil, err
	}
	var base float64
	for _, n := range b.cfg.guests {
		shares := make([]uint32, n)
		for i := range shares {
			shares[i] = 1
		}
		err := b.withGuests(shares, func(gs []*guest) error {
			ws := make([]work, n)
			for i := range ws {
				ws[i] = b.medium
			}
			res, el, err := runAll(ctx, gs, ws, b.cfg.window)
			if err != nil {
				return err
			}
			var ops int
			var dev, wait uint64
			lo, hi := -1.0, 0.0
			for _, r := range res {
				ops += r.ops
				dev += r.devNS
				wait += r.waitNS
				rate := float64(r.ops) / el.Seconds()
				if lo < 0 || rate < lo {
					lo = rate
				}
				hi = max(hi, rate)
			}
			rate := float64(ops) / el.Seconds()
			if n == b.cfg.guests[0] {
				base = rate
			}
			t.Add(fmt.Sprint(n), fmt.Sprintf("%.1f", rate), fmt.Sprintf("%.2fx", rate/base),
				fmt.Sprintf("%.0f%%", float64(dev)/float64(el)*100), fmt.Sprintf("%.1f-%.1f", lo, hi),
				time.Duration(wait/uint64(max(ops, 1))).Round(time.Microsecond).String())
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	t.Note("device busy = device time charged by the scheduler (kernel profiling) / wall time of the window")
	t.Note("one OpenCL device (PoCL on the host's CPUs) is shared: aggregate throughput should stay flat, not grow")
	return t, nil
}

func (b *bench) fairness(ctx context.Context) (*table.Table, error) {
	t := &table.Table{
		Title:  fmt.Sprintf("Fairness: two guests launching the %v kernel back to back; Jain's index over device time / weight", b.cfg.mediumT),
		Header: []string{"policy", "weights", "device time A / B", "B's share", "B's share wanted", "Jain (time/weight)"},
	}
	for _, p := range sched.Policies {
		for _, ws := range [][2]uint32{{1, 1}, {1, 3}} {
			if err := b.setPolicy(p); err != nil {
				return nil, err
			}
			err := b.withGuests(ws[:], func(gs []*guest) error {
				res, _, err := runAll(ctx, gs, []work{b.medium, b.medium}, b.cfg.window)
				if err != nil {
					return err
				}
				a, bb := float64(res[0].devNS), float64(res[1].devNS)
				want := "50%"
				if p == sched.PolicyFixedShare {
					want = fmt.Sprintf("%.0f%%", float64(ws[1])/float64(ws[0]+ws[1])*100)
				}
				t.Add(string(p), fmt.Sprintf("%d:%d", ws[0], ws[1]),
					fmt.Sprintf("%.0f / %.0f ms", a/1e6, bb/1e6), fmt.Sprintf("%.1f%%", bb/(a+bb)*100), want,
					fmt.Sprintf("%.3f", jain([]float64{a / float64(ws[0]), bb / float64(ws[1])})))
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	t.Note("weights are the instances' shares; only fixed-share honours them, so the other policies' index at 1:3 shows how far an")
	t.Note("unweighted split is from the weighted one (1.0 = device time exactly proportional to the weights)")
	return t, nil
}

func (b *bench) interference(ctx context.Context) (*table.Table, error) {
	policies := []sched.Policy{sched.DefaultPolicy, sched.PolicyTimeslice}
	t := &table.Table{
		Title: fmt.Sprintf("Interference: a short-kernel guest (%v kernels, launch + wait, back to back) next to another guest; slowdown = its mean latency / alone under the same policy",
			b.cfg.shortT),
		Header: []string{"neighbour", "policy", "in-vgpud latency", "slowdown", "guest latency", "slowdown", "queue wait", "device time", "neighbour ops/s", "neighbour slices"},
	}
	per := func(ns uint64, r result) string {
		return time.Duration(ns / uint64(max(r.ops, 1))).Round(time.Microsecond).String()
	}
	slow := map[sched.Policy][]float64{}
	for _, p := range policies {
		if err := b.setPolicy(p); err != nil {
			return nil, err
		}
		var alone, aloneHost time.Duration
		err := b.withGuests([]uint32{1}, func(gs []*guest) error {
			res, _, err := runAll(ctx, gs, []work{b.short}, b.cfg.window)
			if err != nil {
				return err
			}
			r := res[0]
			alone, aloneHost = r.latency, hostLatency(r)
			t.Add("(alone)", string(p), aloneHost.Round(time.Microsecond).String(), "1.00x", r.latency.Round(time.Microsecond).String(), "1.00x",
				per(r.waitNS, r), per(r.devNS, r), "-", "-")
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, nb := range []work{b.long, b.copy, b.short} {
			err := b.withGuests([]uint32{1, 1}, func(gs []*guest) error {
				res, el, err := runAll(ctx, gs, []work{b.short, nb}, b.cfg.window)
				if err != nil {
					return err
				}
				r := res[0]
				sd := float64(hostLatency(r)) / float64(aloneHost)
				slow[p] = append(slow[p], sd)
				name := nb.name + " kernel guest"
				if nb.isCopy() {
					name = "memory-copy guest"
				}
				t.Add(name, string(p), hostLatency(r).Round(time.Microsecond).String(), fmt.Sprintf("%.2fx", sd),
					r.latency.Round(time.Microsecond).String(), fmt.Sprintf("%.2fx", float64(r.latency)/float64(alone)),
					per(r.waitNS, r), per(r.devNS, r), fmt.Sprintf("%.1f", float64(res[1].ops)/el.Seconds()), fmt.Sprint(res[1].slices))
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	slices.SortStableFunc(t.Rows, func(a, b []string) int { return strings.Compare(rank(a[0]), rank(b[0])) })
	t.Note("in-vgpud latency = queue wait for the device turn + the kernel's profiled device time, per launch of the short guest (what the")
	t.Note("scheduler controls); guest latency = wall time of launch + wait in the guest, which adds a fixed ~0.4 ms of harness round trip")
	t.Note("(doorbell over the socket, worker wake-up, completion poll) to every launch, alone and co-located alike")
	t.Note("%s: long launches are sliced to half the short guest's typical kernel while it is active; the least-served guest goes", sched.DefaultPolicy)
	t.Note("first, shorter work first within %v; timeslice (baseline): 1 ms round-robin slices, long launches cut at 1 ms (NVIDIA-like)", time.Millisecond)
	t.Note("long kernel ~%v; copy guest = %d MiB write + %d MiB read, moved in 1 MiB device turns", b.cfg.longT, copyBytes>>20, copyBytes>>20)
	for _, p := range policies {
		t.Note("%s in-vgpud slowdowns (long, copy, short): %.2fx %.2fx %.2fx", p, slow[p][0], slow[p][1], slow[p][2])
	}
	return t, nil
}

// hostLatency is the mean in-vgpud latency of r's launches: queue wait
// plus device time.
func hostLatency(r result) time.Duration {
	return time.Duration((r.waitNS + r.devNS) / uint64(max(r.ops, 1)))
}

// rank orders the interference rows by neighbour.
func rank(name string) string {
	for i, n := range []string{"(alone)", "long", "memory", "short"} {
		if strings.HasPrefix(name, n) {
			return fmt.Sprint(i)
		}
	}
	return name
}

package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/stats"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
	"github.com/vgpud/vgpud/sched"
)

func main() {
	benchmain.Main("reuse", benchmain.Stdout(run))
}

type config struct {
	jobs    int
	device  string
	budget  int64
	only    string
	redunds []int
}

// bench is one kernel's job: inputs (whole uploads), launches, outputs.
type bench struct {
	name   string
	size   string
	inputs []int // bytes of each input buffer (handles 1..)
	output int   // bytes of the output buffer (handle 10)
	// launches returns the launch descriptors of one job.
	launches func() []abi.LaunchDesc
	// inPlace: the output is input 0 (lud).
	inPlace bool
}

func i32(v int) abi.KernelArg {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	return abi.KernelArg{Kind: abi.ArgScalar, Bytes: b}
}

func f32(v float32) abi.KernelArg {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	return abi.KernelArg{Kind: abi.ArgScalar, Bytes: b}
}

func buf(h uint32) abi.KernelArg { return abi.KernelArg{Kind: abi.ArgBuffer, Handle: h} }

func benches() []bench {
	const out = 10
	r1 := func(k string, g uint64, args ...abi.KernelArg) abi.LaunchDesc {
		return abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{g}, Kernel: k, Args: args}
	}
	r2 := func(k string, x, y uint64, args ...abi.KernelArg) abi.LaunchDesc {
		return abi.LaunchDesc{WorkDim: 2, GlobalSize: [3]uint64{x, y}, Kernel: k, Args: args}
	}
	const md, mm, sr, bpIn, bpHid, hs, lu = 2048, 512, 1024, 65536, 256, 1024, 256
	return []bench{
		{name: "madd", size: "2048x2048", inputs: []int{4 * md * md, 4 * md * md}, output: 4 * md * md,
			launches: func() []abi.LaunchDesc {
				return []abi.LaunchDesc{r1("madd", md*md, buf(1), buf(2), buf(out), i32(md*md))}
			}},
		{name: "mmul", size: "512x512", inputs: []int{4 * mm * mm, 4 * mm * mm}, output: 4 * mm * mm,
			launches: func() []abi.LaunchDesc {
				return []abi.LaunchDesc{r2("mmul", mm, mm, buf(1), buf(2), buf(out), i32(mm))}
			}},
		{name: "srad", size: "1024x1024", inputs: []int{4 * sr * sr}, output: 4 * sr * sr,
			launches: func() []abi.LaunchDesc {
				return []abi.LaunchDesc{r2("srad", sr, sr, buf(1), buf(out), i32(sr), i32(sr), f32(0.5), f32(0.1))}
			}},
		{name: "backprop", size: "65536x256", inputs: []int{4 * bpIn, 4 * bpIn * bpHid}, output: 4 * bpHid,
			launches: func() []abi.LaunchDesc {
				return []abi.LaunchDesc{r1("backprop", bpHid, buf(1), buf(2), buf(out), i32(bpIn), i32(bpHid))}
			}},
		{name: "hotspot", size: "1024x1024x8", inputs: []int{4 * hs * hs, 4 * hs * hs}, output: 4 * hs * hs,
			launches: func() []abi.LaunchDesc {
				return []abi.LaunchDesc{r2("hotspot", hs, hs, buf(1), buf(2), buf(out), i32(hs), i32(hs), i32(8))}
			}},
		{name: "lud", size: "256x256", inputs: []int{4 * lu * lu}, inPlace: true,
			launches: func() []abi.LaunchDesc {
				var l []abi.LaunchDesc
				for k := 0; k < lu-1; k++ {
					l = append(l, r1("lud_col", uint64(lu-k-1), buf(1), i32(lu), i32(k)))
					l = append(l, r2("lud", uint64(lu-k-1), uint64(lu-k-1), buf(1), i32(lu), i32(k)))
				}
				return l
			}},
	}
}

func run(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("reuse", flag.ContinueOnError)
	var cfg config
	fs.IntVar(&cfg.jobs, "jobs", 10, "jobs per kernel, redundancy and mode")
	fs.StringVar(&cfg.device, "device", os.Getenv("VGPUD_TEST_DEVICE"), "gpu.Open selector")
	fs.Int64Var(&cfg.budget, "budget", 1<<30, "reuse domain byte budget")
	fs.StringVar(&cfg.only, "only", "", "run only this kernel")
	redunds := fs.String("redund", "0,20,50,80,100", "redundancy levels (percent, comma-separated)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.jobs < 1 || cfg.budget < 1 {
		return fmt.Errorf("-jobs %d, -budget %d: want positive values", cfg.jobs, cfg.budget)
	}
	if cfg.only != "" {
		known := false
		for _, b := range benches() {
			known = known || b.name == cfg.only
		}
		if !known {
			return fmt.Errorf("-only %q: no such kernel", cfg.only)
		}
	}
	for _, f := range strings.Split(*redunds, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 || v > 100 {
			return fmt.Errorf("-redund: %q: want percentages", f)
		}
		cfg.redunds = append(cfg.redunds, v)
	}
	g, err := gpu.Open(cfg.device)
	if err != nil {
		return err
	}
	defer g.Close()
	// Off and on get a scheduler each over the one OpenCL device: they
	// never run at once, and one scheduler would slice each one's long
	// launches for the other, which just finished (docs/scheduler.md),
	// adding the scheduler's cost to whichever ran second.
	var devs [2]*aggregator.Device
	for mode := range devs {
		devs[mode] = aggregator.NewDevice(g, sched.New(sched.DefaultPolicy, nil), nil)
		defer devs[mode].Close()
	}
	info := g.Info()
	fmt.Fprintf(w, "device: %s (%s), %d compute units; path: aggregator directly (no QEMU, no transport); %d jobs per cell, off and on alternating; budget %d MiB\n",
		info.Name, info.Platform, info.ComputeUnits, cfg.jobs, cfg.budget>>20)
	fmt.Fprintf(w, "on/off = rate ratio of the median jobs; paired = geometric mean of the per-pair time ratios off/on with its 95%% confidence interval (t), wall and process CPU time\n\n")
	fmt.Fprintf(w, "%-9s %-12s %5s %11s %11s %8s %23s %23s %6s\n", "kernel", "size", "redund", "off jobs/s", "on jobs/s", "on/off", "paired wall [95% CI]", "paired cpu [95% CI]", "hits")
	eng := reuse.New(reuse.Config{Budget: cfg.budget})
	for bi, b := range benches() {
		if cfg.only != "" && b.name != cfg.only {
			continue
		}
		for _, red := range cfg.redunds {
			if err := runRow(ctx, w, cfg, devs, eng, bi, b, red); err != nil {
				return fmt.Errorf("%s %d%%: %w", b.name, red, err)
			}
		}
	}
	return nil
}

// runRow measures one kernel at one redundancy and prints its row. Its
// instances (and their guest RAM) are gone when it returns.
func runRow(ctx context.Context, w io.Writer, cfg config, devs [2]*aggregator.Device, eng *reuse.Engine, bi int, b bench, red int) error {
	// Off and on run as two instances, job by job interleaved, so that
	// drift in the shared machine's speed hits both alike.
	var jobsOf [2]func(int) (jobTime, error)
	var doms [2]*reuse.Domain
	for mode := 0; mode < 2; mode++ {
		id := fmt.Sprintf("%s-%d-%d", b.name, red, mode)
		if mode == 1 {
			doms[mode] = eng.Private(id)
		}
		j, closeFn, err := runCell(devs[mode], id, doms[mode], b, red, cfg.jobs, uint64(bi))
		if err != nil {
			return err
		}
		defer closeFn()
		jobsOf[mode] = j
	}
	h0 := doms[1].Stats.Hits.Load()
	var el [2][]time.Duration
	var wall, cpu [2][]float64
	for j := 0; j < cfg.jobs; j++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Alternate which mode goes first, so that neither always runs
		// right after the other's cache-cold frees.
		for k := 0; k < 2; k++ {
			mode := (j + k) % 2
			t, err := jobsOf[mode](j)
			if err != nil {
				return err
			}
			el[mode] = append(el[mode], t.wall)
			wall[mode] = append(wall[mode], t.wall.Seconds())
			cpu[mode] = append(cpu[mode], t.cpu.Seconds())
		}
	}
	hits := doms[1].Stats.Hits.Load() - h0
	eng.Drop(doms[1])
	rates := [2]float64{1 / stats.Median(el[0]).Seconds(), 1 / stats.Median(el[1]).Seconds()}
	fmt.Fprintf(w, "%-9s %-12s %5d%% %11.2f %11.2f %7.2fx %23s %23s %6d\n", b.name, b.size, red, rates[0], rates[1], rates[1]/rates[0],
		stats.PairedRatio(wall[0], wall[1]), stats.PairedRatio(cpu[0], cpu[1]), hits)
	return nil
}

// runCell runs jobs of b on a fresh instance and returns jobs per second.
// A redundant job repeats the inputs of an earlier job; which jobs are
// redundant is the same for reuse off and on.
func runCell(dev *aggregator.Device, id string, dom *reuse.Domain, b bench, red, jobs int, seed uint64) (func(int) (jobTime, error), func(), error) {
	total := b.output
	for _, n := range b.inputs {
		total += n
	}
	g, err := newGuest(dev, id, 2*total+(4<<20))
	if err != nil {
		return nil, nil, err
	}
	closeAll := func() { g.in.SetReuseDomain(nil); g.in.Close() }
	g.in.SetReuseDomain(dom)
	cmds := []abi.Command{g.build(1, kernelSource)}
	for i, n := range b.inputs {
		cmds = append(cmds, g.create(uint32(i+1), uint64(n)))
	}
	outH, outN := uint32(10), uint64(b.output)
	if b.inPlace {
		outH, outN = 1, uint64(b.inputs[0])
	}
	if err := g.run(cmds...); err != nil {
		return nil, nil, err
	}
	inputs := func(fresh uint64) [][]byte {
		r := rand.New(rand.NewPCG(seed, fresh))
		var in [][]byte
		for _, n := range b.inputs {
			d := make([]byte, n)
			for j := 0; j+4 <= n; j += 4 {
				binary.LittleEndian.PutUint32(d[j:], math.Float32bits(1+r.Float32()))
			}
			in = append(in, d)
		}
		return in
	}
	// Warm-up (untimed): two input sets, each run twice, so that PoCL has
	// compiled the kernels and the table holds their results (a launch is
	// recorded at its second occurrence: the first only notes its sample
	// key, docs/reuse.md). Then red% of the timed jobs repeat a warmed set,
	// spread evenly; the others have fresh inputs. Same plan off and on.
	warm := []uint64{1, 2}
	plan := make([]uint64, jobs)
	nred := (jobs*red + 50) / 100
	for j := range plan {
		if (j+1)*nred/jobs > j*nred/jobs {
			plan[j] = warm[j%len(warm)]
		} else {
			plan[j] = 100 + uint64(j)
		}
	}
	// The warmed input sets are kept; a fresh set is made before its job
	// (untimed) and dropped after it, so memory stays bounded by a few
	// sets whatever -jobs is.
	data := map[uint64][][]byte{}
	for _, p := range warm {
		data[p] = inputs(p)
	}
	setFor := func(p uint64) [][]byte {
		if d, ok := data[p]; ok {
			return d
		}
		return inputs(p)
	}
	doJob := func(in [][]byte) error {
		// Like Rodinia's host code, a job allocates its output buffer and
		// frees it at the end (a fresh buffer's content is defined as
		// zeros, so its launch key does not depend on earlier jobs).
		var job []abi.Command
		if !b.inPlace {
			job = append(job, g.create(outH, outN))
		}
		for i, d := range in {
			job = append(job, g.upload(uint32(i+1), d))
		}
		flush := func() error {
			err := g.run(job...)
			job = job[:0]
			return err
		}
		for _, l := range b.launches() {
			job = append(job, g.launch(1, l))
			if len(job) == slots-1 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		job = append(job, g.download(outH, outN))
		if !b.inPlace {
			job = append(job, abi.NewCommand(&abi.BufferFree{Handle: outH}, 0, 0))
		}
		return flush()
	}
	for _, w := range append(warm, warm...) {
		if err := doJob(data[w]); err != nil {
			return nil, nil, err
		}
	}
	job := func(j int) (jobTime, error) {
		in := setFor(plan[j])
		c0, err := processCPU()
		if err != nil {
			return jobTime{}, err
		}
		start := time.Now()
		err = doJob(in)
		wall := time.Since(start)
		c1, cerr := processCPU()
		return jobTime{wall: wall, cpu: c1 - c0}, errors.Join(err, cerr)
	}
	return job, closeAll, nil
}

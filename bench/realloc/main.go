// Command realloc reproduces the shape of Figure 2 of the heterogeneous
// GPU reallocation seed (docs/overcommit.md): a steady workload's
// throughput over time while an operator downgrades its VM's vGPU to a
// smaller device and profile, and later upgrades it back, without
// stopping the VM. The stoppage (the ring frozen while the device state
// moves between workers) is marked in the table.
//
// The workload is a frame loop, like a video encoder's: each frame is
// uploaded, a kernel transforms it against a reference held in a
// working-set buffer, and the result is read back and checked against
// the CPU. The guest is the driver library on the QEMU-less harness VM
// (mdev/mpqemu/mpqemutest) against a real vgpud manager whose instances
// run in worker processes on two PoCL device models: pthread (all cores)
// and basic (one core), the "large" and "small" devices. Two modes, one
// after the other in the same run:
//
//   - transparent: the program takes no part; vgpud moves its device
//     state whole (a fixed working set, which must fit the small profile);
//
//   - cooperative: the program uses the reconfiguration API through the
//     agent channel (a guestagent/agent client on the instance's agent
//     socket, as vgpu-agent's would be): it declares min/preferred memory,
//     checkpoints its position and frees its buffers (R.1, R.2), sizes
//     its working set to the new profile (R.3: 3/4 of the quota, at most
//     the preferred size) and makes it again on the device (R.4).
//
//     go run ./bench/realloc [-seconds 12] [-bin 500ms] [-frame 262144] [-work 64] [-modes transparent,cooperative]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/bench/benchmain"
	"github.com/vgpud/vgpud/bench/table"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/agent"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
)

func main() {
	benchmain.Main("realloc", benchmain.Stdout(run))
}

type config struct {
	seconds float64
	bin     time.Duration
	frame   int    // elements (uint32) per frame
	work    int    // hash rounds per element
	wset    uint64 // transparent mode's working set, bytes
	pref    uint64 // cooperative mode's preferred working set, bytes
	modes   []string
}

// The vGPU types: the VM starts on "large" (device 0) and is downgraded to
// "small" (device 1).
var (
	large = mdev.Profile{Name: "large", MemBytes: 1 << 30, Share: 1, MaxPerDevice: 2}
	small = mdev.Profile{Name: "small", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 2}
)

var allModes = []string{"transparent", "cooperative"}

func run(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("realloc", flag.ContinueOnError)
	var cfg config
	fs.Float64Var(&cfg.seconds, "seconds", 12, "length of each mode's run without its reallocations: before, after the downgrade and after the upgrade each run a third of it")
	fs.DurationVar(&cfg.bin, "bin", 500*time.Millisecond, "width of one row of the time series")
	fs.IntVar(&cfg.frame, "frame", 1<<18, "elements (uint32) per frame")
	fs.IntVar(&cfg.work, "work", 64, "hash rounds per element per frame")
	fs.Uint64Var(&cfg.wset, "working-set", 64<<20, "transparent mode: bytes of the working set the VM keeps on the device (moved with it)")
	fs.Uint64Var(&cfg.pref, "preferred", 384<<20, "cooperative mode: the preferred working set; it gets 3/4 of the quota at most")
	list := fs.String("modes", "transparent,cooperative", "modes to run, in order")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.modes, err = table.ParseSections(*list, allModes); err != nil {
		return err
	}
	if cfg.seconds <= 0 || cfg.bin <= 0 || cfg.frame < 1024 || cfg.work < 1 || cfg.wset < uint64(cfg.frame)*4 || cfg.wset > small.MemBytes/2 || cfg.pref < uint64(cfg.frame)*4 {
		return fmt.Errorf("-seconds %v, -bin %v, -frame %d, -work %d, -working-set %d, -preferred %d: want positive values, a frame of at least 1024 elements, working sets of at least one frame and a transparent one of at most half of %s",
			cfg.seconds, cfg.bin, cfg.frame, cfg.work, cfg.wset, cfg.pref, small.Name)
	}
	if os.Getenv("POCL_DEVICES") == "" {
		// Two device models of the one CPU: the large and the small GPU.
		os.Setenv("POCL_DEVICES", "pthread basic")
	}
	devs, err := gpu.Devices()
	if err != nil {
		return err
	}
	if len(devs) < 2 {
		return fmt.Errorf("%d OpenCL devices: the benchmark needs two (PoCL: POCL_DEVICES=\"pthread basic\")", len(devs))
	}
	// The large device is the one with more compute units.
	if devs[1].ComputeUnits > devs[0].ComputeUnits {
		devs[0], devs[1] = devs[1], devs[0]
	}
	var opened []gpu.Device
	for _, info := range devs[:2] {
		d, err := gpu.Open(fmt.Sprint(info.Index))
		if err != nil {
			return err
		}
		defer d.Close()
		opened = append(opened, d)
	}
	dir, err := os.MkdirTemp("", "vgpud-realloc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	m, err := mdev.NewManager(mdev.Config{Devices: opened, Profiles: []mdev.Profile{large, small}, SocketDir: dir,
		Transport: mpqemu.Transport{}, Logger: log, Reuse: mdev.ReuseConfig{Off: true},
		DeviceMemory: []uint64{large.MemBytes, small.MemBytes}})
	if err != nil {
		return err
	}
	defer m.Close()

	fmt.Fprintf(w, "vgpud reallocation benchmark (seed Figure 2), %s, %s, %d host CPUs\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU())
	for i, info := range devs[:2] {
		fmt.Fprintf(w, "  device %d: %s, %d compute units\n", i, info.Name, info.ComputeUnits)
	}
	fmt.Fprintf(w, "  profiles: %s %d MiB on device 0, %s %d MiB on device 1 (each device's ledger holds its profile's memory)\n",
		large.Name, large.MemBytes>>20, small.Name, small.MemBytes>>20)
	fmt.Fprintf(w, "  workload: frames of %d KiB, %d hash rounds per element against a working set on the device; each frame checked on the CPU\n",
		cfg.frame*4>>10, cfg.work)
	var sums []summaryRow
	for _, mode := range cfg.modes {
		r, err := runMode(ctx, m, cfg, mode)
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
		series(w, cfg, r)
		sums = append(sums, phases(r)...)
	}
	summary(w, sums)
	return nil
}

// move is one reallocation and when it started.
type move struct {
	at  time.Duration
	res mdev.ReallocResult
}

// result is one mode's run.
type result struct {
	mode   string
	start  time.Time
	total  time.Duration
	frames []time.Time
	wsets  []uint64 // the working set in each phase
	moves  []move
}

// runMode runs the timeline once: a new instance on device 0, the frame
// loop, a downgrade at 1/3 and an upgrade at 2/3.
func runMode(ctx context.Context, m *mdev.Manager, cfg config, mode string) (*result, error) {
	zero := 0
	inst, err := m.Create(mdev.CreateRequest{Profile: large.Name, Device: &zero})
	if err != nil {
		return nil, err
	}
	defer m.Destroy(inst.UUID())
	vm, err := mpqemutest.Dial(inst.Socket(), 64<<20)
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	d, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	wl := &workload{d: d, cfg: cfg, wsetBytes: cfg.wset}
	if mode == "cooperative" {
		wl.wsetBytes = cfg.sized(large.MemBytes)
	}
	if err := wl.setup(); err != nil {
		return nil, err
	}
	res := &result{mode: mode, total: time.Duration(cfg.seconds * float64(time.Second)), wsets: []uint64{wl.wsetBytes}}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if mode == "cooperative" {
		cl := agent.New(func() (io.ReadWriteCloser, error) {
			return net.DialUnix("unix", nil, &net.UnixAddr{Name: inst.AgentSocket(), Net: "unix"})
		}, agent.Options{Ident: "bench-realloc", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		cl.HandleReconfig(agent.Resources{MinMem: uint64(cfg.frame) * 4 * 4, PrefMem: cfg.pref, Name: "bench-realloc"}, wl)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl.Run(runCtx)
		}()
		if err := waitReconfigurable(ctx, inst); err != nil {
			return nil, err
		}
	}
	res.start = time.Now()
	// Each phase runs for a third of -seconds counted from the end of the
	// reallocation before it, so a slow move (a loaded host) shortens no
	// phase and skips no move; the run is then longer than -seconds.
	phase := res.total / 3
	loopCtx, stopLoop := context.WithCancel(runCtx)
	defer stopLoop()
	var loopErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		loopErr = wl.loop(loopCtx)
		stopLoop() // a failed frame ends the run at once
	}()
	next := res.start.Add(phase)
	for _, step := range []struct {
		dev     int
		profile mdev.Profile
	}{{1, small}, {0, large}} {
		select {
		case <-time.After(time.Until(next)):
		case <-loopCtx.Done():
		}
		if loopCtx.Err() != nil {
			break
		}
		dev := step.dev
		t0 := time.Now()
		r, err := m.Realloc(ctx, inst.UUID(), mdev.ReallocRequest{Device: &dev, Profile: step.profile.Name})
		if err != nil {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("reallocation to device %d: %w", dev, err)
		}
		if coop := mode == "cooperative"; coop == r.Transparent || coop && r.Programs != 1 {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("reallocation to device %d: %d programs took part (transparent %v)", dev, r.Programs, r.Transparent)
		}
		res.moves = append(res.moves, move{at: t0.Sub(res.start), res: r})
		res.wsets = append(res.wsets, wl.workingSet())
		next = time.Now().Add(phase)
	}
	select {
	case <-time.After(time.Until(next)):
	case <-loopCtx.Done():
	}
	stopLoop()
	res.total = time.Since(res.start)
	cancel()
	wg.Wait()
	if loopErr != nil && !errors.Is(loopErr, context.DeadlineExceeded) && !errors.Is(loopErr, context.Canceled) {
		return nil, loopErr
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.frames = wl.frames()
	return res, nil
}

// waitReconfigurable waits until the program's declaration reached vgpud.
func waitReconfigurable(ctx context.Context, inst *mdev.Instance) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if a := inst.Agent(); a != nil && a.Reconfigurable() && len(a.Declared()) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent client did not register: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sized is the cooperative working set under a quota: 3/4 of it, at most
// the preferred size.
func (cfg config) sized(quota uint64) uint64 {
	n := min(cfg.pref, quota/4*3)
	return n &^ 3
}

// workload is the frame loop and, in cooperative mode, the program's
// reconfiguration handler.
type workload struct {
	d         *driver.Device
	cfg       config
	wsetBytes uint64

	gate sync.Mutex // held around each frame, and from Checkpoint to Resume
	mu   sync.Mutex // guards below
	prog driver.Program
	in   driver.Buffer
	out  driver.Buffer
	wset driver.Buffer
	done []time.Time
	held bool // Checkpoint took the gate
}

const kernelSrc = `__kernel void frame(__global const uint* in, __global const uint* ref, __global uint* out, uint rounds, uint refn, uint seq) {
	size_t i = get_global_id(0);
	uint x = in[i] ^ ref[(i * 2654435761u + seq) % refn];
	for (uint r = 0; r < rounds; r++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		x += r;
	}
	out[i] = x;
}
__kernel void fill(__global uint* ref) {
	size_t i = get_global_id(0);
	ref[i] = (uint)i * 0x9e3779b9u ^ 0x5bd1e995u;
}`

// setup builds the program and makes the buffers, the working set filled
// on the device.
func (wl *workload) setup() error {
	d := wl.d
	var err error
	if wl.prog, _, err = d.Build(kernelSrc, ""); err != nil {
		return err
	}
	n := uint64(wl.cfg.frame) * 4
	if wl.in, err = d.CreateBuffer(n); err != nil {
		return err
	}
	if wl.out, err = d.CreateBuffer(n); err != nil {
		return err
	}
	if wl.wset, err = d.CreateBuffer(wl.wsetBytes); err != nil {
		return err
	}
	if err := d.Launch(wl.prog, "fill", driver.Range1(wl.wsetBytes/4, 0), driver.BufferArg(wl.wset)); err != nil {
		return err
	}
	return d.Finish()
}

func (wl *workload) workingSet() uint64 {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	return wl.wsetBytes
}

// refWord is the working set's content at element i.
func refWord(i uint64) uint32 { return uint32(i)*0x9e3779b9 ^ 0x5bd1e995 }

// cpuFrame is the kernel on the CPU, for element i.
func cpuFrame(in uint32, i uint64, rounds, refn, seq uint32) uint32 {
	x := in ^ refWord((i*2654435761+uint64(seq))%uint64(refn))
	for r := uint32(0); r < rounds; r++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		x += r
	}
	return x
}

// loop processes frames until ctx ends; a wrong frame is an error.
func (wl *workload) loop(ctx context.Context) error {
	frame := make([]byte, wl.cfg.frame*4)
	out := make([]byte, len(frame))
	for seq := uint32(0); ctx.Err() == nil; seq++ {
		for i := 0; i < wl.cfg.frame; i++ {
			le32(frame[i*4:], uint32(i)*seq+0x1234567)
		}
		if err := wl.frame(seq, frame, out); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// frame runs one frame under the gate and checks it.
func (wl *workload) frame(seq uint32, frame, out []byte) error {
	wl.gate.Lock()
	defer wl.gate.Unlock()
	wl.mu.Lock()
	prog, in, o, ws, refn := wl.prog, wl.in, wl.out, wl.wset, uint32(wl.wsetBytes/4)
	wl.mu.Unlock()
	d := wl.d
	if err := d.Write(in, 0, frame); err != nil {
		return err
	}
	args := []driver.Arg{driver.BufferArg(in), driver.BufferArg(ws), driver.BufferArg(o),
		driver.Uint32Arg(uint32(wl.cfg.work)), driver.Uint32Arg(refn), driver.Uint32Arg(seq)}
	if err := d.Launch(prog, "frame", driver.Range1(uint64(wl.cfg.frame), 0), args...); err != nil {
		return err
	}
	if err := d.Read(o, 0, out); err != nil {
		return err
	}
	// Check a spread of elements (all of them would make the CPU check
	// the bottleneck on two cores).
	for _, i := range []int{0, 1, wl.cfg.frame / 3, wl.cfg.frame / 2, wl.cfg.frame - 1} {
		want := cpuFrame(u32(frame[i*4:]), uint64(i), uint32(wl.cfg.work), refn, seq)
		if got := u32(out[i*4:]); got != want {
			return fmt.Errorf("frame %d element %d: %#x, want %#x", seq, i, got, want)
		}
	}
	wl.mu.Lock()
	wl.done = append(wl.done, time.Now())
	wl.mu.Unlock()
	return nil
}

func le32(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }
func u32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Checkpoint (R.1): the frame loop's position is all the program needs
// (the working set is made again from its definition), so it only stops
// the loop between two frames.
func (wl *workload) Checkpoint(ctx context.Context, to agentmsg.Limits) error {
	if wl.cfg.sized(to.MemBytes) < uint64(wl.cfg.frame)*4*4 {
		return fmt.Errorf("%d bytes: %w", to.MemBytes, agent.ErrRefused)
	}
	wl.gate.Lock()
	wl.mu.Lock()
	wl.held = true
	wl.mu.Unlock()
	return nil
}

// Cleanup (R.2) frees every device object of the program.
func (wl *workload) Cleanup(ctx context.Context) error {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	for _, b := range []driver.Buffer{wl.in, wl.out, wl.wset} {
		if err := wl.d.Free(b); err != nil {
			return err
		}
	}
	if err := wl.d.FreeProgram(wl.prog); err != nil {
		return err
	}
	return wl.d.Finish()
}

// Reconfigure (R.3) sizes the working set to the limits in force.
func (wl *workload) Reconfigure(ctx context.Context, now agentmsg.Limits) error {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	wl.wsetBytes = wl.cfg.sized(now.MemBytes)
	return nil
}

// Resume (R.4) makes the program and buffers again and lets the loop go.
func (wl *workload) Resume(ctx context.Context) error {
	wl.mu.Lock()
	held := wl.held
	wl.held = false
	wl.mu.Unlock()
	if !held {
		return nil
	}
	defer wl.gate.Unlock()
	return wl.setup()
}

func (wl *workload) frames() []time.Time {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	return append([]time.Time(nil), wl.done...)
}

// series prints one mode's throughput over time, one row per bin.
func series(w io.Writer, cfg config, r *result) {
	t := &table.Table{Title: fmt.Sprintf("%s: throughput over time (frames/s per %v bin)", r.mode, cfg.bin),
		Header: []string{"t (s)", "device", "frames/s", "", "event"}}
	nbins := int(r.total / cfg.bin)
	counts := make([]int, nbins+1)
	for _, f := range r.frames {
		if b := int(f.Sub(r.start) / cfg.bin); b >= 0 && b < len(counts) {
			counts[b]++
		}
	}
	peak := 1
	for _, c := range counts[:nbins] {
		peak = max(peak, c)
	}
	for b := range nbins {
		lo, hi := time.Duration(b)*cfg.bin, time.Duration(b+1)*cfg.bin
		dev := "0 " + large.Name
		var event string
		for _, mv := range r.moves {
			end := mv.at + mv.res.Total.D()
			if mv.at < hi && end > lo {
				event = fmt.Sprintf("STOP -> device %d %s (ring frozen %v, realloc %v)", mv.res.To, mv.res.ToProfile,
					mv.res.Stopped.D().Round(time.Millisecond), mv.res.Total.D().Round(time.Millisecond))
			}
			if end <= lo {
				dev = fmt.Sprintf("%d %s", mv.res.To, mv.res.ToProfile)
			}
		}
		bar := ""
		for range counts[b] * 30 / peak {
			bar += "#"
		}
		t.Add(fmt.Sprintf("%.1f", lo.Seconds()), dev, fmt.Sprintf("%.1f", float64(counts[b])/cfg.bin.Seconds()), bar, event)
	}
	t.Notes = []string{
		"STOP marks the bins in which a reallocation ran (realloc: from the request to the answer). The ring is frozen only for the figure given: transparent moves pre-copy the state and build the programs on the new device while the guest computes; a cooperative program stops itself from its checkpoint (R.1) to its resume (R.4).",
	}
	t.Print(w)
}

// summaryRow is one phase of one mode.
type summaryRow struct {
	mode, phase, device     string
	rate, first             float64
	wset                    uint64
	stopped, total, resumeT time.Duration
	state                   uint64
	moved                   bool
}

// phases returns the mode's phases: before, after the downgrade, after the
// upgrade, each without the reallocation itself.
func phases(r *result) []summaryRow {
	bounds := []time.Duration{0}
	for _, mv := range r.moves {
		bounds = append(bounds, mv.at, mv.at+mv.res.Total.D())
	}
	bounds = append(bounds, r.total)
	var out []summaryRow
	var first float64
	for p := 0; p+1 < len(bounds); p += 2 {
		lo, hi := bounds[p], bounds[p+1]
		n := 0
		for _, f := range r.frames {
			if d := f.Sub(r.start); d >= lo && d < hi {
				n++
			}
		}
		if hi <= lo {
			continue // the run ended during the reallocation
		}
		rate := float64(n) / (hi - lo).Seconds()
		if p == 0 {
			first = rate
		}
		row := summaryRow{mode: r.mode, phase: "before", device: "0 " + large.Name, rate: rate, first: first, wset: r.wsets[p/2]}
		if p > 0 {
			mv := r.moves[p/2-1]
			row.phase = fmt.Sprintf("after move %d", p/2)
			row.device = fmt.Sprintf("%d %s", mv.res.To, mv.res.ToProfile)
			row.stopped, row.total, row.resumeT, row.state, row.moved = mv.res.Stopped.D(), mv.res.Total.D(), mv.res.Resume.D(), mv.res.StateBytes, true
		}
		out = append(out, row)
	}
	return out
}

// summary prints every mode's phases against their first.
func summary(w io.Writer, rows []summaryRow) {
	t := &table.Table{Title: "Phases (rates without the reallocations; \"vs before\": ratio to the same mode's phase before the downgrade, same run)",
		Header: []string{"mode", "phase", "device", "working set (MiB)", "frames/s", "vs before", "state moved (MiB)", "ring frozen (ms)", "realloc (ms)"}}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d.Microseconds())/1000) }
	for _, r := range rows {
		ratio := "1.00x"
		if r.first > 0 {
			ratio = fmt.Sprintf("%.2fx", r.rate/r.first)
		}
		state, stopped, total := "", "", ""
		if r.moved {
			state, stopped, total = fmt.Sprintf("%.1f", float64(r.state)/(1<<20)), ms(r.stopped), ms(r.total)
		}
		t.Add(r.mode, r.phase, r.device, fmt.Sprint(r.wset>>20), fmt.Sprintf("%.1f", r.rate), ratio, state, stopped, total)
	}
	t.Notes = []string{
		"transparent: the state is read while the guest runs and what changed is copied again while the ring is frozen; cooperative: the program frees its buffers first (R.1, R.2), so almost nothing moves, and makes its working set again at the new size after (R.3, R.4): it does not run from its checkpoint to its resume, most of which is its program's compile for the other device.",
	}
	t.Print(w)
}

// Command vgpu-iterate runs inside a guest for the live-migration
// end-to-end test (docs/agent-channel.md "Migration"): a long iterative
// job whose state lives in device buffers. It builds one integer-only
// OpenCL kernel (so every device model computes bit-identical results),
// uploads a vector made from -seed, and launches the kernel -steps times,
// ping-ponging two buffers (each launch's output is the next one's input)
// and waiting for each step. Every -progress steps it prints
//
//	ITERATE step I/N device=<device name> cus=<compute units>
//
// (the host test waits for these lines on the serial console and migrates
// the VM mid-run), and at the end it reads the final buffer, repeats the
// computation on the CPU and prints
//
//	ITERATE OK steps=N sum=<FNV-1a 64 of the final buffer, hex>
//
// or "ITERATE FAIL <reason>", exiting 0 only on OK. It registers a
// migration handler with the agent channel (agent.DriverMigration, which
// reopens the device with driver.ReopenGuest), reached through vgpu-agent's
// relay socket or, when there is none, the virtio-serial port itself. It
// needs root (pagemap, sysfs, mlock).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/vgpud/vgpud/guestagent/agent"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// Prefix starts every line the host test reads.
const Prefix = "ITERATE "

// Kernel is the kernel's name in kernelSrc.
const Kernel = "iterate_step"

// kernelSrc mixes each element with its neighbour and the step key using
// 32-bit integer operations only; cpuStep is the same on the CPU.
// The ballast kernels fill device memory with a hash of each element's
// index and a seed (incompressible, never zero) and count the elements
// that differ from it.
const kernelSrc = `__kernel void iterate_step(__global const uint* in, __global uint* out, uint k) {
	size_t i = get_global_id(0);
	uint n = get_global_size(0);
	uint x = in[i] ^ (in[(i + 1) % n] >> 3) ^ k;
	x = x * 2654435761u + (k << 1);
	out[i] = x ^ (x >> 15);
}

uint ballast_hash(uint x) {
	x ^= x >> 16; x *= 0x7feb352du;
	x ^= x >> 15; x *= 0x846ca68bu;
	return (x ^ (x >> 16)) | 1u;
}

__kernel void ballast_fill(__global uint* b, uint seed) {
	size_t i = get_global_id(0);
	b[i] = ballast_hash((uint)i ^ seed);
}

__kernel void ballast_check(__global const uint* b, uint seed, __global uint* bad) {
	size_t i = get_global_id(0);
	if (b[i] != ballast_hash((uint)i ^ seed)) atomic_inc(bad);
}
`

// Ballast kernels' names in kernelSrc.
const (
	FillKernel  = "ballast_fill"
	CheckKernel = "ballast_check"
)

// ballastChunk is the most bytes in one ballast buffer.
const ballastChunk = 64 << 20

// ballastSeed is the fill seed of ballast buffer b in its generation g.
func ballastSeed(b int, g uint32) uint32 { return uint32(b+1)*0x9e3779b9 + g*0x85ebca6b }

// Config is one job.
type Config struct {
	Steps    int
	N        uint32 // elements
	Seed     uint64
	Pace     time.Duration // slept between steps
	Progress int           // steps between progress lines; 0: none
	// Ballast is device memory the job holds besides its two vectors, in
	// buffers of at most 64 MiB filled on the device; Rewrite is how many
	// of those buffers each step fills anew (the job's dirty rate).
	Ballast uint64
	Rewrite int
	// Duration, if set, ends the job after the step that finishes past it
	// (however many steps that is, at most Steps).
	Duration time.Duration
	// Migrations, if set, ends the job after the first step that
	// finishes once it has been migrated (resumed on a re-plugged device)
	// this many times; Migrated counts them.
	Migrations int
	Migrated   *atomic.Int32
}

// stepKey is launch s's k argument.
func stepKey(s int) uint32 { return uint32(s) + 1 }

// cpuStep is the kernel on the CPU.
func cpuStep(in, out []uint32, k uint32) {
	n := uint32(len(in))
	for i := range in {
		x := in[i] ^ (in[(uint32(i)+1)%n] >> 3) ^ k
		x = x*2654435761 + (k << 1)
		out[i] = x ^ (x >> 15)
	}
}

// initial is the job's input vector.
func initial(seed uint64, n uint32) []uint32 {
	r := rand.New(rand.NewPCG(seed, 0x6d696772617465)) // "migrate"
	v := make([]uint32, n)
	for i := range v {
		v[i] = r.Uint32()
	}
	return v
}

// reference runs the job on the CPU.
func reference(seed uint64, n uint32, steps int) []uint32 {
	a, b := initial(seed, n), make([]uint32, n)
	for s := range steps {
		cpuStep(a, b, stepKey(s))
		a, b = b, a
	}
	return a
}

func toBytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	return b
}

func fromBytes(b []byte) []uint32 {
	v := make([]uint32, len(b)/4)
	for i := range v {
		v[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return v
}

// checksum is FNV-1a 64 of the vector's little-endian bytes.
func checksum(v []uint32) uint64 {
	h := fnv.New64a()
	h.Write(toBytes(v))
	return h.Sum64()
}

// printable keeps a device name on one line.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}

// progressLine says how far the job is and the longest step (launch to
// finish, as the guest sees it) since the last line: a pause of the host
// (an upgrade of vgpud in place) shows there.
func progressLine(d *driver.Device, step, steps int, longest time.Duration) string {
	in := d.Info()
	return fmt.Sprintf("%sstep %d/%d device=%s cus=%d longest=%dus\n", Prefix, step, steps, printable(in.Name), in.ComputeUnits, longest.Microseconds())
}

// errMismatch: the device's result is not the CPU's.
var errMismatch = errors.New("result differs from the CPU reference")

// job runs cfg on d, printing progress to out, and returns the checksum
// of the final vector after checking it against the CPU, and how many
// steps it ran.
func job(ctx context.Context, d *driver.Device, cfg Config, out io.Writer) (uint64, int, error) {
	start := time.Now()
	steps := cfg.Steps
	p, log, err := d.Build(kernelSrc, "")
	if err != nil {
		return 0, steps, fmt.Errorf("build: %w (log: %q)", err, log)
	}
	size := uint64(cfg.N) * 4
	var bufs [2]driver.Buffer
	// Free what the job made and wait for it, so that the device is left
	// as the job found it (best effort after a failure).
	defer func() {
		for _, b := range bufs {
			if b.Handle != 0 {
				d.Free(b)
			}
		}
		d.FreeProgram(p)
		d.Finish()
	}()
	for i := range bufs {
		if bufs[i], err = d.CreateBuffer(size); err != nil {
			return 0, steps, fmt.Errorf("create buffer: %w", err)
		}
	}
	bl, err := newBallast(d, p, cfg.Ballast)
	if bl != nil {
		defer bl.free()
	}
	if err != nil {
		return 0, steps, err
	}
	if err := d.Write(bufs[0], 0, toBytes(initial(cfg.Seed, cfg.N))); err != nil {
		return 0, steps, fmt.Errorf("upload: %w", err)
	}
	if err := d.Finish(); err != nil {
		return 0, steps, fmt.Errorf("upload: %w", err)
	}
	var longest time.Duration
	for s := range cfg.Steps {
		if s > 0 && (cfg.Duration > 0 && time.Since(start) >= cfg.Duration ||
			cfg.Migrations > 0 && cfg.Migrated != nil && int(cfg.Migrated.Load()) >= cfg.Migrations) {
			steps = s
			break
		}
		in, res := bufs[s%2], bufs[(s+1)%2]
		t0 := time.Now()
		if err := d.Launch(p, Kernel, driver.Range1(uint64(cfg.N), 0), driver.BufferArg(in), driver.BufferArg(res), driver.Uint32Arg(stepKey(s))); err != nil {
			return 0, steps, fmt.Errorf("step %d: %w", s+1, err)
		}
		if err := bl.rewrite(cfg.Rewrite); err != nil {
			return 0, steps, fmt.Errorf("step %d: %w", s+1, err)
		}
		if err := d.Finish(); err != nil {
			return 0, steps, fmt.Errorf("step %d: %w", s+1, err)
		}
		longest = max(longest, time.Since(t0))
		if cfg.Progress > 0 && (s+1)%cfg.Progress == 0 {
			if _, err := io.WriteString(out, progressLine(d, s+1, cfg.Steps, longest)); err != nil {
				return 0, steps, err
			}
			longest = 0
		}
		if cfg.Pace > 0 && s+1 < cfg.Steps {
			t := time.NewTimer(cfg.Pace)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			return 0, steps, fmt.Errorf("step %d: %w", s+1, err)
		}
	}
	if err := bl.check(); err != nil {
		return 0, steps, err
	}
	got := make([]byte, size)
	if err := d.Read(bufs[steps%2], 0, got); err != nil {
		return 0, steps, fmt.Errorf("read result: %w", err)
	}
	v := fromBytes(got)
	want := reference(cfg.Seed, cfg.N, steps)
	for i := range want {
		if v[i] != want[i] {
			return 0, steps, fmt.Errorf("element %d is %#08x, want %#08x: %w", i, v[i], want[i], errMismatch)
		}
	}
	return checksum(v), steps, nil
}

// ballast is device memory the job holds and checks at the end.
type ballast struct {
	d    *driver.Device
	p    driver.Program
	bufs []driver.Buffer
	gen  []uint32 // each buffer's fill generation
	next int      // the buffer rewrite fills next
}

// newBallast creates and fills bytes of ballast (rounded up to 4 bytes);
// nil for 0.
func newBallast(d *driver.Device, p driver.Program, bytes uint64) (*ballast, error) {
	if bytes == 0 {
		return nil, nil
	}
	bl := &ballast{d: d, p: p}
	for left := (bytes + 3) &^ 3; left > 0; {
		n := min(left, ballastChunk)
		b, err := d.CreateBuffer(n)
		if err != nil {
			return bl, fmt.Errorf("create ballast: %w", err)
		}
		bl.bufs = append(bl.bufs, b)
		bl.gen = append(bl.gen, 0)
		if err := bl.fill(len(bl.bufs) - 1); err != nil {
			return bl, err
		}
		left -= n
	}
	if err := d.Finish(); err != nil {
		return bl, fmt.Errorf("fill ballast: %w", err)
	}
	return bl, nil
}

func (bl *ballast) fill(i int) error {
	b := bl.bufs[i]
	if err := bl.d.Launch(bl.p, FillKernel, driver.Range1(b.Size/4, 0), driver.BufferArg(b), driver.Uint32Arg(ballastSeed(i, bl.gen[i]))); err != nil {
		return fmt.Errorf("fill ballast: %w", err)
	}
	return nil
}

// rewrite fills the next n buffers anew (round robin).
func (bl *ballast) rewrite(n int) error {
	if bl == nil {
		return nil
	}
	for range min(n, len(bl.bufs)) {
		bl.gen[bl.next]++
		if err := bl.fill(bl.next); err != nil {
			return err
		}
		bl.next = (bl.next + 1) % len(bl.bufs)
	}
	return nil
}

// check counts, on the device, the ballast elements that are not what
// their buffer's last fill wrote.
func (bl *ballast) check() error {
	if bl == nil {
		return nil
	}
	bad, err := bl.d.CreateBuffer(4)
	if err != nil {
		return fmt.Errorf("check ballast: %w", err)
	}
	defer bl.d.Free(bad)
	if err := bl.d.Write(bad, 0, make([]byte, 4)); err != nil {
		return fmt.Errorf("check ballast: %w", err)
	}
	for i, b := range bl.bufs {
		if err := bl.d.Launch(bl.p, CheckKernel, driver.Range1(b.Size/4, 0), driver.BufferArg(b), driver.Uint32Arg(ballastSeed(i, bl.gen[i])), driver.BufferArg(bad)); err != nil {
			return fmt.Errorf("check ballast: %w", err)
		}
	}
	got := make([]byte, 4)
	if err := bl.d.Read(bad, 0, got); err != nil {
		return fmt.Errorf("check ballast: %w", err)
	}
	if n := fromBytes(got)[0]; n != 0 {
		return fmt.Errorf("%d ballast elements lost their value: %w", n, errMismatch)
	}
	return nil
}

func (bl *ballast) free() {
	for _, b := range bl.bufs {
		bl.d.Free(b)
	}
}

// lockedWriter serialises the job's lines and the migration handler's.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// reporting prints what the migration handler did (for the host test's
// log; the lines do not start with "ITERATE OK" or "ITERATE FAIL").
type reporting struct {
	h        agent.MigrationHandler
	d        *driver.Device
	out      io.Writer
	migrated *atomic.Int32 // resumes on a re-plugged device
}

func (r reporting) Quiesce(ctx context.Context) error {
	err := r.h.Quiesce(ctx)
	if err != nil {
		fmt.Fprintf(r.out, "%squiesce error: %v\n", Prefix, err)
	} else {
		fmt.Fprintf(r.out, "%squiesced\n", Prefix)
	}
	return err
}

func (r reporting) Resume(ctx context.Context, replugged bool) error {
	err := r.h.Resume(ctx, replugged)
	if err != nil {
		fmt.Fprintf(r.out, "%sresume error (replugged %v): %v\n", Prefix, replugged, err)
	} else {
		in := r.d.Info()
		if replugged {
			r.migrated.Add(1)
		}
		fmt.Fprintf(r.out, "%sresumed replugged=%v device=%s cus=%d\n", Prefix, replugged, printable(in.Name), in.ComputeUnits)
	}
	return err
}

// Lost passes a device that came back without its state on to the
// handler (agent.LostHandler).
func (r reporting) Lost(ctx context.Context) error {
	lh, ok := r.h.(agent.LostHandler)
	if !ok {
		return r.h.Resume(ctx, true)
	}
	err := lh.Lost(ctx)
	fmt.Fprintf(r.out, "%stold the device state is lost (err %v)\n", Prefix, err)
	return err
}

// Replaced by tests.
var (
	// openDevice finds (if path is empty) and maps the vGPU.
	openDevice = driver.OpenGuest
	// reopenDevice waits for the vGPU after a migration and maps it.
	reopenDevice = driver.ReopenGuest
	// portOpener opens the virtio-serial port of the agent channel.
	portOpener = func() func() (io.ReadWriteCloser, error) { return agent.OpenPort(agent.PortName) }
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-iterate:", err)
		os.Exit(1)
	}
}

// errFailed: the job ran and failed (an ITERATE FAIL line was printed).
var errFailed = errors.New("job failed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("vgpu-iterate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	fs.IntVar(&cfg.Steps, "steps", 200, "kernel launches")
	n := fs.Uint("n", 65536, "uint32 elements of the vector")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the initial vector")
	fs.DurationVar(&cfg.Pace, "pace", 0, "sleep this long between steps")
	fs.IntVar(&cfg.Progress, "progress", 10, "print a progress line every this many steps (0: none)")
	timeout := fs.Duration("timeout", driver.DefaultTimeout, "give up on the device after this long per wait, including a wait for the device to resume after a migration")
	device := fs.String("device", "", "sysfs directory of the vGPU (default: search /sys/bus/pci/devices, also after a migration)")
	staging := fs.Int("staging", driver.DefaultStagingBytes, "DMA staging pool bytes")
	via := fs.String("agent", "auto", "agent channel for migration: relay (vgpu-agent's socket), port (the virtio-serial port), auto (relay if its socket exists, else port) or none")
	sock := fs.String("agent-socket", "", "vgpu-agent's relay socket (default: $VGPU_AGENT_SOCKET, else "+agent.DefaultRelaySocket+")")
	agentWait := fs.Duration("agent-wait", 10*time.Second, "how long to wait for the agent channel before starting anyway")
	verbose := fs.Bool("v", false, "debug logs on stderr")
	recoverN := fs.Int("recover", 0, "when the device comes back without its state (vgpud restarted), report the loss and start the job again on the fresh device, up to this many times")
	fs.Uint64Var(&cfg.Ballast, "ballast", 0, "device memory in bytes to hold besides the vectors, filled on the device and checked at the end")
	fs.DurationVar(&cfg.Duration, "duration", 0, "end the job after this long (0: after -steps)")
	fs.IntVar(&cfg.Migrations, "migrations", 0, "end the job once it has been migrated this many times (0: after -steps)")
	fs.IntVar(&cfg.Rewrite, "rewrite", 0, "ballast buffers (64 MiB each) each step fills anew: the job's dirty rate")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case cfg.Steps < 1:
		return fmt.Errorf("-steps %d: want at least 1", cfg.Steps)
	case *n < 1 || *n > 1<<28:
		return fmt.Errorf("-n %d: want 1..%d", *n, 1<<28)
	case cfg.Progress < 0:
		return fmt.Errorf("-progress %d: want 0 or more", cfg.Progress)
	case cfg.Pace < 0:
		return fmt.Errorf("-pace %v: want 0 or more", cfg.Pace)
	case cfg.Ballast > 1<<40:
		return fmt.Errorf("-ballast %d: want at most 1 TiB", cfg.Ballast)
	case cfg.Migrations < 0:
		return fmt.Errorf("-migrations %d: want 0 or more", cfg.Migrations)
	case cfg.Rewrite < 0:
		return fmt.Errorf("-rewrite %d: want 0 or more", cfg.Rewrite)
	}
	cfg.N = uint32(*n)
	cfg.Migrated = new(atomic.Int32)
	if *sock == "" {
		*sock = os.Getenv("VGPU_AGENT_SOCKET")
	}
	if *sock == "" {
		*sock = agent.DefaultRelaySocket
	}
	var open func() (io.ReadWriteCloser, error)
	switch *via {
	case "auto":
		if _, err := os.Stat(*sock); err == nil {
			open = agent.DialRelay(*sock)
		} else {
			open = portOpener()
		}
	case "relay":
		open = agent.DialRelay(*sock)
	case "port":
		open = portOpener()
	case "none":
	default:
		return fmt.Errorf("-agent %q: want auto, relay, port or none", *via)
	}
	lvl := slog.LevelWarn
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("prog", "vgpu-iterate")
	out := &lockedWriter{w: stdout}
	fail := func(err error) error {
		fmt.Fprintf(out, "%sFAIL %s\n", Prefix, strings.ReplaceAll(err.Error(), "\n", " "))
		return fmt.Errorf("%w: %w", errFailed, err)
	}

	regs, mem, err := openDevice(*device)
	if err != nil {
		return fail(fmt.Errorf("open vgpu: %w", err))
	}
	dopts := driver.Options{StagingBytes: *staging, Timeout: *timeout, Logger: log}
	d, err := driver.Open(regs, mem, dopts)
	if err != nil {
		return fail(fmt.Errorf("open vgpu: %w", err))
	}
	defer func() { d.Close() }()

	reopen := func(ctx context.Context) (driver.Registers, error) { return reopenDevice(ctx, *device) }
	var c *agent.Client
	if open != nil {
		c = agent.New(open, agent.Options{Ident: "vgpu-iterate", Logger: log, OnStopping: func(drain time.Duration) {
			fmt.Fprintf(out, "%shost stopping: fetched commands get %v to finish\n", Prefix, drain)
		}})
		c.HandleMigration(reporting{h: agent.DriverMigration(d, reopen), d: d, out: out, migrated: cfg.Migrated})
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(actx) }()
		defer func() {
			cancel()
			<-done
		}()
		wctx, wcancel := context.WithTimeout(ctx, *agentWait)
		if err := c.WaitReady(wctx); err != nil {
			log.Warn("agent channel not up: the VM cannot be migrated until it is", "err", err)
		}
		wcancel()
	}

	for attempt := 0; ; attempt++ {
		in := d.Info()
		fmt.Fprintf(out, "%sstart steps=%d n=%d device=%s cus=%d\n", Prefix, cfg.Steps, cfg.N, printable(in.Name), in.ComputeUnits)
		sum, steps, err := job(ctx, d, cfg, out)
		if err == nil {
			fmt.Fprintf(out, "%sOK steps=%d sum=%016x\n", Prefix, steps, sum)
			return nil
		}
		if !errors.Is(err, driver.ErrDeviceLost) || attempt >= *recoverN {
			return fail(err)
		}
		// The device came back without its state (vgpud restarted): say
		// what was lost, open the new device and start the job again.
		fmt.Fprintf(out, "%sLOST %s\n", Prefix, strings.ReplaceAll(err.Error(), "\n", " "))
		d.Close()
		if d, err = reopenFresh(ctx, reopen, mem, dopts, *timeout); err != nil {
			return fail(fmt.Errorf("reopen vgpu after losing it: %w", err))
		}
		if c != nil {
			c.HandleMigration(reporting{h: agent.DriverMigration(d, reopen), d: d, out: out, migrated: cfg.Migrated})
		}
		fmt.Fprintf(out, "%sRECOVERED on a fresh device: starting the job again\n", Prefix)
	}
}

// reopenFresh waits (at most wait) for a vGPU that opens: after a vgpud
// restart the dead device may still be present until the host removes it,
// and a new one appears at its slot.
func reopenFresh(ctx context.Context, reopen func(context.Context) (driver.Registers, error), mem driver.Memory,
	opts driver.Options, wait time.Duration) (*driver.Device, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		regs, err := reopen(ctx)
		if err == nil {
			d, oerr := driver.Open(regs, mem, opts)
			if oerr == nil {
				return d, nil
			}
			if cl, ok := regs.(io.Closer); ok {
				cl.Close()
			}
			err = oerr
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

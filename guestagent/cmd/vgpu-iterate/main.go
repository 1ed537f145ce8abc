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
//
// With -min-mem it also holds a device "workspace" of min(-pref-mem, 3/4
// of the device memory quota) bytes, at least -min-mem, and registers for
// reconfiguration (docs/agent-channel.md "Reconfiguration") with those
// needs: on Checkpoint it refuses limits whose 3/4 is below -min-mem,
// else reads its vector back and frees every buffer and program it holds
// (the step loop waits); on Reconfigure it sizes the workspace to the new
// quota, then builds its program and buffers again, uploads the vector and
// lets the loop continue. It prints
//
//	ITERATE reconfig checkpoint to=<bytes> step=<steps done>
//	ITERATE reconfig limits mem=<bytes> device=<name> profile=<name> workspace=<bytes>
//
// and the result is the same however many times that happens.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/guestagent/agent"
	"github.com/vgpud/vgpud/guestagent/cmd/internal/cmdmain"
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
	// WorkMin and WorkPref size the workspace, device memory the job
	// holds (filled like ballast, never read) for the reconfiguration
	// API: see workspaceSize. WorkMin 0: none.
	WorkMin, WorkPref uint64
}

// fitsWorkspace says whether cfg's workspace minimum fits a device
// memory quota.
func fitsWorkspace(cfg Config, quota uint64) bool {
	_, fits := workspaceSize(cfg.WorkMin, cfg.WorkPref, quota)
	return fits
}

// workspaceSize is the workspace for a device memory quota: the
// preferred size (at least the minimum), at most 3/4 of the quota, and
// at least the minimum; fits says whether the minimum is within 3/4 of the
// quota.
func workspaceSize(minB, pref, quota uint64) (size uint64, fits bool) {
	limit := quota / 4 * 3
	return max(min(max(pref, minB), limit), minB), minB <= limit
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
	return newJob(d, cfg, out).run(ctx)
}

// iterJob is one run of the job. Its device state (program, vectors,
// ballast, workspace) can be taken down and built again around a
// reconfiguration: it is the program's agent.ReconfigHandler.
type iterJob struct {
	d   *driver.Device
	cfg Config
	out io.Writer
	// waiting, if set, is called when the step loop starts to wait for a
	// Resume (tests).
	waiting func()

	// lock is the job's mutex, a channel so that a handler's wait for it
	// ends with its context: the step loop holds it around each step and
	// the handler during each call.
	lock chan struct{}
	// Guarded by lock.
	p       driver.Program
	bufs    [2]driver.Buffer
	bl, ws  *ballast
	wsBytes uint64        // the workspace's size
	quota   uint64        // the device memory quota in effect
	live    bool          // the device state exists
	ended   bool          // the job is over: there is nothing to checkpoint
	step    int           // steps done
	saved   []uint32      // the vector at the checkpoint, while it is not on the device
	paused  chan struct{} // from Checkpoint to Resume, closed by Resume
	err     error         // Resume failed: the job fails with it
}

func newJob(d *driver.Device, cfg Config, out io.Writer) *iterJob {
	return &iterJob{d: d, cfg: cfg, out: out, lock: make(chan struct{}, 1)}
}

func (j *iterJob) lockCtx(ctx context.Context) error {
	select {
	case j.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *iterJob) unlock() { <-j.lock }

// acquire takes the lock for the step loop, waiting while the job is
// checkpointed; it fails with the error of a failed Resume.
func (j *iterJob) acquire(ctx context.Context) error {
	for {
		if err := j.lockCtx(ctx); err != nil {
			return err
		}
		if j.err != nil {
			j.unlock()
			return j.err
		}
		if j.paused == nil {
			return nil
		}
		ch := j.paused
		j.unlock()
		if j.waiting != nil {
			j.waiting()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (j *iterJob) run(ctx context.Context) (uint64, int, error) {
	start := time.Now()
	cfg := j.cfg
	steps := cfg.Steps
	if err := j.acquire(ctx); err != nil {
		return 0, steps, err
	}
	err := j.setupLocked()
	j.unlock()
	// Free what the job made and wait for it, so that the device is left
	// as the job found it (best effort after a failure).
	defer j.end()
	if err != nil {
		return 0, steps, err
	}
	var longest time.Duration
	for s := range cfg.Steps {
		if s > 0 && (cfg.Duration > 0 && time.Since(start) >= cfg.Duration ||
			cfg.Migrations > 0 && cfg.Migrated != nil && int(cfg.Migrated.Load()) >= cfg.Migrations) {
			steps = s
			break
		}
		if err := j.acquire(ctx); err != nil {
			return 0, steps, fmt.Errorf("step %d: %w", s+1, err)
		}
		t0 := time.Now()
		err := j.stepLocked(s)
		j.unlock()
		if err != nil {
			return 0, steps, fmt.Errorf("step %d: %w", s+1, err)
		}
		longest = max(longest, time.Since(t0))
		if cfg.Progress > 0 && (s+1)%cfg.Progress == 0 {
			if _, err := io.WriteString(j.out, progressLine(j.d, s+1, cfg.Steps, longest)); err != nil {
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
	if err := j.acquire(ctx); err != nil {
		return 0, steps, err
	}
	defer j.unlock()
	if err := j.bl.check(); err != nil {
		return 0, steps, err
	}
	got := make([]byte, uint64(cfg.N)*4)
	if err := j.d.Read(j.bufs[steps%2], 0, got); err != nil {
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

// setupLocked makes the job's device state and uploads its initial
// vector.
func (j *iterJob) setupLocked() error {
	if j.cfg.WorkMin > 0 && j.quota == 0 {
		j.quota = j.d.Info().MemSize
		size, fits := workspaceSize(j.cfg.WorkMin, j.cfg.WorkPref, j.quota)
		if !fits {
			return fmt.Errorf("workspace: a minimum of %d bytes does not fit 3/4 of the device's %d", j.cfg.WorkMin, j.quota)
		}
		j.wsBytes = size
	}
	return j.makeLocked(initial(j.cfg.Seed, j.cfg.N), 0)
}

// makeLocked builds the program, makes the vectors, the ballast (anew,
// or as it was) and the workspace, and uploads v as the vector after
// step steps. What it made is freed by dropLocked, also after a failure.
func (j *iterJob) makeLocked(v []uint32, step int) error {
	d := j.d
	j.live = true
	p, log, err := d.Build(kernelSrc, "")
	if err != nil {
		return fmt.Errorf("build: %w (log: %q)", err, log)
	}
	j.p = p
	for i := range j.bufs {
		if j.bufs[i], err = d.CreateBuffer(uint64(j.cfg.N) * 4); err != nil {
			return fmt.Errorf("create buffer: %w", err)
		}
	}
	if j.bl == nil {
		j.bl, err = newBallast(d, p, j.cfg.Ballast, ballastChunk)
	} else {
		err = j.bl.restore(p)
	}
	if err != nil {
		return err
	}
	// The workspace's buffers fit any device's largest allocation, which
	// OpenCL makes at least a quarter of its memory.
	chunk := uint64(ballastChunk)
	if m := d.Info().MaxAlloc; m > 0 {
		chunk = min(chunk, m)
	}
	if j.quota >= 16 {
		chunk = min(chunk, j.quota/4)
	}
	if j.ws, err = newBallast(d, p, j.wsBytes, chunk); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := d.Write(j.bufs[step%2], 0, toBytes(v)); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	return nil
}

// stepLocked runs step s.
func (j *iterJob) stepLocked(s int) error {
	in, res := j.bufs[s%2], j.bufs[(s+1)%2]
	if err := j.d.Launch(j.p, Kernel, driver.Range1(uint64(j.cfg.N), 0), driver.BufferArg(in), driver.BufferArg(res), driver.Uint32Arg(stepKey(s))); err != nil {
		return err
	}
	if err := j.bl.rewrite(j.cfg.Rewrite); err != nil {
		return err
	}
	if err := j.d.Finish(); err != nil {
		return err
	}
	j.step = s + 1
	return nil
}

// dropLocked frees every buffer and program the job holds and waits for
// the device to have done it. The ballast keeps its sizes and fill
// generations (restore makes it again).
func (j *iterJob) dropLocked() error {
	if !j.live {
		return nil
	}
	j.live = false
	var errs []error
	for i, b := range j.bufs {
		if b.Handle != 0 {
			errs = append(errs, j.d.Free(b))
		}
		j.bufs[i] = driver.Buffer{}
	}
	errs = append(errs, j.bl.drop())
	if j.ws != nil {
		errs = append(errs, j.ws.drop())
		j.ws = nil
	}
	if j.p.Handle != 0 {
		errs = append(errs, j.d.FreeProgram(j.p))
		j.p = driver.Program{}
	}
	errs = append(errs, j.d.Finish())
	return errors.Join(errs...)
}

// end frees the job's device state for good: later reconfiguration
// requests find nothing to do.
func (j *iterJob) end() {
	j.lock <- struct{}{}
	defer j.unlock()
	j.ended = true
	j.dropLocked()
}

// Checkpoint implements agent.ReconfigHandler (R.1): it refuses limits
// whose 3/4 is below the workspace's minimum; else it reads the vector
// back and holds the step loop until Resume.
func (j *iterJob) Checkpoint(ctx context.Context, to agentmsg.Limits) error {
	if !fitsWorkspace(j.cfg, to.MemBytes) {
		fmt.Fprintf(j.out, "%sreconfig refused to=%d min=%d\n", Prefix, to.MemBytes, j.cfg.WorkMin)
		return fmt.Errorf("3/4 of %d bytes is below the workspace's minimum of %d: %w", to.MemBytes, j.cfg.WorkMin, agent.ErrRefused)
	}
	if err := j.lockCtx(ctx); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer j.unlock()
	if j.ended || j.paused != nil {
		return nil
	}
	if j.live {
		got := make([]byte, uint64(j.cfg.N)*4)
		if err := j.d.Read(j.bufs[j.step%2], 0, got); err != nil {
			return fmt.Errorf("checkpoint: read the vector: %w", err)
		}
		j.saved = fromBytes(got)
	}
	j.paused = make(chan struct{})
	fmt.Fprintf(j.out, "%sreconfig checkpoint to=%d step=%d\n", Prefix, to.MemBytes, j.step)
	return nil
}

// Cleanup implements agent.ReconfigHandler (R.2): it frees every buffer
// and program the job holds.
func (j *iterJob) Cleanup(ctx context.Context) error {
	if err := j.lockCtx(ctx); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer j.unlock()
	if j.paused == nil || j.saved == nil {
		return nil // nothing checkpointed: keep it
	}
	if err := j.dropLocked(); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// Reconfigure implements agent.ReconfigHandler (R.3): it sizes the
// workspace to the memory quota in effect (a workspace that was not freed
// keeps its size).
func (j *iterJob) Reconfigure(ctx context.Context, now agentmsg.Limits) error {
	if err := j.lockCtx(ctx); err != nil {
		return fmt.Errorf("reconfigure: %w", err)
	}
	defer j.unlock()
	if !j.live {
		j.quota = now.MemBytes
		j.wsBytes, _ = workspaceSize(j.cfg.WorkMin, j.cfg.WorkPref, now.MemBytes)
	}
	fmt.Fprintf(j.out, "%sreconfig limits mem=%d device=%s profile=%s workspace=%d\n", Prefix, now.MemBytes,
		printable(now.Device), printable(now.Profile), j.wsBytes)
	return nil
}

// Resume implements agent.ReconfigHandler (R.4): it makes the device
// state again, uploads the checkpointed vector and lets the step loop go
// on. If that fails the job fails with the error.
func (j *iterJob) Resume(ctx context.Context) error {
	if err := j.lockCtx(ctx); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	defer j.unlock()
	if j.paused == nil {
		return nil
	}
	if !j.live && j.saved != nil {
		if err := j.makeLocked(j.saved, j.step); err != nil {
			j.err = fmt.Errorf("resume after a reconfiguration: %w", err)
		}
	}
	j.saved = nil
	close(j.paused)
	j.paused = nil
	return j.err
}

var _ agent.ReconfigHandler = (*iterJob)(nil)

// ballast is device memory the job holds and checks at the end.
type ballast struct {
	d    *driver.Device
	p    driver.Program
	bufs []driver.Buffer
	gen  []uint32 // each buffer's fill generation
	next int      // the buffer rewrite fills next
}

// newBallast creates and fills bytes of ballast (rounded up to 4 bytes)
// in buffers of at most chunk bytes; nil for 0.
func newBallast(d *driver.Device, p driver.Program, bytes, chunk uint64) (*ballast, error) {
	if bytes == 0 {
		return nil, nil
	}
	chunk = max(chunk&^3, 4)
	bl := &ballast{d: d, p: p}
	for left := (bytes + 3) &^ 3; left > 0; {
		n := min(left, chunk)
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

// drop frees the buffers, keeping their sizes and fill generations for
// restore.
func (bl *ballast) drop() error {
	if bl == nil {
		return nil
	}
	var errs []error
	for i, b := range bl.bufs {
		if b.Handle != 0 {
			errs = append(errs, bl.d.Free(b))
		}
		bl.bufs[i].Handle = 0
	}
	return errors.Join(errs...)
}

// restore makes the buffers drop freed again, filled as they were, for
// program p.
func (bl *ballast) restore(p driver.Program) error {
	if bl == nil {
		return nil
	}
	bl.p = p
	for i, b := range bl.bufs {
		if b.Handle != 0 {
			continue
		}
		nb, err := bl.d.CreateBuffer(b.Size)
		if err != nil {
			return fmt.Errorf("restore ballast: %w", err)
		}
		bl.bufs[i] = nb
		if err := bl.fill(i); err != nil {
			return err
		}
	}
	return nil
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

// settle waits for the lines printAfter is still writing.
func (l *lockedWriter) settle() {
	l.mu.Lock()
	l.mu.Unlock() //nolint:staticcheck // an empty critical section: waits for the writer
}

// printAfter prints a line of the migration handler so that it does not
// hold up the handler's answer: on a lockedWriter the lock is taken now,
// so no line of the job comes before it, and the line is written while
// the answer goes to the host. Under TCG a line on the serial console
// costs tens of milliseconds (a trap per byte), which the host measured
// as part of the GPU stun when the handler printed before it returned.
func printAfter(w io.Writer, format string, args ...any) {
	l, ok := w.(*lockedWriter)
	if !ok {
		fmt.Fprintf(w, format, args...)
		return
	}
	l.mu.Lock()
	go func() {
		defer l.mu.Unlock()
		fmt.Fprintf(l.w, format, args...)
	}()
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
		printAfter(r.out, "%squiesce error: %v\n", Prefix, err)
	} else {
		printAfter(r.out, "%squiesced\n", Prefix)
	}
	return err
}

func (r reporting) Resume(ctx context.Context, replugged bool) error {
	start := time.Now()
	before := r.d.Regs()
	err := r.h.Resume(ctx, replugged)
	took := time.Since(start)
	// kept: the registers mapped before the migration serve after it (an
	// in-place migration, no reopen).
	kept := r.d.Regs() == before
	if err != nil {
		printAfter(r.out, "%sresume error (replugged %v): %v\n", Prefix, replugged, err)
	} else {
		in := r.d.Info()
		if replugged {
			r.migrated.Add(1)
		}
		printAfter(r.out, "%sresumed replugged=%v kept-mapping=%v device=%s cus=%d took=%s\n", Prefix, replugged, kept, printable(in.Name), in.ComputeUnits, took.Round(time.Microsecond))
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

// main runs the command until it ends or SIGINT/SIGTERM cancels it,
// exiting 1 on error.
func main() {
	cmdmain.Main("vgpu-iterate", func(ctx context.Context, args []string) error { return run(ctx, args, os.Stdout, os.Stderr) }, os.Interrupt, syscall.SIGTERM)
}

// byteSize is a flag holding a number of bytes: plain, or with a binary
// suffix, KiB, MiB, GiB or TiB (64MiB).
type byteSize uint64

// String formats the size as plain bytes (flag.Value).
func (b *byteSize) String() string { return strconv.FormatUint(uint64(*b), 10) }

// Set parses a size, plain or with a binary suffix (flag.Value).
func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// parseBytes reads a byteSize.
func parseBytes(s string) (uint64, error) {
	num, mult := s, uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("%q: want a number of bytes, optionally followed by KiB, MiB, GiB or TiB", s)
	}
	return n * mult, nil
}

// errFailed: the job ran and failed (an ITERATE FAIL line was printed).
var errFailed = errors.New("job failed")

// run is the command: it parses args, opens the vGPU (and the device
// context of -context), connects the agent channel and runs the job,
// again on a fresh device after a loss (-recover).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	s := newSession(o, stdout, stderr)
	defer s.close()
	defer s.out.settle() // after the agent stopped: no line printed after run returns
	if err := s.open(); err != nil {
		return s.fail(err)
	}
	if o.open != nil {
		stop := s.startAgent(ctx)
		defer stop()
	}
	return s.runJob(ctx)
}

// options is the command line, parsed and checked.
type options struct {
	cfg       Config
	n         uint
	timeout   time.Duration
	device    string
	staging   int
	via       string
	sock      string
	agentWait time.Duration
	ctxID     uint
	verbose   bool
	recoverN  int
	minMem    byteSize
	prefMem   byteSize
	// open opens the agent channel (-agent); nil for none.
	open func() (io.ReadWriteCloser, error)
}

// parseFlags parses and checks the command line; usage goes to stderr.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("vgpu-iterate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	cfg := &o.cfg
	fs.IntVar(&cfg.Steps, "steps", 200, "kernel launches")
	fs.UintVar(&o.n, "n", 65536, "uint32 elements of the vector")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the initial vector")
	fs.DurationVar(&cfg.Pace, "pace", 0, "sleep this long between steps")
	fs.IntVar(&cfg.Progress, "progress", 10, "print a progress line every this many steps (0: none)")
	fs.DurationVar(&o.timeout, "timeout", driver.DefaultTimeout, "give up on the device after this long per wait, including a wait for the device to resume after a migration")
	fs.StringVar(&o.device, "device", "", "sysfs directory of the vGPU (default: search /sys/bus/pci/devices, also after a migration)")
	fs.IntVar(&o.staging, "staging", driver.DefaultStagingBytes, "DMA staging pool bytes")
	fs.StringVar(&o.via, "agent", "auto", "agent channel for migration: relay (vgpu-agent's socket), port (the virtio-serial port), auto (relay if its socket exists, else port) or none")
	fs.StringVar(&o.sock, "agent-socket", "", "vgpu-agent's relay socket (default: $VGPU_AGENT_SOCKET, else "+agent.DefaultRelaySocket+")")
	fs.DurationVar(&o.agentWait, "agent-wait", 10*time.Second, "how long to wait for the agent channel before starting anyway")
	fs.UintVar(&o.ctxID, "context", 0, "run the job on this device context (ABI 1.5: its own ring and handles) instead of the default ring (0)")
	fs.BoolVar(&o.verbose, "v", false, "debug logs on stderr")
	fs.IntVar(&o.recoverN, "recover", 0, "when the device comes back without its state (vgpud restarted), report the loss and start the job again on the fresh device, up to this many times")
	fs.Uint64Var(&cfg.Ballast, "ballast", 0, "device memory in bytes to hold besides the vectors, filled on the device and checked at the end")
	fs.DurationVar(&cfg.Duration, "duration", 0, "end the job after this long (0: after -steps)")
	fs.IntVar(&cfg.Migrations, "migrations", 0, "end the job once it has been migrated this many times (0: after -steps)")
	fs.IntVar(&cfg.Rewrite, "rewrite", 0, "ballast buffers (64 MiB each) each step fills anew: the job's dirty rate")
	fs.Var(&o.minMem, "min-mem", "hold a device workspace of at least this many bytes (64MiB, or plain bytes) and register for reconfiguration with it as the job's least device memory (0: neither)")
	fs.Var(&o.prefMem, "pref-mem", "with -min-mem, the workspace the job would hold and declares (0: -min-mem); it holds at most 3/4 of the device's memory quota")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	cfg.WorkMin, cfg.WorkPref = uint64(o.minMem), uint64(max(o.prefMem, o.minMem))
	cfg.N = uint32(o.n)
	cfg.Migrated = new(atomic.Int32)
	if err := o.agentChannel(); err != nil {
		return nil, err
	}
	return &o, nil
}

// check refuses flag values out of range.
func (o *options) check() error {
	cfg := &o.cfg
	switch {
	case cfg.Steps < 1:
		return fmt.Errorf("-steps %d: want at least 1", cfg.Steps)
	case o.n < 1 || o.n > 1<<28:
		return fmt.Errorf("-n %d: want 1..%d", o.n, 1<<28)
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
	case o.ctxID > abi.MaxContexts:
		return fmt.Errorf("-context %d: want 0..%d", o.ctxID, abi.MaxContexts)
	case o.minMem > 1<<40:
		return fmt.Errorf("-min-mem %d: want at most 1 TiB", o.minMem)
	case o.prefMem > 0 && o.minMem == 0:
		return errors.New("-pref-mem needs -min-mem")
	case o.prefMem > 0 && o.prefMem < o.minMem:
		return fmt.Errorf("-pref-mem %d is below -min-mem %d", o.prefMem, o.minMem)
	}
	return nil
}

// agentChannel sets o.open from -agent and -agent-socket.
func (o *options) agentChannel() error {
	if o.sock == "" {
		o.sock = os.Getenv("VGPU_AGENT_SOCKET")
	}
	if o.sock == "" {
		o.sock = agent.DefaultRelaySocket
	}
	switch o.via {
	case "auto":
		if _, err := os.Stat(o.sock); err == nil {
			o.open = agent.DialRelay(o.sock)
		} else {
			o.open = portOpener()
		}
	case "relay":
		o.open = agent.DialRelay(o.sock)
	case "port":
		o.open = portOpener()
	case "none":
	default:
		return fmt.Errorf("-agent %q: want auto, relay, port or none", o.via)
	}
	return nil
}

// session is one run of the command: the vGPU, the device the job runs
// on, the job and the agent channel's client.
type session struct {
	o     *options
	log   *slog.Logger
	out   *lockedWriter
	mem   driver.Memory
	dopts driver.Options
	d     *driver.Device // the vGPU
	// jobDev is where the job runs: d, or a device context of d's
	// (ownJobDev: close it too).
	jobDev    *driver.Device
	ownJobDev bool
	j         *iterJob
	needs     agent.Resources
	c         *agent.Client // nil without an agent channel
}

// newSession sets up the logger (on stderr) and the output (stdout) of a
// run with o.
func newSession(o *options, stdout, stderr io.Writer) *session {
	lvl := slog.LevelWarn
	if o.verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})).With("prog", "vgpu-iterate")
	return &session{
		o:     o,
		log:   log,
		out:   &lockedWriter{w: stdout},
		dopts: driver.Options{StagingBytes: o.staging, Timeout: o.timeout, Logger: log},
		needs: agent.Resources{MinMem: o.cfg.WorkMin, PrefMem: o.cfg.WorkPref, Name: "vgpu-iterate"},
	}
}

// fail prints the job's FAIL line for err and returns err as errFailed.
func (s *session) fail(err error) error {
	fmt.Fprintf(s.out, "%sFAIL %s\n", Prefix, strings.ReplaceAll(err.Error(), "\n", " "))
	return fmt.Errorf("%w: %w", errFailed, err)
}

// open opens the vGPU, the job's device context (-context) and the job.
func (s *session) open() error {
	regs, mem, err := openDevice(s.o.device)
	if err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	s.mem = mem
	if s.d, err = driver.Open(regs, mem, s.dopts); err != nil {
		return fmt.Errorf("open vgpu: %w", err)
	}
	if s.jobDev, err = s.openJobDev(s.d); err != nil {
		return fmt.Errorf("open device context %d: %w", s.o.ctxID, err)
	}
	s.ownJobDev = s.jobDev != s.d
	cfg := s.o.cfg
	if cfg.WorkMin > 0 {
		if quota := s.d.Info().MemSize; !fitsWorkspace(cfg, quota) {
			return fmt.Errorf("-min-mem %d does not fit 3/4 of the device's %d bytes of memory", cfg.WorkMin, quota)
		}
	}
	s.j = newJob(s.jobDev, cfg, s.out)
	return nil
}

// openJobDev returns the device the job runs on: d itself, or with
// -context that device context of d's.
func (s *session) openJobDev(d *driver.Device) (*driver.Device, error) {
	if s.o.ctxID == 0 {
		return d, nil
	}
	return d.OpenContext(driver.ContextOptions{ID: uint32(s.o.ctxID), StagingBytes: s.o.staging, Logger: s.log})
}

// close closes the job's device context, if its own, and the vGPU.
func (s *session) close() {
	if s.ownJobDev && s.jobDev != nil {
		s.jobDev.Close()
	}
	if s.d != nil {
		s.d.Close()
	}
}

// reopen waits for the vGPU after a migration or a loss and maps it.
func (s *session) reopen(ctx context.Context) (driver.Registers, error) {
	return reopenDevice(ctx, s.o.device)
}

// startAgent connects the agent channel, registers the handlers and waits
// (at most -agent-wait) for the channel to be up. stop ends the client.
func (s *session) startAgent(ctx context.Context) (stop func()) {
	out := s.out
	c := agent.New(s.o.open, agent.Options{Ident: "vgpu-iterate", Logger: s.log, OnStopping: func(drain time.Duration) {
		fmt.Fprintf(out, "%shost stopping: fetched commands get %v to finish\n", Prefix, drain)
	}})
	s.c = c
	s.handle()
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(actx) }()
	stop = func() {
		cancel()
		<-done
	}
	wctx, wcancel := context.WithTimeout(ctx, s.o.agentWait)
	if err := c.WaitReady(wctx); err != nil {
		s.log.Warn("agent channel not up: the VM cannot be migrated until it is", "err", err)
	}
	wcancel()
	return stop
}

// handle registers the current device's migration handler, and the job
// for reconfiguration with -min-mem, with the agent client.
func (s *session) handle() {
	s.c.HandleMigration(reporting{h: agent.DriverMigration(s.d, s.reopen), d: s.d, out: s.out, migrated: s.o.cfg.Migrated})
	if s.o.cfg.WorkMin > 0 {
		s.c.HandleReconfig(s.needs, s.j)
	}
}

// runJob runs the job and prints its outcome; when the device is lost
// (vgpud restarted) it starts again on a fresh one, up to -recover times.
func (s *session) runJob(ctx context.Context) error {
	cfg := s.o.cfg
	for attempt := 0; ; attempt++ {
		in := s.d.Info()
		where := ""
		if c := s.jobDev.Context(); c != 0 {
			where = fmt.Sprintf(" context=%d", c)
		}
		fmt.Fprintf(s.out, "%sstart steps=%d n=%d device=%s cus=%d%s\n", Prefix, cfg.Steps, cfg.N, printable(in.Name), in.ComputeUnits, where)
		sum, steps, err := s.j.run(ctx)
		if err == nil {
			fmt.Fprintf(s.out, "%sOK steps=%d sum=%016x\n", Prefix, steps, sum)
			return nil
		}
		if !errors.Is(err, driver.ErrDeviceLost) || attempt >= s.o.recoverN {
			return s.fail(err)
		}
		if err := s.reopenAfterLoss(ctx, err); err != nil {
			return s.fail(err)
		}
	}
}

// reopenAfterLoss handles the loss of the device (lost): it came back
// without its state (vgpud restarted), so it says what was lost, opens the
// new device and a new job on it, ready to start again.
func (s *session) reopenAfterLoss(ctx context.Context, lost error) error {
	fmt.Fprintf(s.out, "%sLOST %s\n", Prefix, strings.ReplaceAll(lost.Error(), "\n", " "))
	if s.jobDev != s.d {
		s.jobDev.Close()
	}
	s.d.Close()
	var err error
	if s.d, err = reopenFresh(ctx, s.reopen, s.mem, s.dopts, s.o.timeout); err != nil {
		return fmt.Errorf("reopen vgpu after losing it: %w", err)
	}
	if s.jobDev, err = s.openJobDev(s.d); err != nil {
		return fmt.Errorf("open device context %d after losing the vgpu: %w", s.o.ctxID, err)
	}
	s.j = newJob(s.jobDev, s.o.cfg, s.out)
	if s.c != nil {
		s.handle()
	}
	fmt.Fprintf(s.out, "%sRECOVERED on a fresh device: starting the job again\n", Prefix)
	return nil
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

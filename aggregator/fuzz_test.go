package aggregator

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
	"github.com/vgpud/vgpud/reuse"
	"github.com/vgpud/vgpud/sched"
)

// The fuzzed guest: small, so that one execution costs little more than
// its commands. Page 0 holds the ring and its completions, where stray
// guest writes (fences, downloads) can reach them; the fuzzed RAM bytes
// fill the data pages, repeated, so that addresses in commands land on
// fuzzer-chosen bytes; the last pages hold the fixed sources.
const (
	fzRAM       = 64 << 10
	fzSlots     = 16
	fzMaxCmds   = 2 * fzSlots // the ring wraps once
	fzRing      = 0x0
	fzCompl     = 0x400
	fzData      = 0x1000
	fzDataEnd   = 0xC000
	fzSrcTable  = 0xC000 // one sg entry per fixed source
	fzSrcData   = 0xD000 // fixed source i at fzSrcData + i*fzSrcStride
	fzSrcStride = 0x400
	fzQuota     = 64 << 10 // the instance's device memory
	fzDevMem    = 48 << 10 // the fake device's: less, so it can run out first
)

// fzSources are the programs a fuzzed guest builds by pointing at their
// sg entries (fzSrcTable + 16*i). Every kernel touches only byte 0 of its
// buffers (or only pixels inside its images), so that any launch geometry
// and any buffer are safe on the real device too (TestCommandsOnDevice).
var fzSources = []string{
	// 0: one kernel per argument kind.
	`typedef struct { int a, b; } pair;
__kernel void set(__global uchar *out, uchar v) { if (get_global_id(0) == 0) out[0] = v; }
__kernel void copy1(__global uchar *dst, __global const uchar *src) { if (get_global_id(0) == 0) dst[0] = src[0]; }
__kernel void scratch(__global uchar *out, __local uchar *tmp, uint n) {
	if (get_local_id(0) == 0) tmp[0] = (uchar)n;
	barrier(CLK_LOCAL_MEM_FENCE);
	if (get_global_id(0) == 0) out[0] = tmp[0];
}
__kernel void blend(__constant uchar *c, float4 f, long l, __global uchar *o) { if (get_global_id(0) == 0) o[0] = c[0] + (uchar)f.x + (uchar)l; }
__kernel void pairk(__global uchar *o, pair p) { if (get_global_id(0) == 0) o[0] = (uchar)(p.a + p.b); }
`,
	// 1: reads its geometry: never sliced.
	`__kernel void sized(__global uchar *o) { if (get_global_id(0) == 0) o[0] = (uchar)get_global_size(0); }
`,
	// 2: does not compile.
	`__kernel void broken(__global uchar *o) { o[0] = 1;
`,
	// 3: refused before the compiler sees it.
	`#include "/etc/passwd"
`,
	// 4: builds, without kernels.
	`int helper(int x) { return x + 1; }
`,
	// 5: images and a sampler (ABI 1.8); writes only inside its image,
	// whatever the geometry.
	`__kernel void brighten(__read_only image2d_t in, __write_only image2d_t out, sampler_t s, float k) {
	int2 p = (int2)(get_global_id(0), get_global_id(1));
	if (p.x < get_image_width(out) && p.y < get_image_height(out))
		write_imagef(out, p, read_imagef(in, s, p) * k);
}
`,
}

// Mode bits of a fuzz input.
const (
	fzReuse = 1 << 0 // attach a private reuse domain
	fzSlow  = 1 << 1 // the fake reports 1 ms per launch (reuse then captures results)
	// The bits above fail the fake's n-th device operation (n = mode>>2;
	// 0: none) with gpu.ErrDevice.
	fzFaultShift = 2
)

// fuzzInput is one FuzzCommands input: the mode, the command slots and
// the bytes of the data pages, the last two encoded with zeroRuns.
type fuzzInput struct {
	mode      byte
	ring, ram []byte
}

// fake is the device a fuzz input runs on: a gputest fake with the
// input's launch time and fault.
func (fi fuzzInput) fake() *gputest.Device {
	cfg := gputest.Config{MemLimit: fzDevMem}
	if fi.mode&fzSlow != 0 {
		cfg.LaunchTime = time.Millisecond
	}
	if n := int64(fi.mode >> fzFaultShift); n > 0 {
		var ops atomic.Int64
		cfg.Fault = func(op string) error {
			if ops.Add(1) == n {
				return fmt.Errorf("fault at %s, operation %d: %w", op, n, gpu.ErrDevice)
			}
			return nil
		}
	}
	return gputest.New(cfg)
}

// fzScratch is the memory of one execution that outlives it: guest RAM,
// the decoded arguments, and a staging buffer for the instance's copies,
// which it would otherwise allocate (1 MiB, stagingChunk) at its first
// copy, most of the cost of an execution. Nothing carries over from one
// execution to the next: the RAM is cleared, the arguments are decoded
// anew, and a copy fills staging before it reads it.
type fzScratch struct{ ram, ring, data, staging []byte }

var fzScratches = sync.Pool{New: func() any {
	return &fzScratch{ram: make([]byte, fzRAM), staging: make([]byte, stagingChunk)}
}}

// unzero decodes a fuzz argument into at most limit bytes: a 0 byte
// followed by n stands for n+1 zero bytes (a 0 at the end for one); any
// other byte stands for itself. Guest structures are mostly zeros, and Go's
// minimizer is quadratic in the length of an argument: with raw 64-byte
// slots, every input that finds new coverage would cost a minute of
// minimization. Every raw content still has an encoding (zeroRuns).
func unzero(dst, enc []byte, limit int) []byte {
	dst = dst[:0]
	for i := 0; i < len(enc) && len(dst) < limit; i++ {
		if enc[i] != 0 {
			dst = append(dst, enc[i])
			continue
		}
		n := 1
		if i+1 < len(enc) {
			i++
			n += int(enc[i])
		}
		dst = append(dst, fzZeros[:min(n, limit-len(dst))]...)
	}
	return dst
}

var fzZeros [256]byte

// zeroRuns encodes raw for unzero.
func zeroRuns(raw []byte) []byte {
	var enc []byte
	for i := 0; i < len(raw); {
		n := 0
		for i+n < len(raw) && raw[i+n] == 0 && n < 256 {
			n++
		}
		if n == 0 {
			enc = append(enc, raw[i])
			i++
			continue
		}
		enc = append(enc, 0, byte(n-1))
		i += n
	}
	return enc
}

// TestZeroRuns: every raw content round-trips through the fuzz
// arguments' encoding, and decoding stops at its limit.
func TestZeroRuns(t *testing.T) {
	long := make([]byte, 600)
	long[599] = 9
	tests := []struct {
		raw []byte
		enc []byte
	}{
		{nil, nil},
		{[]byte{1, 2}, []byte{1, 2}},
		{[]byte{0}, []byte{0, 0}},
		{[]byte{7, 0, 0, 0, 8}, []byte{7, 0, 2, 8}},
		{long, []byte{0, 255, 0, 255, 0, 86, 9}},
	}
	for _, tt := range tests {
		enc := zeroRuns(tt.raw)
		if !slices.Equal(enc, tt.enc) {
			t.Errorf("zeroRuns(%v) = %v, want %v", tt.raw, enc, tt.enc)
		}
		if dec := unzero(nil, enc, len(tt.raw)); !slices.Equal(dec, tt.raw) && len(tt.raw) > 0 {
			t.Errorf("unzero(%v) = %v, want %v", enc, dec, tt.raw)
		}
	}
	if dec := unzero(nil, []byte{0}, 10); !slices.Equal(dec, []byte{0}) {
		t.Errorf("unzero(0) = %v, want one zero", dec)
	}
	if dec := unzero(nil, []byte{0, 255, 5}, 10); len(dec) != 10 {
		t.Errorf("unzero past its limit = %d bytes, want 10", len(dec))
	}
}

// discard is the fuzzed instances' logger: a hostile guest's failures
// are expected, and logging them would cost more than running them.
var discard = slog.New(slog.DiscardHandler)

// runFuzzInput runs fi on a new instance on g and checks the property:
// the guest's commands complete in ring order, each with a defined
// status, unless the ring stops with an error latched; then the instance
// resets, runs a nop, holds nothing, and closes. It returns the statuses.
func runFuzzInput(t testing.TB, g gpu.Device, fi fuzzInput, hang time.Duration) []abi.Status {
	t.Helper()
	sc := fzScratches.Get().(*fzScratch)
	defer fzScratches.Put(sc)
	sc.ring = unzero(sc.ring, fi.ring, fzMaxCmds*abi.CommandSize)
	sc.data = unzero(sc.data, fi.ram, fzDataEnd-fzData)
	clear(sc.ram)
	mem := &sliceMemory{ram: sc.ram}
	if len(sc.data) > 0 {
		for off := fzData; off < fzDataEnd; off += len(sc.data) {
			copy(mem.ram[off:fzDataEnd], sc.data)
		}
	}
	for i, src := range fzSources {
		at := fzSrcData + i*fzSrcStride
		copy(mem.ram[at:at+fzSrcStride], src)
		e := abi.SGEntry{Addr: uint64(at), Len: uint32(len(src))}
		e.Marshal(mem.ram[fzSrcTable+i*abi.SGEntrySize:])
	}

	s := sched.New(sched.DefaultPolicy, nil)
	defer s.Close()
	d := NewDevice(g, s, discard)
	defer d.Close()
	// The worker reports each completion; its record is read at once,
	// before a later command of the guest's can overwrite it, and the
	// waiter is woken only once the records it waits for are in.
	var (
		mu   sync.Mutex
		recs []abi.Completion // since the last reset
		want int              // wake the waiter when recs has this many
		wake = make(chan struct{}, 1)
	)
	in, err := d.NewInstance(InstanceConfig{ID: "fuzz", MemBytes: fzQuota, Memory: mem, Logger: discard,
		Notify: func(idx uint32) {
			var b [abi.ComplSize]byte
			err := mem.ReadAt(b[:], fzCompl+uint64(idx%fzSlots)*abi.ComplSize)
			rec, _ := abi.UnmarshalCompletion(b[:])
			if err != nil || rec.Seq != abi.SeqOf(uint64(idx)) {
				rec.Status = abi.Status(abi.NumStatus) // not the record of idx: the waiter reports it
			}
			mu.Lock()
			recs = append(recs, rec)
			done := len(recs) >= want
			mu.Unlock()
			if done {
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}})
	if err != nil {
		t.Fatalf("NewInstance = %v", err)
	}
	defer in.Close()
	// The worker owns staging once the doorbell rings (a channel send
	// after this write).
	in.staging = sc.staging
	if fi.mode&fzReuse != 0 {
		in.SetReuseDomain(reuse.New(reuse.Config{Budget: 1 << 20}).Private(in.ID()))
	}
	ring := RingConfig{Base: fzRing, ComplBase: fzCompl, Slots: fzSlots}
	if err := in.EnableRing(ring); err != nil {
		t.Fatalf("EnableRing = %v", err)
	}

	deadline := time.Now().Add(hang)
	poll := time.NewTimer(time.Hour)
	defer poll.Stop()
	// await waits until commands [0, n) have completed, checks their
	// records, and reports false if the ring stopped first.
	await := func(n int) bool {
		mu.Lock()
		want = n
		mu.Unlock()
		for {
			mu.Lock()
			got := len(recs)
			mu.Unlock()
			if got >= n {
				break
			}
			// Only a fault of the ring or completion area stops the ring,
			// and every record before it is in by then.
			if !in.RingEnabled() {
				mu.Lock()
				got = len(recs)
				mu.Unlock()
				if got < n {
					return false
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("command %d did not complete in %v", got, hang)
			}
			poll.Reset(time.Millisecond)
			select {
			case <-wake:
			case <-poll.C:
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i, rec := range recs {
			if rec.Seq != abi.SeqOf(uint64(i)) || int(rec.Status) >= abi.NumStatus {
				t.Fatalf("command %d completed as %+v: want seq %d and a defined status", i, rec, abi.SeqOf(uint64(i)))
			}
		}
		return true
	}

	n := min(len(sc.ring)/abi.CommandSize, fzMaxCmds)
	stopped := false
	for first := 0; first < n && !stopped; first += fzSlots {
		last := min(first+fzSlots, n)
		for i := first; i < last; i++ {
			copy(mem.ram[fzRing+(i%fzSlots)*abi.CommandSize:], sc.ring[i*abi.CommandSize:(i+1)*abi.CommandSize])
		}
		if err := in.Doorbell(uint32(last)); err != nil {
			t.Fatalf("Doorbell(%d) = %v", last, err)
		}
		stopped = !await(last)
	}
	mu.Lock()
	statuses := make([]abi.Status, len(recs))
	for i, rec := range recs {
		statuses[i] = rec.Status
	}
	recs = recs[:0]
	mu.Unlock()
	if stopped {
		if st, _ := in.Error(); st == abi.StatusOK {
			t.Fatalf("the ring stopped after %d commands with no error latched", len(statuses))
		}
	}
	// What the instance counts is what it holds on the device (the worker
	// is idle).
	if f, ok := g.(*gputest.Device); ok {
		st := f.Stats()
		if st.Bytes != in.MemUsed() || int64(st.Buffers+st.Programs) != in.state.objects.Load() {
			t.Fatalf("the instance counts %d bytes and %d objects, the device holds %+v", in.MemUsed(), in.state.objects.Load(), st)
		}
	}

	// Reset frees everything; the instance then runs a nop as new.
	in.Reset()
	if err := in.EnableRing(ring); err != nil {
		t.Fatalf("EnableRing after Reset = %v", err)
	}
	nop := abi.NewCommand(&abi.Nop{}, 0, 1)
	nop.Marshal(mem.ram[fzRing:])
	if err := in.Doorbell(1); err != nil {
		t.Fatalf("Doorbell after Reset = %v", err)
	}
	if !await(1) || recs[0].Status != abi.StatusOK {
		t.Fatalf("nop after Reset = %v, ring enabled %v", recs, in.RingEnabled())
	}
	if in.Holds() || in.MemUsed() != 0 {
		t.Fatalf("after Reset the instance holds objects (%v) or %d bytes", in.Holds(), in.MemUsed())
	}
	if f, ok := g.(*gputest.Device); ok {
		if st := f.Stats(); st.Bytes != 0 || st.Buffers != 0 || st.Programs != 0 {
			t.Fatalf("after Reset the device holds %+v", st)
		}
	}
	if err := in.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	return statuses
}

// FuzzCommands feeds a hostile guest's ring to an instance on the fake
// device (package gputest): the fuzz input is the command slots, the
// guest RAM they point into (so scatter-gather tables, launch descriptors
// and options are arbitrary too) and a mode (reuse, launch time, an
// injected device fault). Programs are built from fixed sources or from
// fuzzed bytes, and launches run whatever their descriptors say: the fake
// runs nothing, so no ND-range is too long. runFuzzInput states the
// property. TestCommandsOnDevice replays the seeds and the committed
// corpus on the real device.
func FuzzCommands(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.mode, s.ring, s.ram)
	}
	// An execution is a chain of handoffs between this goroutine and the
	// instance's worker; on one P each costs a goroutine switch, not a
	// wake-up of another thread, which halves the time of an execution.
	// go test -fuzz runs one worker process per CPU: no core idles.
	f.Cleanup(func(prev int) func() { return func() { runtime.GOMAXPROCS(prev) } }(runtime.GOMAXPROCS(1)))
	f.Fuzz(func(t *testing.T, mode byte, ring, ram []byte) {
		fi := fuzzInput{mode: mode, ring: ring, ram: ram}
		runFuzzInput(t, fi.fake(), fi, 10*time.Second)
	})
}

// TestCommandsOnDevice runs FuzzCommands' seeds on the real device and on
// the fake and requires the same statuses (and the statuses each seed
// expects), then replays the committed corpus on the real device: the
// fake is never the only check.
func TestCommandsOnDevice(t *testing.T) {
	dev := boundedDevice{openGPU(t)}
	for _, s := range fuzzSeeds() {
		t.Run(s.name, func(t *testing.T) {
			fake := runFuzzInput(t, s.fake(), s.fuzzInput, 10*time.Second)
			if !slices.Equal(fake, s.want) {
				t.Errorf("on the fake: statuses %v, want %v", fake, s.want)
			}
			if s.fakeOnly {
				return
			}
			onDev := runFuzzInput(t, dev, s.fuzzInput, time.Minute)
			if !slices.Equal(onDev, fake) {
				t.Errorf("on the device: statuses %v, the fake's %v", onDev, fake)
			}
		})
	}
	for name, fi := range corpus(t, "testdata/fuzz/FuzzCommands") {
		t.Run(name, func(t *testing.T) { runFuzzInput(t, dev, fi, time.Minute) })
	}
}

// boundedDevice is the real device as TestCommandsOnDevice uses it: it
// refuses launches of more than boundedItems work-items (a CPU device
// would take minutes over the largest ND-range the aggregator allows) and
// builds only fzSources (fuzzed bytes could be a kernel that writes
// outside its buffers).
type boundedDevice struct{ gpu.Device }

type boundedQueue struct{ gpu.Queue }

const boundedItems = 1 << 20

func (d boundedDevice) NewQueue() (gpu.Queue, error) {
	q, err := d.Device.NewQueue()
	if err != nil {
		return nil, err
	}
	return boundedQueue{q}, nil
}

func (q boundedQueue) Build(source, options string) (gpu.Program, string, error) {
	if !slices.Contains(fzSources, source) {
		return nil, "", fmt.Errorf("test device builds only the fixed sources: %w", gpu.ErrBuildFailed)
	}
	return q.Queue.Build(source, options)
}

func (q boundedQueue) Launch(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) (time.Duration, error) {
	items := uint64(1)
	for i := 0; i < min(max(r.Dims, 0), 3); i++ {
		hi, lo := bits.Mul64(items, r.Global[i])
		if hi != 0 || lo > boundedItems {
			return 0, fmt.Errorf("test device: launch over %d work-items: %w", boundedItems, gpu.ErrInvalidLaunch)
		}
		items = lo
	}
	return q.Queue.Launch(k, r, args)
}

// corpus reads the fuzz inputs committed in dir, in the format go test
// -fuzz writes: "go test fuzz v1", then byte('x'), []byte("..."),
// []byte("...").
func corpus(t *testing.T, dir string) map[string]fuzzInput {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]fuzzInput)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		unquote := func(line, typ string) string {
			lit, ok := strings.CutPrefix(line, typ+"(")
			if lit, ok = strings.CutSuffix(lit, ")"); !ok {
				t.Fatalf("%s: %q is not a %s", file, line, typ)
			}
			s, err := strconv.Unquote(lit)
			if err != nil {
				t.Fatalf("%s: %q: %v", file, line, err)
			}
			return s
		}
		if len(lines) != 4 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a FuzzCommands input", file)
		}
		r, _ := utf8.DecodeRuneInString(unquote(lines[1], "byte"))
		if r > math.MaxUint8 {
			t.Fatalf("%s: mode %q", file, lines[1])
		}
		out[filepath.Base(file)] = fuzzInput{mode: byte(r), ring: []byte(unquote(lines[2], "[]byte")), ram: []byte(unquote(lines[3], "[]byte"))}
	}
	return out
}

// fuzzSeed is a FuzzCommands seed with the statuses it gives on the fake.
type fuzzSeed struct {
	name string
	fuzzInput
	want     []abi.Status
	fakeOnly bool // depends on the fake's faults or memory size: not run on the device
}

// seedBuilder lays out a seed, raw (not encoded): commands, and data at
// known places of the data pages.
type seedBuilder struct {
	fuzzInput
	want []abi.Status
}

// cmd appends a command that is to complete with want.
func (b *seedBuilder) cmd(want abi.Status, p abi.Payload, flags uint16) {
	c := abi.NewCommand(p, flags, 0) // tag 0: a shorter encoding
	var s [abi.CommandSize]byte
	c.Marshal(s[:])
	b.ring = append(b.ring, s[:]...)
	b.want = append(b.want, want)
}

// raw appends a slot as bytes.
func (b *seedBuilder) raw(want abi.Status, slot [abi.CommandSize]byte) {
	b.ring = append(b.ring, slot[:]...)
	b.want = append(b.want, want)
}

// put places data in the data pages, align-aligned and, when within
// says so, not crossing a page, and returns its guest address.
func (b *seedBuilder) put(data []byte, align int, within bool) uint64 {
	for len(b.ram)%align != 0 || within && len(b.ram)/abi.PageSize != (len(b.ram)+len(data)-1)/abi.PageSize {
		b.ram = append(b.ram, 0)
	}
	at := fzData + uint64(len(b.ram))
	b.ram = append(b.ram, data...)
	if at+uint64(len(data)) > fzDataEnd {
		panic("seed too large")
	}
	return at
}

// sg places data in pieces, each in its own place, and a table for them.
func (b *seedBuilder) sg(data []byte, pieces int) (table uint64, count uint32) {
	var t []byte
	for i := 0; i < pieces; i++ {
		part := data[i*len(data)/pieces : (i+1)*len(data)/pieces]
		e := abi.SGEntry{Addr: b.put(part, 8, false), Len: uint32(len(part))}
		var eb [abi.SGEntrySize]byte
		e.Marshal(eb[:])
		t = append(t, eb[:]...)
	}
	return b.put(t, abi.SGEntrySize, true), uint32(pieces)
}

func (b *seedBuilder) create(want abi.Status, h uint32, size uint64) {
	b.cmd(want, &abi.BufferCreate{Handle: h, Size: size}, 0)
}

func (b *seedBuilder) copy(want abi.Status, toDev bool, h uint32, off uint64, data []byte, pieces int) {
	table, n := b.sg(data, pieces)
	b.cmd(want, &abi.Copy{ToDevice: toDev, Handle: h, SGCount: n, Offset: off, Length: uint64(len(data)), SGAddr: table}, 0)
}

// build builds fixed source src as program h, with room for a log.
func (b *seedBuilder) build(want abi.Status, h uint32, src int, opts string, logLen uint32) {
	pb := &abi.ProgramBuild{Handle: h, SrcCount: 1, SrcLen: uint64(len(fzSources[src])), SrcSGAddr: fzSrcTable + uint64(src)*abi.SGEntrySize}
	if opts != "" {
		pb.OptsAddr, pb.OptsLen = b.put([]byte(opts), 1, false), uint32(len(opts))
	}
	if logLen > 0 {
		pb.LogAddr, pb.LogLen = b.put(make([]byte, logLen), 8, false), logLen
	}
	b.cmd(want, pb, 0)
}

func (b *seedBuilder) launch(want abi.Status, prog uint32, flags uint16, kernel string, r gpu.NDRange, args ...abi.KernelArg) {
	d := abi.LaunchDesc{WorkDim: uint32(r.Dims), GlobalOffset: r.Offset, GlobalSize: r.Global, LocalSize: r.Local, Kernel: kernel, Args: args}
	raw, err := d.Marshal()
	if err != nil {
		panic(err)
	}
	b.cmd(want, &abi.Launch{Program: prog, DescLen: uint32(len(raw)), DescAddr: b.put(raw, 8, false)}, flags)
}

func fzBuf(h uint32) abi.KernelArg   { return abi.KernelArg{Kind: abi.ArgBuffer, Handle: h} }
func fzLocal(n uint32) abi.KernelArg { return abi.KernelArg{Kind: abi.ArgLocal, Local: n} }
func fzScalar(v uint64, size int) abi.KernelArg {
	b := binary.LittleEndian.AppendUint64(nil, v)
	for len(b) < size {
		b = append(b, byte(len(b)))
	}
	return abi.KernelArg{Kind: abi.ArgScalar, Bytes: b[:size]}
}

// fuzzSeeds are FuzzCommands' seeds: each drives one area of the
// aggregator the way a driver would, so mutations start from commands
// that reach deep.
func fuzzSeeds() []fuzzSeed {
	const ok = abi.StatusOK
	grid := func(dims int, global, local [3]uint64) gpu.NDRange {
		return gpu.NDRange{Dims: dims, Global: global, Local: local}
	}
	one := grid(1, [3]uint64{1}, [3]uint64{})
	seq := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		return b
	}
	var seeds []fuzzSeed
	add := func(name string, mode byte, f func(b *seedBuilder)) {
		b := &seedBuilder{fuzzInput: fuzzInput{mode: mode}}
		f(b)
		enc := fuzzInput{mode: mode, ring: zeroRuns(b.ring), ram: zeroRuns(b.ram)}
		seeds = append(seeds, fuzzSeed{name: name, fuzzInput: enc, want: b.want})
	}
	fakeOnly := func(name string, mode byte, f func(b *seedBuilder)) {
		add(name, mode, f)
		seeds[len(seeds)-1].fakeOnly = true
	}

	add("copies", 0, func(b *seedBuilder) {
		// Mostly zeros: the encoding keeps the seed short.
		data := append(seq(48), make([]byte, 8192-48)...)
		b.create(ok, 1, 8192)
		b.cmd(ok, &abi.BufferCreate{Handle: 2, Flags: abi.BufferReadOnly, Size: 100}, 0)
		b.copy(ok, true, 1, 0, data, 3)
		b.copy(ok, true, 1, 4000, data[:300], 2)
		b.copy(ok, false, 1, 100, make([]byte, 5000), 4)
		b.copy(ok, true, 2, 0, data[:100], 1)
		b.copy(ok, false, 2, 0, make([]byte, 100), 1)
		b.cmd(ok, &abi.Fence{Addr: b.put(make([]byte, 8), 8, false), Value: 7}, 0)
		b.cmd(ok, &abi.BufferFree{Handle: 1}, 0)
		b.cmd(ok, &abi.BufferFree{Handle: 2}, 0)
	})
	launches := func(b *seedBuilder) {
		b.create(ok, 1, 64)
		b.create(ok, 2, 64)
		b.build(ok, 1, 0, "-D N=1 -cl-std=CL1.2", 128)
		b.launch(ok, 1, 0, "set", grid(1, [3]uint64{64}, [3]uint64{}), fzBuf(1), fzScalar(7, 1))
		b.launch(ok, 1, 0, "copy1", grid(2, [3]uint64{8, 8}, [3]uint64{2, 4}), fzBuf(2), fzBuf(1))
		b.launch(ok, 1, 0, "scratch", grid(1, [3]uint64{32}, [3]uint64{16}), fzBuf(1), fzLocal(16), fzScalar(3, 4))
		b.launch(ok, 1, 0, "blend", grid(3, [3]uint64{4, 2, 2}, [3]uint64{}), fzBuf(2), fzScalar(0x3f800000, 16), fzScalar(5, 8), fzBuf(1))
		b.launch(ok, 1, 0, "pairk", one, fzBuf(2), fzScalar(0x0000000200000001, 8))
		b.copy(ok, false, 1, 0, make([]byte, 64), 1)
		b.cmd(ok, &abi.ProgramFree{Handle: 1}, 0)
		b.cmd(ok, &abi.BufferFree{Handle: 2}, 0)
	}
	add("launches", 0, launches)
	add("launches, reuse", fzReuse|fzSlow, launches)
	add("reuse hits", fzReuse|fzSlow, func(b *seedBuilder) {
		// The same launch on the same input into a fresh output: the
		// second run is recorded, the third and fourth are answered.
		b.create(ok, 1, 32)
		b.copy(ok, true, 1, 0, seq(32), 1)
		b.build(ok, 1, 0, "", 0)
		for i := 0; i < 4; i++ {
			b.create(ok, 2, 32)
			b.launch(ok, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
			b.copy(ok, false, 2, 0, make([]byte, 32), 1)
			b.cmd(ok, &abi.BufferFree{Handle: 2}, 0)
		}
		b.build(ok, 2, 1, "", 0)
		b.create(ok, 2, 32)
		b.launch(ok, 2, abi.FlagNondeterministic, "sized", one, fzBuf(2))
		b.launch(ok, 2, 0, "sized", grid(1, [3]uint64{16}, [3]uint64{}), fzBuf(2))
		b.copy(ok, true, 1, 0, seq(16), 1) // a partial upload
		b.launch(ok, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
	})
	add("images", 0, func(b *seedBuilder) {
		img := func(buf, order, width uint32) abi.KernelArg {
			return abi.KernelArg{Kind: abi.ArgImage, Handle: buf, Image: abi.ImageDesc{Buffer: buf, Type: abi.ImageType2D,
				Order: order, DataType: abi.UnormInt8, Width: uint64(width), Height: 4}}
		}
		smp := abi.KernelArg{Kind: abi.ArgSampler, Sampler: abi.SamplerDesc{Addressing: abi.AddressClampToEdge, Filter: abi.FilterNearest}}
		two := fzScalar(0x40000000, 4)
		g := grid(2, [3]uint64{8, 4}, [3]uint64{})
		b.create(ok, 1, 128)
		b.create(ok, 2, 128)
		b.copy(ok, true, 1, 0, seq(128), 1)
		b.build(ok, 1, 5, "", 0)
		b.launch(ok, 1, 0, "brighten", g, img(1, abi.OrderRGBA, 8), img(2, abi.OrderRGBA, 8), smp, two)
		b.launch(abi.StatusInvalidArgument, 1, 0, "brighten", g, img(1, abi.OrderRGBA, 9), img(2, abi.OrderRGBA, 8), smp, two)
		b.launch(abi.StatusInvalidArgument, 1, 0, "brighten", g, img(1, abi.OrderRG, 8), img(2, abi.OrderRGBA, 8), smp, two)
		b.launch(abi.StatusNotFound, 1, 0, "brighten", g, img(1, abi.OrderRGBA, 8), img(3, abi.OrderRGBA, 8), smp, two)
		b.launch(abi.StatusLaunchFailed, 1, 0, "brighten", g, smp, img(2, abi.OrderRGBA, 8), smp, two)
		b.launch(abi.StatusLaunchFailed, 1, 0, "brighten", g, img(1, abi.OrderRGBA, 8), img(2, abi.OrderRGBA, 8), fzBuf(1), two)
		b.copy(ok, false, 2, 0, make([]byte, 128), 1)
	})
	add("build failures", 0, func(b *seedBuilder) {
		b.build(abi.StatusBuildFailed, 1, 2, "", 256)
		b.build(abi.StatusBuildFailed, 2, 3, "", 64)
		b.build(abi.StatusBuildFailed, 3, 0, "-I/etc", 64)
		b.build(ok, 4, 4, "", 0)
		b.build(abi.StatusExists, 4, 4, "", 0)
		b.launch(abi.StatusNotFound, 4, 0, "set", one)
		b.launch(abi.StatusNotFound, 5, 0, "set", one)
		b.cmd(abi.StatusNotFound, &abi.ProgramFree{Handle: 1}, 0)
		b.cmd(ok, &abi.ProgramFree{Handle: 4}, 0)
	})
	add("launch failures", 0, func(b *seedBuilder) {
		b.create(ok, 1, 16)
		b.build(ok, 1, 0, "", 0)
		b.launch(abi.StatusInvalidArgument, 1, 0, "set", one, fzBuf(1))
		b.launch(abi.StatusLaunchFailed, 1, 0, "set", one, fzScalar(1, 1), fzScalar(1, 1))
		b.launch(abi.StatusLaunchFailed, 1, 0, "set", one, fzBuf(1), fzScalar(1, 4))
		b.launch(abi.StatusLaunchFailed, 1, 0, "scratch", one, fzBuf(1), fzScalar(1, 4), fzScalar(3, 4))
		b.launch(abi.StatusNotFound, 1, 0, "set", one, fzBuf(9), fzScalar(1, 1))
		b.launch(abi.StatusNotFound, 1, 0, "nosuch", one)
		b.launch(abi.StatusInvalidArgument, 1, 0, "set", grid(3, [3]uint64{1 << 20, 1 << 20, 1 << 20}, [3]uint64{}), fzBuf(1), fzScalar(1, 1))
		b.cmd(abi.StatusInvalidArgument, &abi.Launch{Program: 1, DescLen: abi.LaunchHeaderSize, DescAddr: b.put(make([]byte, abi.LaunchHeaderSize), 8, false)}, 0)
		b.cmd(abi.StatusBadAddress, &abi.Launch{Program: 1, DescLen: abi.LaunchHeaderSize, DescAddr: fzRAM}, 0)
	})
	add("bad commands", 0, func(b *seedBuilder) {
		var slot [abi.CommandSize]byte
		binary.LittleEndian.PutUint16(slot[0:], 99)
		b.raw(abi.StatusInvalidOpcode, slot)
		b.cmd(abi.StatusInvalidArgument, &abi.Nop{}, abi.FlagNondeterministic)
		b.cmd(abi.StatusInvalidArgument, &abi.Nop{}, abi.FlagIL)
		// OpenCL C as a SPIR-V module: refused before any compiler sees
		// it, or by a device that takes no SPIR-V, alike.
		b.cmd(abi.StatusBuildFailed, &abi.ProgramBuild{Handle: 7, SrcCount: 1, SrcLen: uint64(len(fzSources[0])), SrcSGAddr: fzSrcTable}, abi.FlagIL)
		b.create(ok, 1, 4096)
		b.create(abi.StatusExists, 1, 4096)
		b.create(abi.StatusQuotaExceeded, 2, fzQuota+1)
		b.copy(abi.StatusInvalidArgument, true, 1, 4090, seq(7), 1)
		b.cmd(abi.StatusNotFound, &abi.BufferFree{Handle: 2}, 0)
		b.cmd(abi.StatusBadAddress, &abi.Fence{Addr: fzRAM}, 0)
	})
	add("sg chains", 0, func(b *seedBuilder) {
		b.create(ok, 1, 64)
		// A chain: table 1 holds one data entry and a link to table 2.
		data := b.put(seq(64), 8, false)
		t2 := b.put(make([]byte, abi.SGEntrySize), abi.SGEntrySize, true)
		(&abi.SGEntry{Addr: data + 32, Len: 32}).Marshal(b.ram[t2-fzData:])
		t1 := b.put(make([]byte, 2*abi.SGEntrySize), abi.SGEntrySize, true)
		(&abi.SGEntry{Addr: data, Len: 32}).Marshal(b.ram[t1-fzData:])
		(&abi.SGEntry{Addr: t2, Len: 1, Flags: abi.SGChain}).Marshal(b.ram[t1-fzData+abi.SGEntrySize:])
		b.cmd(ok, &abi.Copy{ToDevice: true, Handle: 1, SGCount: 2, Length: 64, SGAddr: t1}, 0)
		// A loop: a table that links to itself, until its data entries exceed
		// the length (a loop of links alone ends at abi.MaxSGEntries, slowly).
		loop := b.put(make([]byte, 2*abi.SGEntrySize), abi.SGEntrySize, true)
		(&abi.SGEntry{Addr: data, Len: 1}).Marshal(b.ram[loop-fzData:])
		(&abi.SGEntry{Addr: loop, Len: 2, Flags: abi.SGChain}).Marshal(b.ram[loop-fzData+abi.SGEntrySize:])
		b.cmd(abi.StatusInvalidArgument, &abi.Copy{Handle: 1, SGCount: 2, Length: 64, SGAddr: loop}, 0)
	})
	add("ring wraps", 0, func(b *seedBuilder) {
		fence := b.put(make([]byte, 8), 8, false)
		for i := 0; i < fzMaxCmds; i++ {
			if i%3 == 0 {
				b.cmd(ok, &abi.Fence{Addr: fence, Value: uint64(i)}, 0)
			} else {
				b.cmd(ok, &abi.Nop{}, 0)
			}
		}
	})
	abi14 := func(b *seedBuilder) {
		b.create(ok, 1, 64)
		b.create(ok, 2, 64)
		b.copy(ok, true, 1, 0, seq(64), 1)
		b.build(ok, 1, 0, "", 0)
		table, n := b.sg(make([]byte, 2048), 2) // room for fzSources[0]'s blob
		b.cmd(ok, &abi.ProgramInfoQuery{Handle: 1, SGCount: n, Length: 2048, SGAddr: table}, 0)
		table, n = b.sg(make([]byte, 16), 1) // too little room: the size only
		b.cmd(ok, &abi.ProgramInfoQuery{Handle: 1, SGCount: n, Length: 16, SGAddr: table}, 0)
		b.cmd(abi.StatusNotFound, &abi.ProgramInfoQuery{Handle: 2, SGCount: n, Length: 16, SGAddr: table}, 0)
		b.cmd(ok, &abi.DeviceInfoQuery{SGCount: n, Length: 16, SGAddr: table}, 0) // the size only
		table, n = b.sg(make([]byte, abi.PageSize), 2)
		b.cmd(ok, &abi.DeviceInfoQuery{SGCount: n, Length: abi.PageSize, SGAddr: table}, 0)
		b.launch(ok, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
		b.cmd(ok, &abi.BufferCopy{Src: 1, Dst: 2, SrcOffset: 8, DstOffset: 0, Length: 32}, 0)
		b.cmd(ok, &abi.BufferCopy{Src: 2, Dst: 2, SrcOffset: 0, DstOffset: 32, Length: 32}, 0)
		b.cmd(abi.StatusInvalidArgument, &abi.BufferCopy{Src: 2, Dst: 2, SrcOffset: 0, DstOffset: 16, Length: 32}, 0)
		b.cmd(abi.StatusNotFound, &abi.BufferCopy{Src: 1, Dst: 3, Length: 1}, 0)
		pat := b.put([]byte{1, 2, 3, 4}, 4, true)
		b.cmd(ok, &abi.BufferFill{Handle: 1, PatternLen: 4, Offset: 4, Length: 56, PatternAddr: pat}, 0)
		b.cmd(ok, &abi.BufferFill{Handle: 1, PatternLen: 1, Offset: 0, Length: 64, PatternAddr: pat + 3}, 0)
		b.cmd(abi.StatusBadAddress, &abi.BufferFill{Handle: 1, PatternLen: 4, Length: 4, PatternAddr: fzRAM}, 0)
		b.launch(ok, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
		b.copy(ok, false, 2, 0, make([]byte, 64), 1)
	}
	add("abi 1.4", 0, abi14)
	add("abi 1.4, reuse", fzReuse|fzSlow, abi14)
	fakeOnly("device full", 0, func(b *seedBuilder) {
		b.create(ok, 1, fzDevMem-4096)
		b.create(abi.StatusOutOfResources, 2, 8192) // within the quota, past the device's memory
		b.create(ok, 3, 4096)
		b.cmd(ok, &abi.BufferFree{Handle: 1}, 0)
		b.create(ok, 2, 8192)
	})
	fakeOnly("device faults", 6<<fzFaultShift, func(b *seedBuilder) {
		// Device operations: alloc, alloc, write, build, write, launch (the fault).
		b.create(ok, 1, 64)
		b.create(ok, 2, 64)
		b.copy(ok, true, 1, 0, seq(64), 1)
		b.build(ok, 1, 0, "", 0)
		b.copy(ok, true, 2, 0, seq(64), 1)
		b.launch(abi.StatusDeviceError, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
		b.launch(ok, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
		b.copy(ok, false, 2, 0, make([]byte, 64), 1)
	})
	fakeOnly("device faults, reuse", 2<<fzFaultShift|fzReuse|fzSlow, func(b *seedBuilder) {
		b.create(ok, 1, 64)
		b.create(abi.StatusDeviceError, 2, 64)
		b.create(ok, 2, 64)
		b.copy(ok, true, 1, 0, seq(64), 1)
		b.build(ok, 1, 0, "", 0)
		b.launch(ok, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
		b.launch(ok, 1, 0, "copy1", one, fzBuf(2), fzBuf(1))
		b.copy(ok, false, 2, 0, make([]byte, 64), 1)
	})
	return seeds
}

// BenchmarkFuzzCommands times one FuzzCommands execution of each seed: the
// fuzzer's speed.
func BenchmarkFuzzCommands(b *testing.B) {
	for _, s := range fuzzSeeds() {
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				runFuzzInput(b, s.fake(), s.fuzzInput, 10*time.Second)
			}
		})
	}
}

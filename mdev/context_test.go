package mdev

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/internal/guestmem/addrspacetest"
)

// scanKernel searches memory for two 8-byte words, given as their
// scanHash so that neither the kernel's buffers nor its registers ever
// hold the words themselves (a kernel that computed them would find its
// own copy on a stack it scans): work item i scans range i of ranges
// (start, length pairs) at 8-byte steps and records the addresses of hits.
const scanKernel = `ulong mix(ulong v, ulong mask) { v ^= mask; v ^= v >> 29; return v * 0xbf58476d1ce4e5b9UL; }
__kernel void scan(__global const ulong *ranges, __global const ulong *needles, ulong mask,
		__global ulong *hits, __global volatile uint *nhits) {
	size_t i = get_global_id(0);
	ulong a = needles[0], b = needles[1];
	__global const ulong *p = (__global const ulong *)ranges[2*i];
	ulong n = ranges[2*i+1] / 8;
	for (ulong j = 0; j < n; j++) {
		ulong h = mix(p[j], mask);
		if (h == a || h == b) {
			uint k = atomic_inc(nhits);
			if (k < 64) hits[k] = (ulong)(p + j);
		}
	}
}`

// scanHash is scanKernel's mix: what it compares each word's hash with.
func scanHash(v, mask uint64) uint64 {
	v ^= mask
	v ^= v >> 29
	return v * 0xbf58476d1ce4e5b9
}

// wildKernel writes through a pointer to nowhere.
const wildKernel = `__kernel void wild(__global int *o) { *(__global int *)0x10 = 1; o[0] = 2; }`

// contextProfile offers device contexts, with a patient kernel limit.
var contextProfile = Profile{Name: "contexts", MemBytes: 256 << 20, Share: 1, MaxPerDevice: 8, Contexts: 8,
	TurnTimeout: Duration(10 * time.Minute), BuildTimeout: Duration(10 * time.Minute)}

// TestContextsIsolateProcesses (issue 31) plays two processes of one VM,
// each with its own device context, against real sandboxed workers and
// executors: one's kernel scans every readable page of the process it
// runs in for the other's secret and for a marker in guest RAM and finds
// neither; its wild-pointer kernel then ends its context alone, while the
// other's job runs to a correct result; and it comes back by reopening.
func TestContextsIsolateProcesses(t *testing.T) {
	// Two devices (the same OpenCL device twice): the instance moves to
	// the second at the end.
	m := newExecutorManager(t, Config{Devices: []gpu.Device{openGPU(t), openGPU(t)}, Profiles: []Profile{contextProfile}})
	if !m.Pool().KernelsInExecutor(0) {
		t.Skip("no executors here (a device off the host, or workers without a PID namespace): TestContextsInTheWorker covers contexts there")
	}
	zero := 0
	inst := mustCreate(t, m, CreateRequest{Profile: contextProfile.Name, Device: &zero})
	_, d, marker := markedGuest(t, inst)
	if got := d.Info().MaxContexts; got != contextProfile.Contexts {
		t.Fatalf("MaxContexts = %d, want the profile's %d", got, contextProfile.Contexts)
	}
	worker := inst.WorkerPID()
	attacker, attackerPID := openContext(t, d, worker, driver.ContextOptions{ID: 1})
	defer attacker.Close()
	victim, victimPID := openContext(t, d, worker, driver.ContextOptions{ID: 2, MemLimit: 64 << 20})
	defer victim.Close()
	attackerExec, victimExec := []int{attackerPID}, []int{victimPID}

	// The victim's secret, in its buffer on the device.
	secret := append([]byte("ICD-VICTIM-SECRET"), make([]byte, 4096-17)...)
	rand.Read(secret[17:])
	sb, err := victim.CreateBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(victim.Write(sb, 0, secret), victim.Finish()); err != nil {
		t.Fatal(err)
	}
	// The operator sees both, with the victim's memory.
	if l := inst.ContextList(); len(l) != 2 || l[0].ID != 1 || l[1].ID != 2 || l[1].MemUsed != 4096 || l[0].Lost {
		t.Errorf("ContextList = %+v, want contexts 1 and 2 (4096 bytes), none lost", l)
	}

	// The attacker scans every readable mapping of the process its
	// kernels run in. The same scan in the victim's context finds the
	// secret (its own): the scan can see what it looks for.
	mask := uint64(0x5a5a_a5a5_0ff0_f00f)
	needles := make([]byte, 16)
	binary.LittleEndian.PutUint64(needles[0:], scanHash(binary.LittleEndian.Uint64(secret[24:]), mask)) // random: past the text prefix, which this binary's own data holds
	binary.LittleEndian.PutUint64(needles[8:], scanHash(binary.LittleEndian.Uint64(marker), mask))
	if n, scanned, _ := scanContext(t, victim, victimExec, needles, mask); n == 0 {
		t.Fatalf("the victim's own scan (%d bytes) did not find its secret: the scan proves nothing", scanned)
	}
	if n, scanned, hits := scanContext(t, attacker, attackerExec, needles, mask); n != 0 {
		t.Errorf("the attacker's kernel found the victim's secret or the guest RAM marker %d times in its process (%d bytes scanned) at %v",
			n, scanned, hits)
	} else {
		t.Logf("the attacker's kernel scanned %d readable bytes of its process: neither the secret nor the marker", scanned)
	}

	// The victim computes while the attacker's wild pointer ends the
	// attacker's context.
	var wg sync.WaitGroup
	var victimErr error
	wg.Go(func() { victimErr = contextVectorAdd(victim, 1<<16, 40) })
	if err := launchWild(t, attacker); !errors.Is(err, driver.ErrDeviceLost) {
		t.Errorf("the wild write in context 1 = %v, want its context lost", err)
	}
	if l := inst.ContextList(); len(l) != 2 || !l[0].Lost || l[1].Lost {
		t.Errorf("ContextList after the crash = %+v, want context 1 lost, 2 not", l)
	}
	wg.Wait()
	if victimErr != nil {
		t.Errorf("the victim's job while the attacker crashed: %v", victimErr)
	}
	if err := contextVectorAdd(d, 4096, 2); err != nil {
		t.Errorf("the default context after context 1 crashed: %v", err)
	}
	if got := make([]byte, 4096); victim.Read(sb, 0, got) != nil || victim.Finish() != nil || !bytes.Equal(got, secret) {
		t.Errorf("the victim's buffer changed")
	}
	if err := attacker.Reopen(); err != nil {
		t.Fatalf("reopen the attacker's context: %v", err)
	}
	if err := contextVectorAdd(attacker, 4096, 2); err != nil {
		t.Errorf("context 1 after it was reopened: %v", err)
	}
	if inst.WorkerPID() != worker {
		t.Errorf("the worker changed (%d -> %d): a context's crash ended more than the context", worker, inst.WorkerPID())
	}
	// Live contexts move with the instance: a reallocation to the other
	// device moves the instance to a new worker, its contexts (and their
	// executors) with it, while the victim computes.
	if n := inst.LiveContexts(); n != 2 {
		t.Errorf("LiveContexts = %d, want 2", n)
	}
	var moveErr error
	var mv sync.WaitGroup
	mv.Go(func() {
		one := 1
		_, moveErr = m.Realloc(t.Context(), inst.UUID(), ReallocRequest{Device: &one})
	})
	if err := contextVectorAdd(victim, 1<<16, 20); err != nil {
		t.Errorf("the victim while its instance moved: %v", err)
	}
	mv.Wait()
	if moveErr != nil {
		t.Fatalf("Realloc with live contexts: %v", moveErr)
	}
	if inst.WorkerPID() == worker || inst.LiveContexts() != 2 {
		t.Errorf("after the move: worker %d (was %d), %d live contexts, want a new worker and 2", inst.WorkerPID(), worker, inst.LiveContexts())
	}
	if got := make([]byte, 4096); victim.Read(sb, 0, got) != nil || victim.Finish() != nil || !bytes.Equal(got, secret) {
		t.Errorf("the victim's buffer after the move differs")
	}
	for _, c := range []*driver.Device{victim, attacker, d} {
		if err := contextVectorAdd(c, 4096, 2); err != nil {
			t.Errorf("context %d after the move: %v", c.Context(), err)
		}
	}
	if got := len(addrspacetest.Children(inst.WorkerPID())); got != 3 {
		t.Errorf("the new worker has %d executors, want 3 (the default ring's and the two contexts')", got)
	}
}

// launchWild runs wildKernel on c and returns the launch's or the wait's
// error.
func launchWild(t *testing.T, c *driver.Device) error {
	t.Helper()
	wp, _, err := c.Build(wildKernel, "")
	if err != nil {
		t.Fatal(err)
	}
	wb := mustBuffer(t, c, 4)
	if err := c.Launch(wp, "wild", driver.Range1(1, 0), driver.BufferArg(wb)); err != nil {
		return err
	}
	return c.Finish()
}

// scanContext runs scanKernel in context c over every readable mapping
// of its executor (execs: exactly one pid) and returns the hits, the
// bytes scanned and the first hits' addresses.
func scanContext(t *testing.T, c *driver.Device, execs []int, needles []byte, mask uint64) (uint32, uint64, []string) {
	t.Helper()
	if len(execs) != 1 {
		t.Fatalf("context %d: executors %v, want one", c.Context(), execs)
	}
	ranges, scanned := addrspacetest.ReadableRanges(t, execs[0])
	p, log, err := c.Build(scanKernel, "")
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log)
	}
	rb, nb := mustBuffer(t, c, uint64(len(ranges))), mustBuffer(t, c, 16)
	hb, cb := mustBuffer(t, c, 64*8), mustBuffer(t, c, 4)
	if err := errors.Join(c.Write(rb, 0, ranges), c.Write(nb, 0, needles), c.Write(cb, 0, make([]byte, 4)),
		c.Launch(p, "scan", driver.Range1(uint64(len(ranges)/16), 1), driver.BufferArg(rb), driver.BufferArg(nb),
			driver.Uint64Arg(mask), driver.BufferArg(hb), driver.BufferArg(cb)),
		c.Finish()); err != nil {
		t.Fatalf("scan in context %d: %v", c.Context(), err)
	}
	count, hits := make([]byte, 4), make([]byte, 64*8)
	if err := errors.Join(c.Read(cb, 0, count), c.Read(hb, 0, hits), c.Finish()); err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint32(count)
	return n, scanned, hitAddrs(hits, n)
}

func hitAddrs(b []byte, n uint32) []string {
	var out []string
	for i := uint32(0); i < min(n, 64); i++ {
		out = append(out, fmt.Sprintf("%#x", binary.LittleEndian.Uint64(b[8*i:])))
	}
	return out
}

func mustBuffer(t *testing.T, d *driver.Device, n uint64) driver.Buffer {
	t.Helper()
	b, err := d.CreateBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vaddKernel adds b to a, in place.
const vaddKernel = `__kernel void vadd(__global float *a, __global const float *b) {
	size_t i = get_global_id(0);
	a[i] += b[i];
}`

// contextVectorAdd adds b to a rounds times on d and checks the result
// against the CPU's.
func contextVectorAdd(d *driver.Device, n, rounds int) error {
	p, log, err := d.Build(vaddKernel, "")
	if err != nil {
		return fmt.Errorf("build: %w\n%s", err, log)
	}
	a, b := make([]byte, 4*n), make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(a[4*i:], math.Float32bits(float32(i)))
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i%7)))
	}
	ab, err := d.CreateBuffer(uint64(4 * n))
	if err != nil {
		return err
	}
	bb, err := d.CreateBuffer(uint64(4 * n))
	if err != nil {
		return err
	}
	if err := errors.Join(d.Write(ab, 0, a), d.Write(bb, 0, b)); err != nil {
		return err
	}
	for range rounds {
		if err := d.Launch(p, "vadd", driver.Range1(uint64(n), 0), driver.BufferArg(ab), driver.BufferArg(bb)); err != nil {
			return err
		}
	}
	got := make([]byte, 4*n)
	if err := errors.Join(d.Read(ab, 0, got), d.Finish()); err != nil {
		return err
	}
	for i := range n {
		want := float32(i) + float32(rounds)*float32(i%7)
		if g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); g != want {
			return fmt.Errorf("a[%d] = %v, want %v", i, g, want)
		}
	}
	return errors.Join(d.Free(ab), d.Free(bb), d.FreeProgram(p), d.Finish())
}

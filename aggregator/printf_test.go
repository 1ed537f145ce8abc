package aggregator

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/reuse"
)

// printerDevice wraps the test's OpenCL device so that its queues are
// gpu.Printers whose kernels "print" text (the real capture is an
// executor's, tested in worker/child/kernelout and end to end in
// tests/icdhost): the launch runs on the real device, and the count of
// printing launches says which launches really ran.
type printerDevice struct {
	gpu.Device
	text     string
	printing *atomic.Int32
}

func (d printerDevice) NewQueue() (gpu.Queue, error) {
	q, err := d.Device.NewQueue()
	if err != nil {
		return nil, err
	}
	return printerQueue{q, d}, nil
}

// Close leaves the shared test device open.
func (d printerDevice) Close() error { return nil }

type printerQueue struct {
	gpu.Queue
	d printerDevice
}

func (q printerQueue) LaunchPrinting(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg, max int) (time.Duration, gpu.Printout, error) {
	t, err := q.Queue.Launch(k, r, args)
	if err != nil {
		return t, gpu.Printout{}, err
	}
	q.d.printing.Add(1)
	out := []byte(q.d.text)
	keep := min(len(out), max)
	return t, gpu.Printout{Data: out[:keep], Dropped: uint64(len(out) - keep)}, nil
}

const printfSource = `__kernel void bump(__global int *a) { a[get_global_id(0)] += 1; }`

// printfJob creates buffers 1 (16 ints, uploaded) and 2 (the printf
// buffer, of pbSize bytes), launches bump on buffer 1 (with printf buffer
// 2 when printf), and returns the completions, buffer 1 and buffer 2's
// first 64 bytes (or fewer).
func printfJob(g *testGuest, pbSize uint64, printf uint32) ([]abi.Completion, []byte, []byte) {
	g.t.Helper()
	build, _ := g.build(1, printfSource, 0)
	ints := make([]byte, 64)
	for i := range 16 {
		binary.LittleEndian.PutUint32(ints[4*i:], uint32(10*i))
	}
	l := g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{16}, Kernel: "bump", Args: []abi.KernelArg{bufArg(1)}})
	p, _ := abi.DecodeAs[*abi.Launch](&l)
	p.Printf = printf
	l = abi.NewCommand(p, 0, 0)
	n := int(min(pbSize, 64))
	getA, readA := g.download(1, 64)
	getP, readP := g.download(2, n)
	recs := g.run(build,
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 64}, 0, 0),
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: pbSize}, 0, 0),
		g.upload(1, ints), l, getA, getP)
	return recs, readA(), readP()
}

// TestLaunchPrintf: a launch naming a printf buffer gets the header and
// what the kernel printed in it (cut to the buffer, the rest counted as
// dropped); a queue that cannot capture writes a header that says so; a
// printf buffer too small or missing is refused.
func TestLaunchPrintf(t *testing.T) {
	printing := new(atomic.Int32)
	d := newDeviceOn(t, printerDevice{openGPU(t), "hello from work-item 0\n", printing})
	g := newTestGuest(t, d, "printf", 1<<20)
	recs, a, pb := printfJob(g, 64, 2)
	g.mustOK(recs...)
	if got := binary.LittleEndian.Uint32(a[4*3:]); got != 31 {
		t.Errorf("the kernel's result a[3] = %d, want 31", got)
	}
	h, err := abi.UnmarshalPrintfHeader(pb, 64)
	if err != nil || h.Flags != abi.PrintfCaptured || h.Length != 23 || h.Dropped != 0 {
		t.Fatalf("printf header %+v, %v", h, err)
	}
	if got := string(pb[abi.PrintfHeaderSize : abi.PrintfHeaderSize+h.Length]); got != "hello from work-item 0\n" {
		t.Errorf("printf output %q", got)
	}

	// A buffer of 24 bytes: 8 bytes of output fit, 15 are dropped.
	g2 := newTestGuest(t, d, "printf-small", 1<<20)
	recs, _, pb = printfJob(g2, 24, 2)
	g2.mustOK(recs...)
	h, err = abi.UnmarshalPrintfHeader(pb, 24)
	if err != nil || h.Length != 8 || h.Dropped != 15 || string(pb[16:24]) != "hello fr" {
		t.Errorf("a 24-byte printf buffer: %+v %q, %v", h, pb[16:], err)
	}

	// Refusals: too small for the header, no such buffer.
	for _, c := range []struct {
		size   uint64
		printf uint32
		want   abi.Status
	}{{abi.PrintfHeaderSize - 1, 2, abi.StatusInvalidArgument}, {64, 9, abi.StatusNotFound}} {
		g := newTestGuest(t, d, fmt.Sprintf("printf-bad-%d", c.printf), 1<<20)
		recs, _, _ := printfJob(g, c.size, c.printf)
		if st := recs[4].Status; abi.Status(st) != c.want {
			t.Errorf("printf buffer %d of %d bytes: status %v, want %v", c.printf, c.size, abi.Status(st), c.want)
		}
	}

	// A device whose queues cannot capture: the header says so.
	plain := newDeviceOn(t, plainDevice{openGPU(t)})
	g3 := newTestGuest(t, plain, "printf-plain", 1<<20)
	recs, _, pb = printfJob(g3, 64, 2)
	g3.mustOK(recs...)
	if h, err := abi.UnmarshalPrintfHeader(pb, 64); err != nil || h != (abi.PrintfHeader{}) {
		t.Errorf("a queue without capture: header %+v, %v", h, err)
	}
}

// plainDevice is the test device with queues that are not gpu.Printers.
type plainDevice struct{ gpu.Device }

func (d plainDevice) NewQueue() (gpu.Queue, error) {
	q, err := d.Device.NewQueue()
	return plainQueue{q}, err
}

// Close leaves the shared test device open.
func (d plainDevice) Close() error { return nil }

type plainQueue struct{ gpu.Queue }

// TestPrintfLaunchesAreNotReused: the same job three times on one reuse
// domain hits the table on the third run (the control), but a launch that
// prints runs every time: its output is a side effect the table does not
// hold.
func TestPrintfLaunchesAreNotReused(t *testing.T) {
	printing := new(atomic.Int32)
	d := newDeviceOn(t, printerDevice{openGPU(t), "printed\n", printing})
	eng := reuse.New(reuse.Config{})
	for _, printf := range []uint32{0, 2} {
		dom, err := eng.Shared(fmt.Sprintf("printf%d", printf))
		if err != nil {
			t.Fatal(err)
		}
		var hits uint64
		for i := range 3 {
			g := newTestGuest(t, d, fmt.Sprintf("reuse-%d-%d", printf, i), 1<<20)
			g.in.SetReuseDomain(dom)
			recs, a, pb := printfJob(g, 64, printf)
			g.mustOK(recs...)
			if got := binary.LittleEndian.Uint32(a[4*3:]); got != 31 {
				t.Errorf("printf %d, run %d: a[3] = %d, want 31", printf, i, got)
			}
			if printf != 0 && !strings.HasPrefix(string(pb[16:]), "printed\n") {
				t.Errorf("run %d: printf output %q", i, pb[16:])
			}
			hits += g.in.ReuseStats().Hits.Load()
		}
		switch {
		case printf == 0 && hits == 0:
			t.Errorf("the control job never hit the reuse table: the test shows nothing")
		case printf != 0 && (hits != 0 || printing.Load() != 3):
			t.Errorf("printing launches: %d hits, %d ran of 3", hits, printing.Load())
		}
	}
}

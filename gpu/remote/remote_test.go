package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
	"github.com/vgpud/vgpud/gpu/iltest"
	"github.com/vgpud/vgpud/gpu/imagetest"
	"github.com/vgpud/vgpud/internal/sockpairtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// socketPair returns the two ends of a Unix stream socket pair, closed at
// the test's end.
func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) { return sockpairtest.Stream(t) }

// served returns a client Device over a socket pair to Serve(dev), which
// ends when the client closes; the test waits for it.
func served(t testing.TB, dev gpu.Device) *Device {
	t.Helper()
	a, b := socketPair(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := Serve(b, dev); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(wg.Wait)
	d, err := NewDevice(a)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const vadd = `__kernel void vadd(__global const int *a, __global const int *b, __global int *c) {
	size_t i = get_global_id(0);
	c[i] = a[i] + b[i];
}
__kernel void twice(__global int *a) { a[get_global_id(0)] *= 2; }`

func ints(v ...int32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(x))
	}
	return b
}

// exercise drives every call of a device through the client and checks
// what both the fake and the real device must agree on; launch tells
// whether kernels really run (the fake computes nothing).
func exercise(t *testing.T, d *Device, computes bool) {
	if d.Info().Name == "" || d.Info().GlobalMemBytes == 0 {
		t.Errorf("Info() = %+v, want the served device's", d.Info())
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	a, err := q.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := q.Alloc(16)
	c, _ := q.Alloc(16)
	zero := make([]byte, 16)
	if err := q.Read(c, 0, zero); err != nil || !bytes.Equal(zero, make([]byte, 16)) {
		t.Errorf("a new buffer reads %x, %v; want zeros", zero, err)
	}
	if err := q.Write(a, 0, ints(1, 2, 3, 4)); err != nil {
		t.Fatal(err)
	}
	if err := q.Write(b, 0, ints(10, 20, 30, 40)); err != nil {
		t.Fatal(err)
	}
	if err := q.Write(a, 12, ints(1, 2)); !errors.Is(err, gpu.ErrOutOfRange) {
		t.Errorf("Write past the end = %v, want ErrOutOfRange", err)
	}
	p, log, err := q.Build(vadd, "")
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, log)
	}
	if names := p.KernelNames(); len(names) != 2 {
		t.Errorf("KernelNames() = %q, want two", names)
	}
	info, err := p.Info()
	if err != nil || len(info) != 2 || info[1].Name != "vadd" || len(info[1].Args) != 3 {
		t.Errorf("Info() = %+v, %v; want twice and vadd, vadd with 3 arguments", info, err)
	}
	k, err := p.Kernel("vadd")
	if err != nil || k.Name() != "vadd" || k.NumArgs() != 3 {
		t.Fatalf("Kernel(vadd) = %v, %v", k, err)
	}
	if _, err := p.Kernel("nope"); !errors.Is(err, gpu.ErrNoKernel) {
		t.Errorf("Kernel(nope) = %v, want ErrNoKernel", err)
	}
	r := gpu.NDRange{Dims: 1, Global: [3]uint64{4, 1, 1}}
	if _, err := q.Launch(k, r, []gpu.Arg{{Buffer: a}, {Buffer: b}, {Buffer: c}}); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	if _, err := q.Launch(k, r, []gpu.Arg{{Buffer: a}, {Scalar: []byte{1, 2, 3, 4}}, {Buffer: c}}); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("Launch with a scalar for a buffer = %v, want ErrInvalidLaunch", err)
	}
	got := make([]byte, 16)
	if err := q.Read(c, 0, got); err != nil {
		t.Fatal(err)
	}
	if computes && !bytes.Equal(got, ints(11, 22, 33, 44)) {
		t.Errorf("vadd read %x, want 11 22 33 44", got)
	}
	if err := q.Copy(b, c, 0, 4, 8); err != nil {
		t.Fatal(err)
	}
	if err := q.Fill(a, 0, 16, []byte{7, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := q.Read(a, 0, got); err != nil || !bytes.Equal(got, ints(7, 7, 7, 7)) {
		t.Errorf("after Fill: %x, %v; want 7s", got, err)
	}
	if err := q.Read(c, 4, got[:8]); err != nil || !bytes.Equal(got[:8], ints(10, 20)) {
		t.Errorf("after Copy: %x, %v; want 10 20", got[:8], err)
	}

	// Build failures carry the log; refused source is told apart.
	if _, log, err := q.Build("__kernel void broken( {", ""); !errors.Is(err, gpu.ErrBuildFailed) {
		t.Errorf("Build(broken) = %v (log %q), want ErrBuildFailed", err, log)
	}
	if _, _, err := q.Build("#include \"/etc/passwd\"\n__kernel void k() {}", ""); !errors.Is(err, gpu.ErrSourceRejected) {
		t.Errorf("Build(#include) = %v, want ErrSourceRejected", err)
	}

	// Objects of another queue are foreign; released ones closed.
	q2, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	if err := q2.Write(a, 0, ints(1)); !errors.Is(err, gpu.ErrForeign) {
		t.Errorf("Write of another queue's buffer = %v, want ErrForeign", err)
	}
	if _, err := q2.Launch(k, r, nil); !errors.Is(err, gpu.ErrForeign) {
		t.Errorf("Launch of another queue's kernel = %v, want ErrForeign", err)
	}
	q2.Close()
	if _, err := q2.Alloc(4); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Alloc on a closed queue = %v, want ErrClosed", err)
	}
	k.Release()
	k.Release()
	if _, err := q.Launch(k, r, nil); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Launch of a released kernel = %v, want ErrClosed", err)
	}
	a.Release()
	if err := q.Write(a, 0, ints(1)); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Write of a released buffer = %v, want ErrClosed", err)
	}
	p.Release()
	b.Release()
	c.Release()
}

// TestServedFake: every call through the protocol to the fake device.
func TestServedFake(t *testing.T) {
	d := served(t, gputest.New(gputest.Config{}))
	exercise(t, d, false)
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := d.NewQueue(); !errors.Is(err, gpu.ErrContextLost) {
		t.Errorf("NewQueue after Close = %v, want ErrContextLost", err)
	}
}

// TestServedPoCL: the same through the protocol to the real OpenCL
// device, whose kernels compute; and a write and read larger than a
// frame's chunk.
func TestServedPoCL(t *testing.T) {
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", err)
	}
	d := served(t, dev)
	defer d.Close()
	exercise(t, d, true)

	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const n = 2*Chunk + 12345
	b, err := q.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]byte, n)
	for i := range in {
		in[i] = byte(i * 7)
	}
	if err := q.Write(b, 0, in); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, n)
	if err := q.Read(b, 0, out); err != nil || !bytes.Equal(in, out) {
		t.Errorf("a %d-byte buffer read back differs (%v)", n, err)
	}
}

// TestServedPoCLImages: image and sampler arguments cross the protocol
// (argImage, argSampler) and compute on the real device as they do on it
// directly (imagetest), one launch at a time and batched.
func TestServedPoCLImages(t *testing.T) {
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", err)
	}
	d := served(t, dev)
	defer d.Close()
	if !d.Info().Caps.Images.Supported {
		t.Skipf("%s has no images", d.Info().Name)
	}
	for _, pipelined := range []bool{false, true} {
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		imagetest.Check(t, q, d.Info().Caps.Images, pipelined)
		q.Close()
	}
}

// TestServedPoCLIL: a SPIR-V module crosses the protocol (OpBuildIL) and
// builds and runs on the real device as on it directly (iltest); on a
// device without SPIR-V the client refuses without asking.
func TestServedPoCLIL(t *testing.T) {
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", err)
	}
	d := served(t, dev)
	defer d.Close()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	iltest.Check(t, q, d.Info().Caps)
}

// TestExecutorGone: when the executor's end closes, a call in progress
// and every later call fail with ErrContextLost.
func TestExecutorGone(t *testing.T) {
	a, b := socketPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Answer Info and one NewQueue, then hang up.
		for i := 0; i < 2; i++ {
			f, err := readFrame(b)
			if err != nil {
				return
			}
			var body []byte
			if Op(f.code) == OpInfo {
				body = []byte(`{"Name":"x","GlobalMemBytes":1}`)
			} else {
				body = binary.LittleEndian.AppendUint32(nil, 1)
			}
			b.Write(appendFrame(nil, f.seq, 0, body))
		}
		readFrame(b) // the Alloc, never answered
		b.Close()
	}()
	d, err := NewDevice(a)
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Alloc(4); !errors.Is(err, gpu.ErrContextLost) || !errors.Is(err, gpu.ErrDevice) {
		t.Errorf("Alloc when the executor hangs up = %v, want ErrContextLost", err)
	}
	if _, err := d.NewQueue(); !errors.Is(err, gpu.ErrContextLost) {
		t.Errorf("NewQueue after = %v, want ErrContextLost", err)
	}
	<-done
	d.Close()
}

// TestHostileReplies: replies that break the protocol lose the device
// instead of being believed.
func TestHostileReplies(t *testing.T) {
	for _, tt := range []struct {
		name  string
		reply func(f frame) []byte
	}{
		{"a reply to a request never made", func(f frame) []byte { return appendFrame(nil, f.seq+100, 0, nil) }},
		{"a frame too long", func(f frame) []byte {
			return append(binary.LittleEndian.AppendUint32(nil, MaxFrame+1), 0, 0, 0, 0, 0)
		}},
		{"a handle 0", func(f frame) []byte { return appendFrame(nil, f.seq, 0, make([]byte, 4)) }},
		{"a short handle", func(f frame) []byte { return appendFrame(nil, f.seq, 0, []byte{1}) }},
		{"a malformed error", func(f frame) []byte { return appendFrame(nil, f.seq, uint8(kindDevice), []byte{9, 9}) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, b := socketPair(t)
			go func() {
				f, err := readFrame(b)
				if err != nil {
					return
				}
				b.Write(appendFrame(nil, f.seq, 0, []byte(`{"Name":"x"}`)))
				if f, err = readFrame(b); err == nil {
					b.Write(tt.reply(f))
				}
				io.Copy(io.Discard, b)
			}()
			d, err := NewDevice(a)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, err := d.NewQueue(); !errors.Is(err, gpu.ErrContextLost) {
				t.Errorf("NewQueue = %v, want ErrContextLost", err)
			}
		})
	}
}

// TestServerMalformed: requests that do not decode are answered with an
// error and the server goes on.
func TestServerMalformed(t *testing.T) {
	a, b := socketPair(t)
	done := make(chan error, 1)
	go func() { done <- Serve(b, gputest.New(gputest.Config{})) }()
	send := func(op Op, body []byte) frame {
		t.Helper()
		if _, err := a.Write(appendFrame(nil, 1, uint8(op), body)); err != nil {
			t.Fatal(err)
		}
		f, err := readFrame(a)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tt := range []struct {
		op   Op
		body []byte
	}{
		{OpAlloc, nil},                             // no queue
		{OpAlloc, []byte{1, 0, 0, 0}},              // a queue that does not exist
		{OpNewQueue, []byte{1}},                    // a body where none goes
		{Op(200), nil},                             // no such op
		{OpRead, append(ints(1), 1)},               // after a queue is made below
		{OpLaunch, append(ints(1, 1), 3, 0, 0, 0)}, // short ND-range
	} {
		if tt.op == OpRead {
			if f := send(OpNewQueue, nil); f.code != 0 {
				t.Fatalf("NewQueue: status %d", f.code)
			}
		}
		if f := send(tt.op, tt.body); f.code == 0 {
			t.Errorf("op %d body %x answered success", tt.op, tt.body)
		}
	}
	// A frame length out of bounds ends the connection with an error.
	a.Write(binary.LittleEndian.AppendUint32(nil, 2))
	a.Write(make([]byte, 8))
	if err := <-done; !errors.Is(err, ErrProtocol) {
		t.Errorf("Serve after a bad frame length = %v, want ErrProtocol", err)
	}
}

// TestLaunchBatch: launches Enqueue batches reach the executor in one
// OpLaunches frame at Sync, run in order, and each reports its own
// outcome: a launch the executor refuses fails alone, in place. On the
// fake device (no gpu.Pipeliner) the server runs them one by one; on
// PoCL it enqueues them behind each other and waits once.
func TestLaunchBatch(t *testing.T) {
	for _, tt := range []struct {
		name string
		dev  func(t *testing.T) gpu.Device
	}{
		{"fake", func(*testing.T) gpu.Device { return gputest.New(gputest.Config{}) }},
		{"PoCL", func(t *testing.T) gpu.Device {
			dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
			if err != nil {
				t.Fatalf("gpu.Open: %v (install pocl-opencl-icd)", err)
			}
			return dev
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := served(t, tt.dev(t))
			defer d.Close()
			gq, err := d.NewQueue()
			if err != nil {
				t.Fatal(err)
			}
			defer gq.Close()
			q := gq.(*Queue)
			a, _ := q.Alloc(16)
			c, _ := q.Alloc(16)
			if err := q.Write(a, 0, ints(1, 2, 3, 4)); err != nil {
				t.Fatal(err)
			}
			p, log, err := q.Build(vadd, "")
			if err != nil {
				t.Fatalf("Build: %v\n%s", err, log)
			}
			k, _ := p.Kernel("vadd")
			r := gpu.NDRange{Dims: 1, Global: [3]uint64{4, 1, 1}}
			if res := q.Sync(); res != nil {
				t.Errorf("Sync with nothing enqueued = %v, want nil", res)
			}
			// c = a + a, then c = a + c three times: c = 4a. The third
			// launch has a scalar for a buffer, which the device refuses.
			steps := [][]gpu.Arg{
				{{Buffer: a}, {Buffer: a}, {Buffer: c}},
				{{Buffer: a}, {Buffer: c}, {Buffer: c}},
				{{Buffer: a}, {Scalar: []byte{1, 2, 3, 4}}, {Buffer: c}},
				{{Buffer: a}, {Buffer: c}, {Buffer: c}},
			}
			for i, args := range steps {
				if err := q.Enqueue(k, r, args); err != nil {
					t.Fatalf("Enqueue %d: %v", i, err)
				}
			}
			res := q.Sync()
			if len(res) != len(steps) {
				t.Fatalf("Sync returned %d outcomes for %d launches", len(res), len(steps))
			}
			for i, o := range res {
				if i == 2 {
					if !errors.Is(o.Err, gpu.ErrInvalidLaunch) {
						t.Errorf("launch 2 (a scalar for a buffer) = %v, want ErrInvalidLaunch", o.Err)
					}
					continue
				}
				if o.Err != nil || o.Device < 0 {
					t.Errorf("launch %d = %+v, want ok", i, o)
				}
			}
			got := make([]byte, 16)
			if err := q.Read(c, 0, got); err != nil {
				t.Fatal(err)
			}
			if tt.name == "PoCL" && !bytes.Equal(got, ints(4, 8, 12, 16)) {
				t.Errorf("after the batch c = %x, want 4 8 12 16", got)
			}
			// Enqueue refuses what cannot be encoded; nothing is sent.
			if err := q.Enqueue(k, gpu.NDRange{Dims: 300}, nil); !errors.Is(err, gpu.ErrInvalidLaunch) {
				t.Errorf("Enqueue of 300 dimensions = %v, want ErrInvalidLaunch", err)
			}
			if res := q.Sync(); res != nil {
				t.Errorf("Sync after a refused Enqueue = %v, want nil", res)
			}
			k.Release()
			p.Release()
		})
	}
}

// TestResultsRoundTrip: an OpLaunches reply decodes to what was encoded
// (errors keep their sentinel), and a reply of the wrong size or an
// unknown kind is ErrProtocol.
func TestResultsRoundTrip(t *testing.T) {
	in := []gpu.LaunchResult{{Device: 1234}, {Err: fmt.Errorf("boom: %w", gpu.ErrOutOfMemory)}, {Device: 0}}
	var e enc
	appendResults(&e, in)
	out, err := decodeResults(e.B, len(in))
	if err != nil {
		t.Fatal(err)
	}
	if out[0].Device != 1234 || out[2].Device != 0 || out[0].Err != nil || !errors.Is(out[1].Err, gpu.ErrOutOfMemory) {
		t.Errorf("decoded %+v, want %+v", out, in)
	}
	if _, err := decodeResults(e.B, len(in)+1); !errors.Is(err, ErrProtocol) {
		t.Errorf("one result short = %v, want ErrProtocol", err)
	}
	if _, err := decodeResults(append(e.B, 0), len(in)); !errors.Is(err, ErrProtocol) {
		t.Errorf("a byte over = %v, want ErrProtocol", err)
	}
	if _, err := decodeResults([]byte{200, 0, 0}, 1); !errors.Is(err, ErrProtocol) {
		t.Errorf("an unknown kind = %v, want ErrProtocol", err)
	}
}

// printout is an Output that hands out what a test put in it, and counts
// the discards.
type printout struct {
	mu        sync.Mutex
	data      []byte
	discards  int
	takeLimit int
}

func (p *printout) Discard() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discards++
	p.data = nil
	return nil
}

func (p *printout) Take(n int) ([]byte, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.takeLimit = n
	keep := min(n, len(p.data))
	out, dropped := p.data[:keep], uint64(len(p.data)-keep)
	p.data = nil
	return out, dropped, nil
}

// printingKernel is a fake kernel whose launch "prints" into p: the fake
// device runs nothing, so the output is put there by the fake's launch
// hook, between the server's Discard and Take.
type printingQueue struct {
	gpu.Queue
	p    *printout
	text string
}

func (q printingQueue) Launch(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) (time.Duration, error) {
	q.p.mu.Lock()
	q.p.data = append(q.p.data, q.text...)
	q.p.mu.Unlock()
	return q.Queue.Launch(k, r, args)
}

type printingDevice struct {
	gpu.Device
	p    *printout
	text string
}

func (d printingDevice) NewQueue() (gpu.Queue, error) {
	q, err := d.Device.NewQueue()
	if err != nil {
		return nil, err
	}
	return printingQueue{q, d.p, d.text}, nil
}

// TestLaunchPrinting: OpLaunchPrinting returns what the kernel printed
// between the launch's start and end (what was printed before is
// discarded), at most the bytes asked for, with the rest counted; a
// server without an output refuses it as unsupported, before launching.
func TestLaunchPrinting(t *testing.T) {
	p := &printout{}
	dev := printingDevice{gputest.New(gputest.Config{}), p, "hello from the kernel\n"}
	a, b := socketPair(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ServeWith(b, dev, ServeOptions{Output: p}); err != nil {
			t.Errorf("ServeWith: %v", err)
		}
	}()
	t.Cleanup(wg.Wait)
	d, err := NewDevice(a)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	prog, _, err := q.Build(vadd, "")
	if err != nil {
		t.Fatal(err)
	}
	k, err := prog.Kernel("twice")
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := q.Alloc(16)
	args := []gpu.Arg{{Buffer: buf}}
	r := gpu.NDRange{Dims: 1, Global: [3]uint64{4, 1, 1}}
	pr, ok := gpu.Queue(q).(gpu.Printer)
	if !ok {
		t.Fatal("a remote queue is not a gpu.Printer")
	}
	p.mu.Lock()
	p.data = []byte("stale output of an earlier launch")
	p.mu.Unlock()
	_, out, err := pr.LaunchPrinting(k, r, args, 1<<20)
	if err != nil || string(out.Data) != "hello from the kernel\n" || out.Dropped != 0 {
		t.Fatalf("LaunchPrinting = %q (%d dropped), %v", out.Data, out.Dropped, err)
	}
	_, out, err = pr.LaunchPrinting(k, r, args, 5)
	if err != nil || string(out.Data) != "hello" || out.Dropped != uint64(len(dev.text)-5) {
		t.Fatalf("LaunchPrinting(5) = %q (%d dropped), %v", out.Data, out.Dropped, err)
	}
	_, out, err = pr.LaunchPrinting(k, r, args, 10*MaxPrintout)
	if err != nil || p.takeLimit != MaxPrintout || string(out.Data) != dev.text {
		t.Fatalf("a bound past MaxPrintout: took at most %d, %q, %v", p.takeLimit, out.Data, err)
	}
	if p.discards != 3 {
		t.Errorf("%d discards for 3 launches", p.discards)
	}
	if _, _, err := pr.LaunchPrinting(k, r, args, -1); !errors.Is(err, gpu.ErrInvalidLaunch) {
		t.Errorf("a negative bound = %v, want ErrInvalidLaunch", err)
	}

	// Without an output: unsupported, and nothing ran.
	plain := served(t, gputest.New(gputest.Config{}))
	defer plain.Close()
	q2, _ := plain.NewQueue()
	prog2, _, _ := q2.Build(vadd, "")
	k2, _ := prog2.Kernel("twice")
	buf2, _ := q2.Alloc(16)
	if _, _, err := q2.(gpu.Printer).LaunchPrinting(k2, r, []gpu.Arg{{Buffer: buf2}}, 100); !errors.Is(err, gpu.ErrUnsupported) {
		t.Errorf("LaunchPrinting without an output = %v, want ErrUnsupported", err)
	}
	if _, err := q2.Launch(k2, r, []gpu.Arg{{Buffer: buf2}}); err != nil {
		t.Errorf("a plain launch after the refusal: %v", err)
	}
}

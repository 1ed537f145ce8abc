package suite

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// Go models of the kernels in Source, for the fake device.

func f32(b []byte, i uint64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}
func put(b []byte, i uint64, v float32) {
	binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
}
func u32(a abi.KernelArg) uint32 { return binary.LittleEndian.Uint32(a.Bytes) }

var kernels = map[string]drivertest.KernelFunc{
	"vadd": func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
		a, b, c, n := buf(d.Args[0].Handle), buf(d.Args[1].Handle), buf(d.Args[2].Handle), uint64(u32(d.Args[3]))
		for i := uint64(0); i < min(n, d.GlobalSize[0]); i++ {
			put(c, i, f32(a, i)+f32(b, i))
		}
		return nil
	},
	"saxpy": func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
		alpha := math.Float32frombits(u32(d.Args[0]))
		x, y, n := buf(d.Args[1].Handle), buf(d.Args[2].Handle), uint64(u32(d.Args[3]))
		for i := uint64(0); i < min(n, d.GlobalSize[0]); i++ {
			put(y, i, alpha*f32(x, i)+f32(y, i))
		}
		return nil
	},
	"matmul": func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
		a, b, c, n := buf(d.Args[0].Handle), buf(d.Args[1].Handle), buf(d.Args[2].Handle), uint64(u32(d.Args[3]))
		for row := uint64(0); row < d.GlobalSize[1]; row++ {
			for col := uint64(0); col < d.GlobalSize[0]; col++ {
				var acc float32
				for k := uint64(0); k < n; k++ {
					acc += f32(a, row*n+k) * f32(b, k*n+col)
				}
				put(c, row*n+col, acc)
			}
		}
		return nil
	},
	"reduce": func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
		in, out, n, l := buf(d.Args[0].Handle), buf(d.Args[1].Handle), uint64(u32(d.Args[3])), d.LocalSize[0]
		if d.Args[2].Local != uint32(4*l) {
			return nil // leave the output wrong: the test will notice
		}
		for g := uint64(0); g < d.GlobalSize[0]/l; g++ {
			var s float32
			for i := g * l; i < (g+1)*l && i < n; i++ {
				s += f32(in, i)
			}
			put(out, g, s)
		}
		return nil
	},
}

func openFake(t *testing.T, cfg drivertest.Config) *driver.Device {
	t.Helper()
	f := drivertest.New(cfg, kernels)
	d, err := driver.Open(f, f, driver.Options{})
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

var small = Options{VectorN: 10000, MatrixN: 32, ReduceN: 100000}

func TestRunOnFake(t *testing.T) {
	d := openFake(t, drivertest.Config{})
	r := Run(context.Background(), d, small)
	if !r.OK() || r.Pass != 7 {
		t.Errorf("Run() = %s, want 7 passes", r)
	}
}

func TestRunHostileOnFake(t *testing.T) {
	d := openFake(t, drivertest.Config{MemSize: 1 << 20, MaxAlloc: 300 << 10})
	r := RunHostile(context.Background(), d, small)
	if !r.OK() || r.Pass != 7 {
		t.Errorf("RunHostile() = %s, want 7 passes", r)
	}
}

func TestRunDetectsWrongResults(t *testing.T) {
	broken := map[string]drivertest.KernelFunc{}
	for k, v := range kernels {
		broken[k] = v
	}
	broken["saxpy"] = func(*abi.LaunchDesc, func(uint32) []byte) error { return nil } // does nothing
	f := drivertest.New(drivertest.Config{}, broken)
	d, err := driver.Open(f, f, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r := Run(context.Background(), d, small)
	if r.OK() || r.Fail != 1 {
		t.Fatalf("Run(broken saxpy) = %s, want exactly one failure", r)
	}
	for _, c := range r.Cases {
		if c.Name == "saxpy" && (c.OK || !strings.Contains(c.Err, "y[0] =")) {
			t.Errorf("saxpy case = %+v, want a failure naming y[0]", c)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	d := openFake(t, drivertest.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := Run(ctx, d, small); r.OK() {
		t.Errorf("Run(cancelled) = %s, want failure", r)
	}
}

func TestReferences(t *testing.T) {
	a := []float32{1, 2, 3, 4}
	b := []float32{10, 20, 30, 40}
	if got := VectorAdd(a, b); got[3] != 44 {
		t.Errorf("VectorAdd()[3] = %g, want 44", got[3])
	}
	if got := SAXPY(2, a, b); got[1] != 24 {
		t.Errorf("SAXPY(2)[1] = %g, want 24", got[1])
	}
	// [1 2; 3 4] x [10 20; 30 40] = [70 100; 150 220]
	got := MatMul(a, b, 2)
	for i, w := range []float64{70, 100, 150, 220} {
		if got[i] != w {
			t.Errorf("MatMul()[%d] = %g, want %g", i, got[i], w)
		}
	}
	if got := Sum(a); got != 10 {
		t.Errorf("Sum() = %g, want 10", got)
	}
	if !Close(1.0000001, 1, 0, 1e-6) || Close(1.1, 1, 0, 1e-6) {
		t.Errorf("Close() tolerance wrong")
	}
	if x := Floats(7, 3, 0, 1); x[0] != Floats(7, 3, 0, 1)[0] || x[0] < 0 || x[0] >= 1 {
		t.Errorf("Floats(7) not deterministic or out of range: %v", x)
	}
	if got := FromBytes(Bytes(a)); got[2] != 3 {
		t.Errorf("FromBytes(Bytes(a))[2] = %g, want 3", got[2])
	}
}

func TestLine(t *testing.T) {
	r := Report{Mode: "suite", Device: "d", Cases: []Case{{Name: "a", OK: true}, {Name: "b", Err: "boom"}}, Pass: 1, Fail: 1}
	line := r.MarshalLine()
	if !strings.HasPrefix(line, "VGPU-RESULT {") || strings.Contains(line, "\n") {
		t.Fatalf("MarshalLine() = %q, want one VGPU-RESULT line", line)
	}
	got, err := ParseLine("boot noise\r\n[  1.0] x " + line + "\r\nmore\n")
	if err != nil || got.Fail != 1 || got.Cases[1].Err != "boom" || got.Mode != "suite" {
		t.Errorf("ParseLine(MarshalLine()) = %+v, %v, want the report back", got, err)
	}
	if _, err := ParseLine("nothing here"); err == nil {
		t.Errorf("ParseLine(no line) = nil error")
	}
	if s := r.String(); !strings.Contains(s, "FAIL b") && !strings.Contains(s, "boom") {
		t.Errorf("String() = %q, want the failing case", s)
	}
}

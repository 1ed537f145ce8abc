package job

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

// cpuDevice runs the job on the CPU; dropWrite > 0 loses that write (1 =
// the first) to show that the check notices lost uploads.
type cpuDevice struct {
	bufs      [][]byte
	writes    int
	dropWrite int
	launches  int
}

func (c *cpuDevice) Build(source, options string) error { return nil }
func (c *cpuDevice) Alloc(size uint64) (Buf, error) {
	c.bufs = append(c.bufs, make([]byte, size))
	return Buf(len(c.bufs) - 1), nil
}
func (c *cpuDevice) Write(b Buf, p []byte) error {
	c.writes++
	if c.writes != c.dropWrite {
		copy(c.bufs[b], p)
	}
	return nil
}
func (c *cpuDevice) Read(b Buf, p []byte) error { copy(p, c.bufs[b]); return nil }
func (c *cpuDevice) Finish() error              { return nil }
func (c *cpuDevice) MatMul(a, b, dst Buf, n, local int) (time.Duration, error) {
	c.launches++
	matmul(c.bufs[a], c.bufs[b], c.bufs[dst], uint64(n))
	return time.Duration(c.launches), nil
}

func f32(b []byte, i uint64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

func matmul(a, b, c []byte, n uint64) {
	for row := range n {
		for col := range n {
			var acc float32
			for k := range n {
				acc += f32(a, row*n+k) * f32(b, k*n+col)
			}
			binary.LittleEndian.PutUint32(c[4*(row*n+col):], math.Float32bits(acc))
		}
	}
}

func TestRunCPU(t *testing.T) {
	s := Spec{N: 32, Reps: 3, Local: 16, Seed: 7}
	c := &cpuDevice{}
	r, err := Run(context.Background(), s, c)
	if err != nil {
		t.Fatalf("Run(%+v) = %v", s, err)
	}
	if r.N != 32 || r.Reps != 3 || r.Checked != Checks || r.KernelLaunches != 3 || r.KernelNS != 1+2+3 || r.TotalNS <= 0 {
		t.Errorf("Run(%+v) = %+v, want n 32, 3 iterations, %d checked, 3 launches of 6 ns in all", s, r, Checks)
	}
	if c.writes != 1+3 {
		t.Errorf("Run(%+v) made %d writes, want 4 (B, then A per iteration)", s, c.writes)
	}
}

// TestRunNoticesLostUpload drops the last upload of A: the device then
// multiplies the other A, which the check must catch.
func TestRunNoticesLostUpload(t *testing.T) {
	s := Spec{N: 16, Reps: 2, Local: 16, Seed: 1}
	_, err := Run(context.Background(), s, &cpuDevice{dropWrite: 3})
	if !errors.Is(err, ErrWrongResult) {
		t.Errorf("Run with the last upload lost = %v, want ErrWrongResult", err)
	}
}

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
	for _, s := range []Spec{
		{N: 0, Reps: 1, Local: 16},
		{N: 24, Reps: 1, Local: 16},
		{N: 8192, Reps: 1, Local: 16},
		{N: 32, Reps: 0, Local: 16},
		{N: 32, Reps: 1, Local: 0},
		{N: 64, Reps: 1, Local: 64},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", s)
		}
		if _, err := Run(context.Background(), s, &cpuDevice{}); err == nil {
			t.Errorf("Run(%+v) = nil error, want the spec refused", s)
		}
	}
}

func fakeMatmul(broken bool) map[string]drivertest.KernelFunc {
	return map[string]drivertest.KernelFunc{
		Kernel: func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
			a, b, c := buf(d.Args[0].Handle), buf(d.Args[1].Handle), buf(d.Args[2].Handle)
			n := uint64(binary.LittleEndian.Uint32(d.Args[3].Bytes))
			matmul(a, b, c, n)
			if broken {
				binary.LittleEndian.PutUint32(c[4*(n*n-1):], math.Float32bits(42))
			}
			return nil
		},
	}
}

func openFake(t *testing.T, broken bool) *driver.Device {
	t.Helper()
	f := drivertest.New(drivertest.Config{}, fakeMatmul(broken))
	d, err := driver.Open(f, f, driver.Options{})
	if err != nil {
		t.Fatalf("driver.Open = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestRunDriver(t *testing.T) {
	tests := []struct {
		broken bool
		want   error
	}{
		{false, nil},
		{true, ErrWrongResult},
	}
	for _, tt := range tests {
		d := openFake(t, tt.broken)
		dd := NewDriverDevice(d)
		s := Spec{N: 32, Reps: 3, Local: 16, Seed: 3}
		r, err := Run(context.Background(), s, dd)
		if !errors.Is(err, tt.want) {
			t.Fatalf("Run(broken=%v) = %+v, %v, want error %v", tt.broken, r, err, tt.want)
		}
		if err == nil && (r.Checked != Checks || r.KernelLaunches != 3) {
			t.Errorf("Run(broken=%v) = %+v, want %d checked and 3 launches with a completion record", tt.broken, r, Checks)
		}
		if err := dd.Free(); err != nil {
			t.Errorf("Free() = %v", err)
		}
	}
}

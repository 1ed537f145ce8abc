package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
	"github.com/vgpud/vgpud/guestagent/job"
)

func f32(b []byte, i uint64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// useFake makes openDevice return an in-process fake vGPU with a Go matmul.
func useFake(t *testing.T) {
	t.Helper()
	kernels := map[string]drivertest.KernelFunc{
		job.Kernel: func(d *abi.LaunchDesc, buf func(uint32) []byte) error {
			a, b, c := buf(d.Args[0].Handle), buf(d.Args[1].Handle), buf(d.Args[2].Handle)
			n := uint64(binary.LittleEndian.Uint32(d.Args[3].Bytes))
			for row := range n {
				for col := range n {
					var acc float32
					for k := range n {
						acc += f32(a, row*n+k) * f32(b, k*n+col)
					}
					binary.LittleEndian.PutUint32(c[4*(row*n+col):], math.Float32bits(acc))
				}
			}
			return nil
		},
	}
	old := openDevice
	openDevice = func(string) (driver.Registers, driver.Memory, error) {
		f := drivertest.New(drivertest.Config{}, kernels)
		return f, f, nil
	}
	t.Cleanup(func() { openDevice = old })
}

func TestRun(t *testing.T) {
	useFake(t)
	var out bytes.Buffer
	args := []string{"-n", "32", "-reps", "2", "-runs", "3"}
	if err := run(context.Background(), args, &out); err != nil {
		t.Fatalf("run(%q) = %v\n%s", args, err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("run(%q) printed %d lines, want 3:\n%s", args, len(lines), out.String())
	}
	for _, line := range lines {
		js, ok := strings.CutPrefix(line, Marker)
		if !ok {
			t.Fatalf("run(%q) printed %q, want %q lines", args, line, Marker)
		}
		var l Line
		if err := json.Unmarshal([]byte(js), &l); err != nil {
			t.Fatalf("decode %q: %v", js, err)
		}
		if l.N != 32 || l.Reps != 2 || l.Checked != job.Checks || l.TotalNS <= 0 {
			t.Errorf("run(%q) result %+v, want n 32, 2 iterations, %d checked, total_ns > 0", args, l, job.Checks)
		}
	}
}

func TestRunErrors(t *testing.T) {
	useFake(t)
	for _, args := range [][]string{
		{"-n", "30"},
		{"-reps", "0"},
		{"-runs", "0"},
		{"extra"},
		{"-bogus"},
	} {
		if err := run(context.Background(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%q) = nil, want error", args)
		}
	}
}

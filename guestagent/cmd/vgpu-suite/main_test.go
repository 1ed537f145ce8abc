package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
	"github.com/vgpud/vgpud/guestagent/suite"
)

// useFake makes run open a fake device without kernels: builds work, every
// launch fails with not found.
func useFake(t *testing.T) {
	t.Helper()
	old := openDevice
	openDevice = func(string) (driver.Registers, driver.Memory, error) {
		f := drivertest.New(drivertest.Config{MemSize: 1 << 20, MaxAlloc: 1 << 19}, nil)
		return f, f, nil
	}
	t.Cleanup(func() { openDevice = old })
}

func TestRun(t *testing.T) {
	useFake(t)
	tests := []struct {
		args []string
		want error
	}{
		{[]string{"-mode", "suite", "-vector-n", "100", "-matrix-n", "16", "-reduce-n", "1000"}, errFailed},
		{[]string{"-mode", "bogus"}, nil},
		{[]string{"extra"}, nil},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		err := run(context.Background(), tt.args, &out)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("run(%q) = %v, want %v", tt.args, err, tt.want)
		}
		if tt.want == errFailed {
			r, perr := suite.ParseLine(out.String())
			if perr != nil || r.Fail == 0 || r.Mode != "suite" {
				t.Errorf("run(%q) printed %q: report %+v, %v", tt.args, out.String(), r, perr)
			}
		}
	}
}

func TestRunHostilePartly(t *testing.T) {
	useFake(t)
	var out bytes.Buffer
	// Without kernels the final vector add fails; the hostile cases pass.
	err := run(context.Background(), []string{"-mode", "hostile", "-vector-n", "64"}, &out)
	if !errors.Is(err, errFailed) {
		t.Fatalf("run(hostile) = %v, want errFailed", err)
	}
	r, perr := suite.ParseLine(out.String())
	if perr != nil || r.Fail != 1 || !strings.Contains(out.String(), "FAIL vector-add-after") {
		t.Errorf("run(hostile) output %q: %+v, %v, want only vector-add-after to fail", out.String(), r, perr)
	}
}

func TestRunReuseMode(t *testing.T) {
	useFake(t)
	var out bytes.Buffer
	// The fake has no kernels: launches fail, builds pass, in each run.
	err := run(context.Background(), []string{"-mode", "reuse", "-repeat", "3", "-vector-n", "64", "-matrix-n", "16", "-reduce-n", "64"}, &out)
	if !errors.Is(err, errFailed) {
		t.Fatalf("run(reuse) = %v, want errFailed", err)
	}
	r, perr := suite.ParseLine(out.String())
	if perr != nil || r.Mode != "reuse" || !strings.Contains(out.String(), "build#3") || strings.Contains(out.String(), "#4") {
		t.Errorf("run(reuse -repeat 3) printed %q: %+v, %v, want three runs", out.String(), r, perr)
	}
	if err := run(context.Background(), []string{"-mode", "reuse", "-repeat", "0"}, &out); err == nil || errors.Is(err, errFailed) {
		t.Errorf("run(-repeat 0) = %v, want a usage error", err)
	}
}

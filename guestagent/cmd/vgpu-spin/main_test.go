package main

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"

	"github.com/vgpud/vgpud/guestagent/driver"
)

func TestCheck(t *testing.T) {
	const iters = 7
	b := make([]byte, 4*64)
	for i := 0; i < 64; i++ {
		x := float32(i) * 0.001
		for range iters {
			x = x*0.999 + float32(math.Sin(float64(x)))
		}
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	if ok, err := check(b, iters); !ok || err != nil {
		t.Errorf("check(reference) = %v, %v, want true, nil", ok, err)
	}
	binary.LittleEndian.PutUint32(b[4*9:], math.Float32bits(42))
	if ok, err := check(b, iters); ok || err == nil {
		t.Errorf("check(wrong item) = %v, %v, want false and an error", ok, err)
	}
}

func TestBadFlags(t *testing.T) {
	errNoDevice := errors.New("no device here")
	openDevice = func() (driver.Registers, driver.Memory, error) { return nil, nil, errNoDevice }
	for _, args := range [][]string{{"-items", "100"}, {"-items", "0"}, {"-batch", "0"}, {"-batch", "49"}, {"extra", "-bogus"}} {
		if err := run(context.Background(), args, io.Discard); err == nil || errors.Is(err, errNoDevice) {
			t.Errorf("run(%q) = %v, want a flag error", args, err)
		}
	}
	if err := run(context.Background(), nil, io.Discard); !errors.Is(err, errNoDevice) {
		t.Errorf("run() = %v, want the device error", err)
	}
}

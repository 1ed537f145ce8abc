package main

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/vgpud/vgpud/gpu"
)

// TestKernelOnRealDevice builds kernelSrc on the host's OpenCL device and
// runs a few steps of it against cpuStep: the fake device of the other
// tests runs cpuStep itself, so it cannot catch a kernel that does not
// build, is not found by name (a kernel named like an OpenCL built-in,
// "step", builds but cannot be created) or computes something else.
func TestKernelOnRealDevice(t *testing.T) {
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatalf("gpu.Open: %v", err)
	}
	defer dev.Close()
	q, err := dev.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	prog, log, err := q.Build(kernelSrc, "")
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, log)
	}
	defer prog.Release()
	k, err := prog.Kernel(Kernel)
	if err != nil {
		t.Fatalf("Kernel(%q): %v (the program has %q)", Kernel, err, prog.KernelNames())
	}
	defer k.Release()
	const n, steps = 1000, 5
	v := initial(7, n)
	bufs := [2]gpu.Buffer{}
	for i := range bufs {
		if bufs[i], err = q.Alloc(4 * n); err != nil {
			t.Fatal(err)
		}
		defer bufs[i].Release()
	}
	if err := q.Write(bufs[0], 0, toBytes(v)); err != nil {
		t.Fatal(err)
	}
	for s := range steps {
		key := binary.LittleEndian.AppendUint32(nil, stepKey(s))
		args := []gpu.Arg{{Buffer: bufs[s%2]}, {Buffer: bufs[(s+1)%2]}, {Scalar: key}}
		if _, err := q.Launch(k, gpu.NDRange{Dims: 1, Global: [3]uint64{n}}, args); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
	}
	got := make([]byte, 4*n)
	if err := q.Read(bufs[steps%2], 0, got); err != nil {
		t.Fatal(err)
	}
	want := reference(7, n, steps)
	for i, x := range fromBytes(got) {
		if x != want[i] {
			t.Fatalf("element %d: device %#08x, CPU %#08x", i, x, want[i])
		}
	}
	// The ballast kernels: fill, then check finds nothing, then finds the
	// one element changed from the host.
	fill, err := prog.Kernel(FillKernel)
	if err != nil {
		t.Fatal(err)
	}
	defer fill.Release()
	check, err := prog.Kernel(CheckKernel)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Release()
	seed := binary.LittleEndian.AppendUint32(nil, ballastSeed(2, 3))
	if _, err := q.Launch(fill, gpu.NDRange{Dims: 1, Global: [3]uint64{n}}, []gpu.Arg{{Buffer: bufs[0]}, {Scalar: seed}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Read(bufs[0], 0, got); err != nil {
		t.Fatal(err)
	}
	for i, x := range fromBytes(got) {
		if want := ballastHash(uint32(i) ^ ballastSeed(2, 3)); x != want {
			t.Fatalf("ballast element %d: device %#08x, Go %#08x", i, x, want)
		}
	}
	bad, err := q.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Release()
	countBad := func() uint32 {
		t.Helper()
		if err := q.Write(bad, 0, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Launch(check, gpu.NDRange{Dims: 1, Global: [3]uint64{n}}, []gpu.Arg{{Buffer: bufs[0]}, {Scalar: seed}, {Buffer: bad}}); err != nil {
			t.Fatal(err)
		}
		c := make([]byte, 4)
		if err := q.Read(bad, 0, c); err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint32(c)
	}
	if c := countBad(); c != 0 {
		t.Errorf("check after fill counts %d bad elements, want 0", c)
	}
	if err := q.Write(bufs[0], 40, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if c := countBad(); c != 1 {
		t.Errorf("check after one changed element counts %d, want 1", c)
	}
}

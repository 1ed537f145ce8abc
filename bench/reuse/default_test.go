package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/bench/host"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/reuse"
)

// TestDefaultConfigServesRepeats guards the mechanism behind the reuse
// figure, not only its correctness. Each of the six kernels' job pattern
// (upload the inputs, create a fresh output, launch, download it, free
// it) is run four times with the same inputs by a guest on an instance
// created with vgpud's defaults: result reuse on, the instance's private
// domain, the default budget. The guest is the driver library on the
// QEMU-less harness VM, so inputs over half the driver's staging pool
// arrive as several sequential partial copies, as they do from a real
// guest. Repetitions 1 and 2 must get no hit (a launch is recorded at its
// second occurrence), repetitions 3 and 4 must be served from the table,
// and every download must be byte-identical to the first repetition's,
// which the device computed.
//
// The exception, documented in docs/reuse.md: lud's job is 510 in-place
// launches on one buffer whose intermediate states are never downloaded
// and are too cheap to capture, so from the third repetition its last
// launch is served and the others run again; but a step is captured, and
// served, when it took at least 20 ns per output byte on the device,
// which depends on the device and its load: Mesa's rusticl took that long
// for a few of lud's first steps (4 hits in one run of make
// test-platforms, 1 in another; docs/platforms.md). So lud must get at
// least the last launch's hit, and no more than its launches.
func TestDefaultConfigServesRepeats(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six kernels on the OpenCL device")
	}
	h, err := host.Start("", "vgpud-reuse-default-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("close host: %v", err)
		}
	})
	for bi, b := range benches() {
		t.Run(b.name, func(t *testing.T) {
			g := newDefaultGuest(t, h.Mgr)
			prog, _, err := g.d.Build(kernelSource, "")
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			inputs := make([]driver.Buffer, len(b.inputs))
			data := make([][]byte, len(b.inputs))
			r := rand.New(rand.NewPCG(uint64(bi), 1))
			for i, n := range b.inputs {
				if inputs[i], err = g.d.CreateBuffer(uint64(n)); err != nil {
					t.Fatal(err)
				}
				data[i] = make([]byte, n)
				for j := 0; j+4 <= n; j += 4 {
					binary.LittleEndian.PutUint32(data[i][j:], math.Float32bits(1+r.Float32()))
				}
			}
			launches := uint64(len(b.launches()))
			var first []byte
			for rep := 1; rep <= 4; rep++ {
				before := g.inst.ReuseStats()
				got := g.job(t, b, prog, inputs, data)
				after := g.inst.ReuseStats()
				hits := after.Hits - before.Hits
				var want uint64
				switch {
				case rep < 3:
					want = 0
				case b.inPlace:
					// The last in-place step, and any step slow
					// enough to be captured (see above).
					if hits >= 1 && hits <= launches {
						want = hits
						t.Logf("repetition %d: %d hits of %d launches", rep, hits, launches)
					} else {
						want = 1
					}
				default:
					want = launches
				}
				if hits != want {
					t.Errorf("repetition %d: %d hits of %d launches, want %d (counters before %+v, after %+v)",
						rep, hits, launches, want, before, after)
				}
				if rep == 1 {
					first = got
				} else if !bytes.Equal(got, first) {
					t.Errorf("repetition %d: download differs from the first repetition's (computed on the device)", rep)
				}
			}
		})
	}
}

// defaultGuest is a harness VM with the driver library on an instance
// created with the default settings.
type defaultGuest struct {
	inst *mdev.Instance
	d    *driver.Device
}

func newDefaultGuest(t *testing.T, m *mdev.Manager) *defaultGuest {
	t.Helper()
	inst, err := m.Create(mdev.CreateRequest{Profile: "vgpu-small"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Destroy(inst.UUID()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	if got, want := inst.ReuseDomain(), reuse.PrivatePrefix+inst.UUID(); got != want {
		t.Fatalf("default reuse domain = %q, want the private %q", got, want)
	}
	vm, err := mpqemutest.Dial(inst.Socket(), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	d, err := driver.Open(vm, vm, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &defaultGuest{inst: inst, d: d}
}

// job runs one job of b and returns the downloaded output.
func (g *defaultGuest) job(t *testing.T, b bench, prog driver.Program, inputs []driver.Buffer, data [][]byte) []byte {
	t.Helper()
	out := inputs[0]
	if !b.inPlace {
		var err error
		if out, err = g.d.CreateBuffer(uint64(b.output)); err != nil {
			t.Fatal(err)
		}
	}
	for i, in := range inputs {
		if err := g.d.Write(in, 0, data[i]); err != nil {
			t.Fatal(err)
		}
	}
	// The bench names inputs 1.. and the output 10 (docs of benches).
	buffers := map[uint32]driver.Buffer{10: out}
	for i, in := range inputs {
		buffers[uint32(i+1)] = in
	}
	for _, l := range b.launches() {
		args := make([]driver.Arg, len(l.Args))
		for i, a := range l.Args {
			switch a.Kind {
			case abi.ArgBuffer:
				args[i] = driver.BufferArg(buffers[a.Handle])
			case abi.ArgScalar:
				args[i] = driver.BytesArg(a.Bytes)
			default:
				t.Fatalf("%s: argument kind %v", l.Kernel, a.Kind)
			}
		}
		r := driver.NDRange{Dims: l.WorkDim, Global: l.GlobalSize, Local: l.LocalSize}
		if err := g.d.Launch(prog, l.Kernel, r, args...); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, out.Size)
	if err := g.d.Read(out, 0, got); err != nil {
		t.Fatal(err)
	}
	if !b.inPlace {
		if err := g.d.Free(out); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.d.Finish(); err != nil {
		t.Fatal(err)
	}
	return got
}

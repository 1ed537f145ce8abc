package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/vgpud/vgpud/bench/rodinia"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// kernelSource: the Rodinia-style kernels of bench/reuse and a spin
// kernel.
const kernelSource = rodinia.Source + `
__kernel void spin(__global float *out, uint iters) {
	size_t i = get_global_id(0);
	float x = (float)i * 0.001f;
	for (uint k = 0; k < iters; k++) x = x * 0.999f + sin(x);
	out[i] = x;
}
`

// workload is one kind of guest loop.
type workload struct {
	name string
	// bufs are the sizes of the buffers setup creates and fills.
	bufs []uint64
	// iter runs one iteration on g and waits for it.
	iter func(g *guest) error
}

func floats(n int, seed float32) []byte {
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(seed+float32(i%97)*0.01))
	}
	return b
}

// launchRead launches kernel k over r, then reads buffer out back.
func launchRead(g *guest, k string, r driver.NDRange, out int, args ...driver.Arg) error {
	if err := g.D.Launch(g.Prog, k, r, args...); err != nil {
		return err
	}
	if err := g.wait(); err != nil {
		return err
	}
	return g.D.Read(g.bufs[out], 0, g.scratch[:g.bufs[out].Size])
}

// think keeps the guest's CPU busy for d (a VM's own work between
// kernels), counted as busy time.
func think(d time.Duration) float64 {
	end := time.Now().Add(d)
	x := 1.0
	for time.Now().Before(end) {
		for range 1000 {
			x = x*0.999 + 0.001
		}
		runtime.Gosched()
	}
	return x
}

func workloads() []workload {
	buf := driver.BufferArg
	i32 := func(v int) driver.Arg { return driver.Int32Arg(int32(v)) }
	const md, mm, sr, bpIn, bpHid, hs, lu = 1 << 20, 256, 512, 4096, 256, 512, 96
	return []workload{
		{name: "madd", bufs: []uint64{4 * md, 4 * md, 4 * md}, iter: func(g *guest) error {
			return launchRead(g, "madd", driver.Range1(md, 64), 2, buf(g.bufs[0]), buf(g.bufs[1]), buf(g.bufs[2]), i32(md))
		}},
		{name: "mmul", bufs: []uint64{4 * mm * mm, 4 * mm * mm, 4 * mm * mm}, iter: func(g *guest) error {
			return launchRead(g, "mmul", driver.Range2(mm, mm, 16, 16), 2, buf(g.bufs[0]), buf(g.bufs[1]), buf(g.bufs[2]), i32(mm))
		}},
		{name: "srad", bufs: []uint64{4 * sr * sr, 4 * sr * sr}, iter: func(g *guest) error {
			return launchRead(g, "srad", driver.Range2(sr, sr, 16, 16), 1, buf(g.bufs[0]), buf(g.bufs[1]), i32(sr), i32(sr),
				driver.Float32Arg(0.5), driver.Float32Arg(0.1))
		}},
		{name: "backprop", bufs: []uint64{4 * bpIn, 4 * bpIn * bpHid, 4 * bpHid}, iter: func(g *guest) error {
			return launchRead(g, "backprop", driver.Range1(bpHid, 64), 2, buf(g.bufs[0]), buf(g.bufs[1]), buf(g.bufs[2]), i32(bpIn), i32(bpHid))
		}},
		{name: "hotspot", bufs: []uint64{4 * hs * hs, 4 * hs * hs, 4 * hs * hs}, iter: func(g *guest) error {
			return launchRead(g, "hotspot", driver.Range2(hs, hs, 16, 16), 2, buf(g.bufs[0]), buf(g.bufs[1]), buf(g.bufs[2]), i32(hs), i32(hs), i32(8))
		}},
		{name: "lud", bufs: []uint64{4 * lu * lu}, iter: func(g *guest) error {
			// Many short launches, one wait: the decomposition's steps.
			for k := 0; k < lu-1; k++ {
				if err := g.D.Launch(g.Prog, "lud", driver.Range2(uint64(lu-k-1), uint64(lu-k-1), 1, 1), buf(g.bufs[0]), i32(lu), i32(k)); err != nil {
					return err
				}
			}
			if err := g.wait(); err != nil {
				return err
			}
			return g.D.Read(g.bufs[0], 0, g.scratch[:g.bufs[0].Size])
		}},
		{name: "copy-heavy", bufs: []uint64{8 << 20}, iter: func(g *guest) error {
			if err := g.D.Write(g.bufs[0], 0, g.data[:8<<20]); err != nil {
				return err
			}
			return g.D.Read(g.bufs[0], 0, g.scratch[:8<<20])
		}},
		{name: "short-kernel", bufs: []uint64{4 * 64}, iter: func(g *guest) error {
			return g.spin(64, 200)
		}},
		{name: "long-kernel", bufs: []uint64{4 * 4096}, iter: func(g *guest) error {
			return g.spin(4096, 400)
		}},
		{name: "mixed", bufs: []uint64{4 * 4096, 1 << 20}, iter: func(g *guest) error {
			if err := g.spin(64, 200); err != nil {
				return err
			}
			if err := g.spin(4096, 200); err != nil {
				return err
			}
			if err := g.D.Write(g.bufs[1], 0, g.data[:1<<20]); err != nil {
				return err
			}
			return g.D.Read(g.bufs[1], 0, g.scratch[:1<<20])
		}},
		{name: "cpu-think", bufs: []uint64{4 * 64}, iter: func(g *guest) error {
			t := time.Now()
			g.sink += think(2 * time.Millisecond)
			g.busy += time.Since(t)
			return g.spin(64, 200)
		}},
	}
}

// byName returns the workloads named in names (all for none).
func byName(names []string) ([]workload, error) {
	all := workloads()
	if len(names) == 0 {
		return all, nil
	}
	var out []workload
	for _, n := range names {
		found := false
		for _, w := range all {
			if w.name == n {
				out, found = append(out, w), true
			}
		}
		if !found {
			var have []string
			for _, w := range all {
				have = append(have, w.name)
			}
			return nil, fmt.Errorf("workload %q: have %v", n, have)
		}
	}
	return out, nil
}

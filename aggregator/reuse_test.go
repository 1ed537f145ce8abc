package aggregator

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/reuse"
)

// reuseTestSource has kernels that read, write in place, write part of a
// buffer and chain; every kernel is deterministic.
const reuseTestSource = `
__kernel void scale(__global const float *in, __global float *out, float k) {
	size_t i = get_global_id(0);
	out[i] = in[i] * k + 1.0f;
}
__kernel void addto(__global float *acc, __global const float *x) {
	size_t i = get_global_id(0);
	acc[i] = acc[i] + x[i] * 0.5f;
}
__kernel void head(__global float *out, uint n) {
	size_t i = get_global_id(0);
	if (i < n) out[i] = (float)i;
}
`

// uncertainSource is never reused: a conditional directive.
const uncertainSource = `
#ifndef X
__kernel void bump(__global float *a) { a[get_global_id(0)] += 2.0f; }
#endif
`

func scalarF32(f float32) abi.KernelArg {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, math.Float32bits(f))
	return abi.KernelArg{Kind: abi.ArgScalar, Bytes: b}
}

func scalarU32(v uint32) abi.KernelArg {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, v)
	return abi.KernelArg{Kind: abi.ArgScalar, Bytes: b}
}

func bufArg(h uint32) abi.KernelArg { return abi.KernelArg{Kind: abi.ArgBuffer, Handle: h} }

// reuseRig runs one command stream on several guests at once: ref with
// reuse off, the others with reuse on.
type reuseRig struct {
	t      *testing.T
	guests []*testGuest
}

// each runs the commands made by mk on every guest and returns the
// records of each.
func (r *reuseRig) each(mk func(g *testGuest) []abi.Command) [][]abi.Completion {
	out := make([][]abi.Completion, len(r.guests))
	for i, g := range r.guests {
		out[i] = g.run(mk(g)...)
	}
	return out
}

// TestReuseMatchesNoReuse runs random command streams with reuse off (the
// reference) and on (two instances, private or in one domain, budgets
// from none to roomy, domains switched midway) and requires every
// download to be byte-identical and every status equal.
func TestReuseMatchesNoReuse(t *testing.T) {
	d, _ := newDevice(t)
	t.Cleanup(func() { d.Close() })
	iter := 0
	rapid.Check(t, func(rt *rapid.T) {
		iter++
		budget := rapid.SampledFrom([]int64{1, 3000, 1 << 20}).Draw(rt, "budget")
		shared := rapid.Bool().Draw(rt, "shared")
		eng := reuse.New(reuse.Config{Budget: budget})
		r := &reuseRig{t: t}
		for i := 0; i < 3; i++ {
			g := newTestGuest(t, d, fmt.Sprintf("r%d-%d", iter, i), 1<<20)
			r.guests = append(r.guests, g)
		}
		domainFor := func(i int, shared bool) *reuse.Domain {
			if shared {
				dom, err := eng.Shared("tenant")
				if err != nil {
					t.Fatal(err)
				}
				return dom
			}
			return eng.Private(r.guests[i].in.ID())
		}
		for i := 1; i < 3; i++ {
			r.guests[i].in.SetReuseDomain(domainFor(i, shared))
		}
		defer func() {
			for _, g := range r.guests {
				g.in.Close()
			}
		}()
		// Programs 1 (reusable) and 2 (uncertain).
		for h, src := range map[uint32]string{1: reuseTestSource, 2: uncertainSource} {
			recs := r.each(func(g *testGuest) []abi.Command { c, _ := g.build(h, src, 0); return []abi.Command{c} })
			for _, rs := range recs {
				if rs[0].Status != abi.StatusOK {
					t.Fatalf("build %d = %v", h, rs[0].Status)
				}
			}
		}
		sizes := map[uint32]int{} // live buffers: handle -> floats
		patterns := [][]float32{}
		for p := 0; p < 3; p++ {
			f := make([]float32, 512)
			for i := range f {
				f[i] = float32(p*1000 + i)
			}
			patterns = append(patterns, f)
		}
		check := func(what string, recs [][]abi.Completion, reads []func() []byte) {
			for i := 1; i < len(recs); i++ {
				for j := range recs[0] {
					if recs[i][j].Status != recs[0][j].Status {
						rt.Fatalf("%s: guest %d command %d status = %v, want %v (reuse off)", what, i, j, recs[i][j].Status, recs[0][j].Status)
					}
				}
				if reads != nil {
					if got, want := reads[i](), reads[0](); !bytes.Equal(got, want) {
						rt.Fatalf("%s: guest %d download = %v, want %v (reuse off)", what, i, floats(got)[:8], floats(want)[:8])
					}
				}
			}
		}
		handles := rapid.Uint32Range(1, 4)
		steps := rapid.IntRange(5, 40).Draw(rt, "steps")
		for s := 0; s < steps; s++ {
			h := handles.Draw(rt, "h")
			n, live := sizes[h]
			switch op := rapid.IntRange(0, 10).Draw(rt, "op"); {
			case !live || op == 0: // (re)create and fill
				if live {
					check("free", r.each(func(g *testGuest) []abi.Command {
						return []abi.Command{abi.NewCommand(&abi.BufferFree{Handle: h}, 0, 0)}
					}), nil)
				}
				n = rapid.SampledFrom([]int{256, 512}).Draw(rt, "n")
				sizes[h] = n
				p := patterns[rapid.IntRange(0, 2).Draw(rt, "pat")][:n]
				check("create", r.each(func(g *testGuest) []abi.Command {
					return []abi.Command{abi.NewCommand(&abi.BufferCreate{Handle: h, Size: uint64(4 * n)}, 0, 0), g.upload(h, floatBytes(p))}
				}), nil)
			case op == 1: // whole upload of a shared pattern
				p := patterns[rapid.IntRange(0, 2).Draw(rt, "pat")][:n]
				check("upload", r.each(func(g *testGuest) []abi.Command { return []abi.Command{g.upload(h, floatBytes(p))} }), nil)
			case op == 2: // partial upload
				off := rapid.IntRange(0, n-1).Draw(rt, "off")
				l := rapid.IntRange(1, n-off).Draw(rt, "len")
				data := floatBytes(patterns[2][:l])
				check("partial upload", r.each(func(g *testGuest) []abi.Command {
					table, count, _ := g.sg(data, len(data))
					return []abi.Command{abi.NewCommand(&abi.Copy{ToDevice: true, Handle: h, Offset: uint64(4 * off),
						SGCount: count, Length: uint64(len(data)), SGAddr: table}, 0, 0)}
				}), nil)
			case op == 3 || op == 4 || op == 5: // launch
				h2 := handles.Draw(rt, "h2")
				n2, ok := sizes[h2]
				if !ok {
					continue
				}
				items := uint64(min(n, n2))
				var desc abi.LaunchDesc
				prog := uint32(1)
				flags := uint16(0)
				switch op {
				case 3:
					desc = abi.LaunchDesc{Kernel: "scale", Args: []abi.KernelArg{bufArg(h2), bufArg(h), scalarF32(float32(rapid.IntRange(1, 3).Draw(rt, "k")))}}
				case 4:
					desc = abi.LaunchDesc{Kernel: "addto", Args: []abi.KernelArg{bufArg(h), bufArg(h2)}}
					if rapid.IntRange(0, 3).Draw(rt, "bump") == 0 {
						prog, desc = 2, abi.LaunchDesc{Kernel: "bump", Args: []abi.KernelArg{bufArg(h)}}
						items = uint64(n)
					}
				case 5:
					desc = abi.LaunchDesc{Kernel: "head", Args: []abi.KernelArg{bufArg(h), scalarU32(uint32(rapid.IntRange(0, n).Draw(rt, "head")))}}
					items = uint64(n)
				}
				if rapid.IntRange(0, 5).Draw(rt, "nondet") == 0 {
					flags = abi.FlagNondeterministic
				}
				desc.WorkDim, desc.GlobalSize = 1, [3]uint64{items}
				check("launch "+desc.Kernel, r.each(func(g *testGuest) []abi.Command {
					c := g.launch(prog, desc)
					c.Flags = flags
					return []abi.Command{c}
				}), nil)
			case op == 6: // download, whole or partial
				off := 0
				l := n
				if rapid.Bool().Draw(rt, "partial") {
					off = rapid.IntRange(0, n-1).Draw(rt, "doff")
					l = rapid.IntRange(1, n-off).Draw(rt, "dlen")
				}
				reads := make([]func() []byte, len(r.guests))
				check("download", r.each(func(g *testGuest) []abi.Command {
					table, count, pages := g.sg(nil, 4*l)
					i := len(reads) - 1
					for j := range reads {
						if reads[j] == nil {
							i = j
							break
						}
					}
					reads[i] = func() []byte {
						out := make([]byte, 0, 4*l)
						for k, p := range pages {
							out = append(out, g.get(p, min(abi.PageSize, 4*l-k*abi.PageSize))...)
						}
						return out
					}
					return []abi.Command{abi.NewCommand(&abi.Copy{Handle: h, Offset: uint64(4 * off), SGCount: count,
						Length: uint64(4 * l), SGAddr: table}, 0, 0)}
				}), reads)
			case op == 7: // move an instance between its private domain, the shared one and none
				i := rapid.IntRange(1, 2).Draw(rt, "who")
				switch rapid.IntRange(0, 2).Draw(rt, "to") {
				case 0:
					r.guests[i].in.SetReuseDomain(domainFor(i, false))
				case 1:
					r.guests[i].in.SetReuseDomain(domainFor(i, true))
				case 2:
					r.guests[i].in.SetReuseDomain(nil)
				}
			case op == 8: // an upload split into sequential parts (as the guest driver splits large ones)
				p := floatBytes(patterns[rapid.IntRange(0, 2).Draw(rt, "pat")][:n])
				cut := 4 * rapid.IntRange(1, n-1).Draw(rt, "cut")
				stop := rapid.Bool().Draw(rt, "stop") // the second part never comes
				peek := rapid.Bool().Draw(rt, "peek") // a read between the parts
				reads := make([]func() []byte, len(r.guests))
				k := 0
				check("split upload", r.each(func(g *testGuest) []abi.Command {
					part := func(off, end int) abi.Command {
						table, count, _ := g.sg(p[off:end], end-off)
						return abi.NewCommand(&abi.Copy{ToDevice: true, Handle: h, Offset: uint64(off),
							SGCount: count, Length: uint64(end - off), SGAddr: table}, 0, 0)
					}
					cmds := []abi.Command{part(0, cut)}
					if peek {
						get, read := g.download(h, 4*n)
						cmds = append(cmds, get)
						reads[k] = read
					}
					if !stop {
						cmds = append(cmds, part(cut, len(p)))
					}
					k++
					return cmds
				}), map[bool][]func() []byte{true: reads}[peek])
			case op == 9: // buffer-fill, whole or partial
				off, l := 0, n
				if rapid.Bool().Draw(rt, "fpartial") {
					off = rapid.IntRange(0, n-1).Draw(rt, "foff")
					l = rapid.IntRange(1, n-off).Draw(rt, "flen")
				}
				v := floatBytes([]float32{float32(rapid.IntRange(0, 2).Draw(rt, "fv"))})
				check("fill", r.each(func(g *testGuest) []abi.Command {
					pat := g.alloc(4)
					g.put(pat, v)
					return []abi.Command{abi.NewCommand(&abi.BufferFill{Handle: h, PatternLen: 4, Offset: uint64(4 * off),
						Length: uint64(4 * l), PatternAddr: pat}, 0, 0)}
				}), nil)
			case op == 10: // buffer-copy from another live buffer, or within one
				h2 := handles.Draw(rt, "ch")
				n2, ok := sizes[h2]
				if !ok {
					continue
				}
				l := rapid.IntRange(1, min(n, n2)).Draw(rt, "clen")
				so := rapid.IntRange(0, n2-l).Draw(rt, "csrc")
				do := rapid.IntRange(0, n-l).Draw(rt, "cdst")
				// Overlapping ranges of one buffer are refused on every guest alike.
				check("copy", r.each(func(g *testGuest) []abi.Command {
					return []abi.Command{abi.NewCommand(&abi.BufferCopy{Src: h2, Dst: h, SrcOffset: uint64(4 * so),
						DstOffset: uint64(4 * do), Length: uint64(4 * l)}, 0, 0)}
				}), nil)
			}
		}
	})
}

// TestReuseSeesCopyAndFill: a buffer-fill or buffer-copy into a launch's
// input changes what reuse believes the input holds, so the launch that
// follows runs on the new content and is never answered with the result
// of the old one; and content held in host memory (a whole upload not yet
// on the device) is what a copy reads and what a partial fill lands on.
func TestReuseSeesCopyAndFill(t *testing.T) {
	d, _ := newDevice(t)
	eng := reuse.New(reuse.Config{})
	dom, err := eng.Shared("cf")
	if err != nil {
		t.Fatal(err)
	}
	const n = 256
	ones, twos := make([]float32, n), make([]float32, n)
	for i := range ones {
		ones[i], twos[i] = 1, 2
	}
	g := newTestGuest(t, d, "cf", 1<<20)
	g.in.SetReuseDomain(dom)
	c, _ := g.build(1, reuseTestSource, 0)
	g.mustOK(g.run(c,
		abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 4 * n}, 0, 0), // input
		abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 4 * n}, 0, 0), // output
		abi.NewCommand(&abi.BufferCreate{Handle: 3, Size: 4 * n}, 0, 0), // a source of copies
	)...)
	// out = in*2 + 1, downloaded. The output is uploaded first (zeros), so
	// that reuse knows every argument's content.
	zeros := make([]byte, 4*n)
	scale := func(what string, want float32) {
		t.Helper()
		get, read := g.download(2, 4*n)
		g.mustOK(g.run(g.upload(2, zeros), g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{n}, Kernel: "scale",
			Args: []abi.KernelArg{bufArg(1), bufArg(2), scalarF32(2)}}), get)...)
		out := floats(read())
		for i, v := range out {
			if v != want {
				t.Fatalf("%s: out[%d] = %v, want %v", what, i, v, want)
			}
		}
	}
	fill := func(h uint32, off, l uint64, v float32) abi.Command {
		pat := g.alloc(4)
		g.put(pat, floatBytes([]float32{v}))
		return abi.NewCommand(&abi.BufferFill{Handle: h, PatternLen: 4, Offset: off, Length: l, PatternAddr: pat}, 0, 0)
	}
	// The same upload three times: the launch is recorded, then served
	// from the table.
	for i := 0; i < 3; i++ {
		g.mustOK(g.run(g.upload(1, floatBytes(ones)))...)
		scale("upload of ones", 3)
	}
	if g.in.ReuseStats().Hits.Load() == 0 {
		t.Fatalf("no reuse hit before the fill: the test proves nothing")
	}
	hits := g.in.ReuseStats().Hits.Load()
	// A whole fill replaces the input (held in host memory until now).
	g.mustOK(g.run(fill(1, 0, 4*n, 5))...)
	scale("after a whole fill", 11)
	// The same upload again, then a partial fill over it: the upload must
	// reach the device under the fill.
	g.mustOK(g.run(g.upload(1, floatBytes(ones)), fill(1, 0, 4*n/2, 4))...)
	get, read := g.download(1, 4*n)
	g.mustOK(g.run(get)...)
	if in := floats(read()); in[0] != 4 || in[n-1] != 1 {
		t.Fatalf("after a partial fill over an upload: in[0] = %v, in[%d] = %v, want 4 and 1", in[0], n-1, in[n-1])
	}
	// Back to the recorded input, then a copy from a buffer whose content
	// is a pending upload of twos: the copy reads the twos.
	g.mustOK(g.run(g.upload(1, floatBytes(ones)), g.upload(3, floatBytes(twos)))...)
	scale("ones again", 3)
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCopy{Src: 3, Dst: 1, Length: 4 * n}, 0, 0))...)
	scale("after a whole copy of twos", 5)
	// A copy of part of the input within the input (a move of the first
	// half over the second) after a recorded launch.
	g.mustOK(g.run(g.upload(1, floatBytes(ones)), fill(1, 0, 4*n/2, 2))...)
	g.mustOK(g.run(abi.NewCommand(&abi.BufferCopy{Src: 1, Dst: 1, DstOffset: 4 * n / 2, Length: 4 * n / 2}, 0, 0))...)
	scale("after a fill and a copy within", 5)
	if g.in.ReuseStats().Hits.Load() < hits+1 {
		t.Errorf("hits = %d: the recorded upload of ones was not served again", g.in.ReuseStats().Hits.Load())
	}
}

// TestReuseHitsChain checks that a repeated chain of launches is served
// from the table (counters), including for a second instance in the same
// domain, and not for one in another domain.
func TestReuseHitsChain(t *testing.T) {
	d, _ := newDevice(t)
	t.Cleanup(func() { d.Close() })
	eng := reuse.New(reuse.Config{})
	dom, err := eng.Shared("t")
	if err != nil {
		t.Fatal(err)
	}
	// 64 KiB buffers: a scale launch over them takes far less than the
	// 20 ns per output byte that would make vgpud capture its result at
	// once (captureNsPerByte), so the first launch's output is never
	// captured, on any machine.
	const n = 16384
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i)
	}
	job := func(g *testGuest) []float32 {
		t.Helper()
		c, _ := g.build(1, reuseTestSource, 0)
		get, read := g.download(3, 4*n)
		g.mustOK(g.run(c,
			abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 4 * n}, 0, 0),
			abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 4 * n}, 0, 0),
			abi.NewCommand(&abi.BufferCreate{Handle: 3, Size: 4 * n}, 0, 0),
			g.upload(1, floatBytes(in)),
			g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{n}, Kernel: "scale", Args: []abi.KernelArg{bufArg(1), bufArg(2), scalarF32(2)}}),
			g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{n}, Kernel: "scale", Args: []abi.KernelArg{bufArg(2), bufArg(3), scalarF32(3)}}),
			get,
		)...)
		return floats(read())
	}
	tests := []struct {
		name     string
		dom      func(g *testGuest) *reuse.Domain
		wantHits uint64
	}{
		// The upload is new: the sample filter runs the job unrecorded.
		{"first", func(*testGuest) *reuse.Domain { return dom }, 0},
		// Its sample repeats: both launches are recorded; the second's
		// output is captured by the download.
		{"second", func(*testGuest) *reuse.Domain { return dom }, 0},
		// The first launch is cheap next to reading its output back, so its
		// result is captured only by a download, which this job never does:
		// it runs again, and the second launch hits.
		{"same domain", func(*testGuest) *reuse.Domain { return dom }, 1},
		{"private", func(g *testGuest) *reuse.Domain { return eng.Private(g.in.ID()) }, 0},
	}
	for i, tc := range tests {
		g := newTestGuest(t, d, fmt.Sprintf("chain%d", i), 1<<20)
		g.in.SetReuseDomain(tc.dom(g))
		got := job(g)
		if want := float32((5*2+1)*3 + 1); got[5] != want {
			t.Errorf("%s: result[5] = %v, want %v", tc.name, got[5], want)
		}
		if h := g.in.ReuseStats().Hits.Load(); h != tc.wantHits {
			t.Errorf("%s: hits = %d, want %d", tc.name, h, tc.wantHits)
		}
	}
}

// sneakySource writes through a pointer its signature declares const: the
// compiler only warns (the vstore discards the qualifier), so reuse must
// not trust the signature.
const sneakySource = `__kernel void sneaky(__global const float *in, __global float *out) {
	size_t i = get_global_id(0);
	out[i] = in[i] + 1.0f;
	if (i == 0) vstore4((float4)(42.0f), 0, in);
}`

// TestReuseDistrustsWarnings: a kernel that writes through a pointer its
// signature declares const is never reused, so the buffer never keeps a
// stale digest. Two rules refuse it: the signature reader (a pointer handed
// to a builtin) and, as a second line for what a reader could miss, the
// build warning the const-discarding conversion produces.
func TestReuseDistrustsWarnings(t *testing.T) {
	d, _ := newDevice(t)
	t.Cleanup(func() { d.Close() })
	eng := reuse.New(reuse.Config{})
	dom, err := eng.Shared("w")
	if err != nil {
		t.Fatal(err)
	}
	in := make([]float32, 64)
	for r := 0; r < 3; r++ {
		g := newTestGuest(t, d, fmt.Sprintf("warn%d", r), 1<<20)
		g.in.SetReuseDomain(dom)
		c, _ := g.build(1, sneakySource, 0)
		getIn, readIn := g.download(1, 256)
		g.mustOK(g.run(c,
			abi.NewCommand(&abi.BufferCreate{Handle: 1, Size: 256}, 0, 0),
			abi.NewCommand(&abi.BufferCreate{Handle: 2, Size: 256}, 0, 0),
			g.upload(1, floatBytes(in)),
			g.launch(1, abi.LaunchDesc{WorkDim: 1, GlobalSize: [3]uint64{64}, Kernel: "sneaky", Args: []abi.KernelArg{bufArg(1), bufArg(2)}}),
			getIn,
		)...)
		if got := floats(readIn())[0]; got != 42 {
			t.Errorf("run %d: in[0] = %v after the kernel wrote 42 through its const pointer", r, got)
		}
		if h := g.in.ReuseStats().Hits.Load(); h != 0 {
			t.Errorf("run %d: %d hits on a program whose build warned", r, h)
		}
	}
}

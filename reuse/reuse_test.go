package reuse

import (
	"bytes"
	"testing"
	"time"
)

func TestParseProgram(t *testing.T) {
	tests := []struct {
		name, src, opts string
		kernel          string
		want            []ArgKind
		noReuse         bool
		uncertain       bool
	}{
		{name: "inputs and outputs", kernel: "k",
			src:  "__kernel void k(__global const float *a, const __global float *b, __global float const *c, __constant float *d, __global float *o, __global float * const p, __local float *l, uint n) { o[0] = a[0]*b[0]; }",
			want: []ArgKind{ArgIn, ArgIn, ArgIn, ArgIn, ArgOut, ArgOut, ArgLocal, ArgScalar}},
		{name: "no args", kernel: "k", src: "kernel void k(void) {}", want: nil},
		{name: "define allowed", kernel: "k", src: "#define N 16\n__kernel void k(__global float *o) { o[0] = N; }", want: []ArgKind{ArgOut}},
		{name: "atomics", kernel: "k", src: "__kernel void k(__global int *o) { atomic_add(o, 1); }", want: []ArgKind{ArgOut}, noReuse: true},
		{name: "ifdef", src: "#ifdef X\n__kernel void k(__global float *o) {}\n#endif", uncertain: true},
		{name: "macro in signature", src: "#define T float\n__kernel void k(__global T *o) {}", uncertain: true},
		{name: "option macro in signature", opts: "-DT=float", src: "__kernel void k(__global const T *o) {}", uncertain: true},
		{name: "redefined const", src: "#define const\n__kernel void k(__global const float *o) {}", uncertain: true},
		{name: "cast away const", src: "__kernel void k(__global const float *i) { ((__global float *)i)[0] = 1; }", uncertain: true},
		{name: "generic cast", src: "__kernel void k(__global const float *i) { float *p = (float *)i; p[0] = 1; }", uncertain: true},
		{name: "pointer without const", src: "__kernel void k(__global const float *i) { float *p = i; p[0] = 1; }", uncertain: true},
		{name: "helper with pointer", src: "void h(__global float *p) { p[0] = 1; }\n__kernel void k(__global const float *i) { h(i); }", uncertain: true},
		{name: "program-scope global", src: "__global int counter;\n__kernel void k(__global float *o) { o[0] = counter++; }", uncertain: true},
		{name: "line splice", src: "__kernel void k(__global const \\\n float *o) {}", uncertain: true},
		{name: "digraph", src: "__kernel void k(__global float *o) <% %>", uncertain: true},
		{name: "image", src: "__kernel void k(__read_only image2d_t im) {}", uncertain: true},
		{name: "private pointer param", src: "__kernel void k(float *o) {}", uncertain: true},
		{name: "duplicate", src: "__kernel void k(__global float *o) {}\n__kernel void k(__global float *o) {}", uncertain: true},
		{name: "multiplication ok", kernel: "k", src: "__kernel void k(__global const float *a, __global float *o, int n) { int i = n * 2; o[i] = a[i] * a[n]; }",
			want: []ArgKind{ArgIn, ArgOut, ArgScalar}},
	}
	for _, tt := range tests {
		p := ParseProgram(tt.src, tt.opts)
		if tt.uncertain {
			if p.Uncertain == "" {
				t.Errorf("%s: ParseProgram() = certain %+v, want uncertain", tt.name, p.Kernels)
			}
			continue
		}
		k, ok := p.Kernel(tt.kernel)
		if !ok {
			t.Errorf("%s: Kernel(%q) missing (uncertain: %q)", tt.name, tt.kernel, p.Uncertain)
			continue
		}
		if len(k.Args) != len(tt.want) {
			t.Errorf("%s: args = %v, want %v", tt.name, k.Args, tt.want)
			continue
		}
		for i := range k.Args {
			if k.Args[i] != tt.want[i] {
				t.Errorf("%s: args = %v, want %v", tt.name, k.Args, tt.want)
				break
			}
		}
		if (k.NoReuse != "") != tt.noReuse {
			t.Errorf("%s: NoReuse = %q, want set %v", tt.name, k.NoReuse, tt.noReuse)
		}
	}
}

func FuzzParseProgram(f *testing.F) {
	f.Add("__kernel void k(__global const float *a, __global float *o) { o[0] = a[0]; }", "")
	f.Add("#define X 1\nkernel void k(void) {}", "-DY=2")
	f.Fuzz(func(t *testing.T, src, opts string) {
		p := ParseProgram(src, opts)
		if p.Uncertain == "" && p.Kernels == nil {
			t.Fatalf("ParseProgram(%q) certain with no kernel map", src)
		}
	})
}

func TestDomainBudgetAndCapture(t *testing.T) {
	e := New(Config{Budget: 100})
	d := e.Private("a")
	k := func(b byte) Key { return Key{b} }
	e1 := d.Record(k(1), time.Millisecond, []Output{{Arg: 1, Size: 60}})
	if _, ok := d.Probe(k(1)); ok {
		t.Fatalf("Probe(uncaptured) = hit, want miss")
	}
	d.Capture(e1, 0, make([]byte, 59)) // wrong size: ignored
	d.Capture(e1, 0, bytes.Repeat([]byte{7}, 60))
	got, ok := d.Probe(k(1))
	if !ok || !bytes.Equal(got.Outputs[0].Data(), bytes.Repeat([]byte{7}, 60)) || got.Outputs[0].Digest != d.Content(bytes.Repeat([]byte{7}, 60)) {
		t.Fatalf("Probe(captured) = %v, %v; want the captured entry", got, ok)
	}
	d.Record(k(2), time.Millisecond, []Output{{Arg: 0, Size: 60}}) // evicts 1
	if _, ok := d.Probe(k(1)); ok || d.Stats.Evictions.Load() != 1 || d.Bytes() != 60 {
		t.Fatalf("after eviction: hit %v, evictions %d, bytes %d; want miss, 1, 60", ok, d.Stats.Evictions.Load(), d.Bytes())
	}
	if e := d.Record(k(3), 0, []Output{{Size: 101}}); e != nil {
		t.Fatalf("Record(over budget) = %v, want nil", e)
	}
	d.SetBudget(0)
	if d.Bytes() != 0 || d.Entries() != 0 {
		t.Fatalf("SetBudget(0): %d bytes in %d entries, want none", d.Bytes(), d.Entries())
	}
}

func TestDigests(t *testing.T) {
	e := New(Config{})
	a, b := e.Private("a"), e.Private("b")
	data := []byte("some buffer")
	if a.Content(data) == b.Content(data) {
		t.Errorf("private domains share a content digest; want per-domain seeds")
	}
	s1, _ := e.Shared("x")
	s2, _ := e.Shared("y")
	if s1.Content(data) != s2.Content(data) || s1.Content(data) != SHA256(data) {
		t.Errorf("shared domains: content digest not SHA-256")
	}
	if _, err := e.Shared(PrivatePrefix + "a"); err == nil {
		t.Errorf("Shared(%q) = nil error, want ErrBadDomain", PrivatePrefix+"a")
	}
	k := NewKey("dev", ProgramDigest("src", ""), "k")
	k.Scalar([]byte{1})
	k2 := NewKey("dev", ProgramDigest("src", ""), "k")
	k2.Local(1)
	if k.Sum() == k2.Sum() {
		t.Errorf("scalar and local argument keys collide")
	}
	// Keys and output names: SHA-256 in shared domains (equal across them),
	// seeded per private domain (equal nowhere else), and never equal to a
	// content digest of the same bytes.
	if s1.Key(k) != s2.Key(k) || s1.Key(k) != k.Sum() {
		t.Errorf("shared domains: keys differ or are not SHA-256")
	}
	if a.Key(k) == b.Key(k) || a.Key(k) == s1.Key(k) || a.Key(k) != a.Key(k) {
		t.Errorf("private domain keys: not seeded per domain, or not stable")
	}
	if a.Output(a.Key(k), 0) == a.Output(a.Key(k), 1) || a.Output(a.Key(k), 0) == b.Output(a.Key(k), 0) ||
		s1.Output(s1.Key(k), 0) != OutputDigest(s1.Key(k), 0) {
		t.Errorf("output names: arguments or domains collide, or shared ones are not OutputDigest")
	}
	if Digest(a.Key(k)) == a.Content(k.buf) {
		t.Errorf("a private key equals the content digest of its own bytes")
	}
}

// TestAbandonedKeysNotRecorded: once an entry is abandoned, Record skips
// its key (the access pattern would abandon it again) but for one attempt
// in retryAbandoned, and other keys are recorded as before.
func TestAbandonedKeysNotRecorded(t *testing.T) {
	d := New(Config{}).Private("a")
	k := Key{1}
	out := func() []Output { return []Output{{Arg: 0, Size: 8}} }
	e := d.Record(k, time.Millisecond, out())
	if e == nil {
		t.Fatal("Record(new key) = nil")
	}
	d.Abandon(e)
	if d.Live(e) {
		t.Fatal("abandoned entry still live")
	}
	for i := 1; i < retryAbandoned; i++ {
		if e := d.Record(k, time.Millisecond, out()); e != nil {
			t.Fatalf("Record attempt %d after Abandon = %v, want nil", i, e)
		}
	}
	if d.Record(k, time.Millisecond, out()) == nil {
		t.Fatalf("Record attempt %d after Abandon = nil, want the retry to record", retryAbandoned)
	}
	// Not abandoned again: recorded at every attempt from now on.
	if d.Record(k, time.Millisecond, out()) == nil {
		t.Fatalf("Record after the retry = nil")
	}
	if first := d.Record(Key{2}, 0, out()); first == nil {
		t.Errorf("Record(other key) = nil after an abandon")
	}
}

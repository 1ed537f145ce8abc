package reuse

import (
	"testing"
	"time"
)

// BenchmarkLaunchKey is the key of a launch like one lud step: a buffer
// and two scalars, in a private and in a shared domain.
func BenchmarkLaunchKey(b *testing.B) {
	e := New(Config{})
	shared, _ := e.Shared("s")
	for _, d := range []*Domain{e.Private("p"), shared} {
		b.Run(map[bool]string{false: "private", true: "shared"}[d.Shared()], func(b *testing.B) {
			prog := ProgramDigest("kernel void k(global float *m, int n, int k) {}", "")
			content := Fresh(256 << 10)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				kb := NewKey("pthread-skylake-avx512", prog, "lud")
				kb.Range(2, [3]uint64{}, [3]uint64{255, 255, 1}, [3]uint64{})
				kb.Buffer(256<<10, 0, content, 0)
				kb.Scalar([]byte{0, 1, 0, 0})
				kb.Scalar([]byte{byte(i), 0, 0, 0})
				_ = d.Key(kb)
			}
		})
	}
}

// BenchmarkRepeatedMiss is a launch the domain has seen and whose entry
// was abandoned: the per-launch cost of a chain step that runs anyway.
func BenchmarkRepeatedMiss(b *testing.B) {
	d := New(Config{}).Private("x")
	k := Key{1}
	e := d.Record(k, time.Millisecond, []Output{{Arg: 0, Size: 8}})
	d.Abandon(e)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := d.Probe(k); ok {
			b.Fatal("hit")
		}
		d.Seen(k)
		d.Record(k, time.Millisecond, []Output{{Arg: 0, Size: 8}})
		_ = d.Output(k, 0)
	}
}

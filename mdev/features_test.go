package mdev

import (
	"math"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/interference"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestFeaturesBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := Counters{At: t0, DeviceNanos: 1e9, ToDev: 1e6, FromDev: 2e6, MemTotal: 1 << 30, WorkItems: 100}
	a.KernelCount[0], a.KernelNanos[0] = 5, 2000
	b := a
	b.At = t0.Add(2 * time.Second)
	b.DeviceNanos += 1e9 // half the wall time
	b.ToDev += 8e6       // 4 MB/s
	b.FromDev += 2e6     // 1 MB/s
	b.MemUsed = 1 << 28
	b.VMMem = 512 << 20
	short := aggregator.KernelBucket(100_000) // 100 us
	long := aggregator.KernelBucket(5_000_000)
	b.KernelCount[short] += 3
	b.KernelNanos[short] += 300_000
	b.KernelCount[long] += 1
	b.KernelNanos[long] += 5_000_000
	b.WorkItems += 4 * 64
	got := FeaturesBetween(a, b)
	want := interference.Features{DeviceUtil: 0.5, MemUtil: 0.25, ToDevMBps: 4, FromDevMBps: 1, VMMemGiB: 0.5,
		WorkItems: 64, KernelMeanMs: 5.3 / 4, LongKernelMeanMs: 5, LongShortRatio: 1.0 / 3, LaunchesPerSec: 2}
	for f := range interference.NumFeatures {
		if !near(got.Get(f), want.Get(f)) {
			t.Errorf("%s = %v, want %v", f, got.Get(f), want.Get(f))
		}
	}

	// Counters a lying worker moved backwards count nothing.
	back := a
	back.At = b.At
	back.ToDev, back.DeviceNanos = 0, 0
	if f := FeaturesBetween(a, back); f.ToDevMBps != 0 || f.DeviceUtil != 0 || f.Validate() != nil {
		t.Errorf("counters going backwards: %+v", f)
	}
	// No time passed: rates stay 0, nothing divides by zero.
	if f := FeaturesBetween(b, b); f.Validate() != nil || f.DeviceUtil != 0 || f.MemUtil != 0.25 {
		t.Errorf("same snapshot: %+v", f)
	}
}

func TestVCPULoad(t *testing.T) {
	g := func(upS float64, busy, idle uint64) Counters {
		return Counters{HaveGuest: true, Guest: agentmsg.GuestStats{UptimeNs: uint64(upS * 1e9), User: busy, Idle: idle}}
	}
	tests := []struct {
		name       string
		a, b       Counters
		vcpus, use float64
	}{
		{"no agent", Counters{}, Counters{}, 0, 0},
		{"between", g(10, 500, 1500), g(20, 1500, 2500), 2, 0.5}, // 2000 jiffies in 10 s: 2 vCPUs
		{"since boot", Counters{}, g(10, 1000, 3000), 4, 0.25},
		{"clock stood still", g(10, 1000, 3000), g(10, 1000, 3000), 4, 0.25},
	}
	for _, tt := range tests {
		v, u := vcpuLoad(tt.a, tt.b)
		if v != tt.vcpus || !near(u, tt.use) {
			t.Errorf("%s: vcpuLoad = %v, %v; want %v, %v", tt.name, v, u, tt.vcpus, tt.use)
		}
	}
}

func TestFeatureWindow(t *testing.T) {
	var w featureWindow
	t0 := time.Unix(0, 0)
	if _, ok := w.oldest(t0); ok {
		t.Fatal("empty window has a sample")
	}
	for s := range 6 {
		w.add(Counters{At: t0.Add(time.Duration(s) * time.Second)})
	}
	if len(w.samples) != featureSamples {
		t.Fatalf("kept %d samples, want %d", len(w.samples), featureSamples)
	}
	if c, _ := w.oldest(t0.Add(3 * time.Second)); !c.At.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("oldest since 3s = %v", c.At)
	}
	if c, _ := w.oldest(t0); !c.At.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("oldest since 0 = %v, want the oldest kept (2s)", c.At)
	}
	if c, _ := w.oldest(t0.Add(time.Hour)); !c.At.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("oldest since later = %v, want the newest", c.At)
	}
}

// TestFeaturesFromWorker runs work through a real worker and checks that
// the features see it: the counters cross the instance page, and a tick
// of the sampler after the work does not hide it from a young instance's
// features.
func TestFeaturesFromWorker(t *testing.T) {
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-small", NoReuse: true})
	d := openDriver(t, attach(t, inst))
	prog, _, err := d.Build(`__kernel void inc(__global int *b) { b[get_global_id(0)] += 1; }`, "")
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.CreateBuffer(4096 * 4)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 4096*4)
	if err := d.Write(buf, 0, data); err != nil {
		t.Fatal(err)
	}
	const launches = 5
	for range launches {
		if err := d.Launch(prog, "inc", driver.Range1(4096, 64), driver.BufferArg(buf)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Read(buf, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	c := inst.Counters()
	var n uint64
	for _, k := range c.KernelCount {
		n += k
	}
	if n != launches || c.WorkItems != launches*4096 {
		t.Errorf("counters: %d launches of %d items, want %d of %d", n, c.WorkItems, launches, launches*4096)
	}
	// The sampler ticks after the work (the window's newest sample
	// then holds it all): a young instance's features still span its
	// life (a CI run's TestGuestBlocksThroughAgent read zeros so).
	inst.window.add(inst.Counters())
	f := inst.Features()
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	if f.WorkItems != 4096 || f.KernelMeanMs <= 0 || f.LaunchesPerSec <= 0 || f.ToDevMBps <= 0 || f.FromDevMBps <= 0 || f.DeviceUtil <= 0 {
		t.Errorf("features miss the work: %+v", f)
	}
	if f.VMMemGiB <= 0 || f.VMMemGiB > 64.0/1024 {
		t.Errorf("VMMemGiB = %v, want the RAM the harness VM (64 MiB) mapped", f.VMMemGiB)
	}
	if f.MemUtil <= 0 {
		t.Errorf("MemUtil = %v with a buffer held", f.MemUtil)
	}
}

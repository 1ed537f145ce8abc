package mdev

import (
	"sync"
	"time"

	"github.com/vgpud/vgpud/abi/agentmsg"
	"github.com/vgpud/vgpud/aggregator"
	"github.com/vgpud/vgpud/interference"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mdev/transport"
)

// DefaultFeatureWindow is how far back an instance's placement features
// look (Config.FeatureWindow).
const DefaultFeatureWindow = time.Minute

// featureSamples is how many samples of an instance's counters a window
// keeps: the window slides in steps of a quarter of it.
const featureSamples = 4

// Counters is a snapshot of the cumulative counters an instance's
// placement features come from (docs/placement.md "Features").
type Counters struct {
	At          time.Time
	DeviceNanos uint64 // device time the scheduler charged
	ToDev       uint64 // bytes copied from guest RAM to the device
	FromDev     uint64
	KernelCount [aggregator.KernelBuckets]uint64
	KernelNanos [aggregator.KernelBuckets]uint64
	WorkItems   uint64
	MemUsed     uint64 // device memory held, bytes (a gauge)
	MemTotal    uint64 // the device's global memory, bytes
	VMMem       uint64 // guest RAM the VM mapped for the vGPU, bytes (0: unknown)
	Guest       agentmsg.GuestStats
	HaveGuest   bool // Guest came from the guest agent
}

// Counters returns the instance's counters now. The worker writes most of
// them into the instance page; they are only counters (FeaturesBetween
// tolerates ones that go backwards).
func (i *Instance) Counters() Counters {
	sh := i.be.Shared()
	c := Counters{
		At:          time.Now(),
		DeviceNanos: i.Sched().DeviceNanos,
		ToDev:       sh.Stats.BytesToDev.Load(),
		FromDev:     sh.Stats.BytesFromDev.Load(),
		WorkItems:   sh.Kernels.WorkItems.Load(),
		MemUsed:     sh.MemUsed.Load(),
		MemTotal:    i.memTotal.Load(),
		VMMem:       i.vmMem.Load(),
	}
	for b := range c.KernelCount {
		c.KernelCount[b] = sh.Kernels.Count[b].Load()
		c.KernelNanos[b] = sh.Kernels.Nanos[b].Load()
	}
	if a := i.agent.Load(); a != nil {
		if g, ok := a.GuestStats(); ok {
			c.Guest, c.HaveGuest = g.GuestStats, true
		}
	}
	return c
}

// longBucket is the first bucket of kernels at least
// interference.LongKernelMs long (1024 us).
var longBucket = aggregator.KernelBucket(uint64(interference.LongKernelMs * 1e6))

// sub is a-b, or 0 where a counter went backwards.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// userHz is the unit of /proc/stat's columns (USER_HZ, 100 on every Linux
// architecture vgpud's guests run).
const userHz = 100

// FeaturesBetween returns the placement features of what an instance did
// between two snapshots of its counters (a taken before b).
func FeaturesBetween(a, b Counters) interference.Features {
	var f interference.Features
	if b.MemTotal > 0 {
		f.MemUtil = float64(b.MemUsed) / float64(b.MemTotal)
	}
	f.VMMemGiB = float64(b.VMMem) / (1 << 30)
	f.VCPUs, f.VCPUUtil = vcpuLoad(a, b)
	dt := b.At.Sub(a.At).Seconds()
	if dt <= 0 {
		return f
	}
	f.DeviceUtil = float64(sub(b.DeviceNanos, a.DeviceNanos)) / 1e9 / dt
	f.ToDevMBps = float64(sub(b.ToDev, a.ToDev)) / 1e6 / dt
	f.FromDevMBps = float64(sub(b.FromDev, a.FromDev)) / 1e6 / dt
	var n, ns, nLong, nsLong uint64
	for k := range b.KernelCount {
		c, t := sub(b.KernelCount[k], a.KernelCount[k]), sub(b.KernelNanos[k], a.KernelNanos[k])
		n, ns = n+c, ns+t
		if k >= longBucket {
			nLong, nsLong = nLong+c, nsLong+t
		}
	}
	if n == 0 {
		return f
	}
	f.LaunchesPerSec = float64(n) / dt
	f.KernelMeanMs = float64(ns) / 1e6 / float64(n)
	f.WorkItems = float64(sub(b.WorkItems, a.WorkItems)) / float64(n)
	if nLong > 0 {
		f.LongKernelMeanMs = float64(nsLong) / 1e6 / float64(nLong)
	}
	if short := n - nLong; short > 0 {
		f.LongShortRatio = float64(nLong) / float64(short)
	} else {
		f.LongShortRatio = float64(nLong)
	}
	return f
}

// vcpuLoad estimates the VM's vCPUs and their busy fraction from the guest
// agent's /proc/stat: between the two snapshots when both have one and
// the guest's clock moved, else since the guest booted.
func vcpuLoad(a, b Counters) (vcpus, util float64) {
	if !b.HaveGuest {
		return 0, 0
	}
	total := func(g agentmsg.GuestStats) uint64 {
		return g.User + g.Nice + g.System + g.Idle + g.IOWait + g.IRQ + g.SoftIRQ + g.Steal
	}
	idle := func(g agentmsg.GuestStats) uint64 { return g.Idle + g.IOWait }
	tot, id, up := total(b.Guest), idle(b.Guest), b.Guest.UptimeNs
	if a.HaveGuest && b.Guest.UptimeNs > a.Guest.UptimeNs && total(b.Guest) > total(a.Guest) {
		tot, id, up = total(b.Guest)-total(a.Guest), sub(idle(b.Guest), idle(a.Guest)), b.Guest.UptimeNs-a.Guest.UptimeNs
	}
	if tot == 0 || up == 0 {
		return 0, 0
	}
	vcpus = float64(int(float64(tot)/(float64(up)/1e9*userHz) + 0.5))
	return max(vcpus, 1), float64(sub(tot, id)) / float64(tot)
}

// featureWindow keeps an instance's recent counter samples.
type featureWindow struct {
	mu      sync.Mutex
	samples []Counters // oldest first, at most featureSamples
}

func (w *featureWindow) add(c Counters) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == featureSamples {
		w.samples = append(w.samples[:0], w.samples[1:]...)
	}
	w.samples = append(w.samples, c)
}

// oldest returns the oldest sample taken at or after since, else the
// newest one.
func (w *featureWindow) oldest(since time.Time) (Counters, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if !s.At.Before(since) {
			return s, true
		}
	}
	if n := len(w.samples); n > 0 {
		return w.samples[n-1], true
	}
	return Counters{}, false
}

// Features returns the instance's placement features over the manager's
// feature window (since the instance was created, if that is shorter).
func (i *Instance) Features() interference.Features {
	now := i.Counters()
	from, ok := i.window.oldest(now.At.Add(-i.windowLen))
	if !ok {
		from = Counters{At: i.created}
	}
	return FeaturesBetween(from, now)
}

// sampleFeatures adds a sample of every instance's counters each quarter
// window, until the manager closes.
func (m *Manager) sampleFeatures(window time.Duration) {
	defer m.wg.Done()
	t := time.NewTicker(window / featureSamples)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			for _, in := range m.List() {
				in.window.add(in.Counters())
			}
		}
	}
}

// sizedMemory is the instance's guest-memory map as the transport sees it:
// it records the bytes of guest RAM mapped (the VM memory feature).
type sizedMemory struct {
	transport.MemoryMap
	in *Instance
}

func (s sizedMemory) Update(regions []guestmem.Region) error {
	if err := s.MemoryMap.Update(regions); err != nil {
		return err
	}
	var n uint64
	for _, r := range regions {
		if !r.Foreign { // a Xen window spans the MMIO hole: not RAM
			n += r.Size
		}
	}
	s.in.vmMem.Store(n)
	return nil
}

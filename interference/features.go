package interference

import (
	"fmt"
	"math"
)

// Features describe how one workload (one vGPU instance) uses its device
// and its VM, measured over a window while it ran. vgpud fills them from
// its own counters (mdev.Instance.Features); a dataset records them for
// each workload run alone (docs/placement.md "Features").
type Features struct {
	// DeviceUtil is the fraction of wall time the device spent on the
	// instance's turns (kernels by profiling, copies by wall time): the
	// seed's "GPU util".
	DeviceUtil float64 `json:"device_util"`
	// MemUtil is the device memory the instance held over the device's
	// global memory (0..1): the seed's "GPU mem util".
	MemUtil float64 `json:"mem_util"`
	// ToDevMBps and FromDevMBps are bytes copied per second (MB = 1e6
	// bytes) from guest RAM to the device and back: the seed's PCIe read
	// and write bandwidth.
	ToDevMBps   float64 `json:"to_dev_mbps"`
	FromDevMBps float64 `json:"from_dev_mbps"`
	// VCPUs is the number of the VM's vCPUs and VCPUUtil the fraction of
	// their time they were busy (the guest agent's /proc/stat); 0 when
	// unknown.
	VCPUs    float64 `json:"vcpus"`
	VCPUUtil float64 `json:"vcpu_util"`
	// VMMemGiB is the VM's RAM in GiB; 0 when unknown.
	VMMemGiB float64 `json:"vm_mem_gib"`
	// WorkItems is the mean number of work items per launch: the seed's
	// "average number of threads".
	WorkItems float64 `json:"work_items"`
	// KernelMeanMs is the mean kernel length, LongKernelMeanMs the mean
	// length of the long kernels (at least LongKernel), LongShortRatio the
	// number of long kernels over the number of short ones (long kernels
	// when there is no short one).
	KernelMeanMs     float64 `json:"kernel_mean_ms"`
	LongKernelMeanMs float64 `json:"long_kernel_mean_ms"`
	LongShortRatio   float64 `json:"long_short_ratio"`
	// LaunchesPerSec is kernel launches per second.
	LaunchesPerSec float64 `json:"launches_per_s"`
}

// LongKernelMs is where a kernel counts as long: about the 1 ms time slice
// of time-sliced GPU schedulers, beside which the seed measured short
// kernels' 2-11x slowdowns (a power of two microseconds, 1024 us, so that
// vgpud's log2 histogram of kernel lengths splits exactly there).
const LongKernelMs = 1.024

// Feature names one field of Features, in the order Vector writes them.
type Feature int

// The features, in the order of Features' fields.
const (
	DeviceUtil Feature = iota
	MemUtil
	ToDevMBps
	FromDevMBps
	VCPUs
	VCPUUtil
	VMMemGiB
	WorkItems
	KernelMeanMs
	LongKernelMeanMs
	LongShortRatio
	LaunchesPerSec
	NumFeatures
)

var featureNames = [NumFeatures]string{"device_util", "mem_util", "to_dev_mbps", "from_dev_mbps", "vcpus", "vcpu_util",
	"vm_mem_gib", "work_items", "kernel_mean_ms", "long_kernel_mean_ms", "long_short_ratio", "launches_per_s"}

func (f Feature) String() string {
	if f >= 0 && f < NumFeatures {
		return featureNames[f]
	}
	return fmt.Sprintf("feature-%d", int(f))
}

// Get returns feature f of x.
func (x Features) Get(f Feature) float64 {
	switch f {
	case DeviceUtil:
		return x.DeviceUtil
	case MemUtil:
		return x.MemUtil
	case ToDevMBps:
		return x.ToDevMBps
	case FromDevMBps:
		return x.FromDevMBps
	case VCPUs:
		return x.VCPUs
	case VCPUUtil:
		return x.VCPUUtil
	case VMMemGiB:
		return x.VMMemGiB
	case WorkItems:
		return x.WorkItems
	case KernelMeanMs:
		return x.KernelMeanMs
	case LongKernelMeanMs:
		return x.LongKernelMeanMs
	case LongShortRatio:
		return x.LongShortRatio
	case LaunchesPerSec:
		return x.LaunchesPerSec
	}
	return 0
}

// Validate checks that every feature is a finite number >= 0 (what a
// dataset file or a peer daemon sends is untrusted).
func (x Features) Validate() error {
	for f := range NumFeatures {
		if v := x.Get(f); math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("feature %s = %v: want a finite number >= 0", f, v)
		}
	}
	return nil
}

// Set is a feature set: which features a model reads, after the seed's
// Table 1.
type Set string

// The feature sets.
const (
	// Base: device utilisation, memory utilisation, copy bandwidth each
	// way.
	Base Set = "base"
	// Extend: Base plus the VM (vCPUs, their load, RAM), work items per
	// launch and the kernel-length features.
	Extend Set = "extend"
	// Select: the seed's refined set: device utilisation, copy bandwidth,
	// vCPUs and their load, VM RAM, mean kernel length.
	Select Set = "select"
)

// Sets lists the feature sets.
var Sets = []Set{Base, Extend, Select}

// Features returns the features of s, or an error for an unknown set.
func (s Set) Features() ([]Feature, error) {
	switch s {
	case Base:
		return []Feature{DeviceUtil, MemUtil, ToDevMBps, FromDevMBps}, nil
	case Extend:
		return []Feature{DeviceUtil, MemUtil, ToDevMBps, FromDevMBps, VCPUs, VCPUUtil, VMMemGiB, WorkItems,
			KernelMeanMs, LongKernelMeanMs, LongShortRatio, LaunchesPerSec}, nil
	case Select:
		return []Feature{DeviceUtil, ToDevMBps, FromDevMBps, VCPUs, VCPUUtil, VMMemGiB, KernelMeanMs}, nil
	}
	return nil, fmt.Errorf("feature set %q: want one of base, extend, select", string(s))
}

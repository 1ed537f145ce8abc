// Package interferencetest provides datasets for the tests of code that
// places by the interference model (mdev, the control API, vgpuctl, the
// end-to-end tests, bench/placement): known structure, so a test can say
// where a model must place.
package interferencetest

import (
	"fmt"

	"github.com/vgpud/vgpud/interference"
)

// ShortLong returns a dataset of what the seed observed, and nothing
// else: a short-kernel workload beside a long-kernel one slows by 3.0,
// every other pair by 0.1. Workloads "short0".."short3" have kernels of
// 0.05-0.2 ms, "long0".."long3" of 5-20 ms; their other features vary
// without regard to kind, so a model must learn kernel length.
func ShortLong() *interference.Dataset {
	d := &interference.Dataset{Version: interference.DatasetVersion, Device: "synthetic", Measured: "interferencetest.ShortLong"}
	noise := []float64{0.3, 0.9, 0.1, 0.6, 0.8, 0.2, 0.7, 0.4}
	for i := range 8 {
		f := interference.Features{
			DeviceUtil:     noise[i],
			MemUtil:        noise[(i+3)%8] / 2,
			ToDevMBps:      100 * noise[(i+5)%8],
			FromDevMBps:    50 * noise[(i+1)%8],
			VCPUUtil:       noise[(i+6)%8],
			VMMemGiB:       noise[(i+2)%8],
			WorkItems:      1024 * float64(1+i%3),
			KernelMeanMs:   0.05 * float64(1+i/2),
			LaunchesPerSec: 1000,
		}
		name := fmt.Sprintf("short%d", i/2)
		if i%2 == 1 {
			name = fmt.Sprintf("long%d", i/2)
			f.KernelMeanMs = 5 * float64(1+i/2)
			f.LongKernelMeanMs, f.LongShortRatio, f.LaunchesPerSec = f.KernelMeanMs, 50, 20
		}
		d.Workloads = append(d.Workloads, interference.Workload{Name: name, Features: f, AloneSec: 0.01 + noise[i]})
	}
	for _, v := range d.Workloads {
		for _, a := range d.Workloads {
			o := 0.1
			if v.Features.KernelMeanMs < interference.LongKernelMs && a.Features.KernelMeanMs >= interference.LongKernelMs {
				o = 3.0
			}
			d.Pairs = append(d.Pairs, interference.Pair{Victim: v.Name, Aggressor: a.Name, Overhead: o})
		}
	}
	return d
}

package interference

import (
	"fmt"
	"testing"
)

// structured returns a dataset where interference is clearly structured:
// a short-kernel victim beside a long-kernel aggressor slows by 3.0,
// every other pair by 0.1. The kinds differ in their kernel lengths; the
// other features vary without regard to kind.
func structured(t testing.TB) *Dataset {
	t.Helper()
	d := &Dataset{Version: DatasetVersion, Device: "synthetic", Measured: "structured()"}
	noise := []float64{0.3, 0.9, 0.1, 0.6, 0.8, 0.2, 0.7, 0.4}
	for i := range 8 {
		long := i%2 == 1
		f := Features{
			DeviceUtil:     noise[i],
			MemUtil:        noise[(i+3)%8] / 2,
			ToDevMBps:      100 * noise[(i+5)%8],
			FromDevMBps:    50 * noise[(i+1)%8],
			VCPUs:          float64(2 + 2*(i/4)),
			VCPUUtil:       noise[(i+6)%8],
			VMMemGiB:       float64(1 + (i/2)%2),
			WorkItems:      1024 * float64(1+i%3),
			KernelMeanMs:   0.05 + 0.05*float64(i),
			LongShortRatio: 0.01,
			LaunchesPerSec: 1000,
		}
		name := fmt.Sprintf("short%d", i)
		if long {
			name = fmt.Sprintf("long%d", i)
			f.KernelMeanMs = 5 + 3*float64(i)
			f.LongKernelMeanMs = f.KernelMeanMs * 1.2
			f.LongShortRatio = 50
			f.LaunchesPerSec = 20
		}
		d.Workloads = append(d.Workloads, Workload{Name: name, Features: f, AloneSec: 1 + noise[i]})
	}
	for _, v := range d.Workloads {
		for _, a := range d.Workloads {
			o := 0.1
			if v.Features.KernelMeanMs < LongKernelMs && a.Features.KernelMeanMs >= LongKernelMs {
				o = 3.0
			}
			d.Pairs = append(d.Pairs, Pair{Victim: v.Name, Aggressor: a.Name, Overhead: o})
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	return d
}

func mustTrain(t testing.TB, d *Dataset, o Options) Model {
	t.Helper()
	m, err := Train(d, o)
	if err != nil {
		t.Fatalf("Train(%+v) = %v", o, err)
	}
	return m
}

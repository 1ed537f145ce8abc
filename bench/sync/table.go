package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

func ms(ns int64) string { return fmt.Sprintf("%.3f", float64(ns)/1e6) }

// notice is the mean time from the kernel's end on the device to the
// guest seeing its fence: the guest's wait minus the device time per
// launch (queueing and the doorbell are inside both and cancel only
// approximately: the estimate is an upper bound on the device side).
func notice(r result) int64 {
	if r.launches == 0 {
		return r.WaitNs
	}
	return max(r.WaitNs-int64(r.kernelNs/r.launches), 0)
}

func printTable(w io.Writer, all [2][]result, steps, cpuIters, kernelIters, core, runs int) {
	fmt.Fprintf(w, "\nSync: NAMD-like loop in a TCG guest (%d steps/mode, cpu-iters %d, kernel-iters %d), vCPU pinned to host core %d; median of %d run(s)\n\n",
		steps, cpuIters, kernelIters, core, runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "co-runner\tmode\truntime s\tlaunches/s\tvs best(poll,block)\tdevice util\tlaunch ms\tnotice ms\twait ms\tpolled\tblocked\tthreshold ms\thint slice ms\thint wait\t")
	for i, rs := range all {
		corunner := "none"
		if i == 1 {
			corunner = "cpu hog"
		}
		best := int64(0)
		for _, r := range rs {
			if (r.Mode == "poll" || r.Mode == "block") && (best == 0 || r.RuntimeNs < best) {
				best = r.RuntimeNs
			}
		}
		for _, r := range rs {
			rt := time.Duration(r.RuntimeNs)
			ratio := "-"
			if best > 0 {
				ratio = fmt.Sprintf("%.2fx", float64(best)/float64(r.RuntimeNs))
			}
			util := 0.0
			if r.hostNs > 0 {
				util = float64(r.kernelNs) / float64(r.hostNs)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.0f\t%s\t%.0f%%\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%.0f%%\t\n",
				corunner, r.Mode, rt.Seconds(), float64(r.Steps)/rt.Seconds(), ratio, 100*util,
				ms(r.LaunchNs), ms(notice(r)), ms(r.WaitNs), r.Polled, r.Blocked, ms(r.Threshold), ms(r.HintSlice), float64(r.HintWait)/1e4)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nvs best: runtime of the better of poll and block in the same co-runner setting divided by this row's (>1 is faster).")
	fmt.Fprintln(w, "device util: this instance's device time / host wall time of the mode. notice: guest wait minus mean device time per launch.")
}

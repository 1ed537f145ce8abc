package aggregator

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/vgpud/vgpud/gpu"
)

// unsliceable are the identifiers whose presence anywhere in a program's
// source or build options makes its launches unsafe to slice: each lets a
// work-item observe the launch's whole index space, its group numbering
// or its offset, which a slice changes (docs/scheduler.md). printf is on
// the list because a slice reorders output between slices.
var unsliceable = []string{
	"get_group_id", "get_num_groups", "get_global_size", "get_global_offset",
	"get_enqueued_local_size", "get_global_linear_id", "printf",
}

// sliceable reports whether launches of kernels from a program with this
// source and these options may be split along their outermost dimension.
// The check is on the whole text, comments included, so it errs on the
// side of not slicing; line splices and trigraphs (which could spell an
// identifier in pieces) and token pasting refuse slicing outright.
func sliceable(source, options string) bool {
	text := source + "\n" + options
	if strings.Contains(text, "\\\n") || strings.Contains(text, "\\\r") || strings.Contains(text, "??") ||
		strings.Contains(text, "##") || strings.Contains(text, "%:%:") {
		return false
	}
	for _, id := range unsliceable {
		if strings.Contains(text, id) {
			return false
		}
	}
	return true
}

// sliceDim is the dimension a launch is cut along (the outermost) and the
// granularity of a cut: the local size there, or 1 when the device picks
// the local size and no argument is __local memory. ok is false when the
// range cannot be cut, or an argument is an image.
func sliceDim(r gpu.NDRange, args []gpu.Arg) (dim int, unit uint64, ok bool) {
	if r.Dims < 1 || r.Dims > 3 {
		return 0, 0, false
	}
	for _, a := range args {
		if a.Image != nil {
			// Each slice would copy the whole image in and out.
			return 0, 0, false
		}
	}
	dim = r.Dims - 1
	unit = r.Local[dim]
	if unit == 0 {
		for i := 0; i < r.Dims; i++ {
			if r.Local[i] != 0 {
				return 0, 0, false
			}
		}
		for _, a := range args {
			if a.Local != 0 {
				return 0, 0, false
			}
		}
		unit = 1
	}
	if r.Global[dim] < 2*unit || r.Global[dim]%unit != 0 {
		return 0, 0, false
	}
	return dim, unit, true
}

// minCut: a launch expected to take less than this is never cut (four
// times the scheduler's smallest slice).
const minCut = 800 * time.Microsecond

// sliceRows rounds a slice of want rows down to unit times a power of
// two (at least unit). An OpenCL implementation may compile a kernel
// anew for each launch shape it has not seen (PoCL 3.1 does: 35-250 ms
// per new global size here), so slice sizes must come from a small set
// that repeats across launches, not from a budget that drifts.
func sliceRows(want, unit uint64) uint64 {
	n := want / unit
	if n <= 1 {
		return unit
	}
	return unit << (bits.Len64(n) - 1)
}

// sliceOf is the part of r that is rows rows along dim, done rows in.
func sliceOf(r gpu.NDRange, dim int, done, rows uint64) gpu.NDRange {
	r.Offset[dim] += done
	r.Global[dim] = rows
	return r
}

// mayCut reports whether a launch of key over r may be cut in slices:
// its range can be cut, its program is sliceable, and it is expected to
// run longer than minCut.
func (in *Instance) mayCut(key kernelKey, pr *program, r gpu.NDRange, args []gpu.Arg) bool {
	_, _, ok := sliceDim(r, args)
	if !ok {
		return false
	}
	items := uint64(1)
	for i := 0; i < r.Dims; i++ {
		items *= r.Global[i]
	}
	avg := in.lengths.of(key)
	whole := time.Duration(avg.nsPerItem * float64(items))
	return avg.nsPerItem > 0 && whole > minCut && sliceable(pr.source, pr.options)
}

// launchKernel runs k over r under the scheduler, in slices along the
// outermost dimension when the launch is expected to run longer than the
// turn's slice budget allows and the program is sliceable. It returns the
// device time of all slices. The slices run in order on in's own queue,
// so the guest sees one launch complete, as if it had not been cut.
func (in *Instance) launchKernel(key kernelKey, pr *program, k gpu.Kernel, r gpu.NDRange, args []gpu.Arg, pt *printing) (time.Duration, error) {
	items := uint64(1)
	for i := 0; i < r.Dims; i++ {
		items *= r.Global[i]
	}
	avg := *in.lengths.of(key)
	dim, unit, _ := sliceDim(r, args)
	whole := time.Duration(avg.nsPerItem * float64(items))
	// A launch whose output is captured runs whole: each slice would be
	// a launch of its own, and the output one launch's.
	cuttable := pt == nil && in.mayCut(key, pr, r, args)
	perRow := avg.nsPerItem * float64(items/max(r.Global[dim], 1))
	// Every slice is presented to the scheduler with the whole launch's
	// expected length: it is long work, whatever the size of the cut, and
	// must not win the short-first choice against a short kernel.
	cost := time.Duration(avg.nanos)
	var total time.Duration
	slices := 0
	cutting := false
	if cuttable {
		// A launch that may be cut runs in turns of its own, each sized
		// by its grant's slice budget, never under a kept turn.
		in.dropTurn()
	}
	for done := uint64(0); ; {
		var budget time.Duration
		var release func(time.Duration, int)
		var err error
		if cuttable {
			budget, release, err = in.dev.arb.Acquire(in.ctx, in.schedID, cost)
			if err == nil {
				in.sh.Turns.Add(1)
			}
		} else {
			budget, release, err = in.acquire(cost)
		}
		if err != nil {
			return total, fmt.Errorf("wait for device turn: %w", err)
		}
		// Cut only when the launch is much longer than a slice: a launch
		// of a few slices gains the neighbour little and costs a launch
		// overhead per slice. Once cut, every later cut too is unit times
		// a power of two (remaining is a multiple of unit), however the
		// budget changes: no slice of any launch has a shape outside that
		// small set.
		remaining := r.Global[dim] - done
		rows := remaining
		switch {
		case cuttable && budget > 0 && whole > 4*budget:
			cutting = true
			rows = min(sliceRows(uint64(float64(budget)/max(perRow, 1)), unit), sliceRows(remaining, unit))
		case cutting:
			rows = sliceRows(remaining, unit)
		}
		cut := sliceOf(r, dim, done, rows)
		start := time.Now()
		t, err := in.launchOnce(k, cut, args, pt)
		dev := t
		if dev <= 0 {
			dev = time.Since(start)
		}
		total += t
		slices++
		done += rows
		last := err != nil || done >= r.Global[dim]
		counted := 0
		if last {
			counted = slices
		}
		release(dev, counted)
		if err != nil {
			return total, err
		}
		if last {
			break
		}
	}
	if total > 0 {
		in.lengths.launched(key, items, total)
	}
	return total, nil
}

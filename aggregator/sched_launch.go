package aggregator

import (
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
// range cannot be cut.
func sliceDim(r gpu.NDRange, args []gpu.Arg) (dim int, unit uint64, ok bool) {
	if r.Dims < 1 || r.Dims > 3 {
		return 0, 0, false
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

// launchKernel runs k over r under the scheduler, in slices along the
// outermost dimension when the launch is expected to run longer than the
// scheduler's slice budget and the program is sliceable. It returns the
// device time of all slices. The slices run in order on in's own queue,
// so the guest sees one launch complete, as if it had not been cut.
func (in *Instance) launchKernel(key kernelKey, pr *program, k gpu.Kernel, r gpu.NDRange, args []gpu.Arg) (time.Duration, error) {
	items := uint64(1)
	for i := 0; i < r.Dims; i++ {
		items *= r.Global[i]
	}
	s := in.dev.sched
	s.mu.Lock()
	avg := *in.dev.sched.core.client(in.id).kernel(key)
	s.mu.Unlock()

	var next func(remaining uint64) uint64
	dim, unit, cuttable := sliceDim(r, args)
	whole := time.Duration(avg.nsPerItem * float64(items))
	if cuttable && avg.nsPerItem > 0 && whole > 4*minSlice && sliceable(pr.source, pr.options) {
		perRow := avg.nsPerItem * float64(items/r.Global[dim])
		next = func(remaining uint64) uint64 {
			s.mu.Lock()
			budget := s.core.budget(s.core.client(in.id), s.now())
			s.mu.Unlock()
			// Cut only when the launch is much longer than a slice: a
			// launch of a few slices gains the neighbour little and
			// costs a launch overhead per slice.
			if budget <= 0 || whole <= 4*budget {
				return remaining
			}
			rows := uint64(float64(budget)/max(perRow, 1)) / unit * unit
			return min(max(rows, unit), remaining)
		}
	}
	// Every slice is presented to the scheduler with the whole launch's
	// expected length: it is long work, whatever the size of the cut, and
	// must not win the short-first choice against a short kernel.
	cost := time.Duration(avg.nanos)
	total, slices, err := in.runSlices(k, r, args, dim, next, func(uint64) time.Duration { return cost })
	s.mu.Lock()
	c := s.core.client(in.id)
	if slices > 1 {
		c.slices += uint64(slices)
	}
	if err == nil && total > 0 {
		a := c.kernel(key)
		a.nanos = ewma(a.nanos, float64(total))
		a.nsPerItem = ewma(a.nsPerItem, float64(total)/float64(max(items, 1)))
	}
	s.mu.Unlock()
	return total, err
}

// runSlices launches r whole when next is nil, else in consecutive cuts
// along dim of next(remaining) rows each (a multiple of the local size,
// at most remaining), each in its own device turn. cost gives a cut's
// expected device time for the scheduler.
func (in *Instance) runSlices(k gpu.Kernel, r gpu.NDRange, args []gpu.Arg, dim int, next func(remaining uint64) uint64,
	cost func(rows uint64) time.Duration) (total time.Duration, slices int, err error) {
	if next == nil {
		err = in.dev.run(in.ctx, in, work{cost: cost(0)}, func() (time.Duration, error) {
			t, err := in.queue.Launch(k, r, args)
			total = t
			return t, err
		})
		return total, 1, err
	}
	for done := uint64(0); done < r.Global[dim]; {
		rows := next(r.Global[dim] - done)
		cut := r
		cut.Offset[dim] = r.Offset[dim] + done
		cut.Global[dim] = rows
		err = in.dev.run(in.ctx, in, work{cost: cost(rows)}, func() (time.Duration, error) {
			t, err := in.queue.Launch(k, cut, args)
			total += t
			return t, err
		})
		slices++
		if err != nil {
			return total, slices, err
		}
		done += rows
	}
	return total, slices, nil
}

// copyWork is the scheduler's view of a copy of n bytes.
func (in *Instance) copyWork(n uint64) work { return in.chunkWork(n, n) }

// chunkWork is the scheduler's view of a chunk of n bytes of a copy of
// total bytes: its cost is the whole copy's expected device time (from
// the instance's recent copies), so that a long copy moved in many chunks
// counts as long work.
func (in *Instance) chunkWork(n, total uint64) work {
	s := in.dev.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.core.client(in.id).kernel(copyKey)
	return work{cost: time.Duration(a.nsPerItem * float64(total)), bytes: n}
}

// copyKey keeps the copy speed among an instance's kernel averages (no
// kernel has an empty name).
var copyKey = kernelKey{}

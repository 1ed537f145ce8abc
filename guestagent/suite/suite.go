// Package suite is the vGPU correctness suite: compute jobs (vector add,
// SAXPY, matrix multiply, reduction, a failing build) checked against CPU
// references, and a hostile-guest run that feeds the device bad addresses,
// foreign handles, over-quota allocations, garbage opcodes and a doorbell
// beyond the ring, expecting each to be refused with its status and the
// device to keep working.
//
// It runs against any *driver.Device: inside a guest (cmd/vgpu-suite), over
// the QEMU-less harness, or over the in-process fake. It knows only the
// driver and the ABI, nothing of dom0.
package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
)

// Options size the suite. Zero fields get defaults.
type Options struct {
	Seed    uint64 // input generator seed; default 1
	VectorN int    // vector add and SAXPY length; default 262144
	MatrixN int    // matrix side, a multiple of 16; default 256
	ReduceN int    // reduction length; default 1<<20
}

func (o Options) withDefaults() Options {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.VectorN <= 0 {
		o.VectorN = 262144
	}
	if o.MatrixN <= 0 {
		o.MatrixN = 256
	}
	if o.ReduceN <= 0 {
		o.ReduceN = 1 << 20
	}
	return o
}

// Case is the result of one test case.
type Case struct {
	Name     string        `json:"name"`
	OK       bool          `json:"ok"`
	Err      string        `json:"err,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Report is the result of a run.
type Report struct {
	Mode      string `json:"mode"`
	Device    string `json:"device,omitempty"`
	Profile   string `json:"profile,omitempty"`
	Cases     []Case `json:"cases"`
	Pass      int    `json:"pass"`
	Fail      int    `json:"fail"`
	Commands  uint64 `json:"commands"`
	Doorbells uint64 `json:"doorbells"`
	// Losses counts the device contexts an attack run lost (and reopened).
	Losses int `json:"losses,omitempty"`
}

// OK reports whether the run had cases and all passed.
func (r Report) OK() bool { return r.Fail == 0 && r.Pass > 0 }

// LinePrefix starts the machine-readable result line.
const LinePrefix = "VGPU-RESULT "

// MarshalLine returns the report as one line: LinePrefix and JSON.
func (r Report) MarshalLine() string {
	b, err := json.Marshal(r)
	if err != nil { // cannot happen: the report holds only plain fields
		return LinePrefix + `{"fail":1}`
	}
	return LinePrefix + string(b)
}

// ParseLine finds the result line in output (e.g. a guest console log) and
// decodes it.
func ParseLine(output string) (Report, error) {
	for _, l := range strings.Split(output, "\n") {
		l = strings.TrimRight(l, "\r")
		i := strings.Index(l, LinePrefix)
		if i < 0 {
			continue
		}
		var r Report
		if err := json.Unmarshal([]byte(l[i+len(LinePrefix):]), &r); err != nil {
			return Report{}, fmt.Errorf("parse result line: %w", err)
		}
		return r, nil
	}
	return Report{}, fmt.Errorf("parse result line: no %q line in %d bytes of output", strings.TrimSpace(LinePrefix), len(output))
}

// String renders the report for people.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "vgpu %s on %q (profile %q)\n", r.Mode, r.Device, r.Profile)
	for _, c := range r.Cases {
		res := "PASS"
		if !c.OK {
			res = "FAIL"
		}
		fmt.Fprintf(&b, "  %-4s %-28s %10v", res, c.Name, c.Duration.Round(time.Microsecond))
		if c.Err != "" {
			fmt.Fprintf(&b, "  %s", c.Err)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d passed, %d failed; %d commands, %d doorbells\n", r.Pass, r.Fail, r.Commands, r.Doorbells)
	return b.String()
}

type runner struct {
	ctx context.Context
	d   *driver.Device
	r   Report
}

func newRunner(ctx context.Context, d *driver.Device, mode string) *runner {
	in := d.Info()
	return &runner{ctx: ctx, d: d, r: Report{Mode: mode, Device: in.Name, Profile: in.Profile}}
}

func (rn *runner) run(name string, f func() error) {
	start := time.Now()
	err := rn.ctx.Err()
	if err == nil {
		err = f()
	}
	c := Case{Name: name, OK: err == nil, Duration: time.Since(start)}
	if err != nil {
		c.Err = err.Error()
		rn.r.Fail++
	} else {
		rn.r.Pass++
	}
	rn.r.Cases = append(rn.r.Cases, c)
}

func (rn *runner) report() Report {
	st := rn.d.Stats()
	rn.r.Commands, rn.r.Doorbells = st.Commands, st.Doorbells
	return rn.r
}

// Run runs the correctness suite on d.
func Run(ctx context.Context, d *driver.Device, opts Options) Report {
	opts = opts.withDefaults()
	rn := newRunner(ctx, d, "suite")
	var prog driver.Program
	rn.run("build", func() error {
		var err error
		prog, err = build(d)
		return err
	})
	if prog.Handle == 0 {
		return rn.report()
	}
	rn.run("vector-add", func() error { return vectorAdd(d, prog, opts.VectorN, opts.Seed) })
	rn.run("saxpy", func() error { return saxpy(d, prog, opts.VectorN, opts.Seed+1) })
	rn.run("matmul", func() error { return matmul(d, prog, opts.MatrixN, opts.Seed+2) })
	rn.run("reduce", func() error { return reduce(d, prog, opts.ReduceN, opts.Seed+3) })
	rn.run("build-failure", func() error { return buildFailure(d) })
	rn.run("program-free", func() error {
		if err := d.FreeProgram(prog); err != nil {
			return err
		}
		return d.Finish()
	})
	return rn.report()
}

package job

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vgpud/vgpud/guestagent/suite"
)

// The kernel every path runs: the suite's matmul, built with the same
// options everywhere.
const (
	Kernel       = "matmul"
	BuildOptions = "-cl-std=CL1.2"
)

// Source is the OpenCL C source holding Kernel.
const Source = suite.Source

// Checks is how many elements of the final product are compared with the
// CPU reference.
const Checks = 32

// ErrWrongResult reports a product that disagrees with the CPU reference.
var ErrWrongResult = errors.New("wrong matmul result")

// Spec sizes the job.
type Spec struct {
	N     int    // matrix side; a multiple of Local
	Reps  int    // matmuls, each with an upload of A and a download of C
	Local int    // work-group side (Local x Local work items)
	Seed  uint64 // input seed
}

// Default is the job bench/datapath runs unless told otherwise.
func Default() Spec { return Spec{N: 512, Reps: 10, Local: 16, Seed: 1} }

// Validate checks s.
func (s Spec) Validate() error {
	switch {
	case s.Local < 1 || s.Local > 32:
		return fmt.Errorf("job: local size %d: want 1..32", s.Local)
	case s.N < s.Local || s.N > 4096 || s.N%s.Local != 0:
		return fmt.Errorf("job: matrix side %d: want a multiple of %d up to 4096", s.N, s.Local)
	case s.Reps < 1 || s.Reps > 100000:
		return fmt.Errorf("job: %d repetitions: want 1..100000", s.Reps)
	}
	return nil
}

// Bytes is the size of one matrix.
func (s Spec) Bytes() uint64 { return 4 * uint64(s.N) * uint64(s.N) }

// Buf names a buffer of a Device.
type Buf int

// Device is what a path provides to run the job. Every method returns once
// its work is done (a batching implementation waits inside).
type Device interface {
	// Build compiles source, which holds Kernel.
	Build(source, options string) error
	Alloc(size uint64) (Buf, error)
	Write(b Buf, p []byte) error
	Read(b Buf, p []byte) error
	// MatMul runs Kernel: c = a * b, n x n, over an n x n range in
	// local x local groups. It returns the kernel's device time, or -1 if
	// the path cannot tell.
	MatMul(a, b, c Buf, n, local int) (time.Duration, error)
	// Finish reports any failure of earlier work.
	Finish() error
}

// Result is one run of the job.
type Result struct {
	N        int   `json:"n"`
	Reps     int   `json:"iterations"`
	SetupNS  int64 `json:"setup_ns"`  // build and allocations, not in TotalNS
	TotalNS  int64 `json:"total_ns"`  // upload B, Reps x (upload A, matmul, download C), finish
	KernelNS int64 `json:"kernel_ns"` // sum of the device times reported, or -1
	// KernelLaunches is how many matmuls reported a device time.
	KernelLaunches int     `json:"kernel_launches"`
	Checked        int     `json:"checked"`     // elements compared with the CPU reference
	MaxAbsErr      float64 `json:"max_abs_err"` // largest difference seen
}

// PerMatMul is the total time divided by the repetitions.
func (r Result) PerMatMul() time.Duration {
	if r.Reps == 0 {
		return 0
	}
	return time.Duration(r.TotalNS / int64(r.Reps))
}

// Inputs are the job's matrices: A alternates between As[0] and As[1], so
// every upload changes the device's A and a lost upload shows in the check.
type Inputs struct {
	As [2][]float32
	B  []float32
}

// MakeInputs returns s's deterministic inputs in [-1, 1).
func MakeInputs(s Spec) Inputs {
	nn := s.N * s.N
	return Inputs{
		As: [2][]float32{suite.Floats(s.Seed, nn, -1, 1), suite.Floats(s.Seed+1, nn, -1, 1)},
		B:  suite.Floats(s.Seed+2, nn, -1, 1),
	}
}

// Run runs the job on d: build and allocate (setup), then upload B and
// Reps times upload A (alternating), multiply and download C (timed), then
// check Checks elements of the last C against the CPU reference.
func Run(ctx context.Context, s Spec, d Device) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	in := MakeInputs(s)
	aBytes := [2][]byte{suite.Bytes(in.As[0]), suite.Bytes(in.As[1])}
	bBytes := suite.Bytes(in.B)
	out := make([]byte, s.Bytes())
	res := Result{N: s.N, Reps: s.Reps}

	start := time.Now()
	if err := d.Build(Source, BuildOptions); err != nil {
		return res, fmt.Errorf("job: build: %w", err)
	}
	var bufs [3]Buf
	for i := range bufs {
		b, err := d.Alloc(s.Bytes())
		if err != nil {
			return res, fmt.Errorf("job: alloc: %w", err)
		}
		bufs[i] = b
	}
	a, b, c := bufs[0], bufs[1], bufs[2]
	if err := d.Finish(); err != nil {
		return res, fmt.Errorf("job: setup: %w", err)
	}
	res.SetupNS = time.Since(start).Nanoseconds()

	start = time.Now()
	if err := d.Write(b, bBytes); err != nil {
		return res, fmt.Errorf("job: upload B: %w", err)
	}
	for i := range s.Reps {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("job: iteration %d: %w", i, err)
		}
		if err := d.Write(a, aBytes[i%2]); err != nil {
			return res, fmt.Errorf("job: iteration %d: upload A: %w", i, err)
		}
		t, err := d.MatMul(a, b, c, s.N, s.Local)
		if err != nil {
			return res, fmt.Errorf("job: iteration %d: matmul: %w", i, err)
		}
		if t >= 0 {
			res.KernelNS += t.Nanoseconds()
			res.KernelLaunches++
		}
		if err := d.Read(c, out); err != nil {
			return res, fmt.Errorf("job: iteration %d: download C: %w", i, err)
		}
	}
	if err := d.Finish(); err != nil {
		return res, fmt.Errorf("job: finish: %w", err)
	}
	res.TotalNS = time.Since(start).Nanoseconds()
	if res.KernelLaunches == 0 {
		res.KernelNS = -1
	}

	res.Checked, res.MaxAbsErr = Check(s, in.As[(s.Reps-1)%2], in.B, suite.FromBytes(out))
	if res.Checked < Checks {
		return res, fmt.Errorf("job: element %d of %d: %w (max error %g)", res.Checked, Checks, ErrWrongResult, res.MaxAbsErr)
	}
	return res, nil
}

// Check compares Checks elements of c, spread over the matrix, with
// a * b computed on the CPU in float64. It returns how many agreed before
// the first disagreement (Checks if all did) and the largest absolute
// difference seen.
func Check(s Spec, a, b, c []float32) (ok int, maxErr float64) {
	n := s.N
	if len(a) != n*n || len(b) != n*n || len(c) != n*n {
		return 0, math.Inf(1)
	}
	// n products of magnitude < 1 summed in float32, as the suite allows.
	atol, rtol := float64(n)*1e-5, 1e-5
	for k := range Checks {
		// An even walk from the first element to the last.
		idx := (k * (n*n - 1)) / (Checks - 1)
		row, col := idx/n, idx%n
		var want float64
		for i := range n {
			want += float64(a[row*n+i]) * float64(b[i*n+col])
		}
		got := float64(c[idx])
		d := math.Abs(got - want)
		if math.IsNaN(got) {
			d = math.Inf(1)
		}
		maxErr = max(maxErr, d)
		if !suite.Close(got, want, atol, rtol) || math.IsNaN(got) {
			return k, maxErr
		}
	}
	return Checks, maxErr
}

package child

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/vgpud/vgpud/gpu"
)

// EnvSelfTest, set to a device selector (gpu.Open), makes a worker run
// one kernel on that device and print a SelfTest as a JSON line on its
// standard output instead of serving the protocol: a sandbox diagnosis
// (worker.Diagnose) runs it under the worker's own confinement.
const EnvSelfTest = "VGPUD_WORKER_SELFTEST"

// SelfTest is what a worker's self-test did.
type SelfTest struct {
	// Device is the opened device's name.
	Device string `json:"device,omitempty"`
	// Step is the last step begun: open, queue, build, alloc, write,
	// launch, read, check, then on a device that takes SPIR-V build-il
	// and the same again, done.
	Step string `json:"step"`
	// IL: the device takes SPIR-V, and the kernel built from a module
	// ran right too.
	IL bool `json:"il,omitempty"`
	// Err is the step's error; "" when every step passed.
	Err string `json:"err,omitempty"`
	// BuildLog is the compiler's log when the build failed.
	BuildLog string `json:"build_log,omitempty"`
}

// selfTestN is the self-test's vector length.
const selfTestN = 4096

// selfTestModule is selfTestSource's kernel as a SPIR-V module
// (selftest.spvasm), which the self-test builds too where the device takes
// SPIR-V.
//
//go:embed selftest.spv
var selfTestModule []byte

const selfTestSource = `__kernel void saxpy(__global const float *x, __global float *y, const float a) {
	size_t i = get_global_id(0);
	y[i] = a * x[i] + y[i];
}`

// runSelfTest opens selector's device and runs y = a*x + y on it,
// checking every element, and writes the SelfTest to out; it returns the
// exit code (0 when the result was right).
func runSelfTest(selector string, out io.Writer) int {
	st := selfTest(selector)
	b, _ := json.Marshal(st)
	fmt.Fprintln(out, string(b))
	if st.Err != "" {
		return 1
	}
	return 0
}

func selfTest(selector string) (st SelfTest) {
	fail := func(err error) SelfTest { st.Err = err.Error(); return st }
	st.Step = "open"
	dev, err := gpu.Open(selector)
	if err != nil {
		return fail(err)
	}
	defer dev.Close()
	st.Device = dev.Info().Name
	st.Step = "queue"
	q, err := dev.NewQueue()
	if err != nil {
		return fail(err)
	}
	defer q.Close()
	builds := []struct {
		step  string
		build func() (gpu.Program, string, error)
	}{{"build", func() (gpu.Program, string, error) { return q.Build(selfTestSource, "") }}}
	if ilb, ok := q.(gpu.ILBuilder); ok && dev.Info().Caps.IL {
		// A SPIR-V build may run other programs of the runtime's
		// (PoCL 6: llvm-spirv): the sandbox must allow them too.
		builds = append(builds, struct {
			step  string
			build func() (gpu.Program, string, error)
		}{"build-il", func() (gpu.Program, string, error) { return ilb.BuildIL(selfTestModule, "") }})
	}
	for _, b := range builds {
		st.Step = b.step
		prog, log, err := b.build()
		if err != nil {
			st.BuildLog = log
			return fail(err)
		}
		err = saxpy(q, prog, &st)
		prog.Release()
		if err != nil {
			return fail(err)
		}
	}
	st.IL = len(builds) > 1
	st.Step = "done"
	return st
}

// saxpy runs prog's saxpy on q over selfTestN elements and checks them,
// naming the step it is at in st.
func saxpy(q gpu.Queue, prog gpu.Program, st *SelfTest) error {
	k, err := prog.Kernel("saxpy")
	if err != nil {
		return err
	}
	defer k.Release()
	st.Step = "alloc"
	x, err := q.Alloc(4 * selfTestN)
	if err != nil {
		return err
	}
	defer x.Release()
	y, err := q.Alloc(4 * selfTestN)
	if err != nil {
		return err
	}
	defer y.Release()
	st.Step = "write"
	xs, ys := make([]byte, 4*selfTestN), make([]byte, 4*selfTestN)
	for i := range selfTestN {
		binary.LittleEndian.PutUint32(xs[4*i:], math.Float32bits(float32(i)))
		binary.LittleEndian.PutUint32(ys[4*i:], math.Float32bits(float32(3*i+1)))
	}
	if err := q.Write(x, 0, xs); err != nil {
		return err
	}
	if err := q.Write(y, 0, ys); err != nil {
		return err
	}
	st.Step = "launch"
	a := make([]byte, 4)
	binary.LittleEndian.PutUint32(a, math.Float32bits(2))
	r := gpu.NDRange{Dims: 1, Global: [3]uint64{selfTestN, 1, 1}}
	if _, err := q.Launch(k, r, []gpu.Arg{{Buffer: x}, {Buffer: y}, {Scalar: a}}); err != nil {
		return err
	}
	st.Step = "read"
	got := make([]byte, 4*selfTestN)
	if err := q.Read(y, 0, got); err != nil {
		return err
	}
	st.Step = "check"
	for i := range selfTestN {
		v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
		if want := float32(2*i) + float32(3*i+1); v != want {
			return fmt.Errorf("y[%d] = %v, want %v", i, v, want)
		}
	}
	return nil
}

//go:build cgo

package gpu

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// cpuQueue opens the test device and returns a queue on it, skipping
// when it has no OpenCL device or the device is no CPU one (the screen
// of inline assembly applies only there).
func cpuQueue(t *testing.T) *queue {
	t.Helper()
	if _, err := Devices(); err != nil {
		t.Skipf("no OpenCL device: %v", err)
	}
	d := openDevice(t, "0")
	if d.(*device).offHost {
		t.Skipf("%s runs kernels off the host's CPU: inline assembly is not screened", d.Info().Name)
	}
	return newQueue(t, d).(*queue)
}

// TestPredefinedAsksTheCompiler: queue.predefined reads the compiler's own
// predefined macros, and caches them per options.
func TestPredefinedAsksTheCompiler(t *testing.T) {
	q := cpuQueue(t)
	names := []string{"__OPENCL_VERSION__", "CL_VERSION_1_0", "R123_USE_MULHILO32_ASM", "__powerpc__", "VGPUD_NOT_A_MACRO"}
	got, err := q.predefined("-cl-std=CL1.2", names)
	if err != nil {
		t.Fatalf("predefined = %v", err)
	}
	want := map[string]bool{"__OPENCL_VERSION__": true, "CL_VERSION_1_0": true, "R123_USE_MULHILO32_ASM": false, "__powerpc__": false, "VGPUD_NOT_A_MACRO": false}
	for n, w := range want {
		if v, ok := got[n]; !ok || v != w {
			t.Errorf("predefined(%s) = %v (answered %v), want %v", n, v, ok, w)
		}
	}
	// -D counts: the compiler is asked with the build's options.
	if got, err := q.predefined("-DVGPUD_NOT_A_MACRO", []string{"VGPUD_NOT_A_MACRO"}); err != nil || !got["VGPUD_NOT_A_MACRO"] {
		t.Errorf("predefined(-DVGPUD_NOT_A_MACRO) = %v, %v; want it defined", got, err)
	}
	q.dev.mu.Lock()
	cached := len(q.dev.predefined["-cl-std=CL1.2"])
	q.dev.mu.Unlock()
	if cached != len(names) {
		t.Errorf("%d answers cached for -cl-std=CL1.2, want %d", cached, len(names))
	}
}

// TestBuildJudgesAsmByWhatIsCompiled builds on the real device (PoCL's
// CPU device in make test): a Random123-shaped source whose asm the
// compiler never compiles builds and computes; asm it compiles is refused
// before the compiler sees it.
func TestBuildJudgesAsmByWhatIsCompiled(t *testing.T) {
	q := cpuQueue(t)
	p, log, err := q.Build(random123Shape, "")
	if err != nil {
		t.Fatalf("Build(Random123 shape) = %v, log:\n%s", err, log)
	}
	k := kernelOf(t, p, "philox")
	out := alloc(t, q, 4)
	const x = 0x12345678
	if err := q.Write(out, 0, u32(x)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Launch(k, NDRange{Dims: 1, Global: [3]uint64{1}}, []Arg{{Buffer: out}}); err != nil {
		t.Fatalf("Launch(philox) = %v", err)
	}
	buf := make([]byte, 4)
	if err := q.Read(out, 0, buf); err != nil {
		t.Fatal(err)
	}
	prod := uint64(x) * 0xD256D193
	if got, want := binary.LittleEndian.Uint32(buf), uint32(prod)^uint32(prod>>32); got != want {
		t.Errorf("philox computed %#x, want %#x", got, want)
	}

	for _, tt := range asmReached {
		if tt.unknown {
			continue // depends on what this compiler predefines: below
		}
		if _, log, err := q.Build(tt.src, tt.opts); !errors.Is(err, ErrSourceRejected) || !strings.Contains(log, tt.want) {
			t.Errorf("%s: Build = %v, log %q; want ErrSourceRejected naming %s", tt.name, err, log, tt.want)
		}
	}
	// Asm under a condition on a predefined macro: refused exactly where
	// the compiler defines it.
	src := "#ifdef __x86_64__\n#define SYS __asm__(\"nop\")\n#else\n#define SYS\n#endif\n__kernel void k(void) { SYS; }"
	defined, err := q.predefined("", []string{"__x86_64__"})
	if err != nil {
		t.Fatal(err)
	}
	_, log, err = q.Build(src, "")
	t.Logf("__x86_64__ predefined: %v; Build of asm under #ifdef __x86_64__: %v", defined["__x86_64__"], err)
	if defined["__x86_64__"] != errors.Is(err, ErrSourceRejected) {
		t.Errorf("__x86_64__ predefined: %v; Build of asm under #ifdef __x86_64__ = %v, log %q", defined["__x86_64__"], err, log)
	}
}

// TestBuildPyopenclPhilox builds pyopencl's own philox.cl (issue 40) on
// the real device.
func TestBuildPyopenclPhilox(t *testing.T) {
	src := pyopenclRandom123(t, "philox.cl")
	q := cpuQueue(t)
	p, log, err := q.Build(src, "")
	if err != nil {
		t.Fatalf("Build(philox.cl) = %v, log:\n%s", err, log)
	}
	kernelOf(t, p, "rng_gen_philox4x32_uniform")
}

//go:build cgo

package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// hugePrivateSource overflows its work-item's stack by 64 MiB: the first
// element of its private array lies that far below the frame
// (guestagent/suite's huge-private-array attack).
const hugePrivateSource = `__kernel void huge(__global float *o) {
	float a[16777216];
	a[get_global_id(0)] = 1.0f;
	o[get_global_id(0)] = a[o[1] > 0.0f ? 5 : 7];
}`

// testGuard is the guard region TestGuardRuntimeThreads asks for.
const testGuard = 1 << 30

// TestGuardRuntimeThreads: after GuardRuntimeThreads, the threads PoCL's
// pthread device runs work-items on have the guard region below their
// stacks, and a kernel whose private array passes its stack by 64 MiB
// ends the process with SIGSEGV, in the guard, every time. In a child
// process: the default thread attributes are the whole process's.
func TestGuardRuntimeThreads(t *testing.T) {
	if os.Getenv("VGPUD_GPU_GUARD_CHILD") == "1" {
		guardChild(t)
		return
	}
	for run := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGuardRuntimeThreads$", "-test.v")
		cmd.Env = append(os.Environ(), "VGPUD_GPU_GUARD_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "--- SKIP: TestGuardRuntimeThreads") {
			t.Skip("the child found no device of PoCL's pthread driver")
		}
		var guards int
		for _, line := range strings.Split(string(out), "\n") {
			if f, ok := strings.CutPrefix(strings.TrimSpace(line), "GUARDS "); ok {
				guards, _ = strconv.Atoi(f)
			}
		}
		if guards == 0 {
			t.Fatalf("run %d: no thread of the runtime has a guard region of %d bytes below its stack (output:\n%s)", run, testGuard, out)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGSEGV {
			t.Fatalf("run %d: the child ended with %v after the huge kernel, want SIGSEGV (output:\n%s)", run, err, out)
		}
	}
}

// guardChild guards, starts the pthread device's threads with a small
// launch, counts the guarded stacks, then launches the huge kernel, which
// must not return.
func guardChild(t *testing.T) {
	if err := GuardRuntimeThreads(testGuard); err != nil {
		t.Fatal(err)
	}
	d := openDevice(t, threadedPoCL(t))
	e := env{d: d, q: newQueue(t, d)}
	e.p = build(t, e.q, testSource)
	vadd(t, e, 4096)
	n, err := guardedStacks(testGuard)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("GUARDS %d\n", n)
	p := build(t, e.q, hugePrivateSource)
	o, err := e.q.Alloc(4 * 64)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.q.Launch(kernelOf(t, p, "huge"), NDRange{Dims: 1, Global: [3]uint64{64}}, []Arg{{Buffer: o}})
	t.Fatalf("the huge kernel's launch returned (%v): its stores landed outside the guard", err)
}

// threadedPoCL names the device of PoCL's pthread driver ("pthread-..."
// in PoCL 3.1, "cpu-..." from PoCL 5, TestPoCLDriversPresent), whose
// threads run the work-items; it skips the test on other platforms.
func threadedPoCL(t *testing.T) string {
	infos, err := Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	for _, in := range infos {
		if in.Platform == "Portable Computing Language" && (strings.HasPrefix(in.Name, "pthread-") ||
			strings.HasPrefix(in.Name, "cpu-") && !strings.HasPrefix(in.Name, "cpu-minimal-")) {
			return in.Name
		}
	}
	t.Skipf("no device of PoCL's pthread driver: where another runtime's threads run kernels, their stacks are its own")
	return ""
}

// guardedStacks counts this process's mappings that look like a stack
// with a guard of at least guard bytes: an inaccessible private mapping
// that large directly below a writable one.
func guardedStacks(guard uint64) (int, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	type span struct {
		lo, hi uint64
		perms  string
	}
	var maps []span
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("maps line %q", sc.Text())
		}
		maps = append(maps, span{l, h, f[1]})
	}
	n := 0
	for i := 0; i+1 < len(maps); i++ {
		g, s := maps[i], maps[i+1]
		if g.perms == "---p" && g.hi-g.lo >= guard && g.hi == s.lo && strings.HasPrefix(s.perms, "rw") {
			n++
		}
	}
	return n, nil
}

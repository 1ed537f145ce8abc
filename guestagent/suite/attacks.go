package suite

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// AttackOptions configure RunAttacks.
type AttackOptions struct {
	// Needles are secrets the test planted where no guest of this trust
	// domain may reach (another guest's buffer, vgpud's own memory): no
	// attack may read one back.
	Needles [][]byte
	// Reopen opens the device again (a reset: a lost instance comes back
	// on a fresh device context).
	Reopen func() (*driver.Device, error)
	// Only, if set, names the attacks to run.
	Only []string
	// ScanBytes is how far around its own buffer the pointer scan reads
	// (each way); 0: 256 KiB.
	ScanBytes uint64
}

// attack is one hostile act and what it must come to.
type attack struct {
	name string
	run  func(a *attacker) error
}

// attacker runs attacks on a device it reopens after every loss.
type attacker struct {
	d      *driver.Device
	opts   AttackOptions
	seen   bytes.Buffer // every byte the attacks read back
	losses int
}

// Attacks are the names of RunAttacks' acts, in order.
func Attacks() []string {
	var names []string
	for _, a := range attacks() {
		names = append(names, a.name)
	}
	return names
}

func attacks() []attack {
	return []attack{
		{"pointer-scan", (*attacker).pointerScan},
		{"endless-kernel", func(a *attacker) error { return a.mustLose("endless", endlessSource, 1) }},
		{"compiler-crash", func(a *attacker) error { return a.mustFailBuild(compilerCrashSource) }},
		{"compiler-bomb", func(a *attacker) error { return a.mustFailBuild(compilerBombSource) }},
		{"wild-write", func(a *attacker) error { return a.mustLose("wild", wildWriteSource, 1) }},
		{"huge-private-array", func(a *attacker) error { return a.mustLoseOrRefuse("huge", hugePrivateSource, 64) }},
	}
}

// OpenCL C of the attacks. Each is a kernel a tenant may submit: vgpud
// cannot tell it from a buggy one before it runs.
const (
	// peekSource reads n bytes at a guest-chosen address (a scalar cast
	// to a pointer) and tells where its own buffer lives.
	peekSource = `
__kernel void where(__global ulong *out, __global uchar *mine) { out[0] = (ulong)mine; }
__kernel void peek(__global uchar *out, ulong addr) {
	size_t i = get_global_id(0);
	out[i] = ((__global uchar *)addr)[i];
}`
	endlessSource     = `__kernel void endless(__global int *o) { while (o[1] == 0) { o[0]++; } }`
	wildWriteSource   = `__kernel void wild(__global int *o) { *(__global int *)0x10 = 1; o[0] = 2; }`
	hugePrivateSource = `__kernel void huge(__global float *o) {
	float a[16777216];
	a[get_global_id(0)] = 1.0f;
	o[get_global_id(0)] = a[o[1] > 0.0f ? 5 : 7];
}`
)

// compilerCrashSource overflows the compiler's stack: macro doubling makes
// a chain of 2^18 unary minus signs (clang parses them recursively). 450
// bytes.
var compilerCrashSource = doubling("-", 18, "__kernel void k(__global int *o) { o[0] = A18 1; }")

// compilerBombSource makes the preprocessor expand 2^40 tokens: it never
// finishes (or runs out of memory).
var compilerBombSource = doubling("x", 40, "__kernel void k(__global int *o) { int x = 1; o[0] = A40; }")

func doubling(base string, n int, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#define A0 %s\n", base)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "#define A%d A%d A%d\n", i, i-1, i-1)
	}
	b.WriteString(body)
	b.WriteString("\n")
	return b.String()
}

// RunAttacks plays a hostile tenant on d: it reads memory through integer
// pointers around its own buffers, runs a kernel that never ends, crashes
// and bombs the compiler, writes through a wild pointer and overflows a
// kernel's stack. Each act must come to what isolation promises (the
// device context lost, or a build refused, never more) and no byte read
// back may hold one of opts.Needles. After every loss it reopens the device and
// goes on; a last case runs a normal job. It returns the report and the
// device it ended with.
func RunAttacks(ctx context.Context, d *driver.Device, opts AttackOptions) (Report, *driver.Device) {
	if opts.ScanBytes == 0 {
		opts.ScanBytes = 256 << 10
	}
	a := &attacker{d: d, opts: opts}
	rn := newRunner(ctx, d, "attack")
	for _, at := range attacks() {
		if len(opts.Only) > 0 && !contains(opts.Only, at.name) {
			continue
		}
		rn.run(at.name, func() error {
			if err := at.run(a); err != nil {
				return err
			}
			for i, n := range opts.Needles {
				if len(n) > 0 && bytes.Contains(a.seen.Bytes(), n) {
					return fmt.Errorf("read back secret %d, which another domain (or vgpud) holds", i)
				}
			}
			return nil
		})
	}
	rn.run("vector-add-after", func() error {
		p, err := build(a.d)
		if err != nil {
			return err
		}
		err = vectorAdd(a.d, p, 4096, 1)
		return errors.Join(err, a.d.FreeProgram(p), a.d.Finish())
	})
	rep := rn.report()
	rep.Losses = a.losses
	return rep, a.d
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lost reports whether err is the loss of the device context; if so it
// reopens the device.
func (a *attacker) lost(err error) (bool, error) {
	if !errors.Is(err, driver.ErrDeviceLost) {
		return false, nil
	}
	a.losses++
	if a.opts.Reopen == nil {
		return true, fmt.Errorf("device lost and no way to reopen it: %w", err)
	}
	a.d.Close()
	d, rerr := a.opts.Reopen()
	if rerr != nil {
		return true, fmt.Errorf("reopen after the loss: %w", rerr)
	}
	a.d = d
	return true, nil
}

// mustLose builds src and launches kernel over n items: the launch must
// end the instance's device context (and nothing else), after which the
// device is reopened.
func (a *attacker) mustLose(kernel, src string, n uint64) error {
	p, _, err := a.d.Build(src, "")
	if err != nil {
		if lost, lerr := a.lost(err); lost {
			return lerr // the build alone did it: contained too
		}
		return fmt.Errorf("build: %w", err)
	}
	b, err := a.d.CreateBuffer(4 * 64)
	if err == nil {
		err = a.d.Write(b, 0, make([]byte, 4*64))
	}
	if err == nil {
		err = a.d.Launch(p, kernel, driver.Range1(n, 0), driver.BufferArg(b))
	}
	if err == nil {
		err = a.d.Finish()
	}
	lost, lerr := a.lost(err)
	switch {
	case lost:
		return lerr
	case err == nil:
		return fmt.Errorf("%s ran to completion: want the device context lost", kernel)
	default:
		return fmt.Errorf("%s: %w, want the device context lost", kernel, err)
	}
}

// mustLoseOrRefuse is mustLose for a kernel a device may refuse to run:
// the context is lost (a CPU device: the worker's stack overflows), or
// the launch (or build) is refused with out-of-resources, launch-failed
// or build-failed and the device goes on working (NVIDIA checks a
// kernel's private memory at launch: CL_OUT_OF_RESOURCES, seen on an
// H100). The attacks after it check the device still works.
func (a *attacker) mustLoseOrRefuse(kernel, src string, n uint64) error {
	err := a.mustLose(kernel, src, n)
	var ce *driver.CommandError
	if err != nil && errors.As(err, &ce) {
		switch ce.Status {
		case abi.StatusOutOfResources, abi.StatusLaunchFailed, abi.StatusBuildFailed:
			return nil
		}
	}
	return err
}

// mustFailBuild builds src: the build must fail (refused, failed, or the
// device context lost with the compiler) and the device still work.
func (a *attacker) mustFailBuild(src string) error {
	p, _, err := a.d.Build(src, "")
	if err == nil {
		_ = a.d.FreeProgram(p)
		return fmt.Errorf("the build succeeded")
	}
	if lost, lerr := a.lost(err); lost {
		return lerr
	}
	if s := abi.StatusOf(err); s != abi.StatusBuildFailed {
		return fmt.Errorf("build: %w, want build failed or the device context lost", err)
	}
	return nil
}

// pointerScan reads memory around its own buffer through a pointer it
// makes from an integer: whatever it can reach is only its own trust
// domain's (its worker process's) memory. A read of an unmapped address
// loses the device context; the scan reopens and goes on.
func (a *attacker) pointerScan() error {
	const window = 64 << 10
	var base uint64
	var prog driver.Program
	var out, mine driver.Buffer
	setup := func() error {
		var err error
		if prog, _, err = a.d.Build(peekSource, ""); err != nil {
			return fmt.Errorf("build: %w", err)
		}
		if mine, err = a.d.CreateBuffer(window); err != nil {
			return err
		}
		if out, err = a.d.CreateBuffer(window); err != nil {
			return err
		}
		addr, err := a.d.CreateBuffer(8)
		if err != nil {
			return err
		}
		if err := a.d.Launch(prog, "where", driver.Range1(1, 0), driver.BufferArg(addr), driver.BufferArg(mine)); err != nil {
			return err
		}
		v := make([]byte, 8)
		if err := a.d.Read(addr, 0, v); err != nil {
			return err
		}
		base = binary.LittleEndian.Uint64(v)
		return nil
	}
	if err := setup(); err != nil {
		return err
	}
	if base == 0 {
		return fmt.Errorf("the kernel saw its buffer at address 0")
	}
	read := 0
	for off := -int64(a.opts.ScanBytes); off < int64(a.opts.ScanBytes)+window; off += window {
		at := uint64(int64(base) + off)
		err := a.d.Launch(prog, "peek", driver.Range1(window, 0), driver.BufferArg(out), driver.Uint64Arg(at))
		got := make([]byte, window)
		if err == nil {
			err = a.d.Read(out, 0, got)
		}
		if lost, lerr := a.lost(err); lost {
			if lerr != nil {
				return lerr
			}
			if err := setup(); err != nil {
				return fmt.Errorf("after a loss: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("peek at %#x: %w", at, err)
		}
		a.seen.Write(got)
		read++
	}
	if read == 0 {
		return fmt.Errorf("no window around its own buffer could be read: the scan proves nothing")
	}
	return errors.Join(a.d.FreeProgram(prog), a.d.Finish())
}

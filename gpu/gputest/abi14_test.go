package gputest_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/gputest"
)

// infoSource's kernels, out of name order, with every address space and
// qualifier the fake reports, in types both spell alike.
const infoSource = `
__kernel void zeta(__global const float *restrict a, __global volatile int *b, __constant uint *c) { }
__kernel void alpha(__local float4 *tmp, int n, float4 v) { }
__kernel void mid() { }
`

// checkInfo checks what Program.Info reports for infoSource; the sizes
// are the device's own.
func checkInfo(t *testing.T, d gpu.Device) {
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	p, log, err := q.Build(infoSource, "")
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	got, err := p.Info()
	if err != nil {
		t.Fatalf("Info() = %v", err)
	}
	want := []gpu.KernelInfo{
		{Name: "alpha", Args: []gpu.ArgInfo{
			{AddressQualifier: gpu.ArgAddressLocal, AccessQualifier: gpu.ArgAccessNone, TypeName: "float4*", Name: "tmp"},
			{AddressQualifier: gpu.ArgAddressPrivate, AccessQualifier: gpu.ArgAccessNone, TypeName: "int", Name: "n"},
			{AddressQualifier: gpu.ArgAddressPrivate, AccessQualifier: gpu.ArgAccessNone, TypeName: "float4", Name: "v"},
		}},
		{Name: "mid"},
		{Name: "zeta", Args: []gpu.ArgInfo{
			{AddressQualifier: gpu.ArgAddressGlobal, AccessQualifier: gpu.ArgAccessNone, TypeQualifier: gpu.ArgTypeConst | gpu.ArgTypeRestrict, TypeName: "float*", Name: "a"},
			{AddressQualifier: gpu.ArgAddressGlobal, AccessQualifier: gpu.ArgAccessNone, TypeQualifier: gpu.ArgTypeVolatile, TypeName: "int*", Name: "b"},
			// The real device reports a __constant pointer as const.
			{AddressQualifier: gpu.ArgAddressConstant, AccessQualifier: gpu.ArgAccessNone, TypeName: "uint*", Name: "c"},
		}},
	}
	sizes := cmpopts.IgnoreFields(gpu.KernelInfo{}, "WorkGroupSize", "PreferredMultiple", "LocalMemSize", "PrivateMemSize")
	constC := cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Args.TypeQualifier" }, cmp.Comparer(func(a, b uint32) bool {
		return a&^gpu.ArgTypeConst == b&^gpu.ArgTypeConst
	}))
	if diff := cmp.Diff(want, got, sizes, cmpopts.EquateEmpty(), constC); diff != "" {
		t.Errorf("Info() (-want +got):\n%s", diff)
	}
	for _, k := range got {
		if k.WorkGroupSize == 0 {
			t.Errorf("kernel %s: work-group size 0", k.Name)
		}
	}
	p.Release()
	if _, err := p.Info(); !errors.Is(err, gpu.ErrClosed) {
		t.Errorf("Info() after Release = %v, want ErrClosed", err)
	}
}

// checkCopyFill runs copies and fills and the refusals of bad ones.
func checkCopyFill(t *testing.T, d gpu.Device) {
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	a, _ := q.Alloc(64)
	b, _ := q.Alloc(32)
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i + 1)
	}
	if err := q.Write(a, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := q.Copy(a, b, 4, 8, 16); err != nil {
		t.Fatalf("Copy = %v", err)
	}
	if err := q.Fill(a, 32, 32, []byte{9, 8, 7, 6}); err != nil {
		t.Fatalf("Fill = %v", err)
	}
	gotA, gotB := make([]byte, 64), make([]byte, 32)
	q.Read(a, 0, gotA)
	q.Read(b, 0, gotB)
	wantA := append(append([]byte(nil), data[:32]...), bytes.Repeat([]byte{9, 8, 7, 6}, 8)...)
	wantB := make([]byte, 32)
	copy(wantB[8:24], data[4:20])
	if !bytes.Equal(gotA, wantA) || !bytes.Equal(gotB, wantB) {
		t.Errorf("a = % x\nb = % x", gotA, gotB)
	}
	for name, err := range map[string]error{
		"overlap":      q.Copy(a, a, 0, 4, 8),
		"past source":  q.Copy(b, a, 30, 0, 4),
		"past dest":    q.Copy(a, b, 0, 30, 4),
		"zero":         q.Copy(a, b, 0, 0, 0),
		"pattern 3":    q.Fill(a, 0, 3, []byte{1, 2, 3}),
		"unaligned":    q.Fill(a, 2, 4, []byte{1, 2, 3, 4}),
		"fill past":    q.Fill(b, 0, 64, []byte{1}),
		"pattern none": q.Fill(b, 0, 1, nil),
	} {
		if !errors.Is(err, gpu.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestInfoCopyFill(t *testing.T) {
	d := gputest.New(gputest.Config{})
	t.Run("info", func(t *testing.T) { checkInfo(t, d) })
	t.Run("copy-fill", func(t *testing.T) { checkCopyFill(t, d) })
	faulty := gputest.New(gputest.Config{Fault: func(op string) error {
		if op == gputest.OpCopy || op == gputest.OpFill || op == gputest.OpInfo {
			return gpu.ErrDevice
		}
		return nil
	}})
	q, _ := faulty.NewQueue()
	defer q.Close()
	a, _ := q.Alloc(16)
	p, _, _ := q.Build(infoSource, "")
	if _, err := p.Info(); !errors.Is(err, gpu.ErrDevice) {
		t.Errorf("Info with a fault = %v", err)
	}
	if err := q.Copy(a, a, 0, 8, 8); !errors.Is(err, gpu.ErrDevice) {
		t.Errorf("Copy with a fault = %v", err)
	}
	if err := q.Fill(a, 0, 8, []byte{1}); !errors.Is(err, gpu.ErrDevice) {
		t.Errorf("Fill with a fault = %v", err)
	}
}

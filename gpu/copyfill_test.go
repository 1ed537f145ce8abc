//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// infoSource has kernels out of name order, every address space, the
// type qualifiers, and a required work-group size.
const infoSource = `
__kernel void zeta(__global const float *restrict a, __global volatile int *b, __constant uint *c) { }
__kernel __attribute__((reqd_work_group_size(8, 2, 1))) void alpha(__local float4 *tmp, int n, float4 v) { }
__kernel void mid(void) { }
`

func TestProgramInfo(t *testing.T) {
	d := openDevice(t, "")
	if strings.HasPrefix(d.Info().Platform, "NVIDIA") {
		// A platform note (gpu/doc.go): NVIDIA's ptxas fails on the
		// empty kernel without parameters ("mid"), declared "(void)" or
		// "()" alike (H100 and H200, driver 580.159.04). Guests see the
		// build failure with its log.
		t.Skip("NVIDIA's compiler refuses an empty kernel without parameters (gpu/doc.go)")
	}
	q := newQueue(t, d)
	p := build(t, q, infoSource)
	got, err := p.Info()
	if err != nil {
		t.Fatalf("Info() = %v", err)
	}
	want := []KernelInfo{
		{Name: "alpha", CompileWorkGroupSize: [3]uint64{8, 2, 1}, Args: []ArgInfo{
			{AddressQualifier: ArgAddressLocal, AccessQualifier: ArgAccessNone, TypeName: "float4*", Name: "tmp"},
			{AddressQualifier: ArgAddressPrivate, AccessQualifier: ArgAccessNone, TypeName: "int", Name: "n"},
			{AddressQualifier: ArgAddressPrivate, AccessQualifier: ArgAccessNone, TypeName: "float4", Name: "v"},
		}},
		{Name: "mid", Args: []ArgInfo{}},
		{Name: "zeta", Args: []ArgInfo{
			{AddressQualifier: ArgAddressGlobal, AccessQualifier: ArgAccessNone, TypeQualifier: ArgTypeConst | ArgTypeRestrict, TypeName: "float*", Name: "a"},
			{AddressQualifier: ArgAddressGlobal, AccessQualifier: ArgAccessNone, TypeQualifier: ArgTypeVolatile, TypeName: "int*", Name: "b"},
			{AddressQualifier: ArgAddressConstant, AccessQualifier: ArgAccessNone, TypeQualifier: ArgTypeConst, TypeName: "uint*", Name: "c"},
		}},
	}
	// Sizes depend on the device: compared separately.
	sizes := cmpopts.IgnoreFields(KernelInfo{}, "WorkGroupSize", "PreferredMultiple", "LocalMemSize", "PrivateMemSize")
	if d := cmp.Diff(want, got, sizes, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("Info() (-want +got):\n%s", d)
	}
	for _, k := range got {
		if k.WorkGroupSize == 0 || k.PreferredMultiple == 0 {
			t.Errorf("kernel %s: work-group size %d, preferred multiple %d, want nonzero", k.Name, k.WorkGroupSize, k.PreferredMultiple)
		}
	}
	p.Release()
	if _, err := p.Info(); !errors.Is(err, ErrClosed) {
		t.Errorf("Info() after Release = %v, want ErrClosed", err)
	}
}

func TestCopyFill(t *testing.T) {
	d := openDevice(t, "")
	q := newQueue(t, d)
	a, b := alloc(t, q, 256), alloc(t, q, 128)
	data := make([]byte, 256)
	for i := range data {
		data[i] = byte(i)
	}
	if err := q.Write(a, 0, data); err != nil {
		t.Fatal(err)
	}
	if err := q.Copy(a, b, 16, 8, 100); err != nil {
		t.Fatalf("Copy(a -> b) = %v", err)
	}
	if err := q.Copy(a, a, 0, 128, 128); err != nil {
		t.Fatalf("Copy(a -> a, adjacent) = %v", err)
	}
	gotA, gotB := make([]byte, 256), make([]byte, 128)
	if err := q.Read(a, 0, gotA); err != nil {
		t.Fatal(err)
	}
	if err := q.Read(b, 0, gotB); err != nil {
		t.Fatal(err)
	}
	wantB := make([]byte, 128)
	copy(wantB[8:108], data[16:116])
	if !bytes.Equal(gotB, wantB) || !bytes.Equal(gotA[:128], data[:128]) || !bytes.Equal(gotA[128:], data[:128]) {
		t.Errorf("after copies a = % x\nb = % x", gotA, gotB)
	}
	for _, pl := range []int{1, 2, 4, 8, 16, 32, 64, 128} {
		pat := make([]byte, pl)
		for i := range pat {
			pat[i] = byte(0x80 + pl + i)
		}
		if err := q.Fill(a, uint64(pl), uint64(pl), pat); err != nil {
			t.Fatalf("Fill(pattern %d) = %v", pl, err)
		}
		got := make([]byte, pl)
		if err := q.Read(a, uint64(pl), got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pat) {
			t.Errorf("Fill(pattern %d) wrote % x", pl, got)
		}
	}
	if err := q.Fill(b, 0, 128, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := q.Read(b, 0, gotB); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotB, bytes.Repeat([]byte{1, 2, 3, 4}, 32)) {
		t.Errorf("whole fill = % x", gotB)
	}

	other := alloc(t, newQueue(t, d), 64)
	for name, err := range map[string]error{
		"copy overlap":       q.Copy(a, a, 0, 8, 16),
		"copy 0 bytes":       q.Copy(a, b, 0, 0, 0),
		"copy past source":   q.Copy(b, a, 100, 0, 29),
		"copy past dest":     q.Copy(a, b, 0, 100, 29),
		"copy offset wraps":  q.Copy(a, b, ^uint64(0), 0, 2),
		"fill pattern 3":     q.Fill(a, 0, 6, []byte{1, 2, 3}),
		"fill pattern 256":   q.Fill(a, 0, 256, make([]byte, 256)),
		"fill no pattern":    q.Fill(a, 0, 1, nil),
		"fill offset":        q.Fill(a, 2, 4, []byte{1, 2, 3, 4}),
		"fill past end":      q.Fill(b, 64, 128, []byte{1}),
		"fill 0 bytes":       q.Fill(b, 0, 0, []byte{1}),
		"copy foreign":       q.Copy(other, a, 0, 0, 8),
		"fill foreign":       q.Fill(other, 0, 8, []byte{1}),
		"copy foreign type":  q.Copy(a, nil, 0, 0, 8),
		"fill released peer": func() error { c := alloc(t, q, 8); c.Release(); return q.Fill(c, 0, 8, []byte{1}) }(),
	} {
		if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrForeign) && !errors.Is(err, ErrClosed) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}

package driver_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/guestagent/driver/drivertest"
)

const twoKernels = `
__kernel void vscale(__global float *restrict out, __global const float *in, float k) { }
__kernel void add(__global const uint *a, __local uint *tmp, uint n) { }
`

func TestProgramInfo(t *testing.T) {
	d, _ := open(t, drivertest.Config{MaxWorkGroup: 128}, driver.Options{})
	p, _, err := d.Build(twoKernels, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := d.ProgramInfo(p)
	if err != nil {
		t.Fatalf("ProgramInfo() = %v", err)
	}
	g, l, pr := abi.ArgAddressGlobal, abi.ArgAddressLocal, abi.ArgAddressPrivate
	none := abi.ArgAccessNone
	want := abi.ProgramInfo{Kernels: []abi.KernelInfo{
		{Name: "add", WorkGroupSize: 128, PreferredMultiple: 1, Args: []abi.KernelArgInfo{
			{AddressQualifier: g, AccessQualifier: none, TypeQualifier: abi.ArgTypeConst, TypeName: "uint*", Name: "a"},
			{AddressQualifier: l, AccessQualifier: none, TypeName: "uint*", Name: "tmp"},
			{AddressQualifier: pr, AccessQualifier: none, TypeName: "uint", Name: "n"},
		}},
		{Name: "vscale", WorkGroupSize: 128, PreferredMultiple: 1, Args: []abi.KernelArgInfo{
			{AddressQualifier: g, AccessQualifier: none, TypeQualifier: abi.ArgTypeRestrict, TypeName: "float*", Name: "out"},
			{AddressQualifier: g, AccessQualifier: none, TypeQualifier: abi.ArgTypeConst, TypeName: "float*", Name: "in"},
			{AddressQualifier: pr, AccessQualifier: none, TypeName: "float", Name: "k"},
		}},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ProgramInfo() (-want +got):\n%s", diff)
	}
	if _, err := d.ProgramInfo(driver.Program{Handle: 77}); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("ProgramInfo(unknown) = %v, want not found", err)
	}
	if _, err := d.ProgramInfo(driver.Program{}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("ProgramInfo(0) = %v, want ErrInvalid", err)
	}
}

// TestProgramInfoGrows: a blob larger than the first page of room is asked
// for again with the size the device reported.
func TestProgramInfoGrows(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	var src strings.Builder
	const n = 40 // 40 kernels of 2 arguments: 16 + 40*(128+288) bytes
	for i := range n {
		fmt.Fprintf(&src, "__kernel void k%02d(__global int *o, int v) { }\n", i)
	}
	p, _, err := d.Build(src.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	before := d.Stats().Commands
	info, err := d.ProgramInfo(p)
	if err != nil {
		t.Fatalf("ProgramInfo() = %v", err)
	}
	if len(info.Kernels) != n || info.Kernels[0].Name != "k00" || info.Kernels[n-1].Name != "k39" || len(info.Kernels[7].Args) != 2 {
		t.Errorf("ProgramInfo() = %d kernels, first %+v", len(info.Kernels), info.Kernels[0])
	}
	if got := d.Stats().Commands - before; got != 2 {
		t.Errorf("ProgramInfo of a %d-byte blob used %d commands, want 2", info.Size(), got)
	}
}

func TestCopyBuffer(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	a, _ := d.CreateBuffer(256)
	b, _ := d.CreateBuffer(256)
	data := make([]byte, 256)
	for i := range data {
		data[i] = byte(i)
	}
	if err := d.Write(a, 0, data); err != nil {
		t.Fatal(err)
	}
	var recs []abi.Completion
	done := func(c abi.Completion) { recs = append(recs, c) }
	if err := d.CopyBuffer(a, b, 16, 32, 64, done); err != nil {
		t.Fatalf("CopyBuffer(a -> b) = %v", err)
	}
	if err := d.CopyBuffer(a, a, 0, 128, 128, nil); err != nil { // adjacent, not overlapping
		t.Fatalf("CopyBuffer(a -> a) = %v", err)
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	if len(recs) != 1 || recs[0].Status != abi.StatusOK || recs[0].Detail != 64 || recs[0].Opcode != abi.OpBufferCopy {
		t.Errorf("done got %+v, want one OK buffer-copy with detail 64", recs)
	}
	gotB := make([]byte, 256)
	if err := d.Read(b, 0, gotB); err != nil {
		t.Fatal(err)
	}
	wantB := make([]byte, 256)
	copy(wantB[32:96], data[16:80])
	if !bytes.Equal(gotB, wantB) {
		t.Errorf("b after copy = % x", gotB)
	}
	gotA := make([]byte, 256)
	if err := d.Read(a, 0, gotA); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotA[128:], data[:128]) || !bytes.Equal(gotA[:128], data[:128]) {
		t.Errorf("a after copy within = % x", gotA)
	}
}

func TestFillBuffer(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	b, _ := d.CreateBuffer(1024)
	for _, pl := range []int{1, 2, 4, 8, 16, 32, 64, 128} {
		pat := make([]byte, pl)
		for i := range pat {
			pat[i] = byte(pl + i)
		}
		off, n := uint64(2*pl), uint64(4*pl)
		if err := d.FillBuffer(b, off, n, pat, nil); err != nil {
			t.Fatalf("FillBuffer(pattern %d) = %v", pl, err)
		}
		got := make([]byte, 1024)
		if err := d.Read(b, 0, got); err != nil {
			t.Fatal(err)
		}
		for i := off; i < off+n; i++ {
			if got[i] != pat[(i-off)%uint64(pl)] {
				t.Fatalf("pattern %d: byte %d = %#x, want %#x", pl, i, got[i], pat[(i-off)%uint64(pl)])
			}
		}
		if got[off+n] != 0 { // no earlier, smaller fill reached it
			t.Fatalf("pattern %d: fill wrote past its range: byte %d = %#x", pl, off+n, got[off+n])
		}
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() = %v", err)
	}
}

func TestCopyFillRejects(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	a, _ := d.CreateBuffer(64)
	b, _ := d.CreateBuffer(64)
	for name, err := range map[string]error{
		"copy overlap":         d.CopyBuffer(a, a, 0, 8, 16, nil),
		"copy length 0":        d.CopyBuffer(a, b, 0, 0, 0, nil),
		"copy beyond source":   d.CopyBuffer(a, b, 60, 0, 8, nil),
		"copy beyond dest":     d.CopyBuffer(a, b, 0, 60, 8, nil),
		"copy handle 0":        d.CopyBuffer(driver.Buffer{}, b, 0, 0, 8, nil),
		"copy offset overflow": d.CopyBuffer(driver.Buffer{Handle: a.Handle}, b, ^uint64(0), 0, 2, nil),
		"fill pattern 0":       d.FillBuffer(a, 0, 8, nil, nil),
		"fill pattern 3":       d.FillBuffer(a, 0, 6, []byte{1, 2, 3}, nil),
		"fill pattern 256":     d.FillBuffer(a, 0, 256, make([]byte, 256), nil),
		"fill offset":          d.FillBuffer(a, 2, 8, []byte{1, 2, 3, 4}, nil),
		"fill length":          d.FillBuffer(a, 0, 6, []byte{1, 2, 3, 4}, nil),
		"fill beyond":          d.FillBuffer(a, 32, 64, []byte{1}, nil),
	} {
		if !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if st := d.Stats(); st.Commands != 2 {
		t.Errorf("rejected calls submitted commands: %d, want the 2 creates", st.Commands)
	}
	// The device's own checks, through a raw command: an overlapping copy.
	idx, err := d.SubmitRaw(abi.NewCommand(&abi.BufferCopy{Src: a.Handle, Dst: a.Handle, DstOffset: 4, Length: 8}, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	d.RingDoorbell(d.Tail())
	if rec, err := d.WaitIndex(idx); err != nil || rec.Status != abi.StatusInvalidArgument {
		t.Errorf("raw overlapping buffer-copy = %+v, %v, want invalid argument", rec, err)
	}
}

// TestCopyFillOwnedStatus: with a done callback the callback owns a
// failure; without one the next Finish reports it.
func TestCopyFillOwnedStatus(t *testing.T) {
	d, _ := open(t, drivertest.Config{}, driver.Options{})
	a, _ := d.CreateBuffer(64)
	gone := driver.Buffer{Handle: 999, Size: 64}
	var got []abi.Status
	done := func(c abi.Completion) { got = append(got, c.Status) }
	if err := d.CopyBuffer(a, gone, 0, 0, 8, done); err != nil {
		t.Fatal(err)
	}
	if err := d.FillBuffer(gone, 0, 8, []byte{1}, done); err != nil {
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Errorf("Finish() with owned failures = %v, want nil", err)
	}
	if len(got) != 2 || got[0] != abi.StatusNotFound || got[1] != abi.StatusNotFound {
		t.Errorf("done statuses = %v, want 2 x not found", got)
	}
	if err := d.FillBuffer(gone, 0, 8, []byte{1}, nil); err != nil {
		t.Fatal(err)
	}
	var ce *driver.CommandError
	if err := d.Finish(); !errors.As(err, &ce) || ce.Opcode != abi.OpBufferFill || ce.Status != abi.StatusNotFound {
		t.Errorf("Finish() = %v, want buffer-fill not found", err)
	}
}

func TestABI14Unsupported(t *testing.T) {
	d, _ := open(t, drivertest.Config{Version: abi.VersionMajor<<16 | 3}, driver.Options{})
	p, _, err := d.Build(twoKernels, "")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := d.CreateBuffer(64)
	b, _ := d.CreateBuffer(64)
	_, err1 := d.ProgramInfo(p)
	_, err2 := d.DeviceInfo()
	for name, err := range map[string]error{
		"ProgramInfo": err1,
		"DeviceInfo":  err2,
		"CopyBuffer":  d.CopyBuffer(a, b, 0, 0, 8, nil),
		"FillBuffer":  d.FillBuffer(a, 0, 8, []byte{1}, nil),
	} {
		if !errors.Is(err, driver.ErrUnsupported) || abi.StatusOf(err) != abi.StatusInvalidOpcode {
			t.Errorf("%s on an abi 1.3 device = %v, want ErrUnsupported", name, err)
		}
	}
	// The fake answers as a 1.3 device would if a command is sent anyway.
	idx, _ := d.SubmitRaw(abi.NewCommand(&abi.BufferFill{Handle: a.Handle, PatternLen: 1, Length: 1}, 0, 0))
	d.RingDoorbell(d.Tail())
	if rec, err := d.WaitIndex(idx); err != nil || rec.Status != abi.StatusInvalidOpcode {
		t.Errorf("raw buffer-fill on abi 1.3 = %+v, %v", rec, err)
	}
}

func TestDeviceInfo(t *testing.T) {
	d, _ := open(t, drivertest.Config{MaxWorkGroup: 128}, driver.Options{})
	got, err := d.DeviceInfo()
	if err != nil {
		t.Fatalf("DeviceInfo() = %v", err)
	}
	want := drivertest.FakeDeviceInfo()
	want.MaxWorkItemSizes = [3]uint64{128, 128, 64} // clamped to MaxWorkGroup
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DeviceInfo() (-want +got):\n%s", diff)
	}
	// The blob is read through the ring like any command: a buffer write
	// queued before it is not lost.
	b, _ := d.CreateBuffer(8)
	if err := d.Write(b, 0, []byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeviceInfo(); err != nil {
		t.Fatalf("second DeviceInfo() = %v", err)
	}
	out := make([]byte, 8)
	if err := d.Read(b, 0, out); err != nil || out[7] != 8 {
		t.Errorf("Read after DeviceInfo = %v, %v", out, err)
	}
	// A device without extensions and with the largest extension list.
	for _, info := range []abi.DeviceInfo{{}, {Extensions: []string{strings.Repeat("x", abi.MaxDeviceInfoLen-abi.DeviceInfoFixedSize)}}} {
		d, _ := open(t, drivertest.Config{DeviceInfo: &info}, driver.Options{})
		got, err := d.DeviceInfo()
		if err != nil || !cmp.Equal(info, got) {
			t.Errorf("DeviceInfo() of %d bytes = %+v, %v", info.Size(), got, err)
		}
	}
}

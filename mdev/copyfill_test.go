package mdev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/guestagent/driver"
)

// abi14Source has two kernels: their parameters cover every address
// space and the const, restrict and volatile qualifiers.
const abi14Source = `
__kernel void saxpy(__global const float *restrict x, __global float *y, float a, uint n) {
	size_t i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}
__kernel void reduce(__constant int *in, __global volatile int *out, __local int *tmp) {
	tmp[get_local_id(0)] = in[get_global_id(0)];
	barrier(CLK_LOCAL_MEM_FENCE);
	if (get_local_id(0) == 0) out[get_group_id(0)] = tmp[0];
}
`

// TestABI14EndToEnd drives the ABI 1.4 commands from the guest driver
// through a harness VM, the transport, a worker process and the
// aggregator to the OpenCL device: device-info, with an fp64 kernel run
// when it lists cl_khr_fp64, program-info of a two-kernel program,
// a fill read back, copies between buffers and within one, and an
// overlapping copy refused.
func TestABI14EndToEnd(t *testing.T) {
	m := newManager(t, nil)
	inst := mustCreate(t, m, CreateRequest{Profile: "vgpu-medium"})
	d := openDriver(t, attach(t, inst))
	if v := d.Info().Version; v != abi.Version {
		t.Fatalf("device abi %#x, want %#x", v, abi.Version)
	}
	checkDeviceInfo(t, d)
	p, log, err := d.Build(abi14Source, "")
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	info, err := d.ProgramInfo(p)
	if err != nil {
		t.Fatalf("ProgramInfo = %v", err)
	}
	if len(info.Kernels) != 2 || info.Kernels[0].Name != "reduce" || info.Kernels[1].Name != "saxpy" {
		t.Fatalf("ProgramInfo kernels = %+v, want reduce and saxpy", info.Kernels)
	}
	g, l, c, pr := abi.ArgAddressGlobal, abi.ArgAddressLocal, abi.ArgAddressConstant, abi.ArgAddressPrivate
	none := abi.ArgAccessNone
	want := map[string][]abi.KernelArgInfo{
		"reduce": {
			{AddressQualifier: c, AccessQualifier: none, TypeQualifier: abi.ArgTypeConst, TypeName: "int*", Name: "in"},
			{AddressQualifier: g, AccessQualifier: none, TypeQualifier: abi.ArgTypeVolatile, TypeName: "int*", Name: "out"},
			{AddressQualifier: l, AccessQualifier: none, TypeName: "int*", Name: "tmp"},
		},
		"saxpy": {
			{AddressQualifier: g, AccessQualifier: none, TypeQualifier: abi.ArgTypeConst | abi.ArgTypeRestrict, TypeName: "float*", Name: "x"},
			{AddressQualifier: g, AccessQualifier: none, TypeName: "float*", Name: "y"},
			{AddressQualifier: pr, AccessQualifier: none, TypeName: "float", Name: "a"},
			{AddressQualifier: pr, AccessQualifier: none, TypeName: "uint", Name: "n"},
		},
	}
	for _, k := range info.Kernels {
		if !slices.Equal(k.Args, want[k.Name]) {
			t.Errorf("kernel %s arguments = %+v\nwant %+v", k.Name, k.Args, want[k.Name])
		}
		if k.WorkGroupSize == 0 || k.WorkGroupSize > uint64(d.Info().MaxWorkGroup) && d.Info().MaxWorkGroup != 1<<31 {
			t.Errorf("kernel %s work-group size %d (device max %d)", k.Name, k.WorkGroupSize, d.Info().MaxWorkGroup)
		}
	}

	const n = 4096
	a, _ := d.CreateBuffer(n)
	b, _ := d.CreateBuffer(n)
	var got []abi.Completion
	done := func(c abi.Completion) { got = append(got, c) }
	if err := d.FillBuffer(a, 0, n, []byte{0xde, 0xad, 0xbe, 0xef}, done); err != nil {
		t.Fatal(err)
	}
	if err := d.FillBuffer(a, n/2, 16, bytes.Repeat([]byte{7}, 16), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyBuffer(a, b, 0, 100, n/2, done); err != nil { // between buffers
		t.Fatal(err)
	}
	if err := d.CopyBuffer(b, b, 100, 100+n/2, n/4, nil); err != nil { // within one, not overlapping
		t.Fatal(err)
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("Finish = %v", err)
	}
	if len(got) != 2 || got[0].Status != abi.StatusOK || got[0].Detail != n || got[1].Status != abi.StatusOK || got[1].Detail != n/2 {
		t.Errorf("completions = %+v", got)
	}
	wantA := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, n/4)
	copy(wantA[n/2:], bytes.Repeat([]byte{7}, 16))
	wantB := make([]byte, n)
	copy(wantB[100:], wantA[:n/2])
	copy(wantB[100+n/2:], wantB[100:100+n/4])
	gotA, gotB := make([]byte, n), make([]byte, n)
	if err := d.Read(a, 0, gotA); err != nil {
		t.Fatal(err)
	}
	if err := d.Read(b, 0, gotB); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotA, wantA) {
		t.Errorf("filled buffer differs at %d", firstDiffByte(gotA, wantA))
	}
	if !bytes.Equal(gotB, wantB) {
		t.Errorf("copied buffer differs at %d", firstDiffByte(gotB, wantB))
	}

	// An overlapping copy: the driver refuses it, and so does the device
	// when a guest sends it anyway.
	if err := d.CopyBuffer(b, b, 0, 8, 16, nil); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("CopyBuffer(overlapping) = %v, want ErrInvalid", err)
	}
	idx, err := d.SubmitRaw(abi.NewCommand(&abi.BufferCopy{Src: b.Handle, Dst: b.Handle, SrcOffset: 0, DstOffset: 8, Length: 16}, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	d.RingDoorbell(d.Tail())
	if rec, err := d.WaitIndex(idx); err != nil || rec.Status != abi.StatusInvalidArgument {
		t.Errorf("raw overlapping buffer-copy = %+v, %v, want invalid argument", rec, err)
	}
	if err := d.Read(b, 0, gotB); err != nil || !bytes.Equal(gotB, wantB) {
		t.Errorf("the refused copy changed the buffer (%v)", err)
	}
}

// checkDeviceInfo reads the device-information blob and checks it against
// the registers and PoCL's CPU devices; when it lists cl_khr_fp64, a
// double-precision kernel builds and computes.
func checkDeviceInfo(t *testing.T, d *driver.Device) {
	t.Helper()
	di, err := d.DeviceInfo()
	if err != nil {
		t.Fatalf("DeviceInfo = %v", err)
	}
	t.Logf("device info: %+v", di)
	mwg := uint64(d.Info().MaxWorkGroup)
	for i, v := range di.MaxWorkItemSizes {
		if v == 0 || v > mwg {
			t.Errorf("max_work_item_sizes[%d] = %d, RegMaxWorkGroup %d", i, v, mwg)
		}
	}
	if di.LocalMemSize == 0 || di.MaxParameterSize < 256 || di.MaxParameterSize > abi.MaxLaunchParamBytes ||
		di.AddressBits != 64 || !di.EndianLittle || di.SingleFPConfig == 0 || di.PreferredVectorWidth[abi.VecFloat] == 0 {
		t.Errorf("DeviceInfo = %+v", di)
	}
	for _, e := range di.Extensions {
		if !abi.PassThroughExtension(e) {
			t.Errorf("DeviceInfo lists %q", e)
		}
	}
	if !slices.Contains(di.Extensions, "cl_khr_fp64") {
		t.Fatalf("DeviceInfo lists no cl_khr_fp64 on PoCL: %q", di.Extensions)
	}
	if di.DoubleFPConfig == 0 {
		t.Errorf("cl_khr_fp64 listed with double_fp_config 0")
	}
	p, log, err := d.Build(`#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void twice(__global double *x, double k) { x[get_global_id(0)] *= k; }`, "")
	if err != nil {
		t.Fatalf("Build(fp64) = %v\n%s", err, log)
	}
	b, _ := d.CreateBuffer(16)
	in := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, math.Float64bits(1.25)), math.Float64bits(-3))
	if err := d.Write(b, 0, in); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(p, "twice", driver.Range1(2, 0), driver.BufferArg(b), driver.Uint64Arg(math.Float64bits(2))); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 16)
	if err := d.Read(b, 0, out); err != nil {
		t.Fatalf("Read after the fp64 launch = %v", err)
	}
	if x, y := math.Float64frombits(binary.LittleEndian.Uint64(out)), math.Float64frombits(binary.LittleEndian.Uint64(out[8:])); x != 2.5 || y != -6 {
		t.Errorf("fp64 kernel gave %v, %v, want 2.5, -6", x, y)
	}
	if err := d.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := d.FreeProgram(p); err != nil {
		t.Fatal(err)
	}
}

func firstDiffByte(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

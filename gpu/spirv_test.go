package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

// The test modules: testdata/NAME.spv is testdata/NAME.spvasm assembled
// by spirv-as (Debian's spirv-tools), which TestILTestdataAssembles checks
// where it is installed:
//
//	spirv-as --target-env spv1.0 NAME.spvasm -o NAME.spv
func readSPV(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("iltest", "testdata", name+".spv"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestILTestdataAssembles(t *testing.T) {
	as, err := exec.LookPath("spirv-as")
	if err != nil {
		t.Skip("spirv-as not installed (spirv-tools): the committed modules are not reassembled")
	}
	// Every module of the repository: these tests' and the worker
	// self-test's (worker/child/selftest.spv).
	for _, base := range []string{"iltest/testdata/scale", "iltest/testdata/kinds", "iltest/testdata/spec", "../worker/child/selftest"} {
		out := filepath.Join(t.TempDir(), filepath.Base(base)+".spv")
		if b, err := exec.Command(as, "--target-env", "spv1.0", base+".spvasm", "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("spirv-as %s: %v\n%s", base, err, b)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(base + ".spv")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s.spv is not %s.spvasm assembled: reassemble it", base, base)
		}
		if _, err := CheckIL(want, MaxILLen); err != nil {
			t.Errorf("%s.spv: CheckIL = %v", base, err)
		}
	}
}

func TestCheckILParams(t *testing.T) {
	for _, tt := range []struct {
		module string
		want   map[string][]ILParam
	}{
		{"scale", map[string][]ILParam{"scale": {
			{Kind: ILBuffer, Type: "float*"},
			{Kind: ILScalar, Type: "float"},
		}}},
		{"kinds", map[string][]ILParam{"kinds": {
			{Kind: ILBuffer, Type: "float*"},
			{Kind: ILBuffer, Type: "__constant int*"},
			{Kind: ILLocal, Type: "__local char4*"},
			{Kind: ILImage, Type: "image2d_t", Access: ILReadOnly},
			{Kind: ILImage, Type: "image3d_t", Access: ILWriteOnly},
			{Kind: ILSampler, Type: "sampler_t"},
			{Kind: ILScalar, Type: "int4"},
			{Kind: ILScalar, Type: "long"},
		}}},
	} {
		m, err := CheckIL(readSPV(t, tt.module), MaxILLen)
		if err != nil {
			t.Fatalf("CheckIL(%s) = %v", tt.module, err)
		}
		if m.Version != 0x00010000 || !reflect.DeepEqual(m.Kernels, tt.want) {
			t.Errorf("CheckIL(%s) = version %#x, %+v; want 1.0, %+v", tt.module, m.Version, m.Kernels, tt.want)
		}
	}
}

// spvEdit returns a copy of module with word i set to v (i past the end
// appends).
func spvEdit(module []byte, i int, v uint32) []byte {
	b := bytes.Clone(module)
	for len(b) < 4*(i+1) {
		b = append(b, 0, 0, 0, 0)
	}
	binary.LittleEndian.PutUint32(b[4*i:], v)
	return b
}

// spvInsn returns module with one instruction appended.
func spvInsn(module []byte, op uint32, operands ...uint32) []byte {
	b := binary.LittleEndian.AppendUint32(bytes.Clone(module), uint32(len(operands)+1)<<16|op)
	for _, v := range operands {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func TestCheckILRefuses(t *testing.T) {
	scale := readSPV(t, "scale")
	bswap := bytes.Clone(scale)
	for i := 0; i < len(bswap); i += 4 {
		bswap[i], bswap[i+1], bswap[i+2], bswap[i+3] = bswap[i+3], bswap[i+2], bswap[i+1], bswap[i]
	}
	// Word 5 is the first instruction, OpCapability Addresses (2 words).
	for _, tt := range []struct {
		name   string
		module []byte
		max    int
	}{
		{"empty", nil, MaxILLen},
		{"header only, short", scale[:16], MaxILLen},
		{"not whole words", scale[:len(scale)-1], MaxILLen},
		{"too long", scale, len(scale) - 4},
		{"magic", spvEdit(scale, 0, 0x12345678), MaxILLen},
		{"big-endian", bswap, MaxILLen},
		{"version 1.3", spvEdit(scale, 1, 0x00010300), MaxILLen},
		{"version 0.9", spvEdit(scale, 1, 0x00000900), MaxILLen},
		{"version low byte", spvEdit(scale, 1, 0x00010001), MaxILLen},
		{"bound 0", spvEdit(scale, 3, 0), MaxILLen},
		{"bound too big", spvEdit(scale, 3, MaxILBound+1), MaxILLen},
		{"schema", spvEdit(scale, 4, 1), MaxILLen},
		{"word count 0", spvEdit(scale, 5, 17), MaxILLen},
		{"word count past the end", spvEdit(scale, 5, 0x7fff<<16|17), MaxILLen},
		{"no Kernel capability", spvEdit(spvEdit(scale, 7, 2<<16|17), 8, 1), MaxILLen},
		{"inline assembly", spvInsn(scale, spvOpCapability, spvCapAsmINTEL), MaxILLen},
		{"id at the bound", spvInsn(scale, spvOpTypeVoid, 0x12), MaxILLen},
		{"type declared twice", spvInsn(scale, spvOpTypeVoid, 8), MaxILLen},
		{"kernel declared twice", spvInsn(scale, spvOpEntryPoint, spvModelKernel, 1, 0x6c616373, 0x65), MaxILLen},
		{"kernel of no function", spvInsn(scale, spvOpEntryPoint, spvModelKernel, 3, 0x00000078), MaxILLen},
		{"kernel name without NUL", spvInsn(scale, spvOpEntryPoint, spvModelKernel, 1, 0x78787878), MaxILLen},
		{"kernel name not UTF-8", spvInsn(scale, spvOpEntryPoint, spvModelKernel, 1, 0x000000ff), MaxILLen},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if m, err := CheckIL(tt.module, tt.max); !errors.Is(err, ErrSourceRejected) {
				t.Errorf("CheckIL = %+v, %v; want ErrSourceRejected", m, err)
			}
		})
	}
}

// FuzzCheckIL: any module is either refused as ErrSourceRejected or
// described with kernels whose parameters all have a kind.
func FuzzCheckIL(f *testing.F) {
	for _, name := range []string{"scale", "kinds"} {
		b, err := os.ReadFile(filepath.Join("iltest", "testdata", name+".spv"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, module []byte) {
		m, err := CheckIL(module, MaxILLen)
		if err != nil {
			if !errors.Is(err, ErrSourceRejected) {
				t.Fatalf("CheckIL = %v, want ErrSourceRejected", err)
			}
			return
		}
		if m.Version < MinILVersion || m.Version > MaxILVersion {
			t.Fatalf("version %#x taken", m.Version)
		}
		for name, params := range m.Kernels {
			for i, p := range params {
				if p.Kind < ILScalar || p.Kind > ILImageBuffer || p.Type == "" {
					t.Fatalf("kernel %q parameter %d: %+v", name, i, p)
				}
			}
		}
	})
}

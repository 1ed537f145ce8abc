package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/gpu"
)

// TestICDSPIRV runs guestagent/icd/testdata/il.c (SPIR-V programs through
// the ICD: clCreateProgramWithIL, the device's IL queries, building,
// running, CL_PROGRAM_IL, binaries, refusals) against the harness on the
// test device, expecting what the device can do: on a device that takes
// SPIR-V (PoCL 6, rusticl: make test-platforms) the whole of it, on one
// that does not (PoCL 3.1) the refusals. Where no C compiler is at hand
// (the VMM root of make test-platforms) $VGPUD_TEST_ICD_DIR and
// $VGPUD_TEST_IL_PROGRAM name an ICD and the program built beforehand.
func TestICDSPIRV(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds SPIR-V on the OpenCL device")
	}
	dev, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if err != nil {
		t.Fatal(err)
	}
	want := "none"
	if dev.Info().Caps.IL {
		want = "il"
	}
	dev.Close()
	icdDir := os.Getenv("VGPUD_TEST_ICD_DIR")
	if icdDir == "" {
		icdDir = buildICD(t)
	}
	prog := os.Getenv("VGPUD_TEST_IL_PROGRAM")
	if prog == "" {
		prog = filepath.Join(t.TempDir(), "il")
		args := []string{"-std=c11", "-Wall", "-Werror", "-I../../guestagent/icd/testdata", "-o", prog,
			"../../guestagent/icd/testdata/il.c", "-lOpenCL"}
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sock := startICDHost(t)
	modules, err := filepath.Abs("../../gpu/iltest/testdata")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prog, modules, want)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OCL_ICD_") && !strings.HasPrefix(kv, "OPENCL_VENDOR_PATH=") && !strings.HasPrefix(kv, "VGPUD_ICD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "OCL_ICD_VENDORS="+icdDir, "VGPUD_ICD_SOCKET="+sock, "VGPUD_ICD_SYSFS="+filepath.Join(t.TempDir(), "no-sysfs"))
	out, err := cmd.CombinedOutput()
	t.Logf("il %s:\n%s", want, out)
	if err != nil {
		t.Errorf("il %s: %v", want, err)
	}
}

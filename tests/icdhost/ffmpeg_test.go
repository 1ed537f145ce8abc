package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/vgpud/vgpud/tests/ffmpegcheck"
)

// TestFFmpegOpenCLFilters runs ffmpeg's four OpenCL filters (Debian's
// ffmpeg, unmodified) on PoCL directly and through the guest ICD against
// an in-process vgpud on the same device: the frames must be the same,
// byte for byte. ffmpeg uses OpenCL images (hwupload makes an image per
// plane, CL_R UNORM_INT8 here) and samplers: before ABI 1.8 it refused
// the vGPU with "No image support in OpenCL driver".
func TestFFmpegOpenCLFilters(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs ffmpeg on the OpenCL device")
	}
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		t.Fatal("ffmpeg not installed (scripts/install-deps.sh installs it)")
	}
	poclDir := poclVendors(t)
	icdDir := buildICD(t)
	sock := startICDHost(t)
	for _, f := range ffmpegcheck.Filters {
		t.Run(ffmpegcheck.Name(f), func(t *testing.T) {
			direct, err := ffmpegcheck.OnPoCL(ffmpeg, f, poclDir)
			if err != nil {
				t.Fatalf("on PoCL directly: %v", err)
			}
			through, err := ffmpegcheck.Run(ffmpeg, f, ffmpegcheck.Env("OCL_ICD_VENDORS="+icdDir, "VGPUD_ICD_SOCKET="+sock))
			if err != nil {
				t.Fatalf("through the ICD: %v", err)
			}
			if len(direct) != ffmpegcheck.Frames {
				t.Fatalf("on PoCL directly: %d frames, want %d: %q", len(direct), ffmpegcheck.Frames, direct)
			}
			if strings.Join(direct, "\n") != strings.Join(through, "\n") {
				t.Errorf("through the ICD the frames differ:\n%s\nPoCL directly:\n%s", strings.Join(through, "\n"), strings.Join(direct, "\n"))
			}
		})
	}
}

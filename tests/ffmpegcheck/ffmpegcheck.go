package ffmpegcheck

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Filters are ffmpeg's OpenCL filters as a user runs them, each with the
// arguments the tests give it.
var Filters = []string{
	"avgblur_opencl=sizeX=3",
	"sobel_opencl",
	"unsharp_opencl",
	"convolution_opencl=0 1 0 1 -4 1 0 1 0:0 1 0 1 -4 1 0 1 0:0 1 0 1 -4 1 0 1 0:0 1 0 1 -4 1 0 1 0",
}

// Frames is how many frames each run filters.
const Frames = 5

// Name is a filter's name, without its arguments.
func Name(filter string) string { return strings.SplitN(filter, "=", 2)[0] }

// Args are ffmpeg's arguments to run filter on the first OpenCL device:
// Frames frames of its own test pattern, made in yuv420p (no software
// scaling, whose SIMD paths differ between CPUs), uploaded to OpenCL
// images, filtered, downloaded, and each frame's MD5 on standard output.
func Args(filter string) []string {
	return []string{"-hide_banner", "-nostdin", "-loglevel", "error",
		"-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25,format=yuv420p", "-frames:v", fmt.Sprint(Frames),
		"-init_hw_device", "opencl=ocl:0.0", "-filter_hw_device", "ocl",
		"-vf", "hwupload," + filter + ",hwdownload,format=yuv420p", "-f", "framemd5", "-"}
}

// ShellArgs is Args quoted for a POSIX shell.
func ShellArgs(filter string) string {
	var q []string
	for _, a := range Args(filter) {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	return strings.Join(q, " ")
}

// frameLine is a frame of ffmpeg's framemd5 output: stream, dts, pts,
// duration, size, MD5.
var frameLine = regexp.MustCompile(`^\d+,\s*-?\d+,\s*-?\d+,\s*\d+,\s*\d+,\s*[0-9a-f]{32}$`)

// FrameMD5s are the frame lines of ffmpeg's framemd5 output: its comment
// lines (which name the version) and anything else in out (a guest's
// console lines) dropped.
func FrameMD5s(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); frameLine.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return lines
}

// Run runs ffmpeg on filter with env (the ICD loader's variables among
// them) and returns the frames' MD5 lines, or an error with what ffmpeg
// printed.
func Run(ffmpeg, filter string, env []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ffmpeg, Args(filter)...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ffmpeg %s: %w\n%s", filter, err, stderr.String())
	}
	return FrameMD5s(string(out)), nil
}

// Env is the environment without the ICD loader's and vgpud ICD's
// variables, plus extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OCL_ICD_") && !strings.HasPrefix(kv, "OPENCL_VENDOR_PATH=") && !strings.HasPrefix(kv, "VGPUD_ICD_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// PoCLICD is where Debian's pocl-opencl-icd puts its loader file.
const PoCLICD = "/etc/OpenCL/vendors/pocl.icd"

// PoCLVendors writes into dir a copy of PoCLICD, so that an
// OCL_ICD_VENDORS naming dir shows the loader PoCL alone.
func PoCLVendors(dir string) error {
	b, err := os.ReadFile(PoCLICD)
	if err != nil {
		return fmt.Errorf("PoCL's ICD is not installed (make deps installs pocl-opencl-icd): %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "pocl.icd"), b, 0o644)
}

// OnPoCL runs filter with only PoCL's ICD visible (vendors, a directory
// holding a copy of pocl.icd), on its first device.
func OnPoCL(ffmpeg, filter, vendors string) ([]string, error) {
	extra := []string{"OCL_ICD_VENDORS=" + vendors}
	if f := strings.Fields(os.Getenv("POCL_DEVICES")); len(f) > 1 {
		extra = append(extra, "POCL_DEVICES="+f[0])
	}
	return Run(ffmpeg, filter, Env(extra...))
}

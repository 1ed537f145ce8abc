package ffmpegcheck

import (
	"slices"
	"strings"
	"testing"
)

func TestFrameMD5s(t *testing.T) {
	out := `#format: frame checksums
#version: 2
#tb 0: 1/25
time=2026-11-30T16:10:39.005Z level=INFO msg="icd client connected" prog=vgpu-icdd conn=32
0,          0,          0,        1,   115200, e6da632c7f3b7daf1dff4dc227492379
0,          1,          1,        1,   115200, e8b0c37f6cd44193095052be78af322d
0,          2,          2,        1,   115200, not-an-md5
`
	want := []string{
		"0,          0,          0,        1,   115200, e6da632c7f3b7daf1dff4dc227492379",
		"0,          1,          1,        1,   115200, e8b0c37f6cd44193095052be78af322d",
	}
	if got := FrameMD5s(out); !slices.Equal(got, want) {
		t.Errorf("FrameMD5s = %q, want %q", got, want)
	}
}

func TestShellArgs(t *testing.T) {
	got := ShellArgs("convolution_opencl=0 1:it's")
	if !strings.Contains(got, `'hwupload,convolution_opencl=0 1:it'\''s,hwdownload,format=yuv420p'`) {
		t.Errorf("ShellArgs = %s", got)
	}
}

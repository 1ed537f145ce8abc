//go:build cgo

package gputest_test

import (
	"errors"
	"os"
	"testing"

	"github.com/vgpud/vgpud/gpu"
)

// openReal opens the real OpenCL device (VGPUD_TEST_DEVICE selects one),
// closed when t ends. Without an OpenCL platform the test is skipped: the
// fake itself needs none.
func openReal(t *testing.T) gpu.Device {
	t.Helper()
	d, err := gpu.Open(os.Getenv("VGPUD_TEST_DEVICE"))
	if errors.Is(err, gpu.ErrNoPlatform) {
		t.Skipf("no OpenCL platform: %v", err)
	}
	if err != nil {
		t.Fatalf("gpu.Open = %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestMatchesOpenCL runs the fake's tables against the real device: what
// the fake accepts and refuses (and with which sentinel), the real one
// must too, so that tests on the fake stand for tests on the device. The
// cases that depend on the fake's own bounds are left out.
func TestMatchesOpenCL(t *testing.T) {
	d := openReal(t)
	t.Run("build", func(t *testing.T) {
		for _, tt := range buildCases {
			if !tt.fakeOnly {
				t.Run(tt.name, func(t *testing.T) { checkBuild(t, d, tt) })
			}
		}
	})
	t.Run("launch", func(t *testing.T) { checkLaunches(t, d, false) })
	t.Run("lifecycle", func(t *testing.T) { checkLifecycle(t, openReal) })
}

// TestInfoCopyFillMatchesOpenCL runs the checks of the fake's Program.Info,
// Copy and Fill against the real device.
func TestInfoCopyFillMatchesOpenCL(t *testing.T) {
	d := openReal(t)
	t.Run("info", func(t *testing.T) { checkInfo(t, d) })
	t.Run("copy-fill", func(t *testing.T) { checkCopyFill(t, d) })
}

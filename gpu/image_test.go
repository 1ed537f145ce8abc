//go:build cgo

package gpu_test

import (
	"slices"
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/imagetest"
)

// TestImages runs the image checks on the OpenCL device, launched and
// pipelined, with buffers on host memory and without.
func TestImages(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(string) (gpu.Device, error)
	}{{"host-backed", gpu.Open}, {"plain", gpu.OpenPlain}} {
		t.Run(c.name, func(t *testing.T) {
			d, err := c.open("")
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			caps := d.Info().Caps.Images
			if !caps.Supported {
				t.Skipf("%s has no images", d.Info().Name)
			}
			if !slices.Contains(caps.Formats, gpu.ImageFormat{Order: 0x10B5, DataType: 0x10D2}) || caps.Max2D[0] < 8192 {
				t.Errorf("image caps %+v: no RGBA UNORM_INT8 or 2D images narrower than OpenCL's minimum", caps)
			}
			for _, pipelined := range []bool{false, true} {
				q, err := d.NewQueue()
				if err != nil {
					t.Fatal(err)
				}
				imagetest.Check(t, q, caps, pipelined)
				if err := q.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

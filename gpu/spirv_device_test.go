//go:build cgo

package gpu_test

import (
	"testing"

	"github.com/vgpud/vgpud/gpu"
	"github.com/vgpud/vgpud/gpu/iltest"
)

// TestBuildIL runs the SPIR-V checks on the OpenCL device, with buffers
// on host memory and without. On a device without SPIR-V (PoCL 3.1) only
// the refusal is checked; make test-platforms runs the rest on PoCL 6 and
// rusticl.
func TestBuildIL(t *testing.T) {
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
			q, err := d.NewQueue()
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			iltest.Check(t, q, d.Info().Caps)
		})
	}
}

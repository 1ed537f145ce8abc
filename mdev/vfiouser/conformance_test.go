package vfiouser_test

import (
	"testing"

	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// TestConformance runs the transport conformance suite over vfio-user,
// the client written from the specification playing QEMU.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	transporttest.Run(t, vfiousertest.Conformance{})
}

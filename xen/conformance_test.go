package xen_test

import (
	"testing"

	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/xen/xentest"
)

// TestConformance runs the transport conformance suite over the fake Xen:
// mdev instances attached with Instance.Attach(xen.NewServer(...)).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the guest suite on the physical device")
	}
	transporttest.Run(t, xentest.Conformance{})
}

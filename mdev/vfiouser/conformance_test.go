package vfiouser_test

import (
	"testing"

	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// TestConformance runs the transport conformance suite over vfio-user,
// the client written from the specification playing QEMU with the kick
// doorbell on the server's ioeventfd (what a KVM client wiring
// DEVICE_GET_REGION_IO_FDS does).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	transporttest.Run(t, vfiousertest.Conformance{})
}

// TestConformanceQEMU101 runs it again with the client behaving as QEMU
// 10.1's vfio-user-pci: BAR0 writes posted (No_reply), no ioeventfd, the
// kick a posted REGION_WRITE.
func TestConformanceQEMU101(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the OpenCL device")
	}
	transporttest.Run(t, vfiousertest.Conformance{Mode: vfiousertest.QEMU101})
}

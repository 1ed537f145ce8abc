package host

import (
	"fmt"
	"net"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/mdev/vfiouser/vfiousertest"
)

// VM is a QEMU-less VM attached to an instance: its BAR0, its RAM and
// DMA memory in it.
type VM interface {
	driver.Registers
	driver.Memory
	Alloc(n int) (driver.DMA, error)
	Close() error
}

var (
	_ VM = (*mpqemutest.VM)(nil)
	_ VM = (*vfiousertest.Client)(nil)
)

// Dial attaches a VM with ramBytes of RAM to the instance socket at
// socket, speaking the Host's transport as a VMM does: mpqemu (QEMU 7.2's
// x-pci-proxy-dev, every BAR access a round trip, the kick too),
// vfio-user with the kick on its ioeventfd (a client that wires it, as
// KVM would: a kick is one eventfd write, waiting for nothing), or, with
// Mode.Posted, vfio-user as QEMU 11.1's vfio-user-pci speaks it (no
// ioeventfd: every BAR write, the kick too, a posted message).
func (h *Host) Dial(socket string, ramBytes uint64) (VM, error) {
	if !h.vfioUser {
		return mpqemutest.Dial(socket, ramBytes)
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, err
	}
	mode := vfiousertest.IOEventfd
	if h.posted {
		mode = vfiousertest.QEMU101
	}
	vm, err := vfiousertest.NewMode(c, ramBytes, mode)
	if err != nil {
		return nil, fmt.Errorf("vfio-user: %w", err)
	}
	return vm, nil
}

// Transport names the Host's transport, for the benchmarks' headers.
func (h *Host) Transport() string {
	switch {
	case h.vfioUser && h.posted:
		return "vfio-user, BAR writes posted and no ioeventfd (as QEMU 11.1's vfio-user-pci)"
	case h.vfioUser:
		return "vfio-user (kick on the ioeventfd, as a client that wires it under KVM)"
	}
	return "mpqemu (every BAR access a round trip, as x-pci-proxy-dev)"
}

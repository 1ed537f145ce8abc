package transporttest

import (
	"testing"
	"time"

	"github.com/vgpud/vgpud/guestagent/driver"
	"github.com/vgpud/vgpud/mdev"
	"github.com/vgpud/vgpud/mdev/transport"
)

// Guest is a QEMU-less VM attached to one vGPU through the transport under
// test: the test client a transport package writes from its protocol's
// specification, playing the hypervisor's side. Its RAM is a sealed memfd
// the transport hands to vgpud the protocol's way; Alloc hands out pages
// of it (scattered, so the device must honour every page address).
//
// Register accesses go to BAR0 through the transport (the client adds the
// BAR0 base it programmed in config space when the protocol carries
// guest-physical addresses).
type Guest interface {
	driver.Registers
	driver.Memory
	// ConfigRead and ConfigWrite access the PCI config space (size 1, 2
	// or 4 bytes).
	ConfigRead(off uint32, size int) (uint32, error)
	ConfigWrite(off uint32, size int, v uint32) error
	// IRQCount returns how many interrupts were delivered since the last
	// IRQCount or WaitIRQ (0: none), like reading an irqfd's counter;
	// WaitIRQ waits up to timeout until that number is nonzero and
	// returns it (an error wrapping os.ErrDeadlineExceeded after timeout).
	IRQCount() (uint64, error)
	WaitIRQ(timeout time.Duration) (uint64, error)
	// Resample ends the interrupt (EOI): a line still high is asserted again.
	Resample() error
	// Reset resets the device the transport's way (mpqemu: DEVICE_RESET,
	// vfio-user: VFIO_USER_DEVICE_RESET, Xen: a config-space FLR is not
	// offered, so the ABI's RingCtrlReset) and then, like firmware, programs
	// BAR0 and the command register again.
	Reset() error
	// Err returns the first transport error a register access met (the
	// driver.Registers methods cannot return one).
	Err() error
	// Close hangs up.
	Close() error
}

// Transport is what the conformance suite needs of a transport.
type Transport interface {
	// Name names the transport in subtest names.
	Name() string
	// Socket is the transport mdev listens for (nil for a transport that
	// owns its event loop, like Xen's: Attach then calls
	// Instance.Attach itself).
	Socket() transport.Socket
	// Attach attaches a new guest with ramBytes of RAM (a multiple of
	// 2 MiB, at least 4 MiB) to inst the way a VM would: through the
	// instance's socket (inst.Socket() + the Socket's suffix) or through
	// the transport's own event loop. It probes and programs config space
	// (BAR0 at an address of its choosing, memory decoding and bus
	// mastering on) and wires the interrupt. The guest is closed at the
	// end of the test.
	Attach(t testing.TB, inst *mdev.Instance, ramBytes uint64) Guest
	// Hostile lists the transport's own malformed-message attacks.
	Hostile() []Attack
}

// Attack is one hostile peer. Run attacks inst through the transport and
// returns once the transport answered (an error reply or a hang-up) and
// it closed whatever it opened; it fails t if the transport crashed,
// hung, or accepted what it must refuse.
// The suite then checks that the instance serves a fresh guest and that a
// neighbour instance on the same device lost nothing.
type Attack struct {
	Name string
	Run  func(t testing.TB, inst *mdev.Instance)
}

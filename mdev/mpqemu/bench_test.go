package mpqemu_test

import (
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mmio"
)

// attachBench attaches a harness VM to a register file in front of a
// fake backend, until b ends.
func attachBench(b *testing.B) *mpqemutest.VM {
	b.Helper()
	mem := &guestmem.Map{}
	vm, stop, err := mpqemutest.Attach(mmio.New(&transporttest.FakeBackend{}), mmio.NewConfigSpace(), mem, 4<<20)
	if err != nil {
		mem.Close()
		b.Fatalf("Attach: %v", err)
	}
	b.Cleanup(func() {
		stop()
		mem.Close()
	})
	return vm
}

// BenchmarkBARWrite measures one harness round trip: a BAR_WRITE of the
// doorbell register through a socketpair, served by a Conn in front of a
// fake backend, and its RET.
func BenchmarkBARWrite(b *testing.B) {
	vm := attachBench(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		vm.Write32(abi.RegRingTail, uint32(i))
	}
	if err := vm.Err(); err != nil {
		b.Fatalf("Err() = %v", err)
	}
}

// BenchmarkBARRead is the same for a register read.
func BenchmarkBARRead(b *testing.B) {
	vm := attachBench(b)
	b.ReportAllocs()
	for b.Loop() {
		vm.Read32(abi.RegRingDone)
	}
	if err := vm.Err(); err != nil {
		b.Fatalf("Err() = %v", err)
	}
}

package mpqemu_test

import (
	"testing"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/mdev/transport/transporttest"
	"github.com/vgpud/vgpud/mmio"
)

// BenchmarkBARWrite measures one harness round trip: a BAR_WRITE of the
// doorbell register through a socketpair, served by a Conn in front of a
// fake backend, and its RET.
func BenchmarkBARWrite(b *testing.B) {
	mem := &guestmem.Map{}
	defer mem.Close()
	vm, stop, err := mpqemutest.Attach(mmio.New(&transporttest.FakeBackend{}), mmio.NewConfigSpace(), mem, 4<<20)
	if err != nil {
		b.Fatalf("Attach: %v", err)
	}
	defer stop()
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
	mem := &guestmem.Map{}
	defer mem.Close()
	vm, stop, err := mpqemutest.Attach(mmio.New(&transporttest.FakeBackend{}), mmio.NewConfigSpace(), mem, 4<<20)
	if err != nil {
		b.Fatalf("Attach: %v", err)
	}
	defer stop()
	b.ReportAllocs()
	for b.Loop() {
		vm.Read32(abi.RegRingDone)
	}
	if err := vm.Err(); err != nil {
		b.Fatalf("Err() = %v", err)
	}
}

package aggregator

import (
	"testing"
	"unsafe"

	"github.com/vgpud/vgpud/abi"
)

// TestSharedLayout pins the instance page's layout: the main process and
// a worker process map the same bytes (docs/worker.md "Instance page").
func TestSharedLayout(t *testing.T) {
	var s Shared
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"Magic", unsafe.Offsetof(s.Magic), 0},
		{"Version", unsafe.Offsetof(s.Version), 4},
		{"Tail", unsafe.Offsetof(s.Tail), 8},
		{"Head", unsafe.Offsetof(s.Head), 12},
		{"Done", unsafe.Offsetof(s.Done), 16},
		{"Enabled", unsafe.Offsetof(s.Enabled), 20},
		{"ErrStatus", unsafe.Offsetof(s.ErrStatus), 24},
		{"ErrCount", unsafe.Offsetof(s.ErrCount), 28},
		{"MemUsed", unsafe.Offsetof(s.MemUsed), 32},
		{"Stats", unsafe.Offsetof(s.Stats), 40},
		// Appended later: after every field of the first layout.
		{"Kernels", unsafe.Offsetof(s.Kernels), unsafe.Offsetof(s.ProgramBytes) + 8},
		{"KernelLimit", unsafe.Offsetof(s.KernelLimit), unsafe.Offsetof(s.Pipelined) + 8},
		{"BuildLimit", unsafe.Offsetof(s.BuildLimit), unsafe.Offsetof(s.Pipelined) + 16},
		// docs/worker.md's table, from the ring shadow on.
		{"RingShadow", unsafe.Offsetof(s.RingShadow), 1368},
		{"KickShadow", unsafe.Offsetof(s.KickShadow), 1392},
		{"DirectKicks", unsafe.Offsetof(s.DirectKicks), 1400},
		{"RelayedKicks", unsafe.Offsetof(s.RelayedKicks), 1408},
		{"size", uintptr(SharedSize), 1416},
	} {
		if f.got != f.want {
			t.Errorf("offset of %s = %d, want %d", f.name, f.got, f.want)
		}
	}
	if SharedSize > abi.PageSize {
		t.Errorf("SharedSize = %d, over a page", SharedSize)
	}
}

func TestSharedIn(t *testing.T) {
	page := make([]uint64, abi.PageSize/8) // 8-byte aligned
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&page[0])), abi.PageSize)
	if _, err := SharedIn(mem, false); err == nil {
		t.Errorf("SharedIn(zero page, false) = nil error, want bad magic")
	}
	s, err := SharedIn(mem, true)
	if err != nil {
		t.Fatal(err)
	}
	s.Latch(abi.StatusBadAddress)
	again, err := SharedIn(mem, false)
	if err != nil || again != s {
		t.Fatalf("SharedIn(initialised) = %p, %v, want %p", again, err, s)
	}
	if st, n := again.Error(); st != abi.StatusBadAddress || n != 1 {
		t.Errorf("Error() = %v, %d, want %v, 1", st, n, abi.StatusBadAddress)
	}
	// A status no instance latches (a lying peer wrote it) reads as a
	// device error.
	s.ErrStatus.Store(0xffff)
	if st, _ := s.Error(); st != abi.StatusDeviceError {
		t.Errorf("Error() with a garbage status = %v, want %v", st, abi.StatusDeviceError)
	}
	if _, err := SharedIn(mem[1:], true); err == nil {
		t.Errorf("SharedIn(misaligned) = nil error")
	}
	if _, err := SharedIn(mem[:8], true); err == nil {
		t.Errorf("SharedIn(short) = nil error")
	}
}

func TestKernelBucket(t *testing.T) {
	for _, c := range []struct {
		ns   uint64
		want int
	}{
		{0, 0}, {999, 0}, {1000, 1}, {1999, 1}, {2000, 2}, {1023_999, 10}, {1024_000, 11}, {1 << 62, KernelBuckets - 1},
	} {
		if got := KernelBucket(c.ns); got != c.want {
			t.Errorf("KernelBucket(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
}

// TestTurnOffer: the parked-turn word's transitions (sched/offer.go), and
// a revocation that finds a value the worker should not have written
// (hostile, or an offer of another number) reads it as not taken.
func TestTurnOffer(t *testing.T) {
	for _, tt := range []struct {
		name      string
		word      func(s *Shared) // what the worker did after ParkTurn(5)
		wantTaken bool
	}{
		{"untouched", func(*Shared) {}, false},
		{"taken", func(s *Shared) {
			if gen, ok := s.TakeTurn(); !ok || gen != 5 {
				t.Errorf("TakeTurn = %d, %v; want 5, true", gen, ok)
			}
		}, true},
		{"garbage", func(s *Shared) { s.TurnOffer.Store(0xdeadbeef) }, false},
		{"another offer taken", func(s *Shared) { s.TurnOffer.Store(6<<2 | offerTaken) }, false},
		{"cleared", func(s *Shared) { s.TurnOffer.Store(0) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var s Shared
			s.ParkTurn(5)
			if !s.TurnParked() {
				t.Fatal("not parked after ParkTurn")
			}
			tt.word(&s)
			if got := s.RevokeTurn(5); got != tt.wantTaken {
				t.Errorf("RevokeTurn = %v, want %v", got, tt.wantTaken)
			}
			if _, ok := s.TakeTurn(); ok && tt.name == "untouched" {
				t.Error("an offer revoked untaken can still be taken")
			}
		})
	}
	var s Shared
	if _, ok := s.TakeTurn(); ok {
		t.Error("TakeTurn took a turn never parked")
	}
}

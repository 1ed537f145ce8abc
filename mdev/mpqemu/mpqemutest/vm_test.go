package mpqemutest_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/internal/guestmem"
	"github.com/vgpud/vgpud/mdev/mpqemu/mpqemutest"
	"github.com/vgpud/vgpud/mmio"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// nullBackend answers the register file with constants.
type nullBackend struct{}

func (nullBackend) Limits() mmio.Limits              { return mmio.Limits{ProfileName: "null"} }
func (nullBackend) EnableRing(mmio.RingConfig) error { return nil }
func (nullBackend) DisableRing()                     {}
func (nullBackend) RingEnabled() bool                { return false }
func (nullBackend) Doorbell(uint32) error            { return nil }
func (nullBackend) Kick(uint64) error                { return nil }
func (nullBackend) ContextKick(uint32) error         { return nil }
func (nullBackend) Head() uint32                     { return 0 }
func (nullBackend) Done() uint32                     { return 0 }
func (nullBackend) Reset()                           {}
func (nullBackend) Error() (abi.Status, uint32)      { return abi.StatusOK, 0 }
func (nullBackend) LatchError(abi.Status)            {}
func (nullBackend) AckError()                        {}

const ram = 8 << 20

func attach(t *testing.T) (*mpqemutest.VM, *guestmem.Map) {
	t.Helper()
	mem := &guestmem.Map{}
	vm, stop, err := mpqemutest.Attach(mmio.New(nullBackend{}), mmio.NewConfigSpace(), mem, ram)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
		mem.Close()
	})
	return vm, mem
}

func TestAllocScatters(t *testing.T) {
	vm, mem := attach(t)
	seen := map[uint64]bool{}
	discontig := 0
	for _, n := range []int{1, abi.PageSize, 3*abi.PageSize + 1, 64 * abi.PageSize} {
		dma, err := vm.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		pages := (n + abi.PageSize - 1) / abi.PageSize
		if len(dma.Pages) != pages || len(dma.Buf) != pages*abi.PageSize {
			t.Fatalf("Alloc(%d) = %d pages, %d bytes, want %d pages", n, len(dma.Pages), len(dma.Buf), pages)
		}
		for i, gpa := range dma.Pages {
			if gpa < mpqemutest.HighRAM || gpa >= ram || gpa%abi.PageSize != 0 || seen[gpa] {
				t.Fatalf("Alloc(%d) page %d at %#x: outside high RAM, unaligned or handed out twice", n, i, gpa)
			}
			seen[gpa] = true
			if i > 0 && gpa != dma.Pages[i-1]+abi.PageSize {
				discontig++
			}
			// Buf page i is guest page gpa, as the device sees it.
			dma.Buf[i*abi.PageSize] = byte(i + 1)
			var b [1]byte
			if err := mem.ReadAt(b[:], gpa); err != nil || b[0] != byte(i+1) {
				t.Fatalf("device ReadAt(%#x) = %d, %v, want %d", gpa, b[0], err, i+1)
			}
			if err := vm.ReadRAM(gpa, b[:]); err != nil || b[0] != byte(i+1) {
				t.Fatalf("ReadRAM(%#x) = %d, %v, want %d", gpa, b[0], err, i+1)
			}
		}
	}
	if discontig == 0 {
		t.Error("Alloc returned only contiguous runs; scatter-gather is not exercised")
	}
	if _, err := vm.Alloc(ram); abi.StatusOf(err) != abi.StatusOutOfResources {
		t.Errorf("Alloc(all of RAM) = %v, want out of resources", err)
	}
	if _, err := vm.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
}

func TestRAMBounds(t *testing.T) {
	vm, mem := attach(t)
	tests := []struct {
		gpa uint64
		n   int
		ok  bool
	}{
		{0, 8, true},
		{mpqemutest.LowRAMEnd - 1, 1, true},
		{mpqemutest.LowRAMEnd - 1, 2, false},
		{mpqemutest.HighRAM, 8, true},
		{ram - 8, 8, true},
		{ram - 8, 9, false},
		{^uint64(0), 2, false},
	}
	for _, tt := range tests {
		p := bytes.Repeat([]byte{0x5a}, tt.n)
		if err := vm.WriteRAM(tt.gpa, p); (err == nil) != tt.ok {
			t.Errorf("WriteRAM(%#x, %d) = %v, want ok=%v", tt.gpa, tt.n, err, tt.ok)
		}
		if err := vm.ReadRAM(tt.gpa, p); (err == nil) != tt.ok {
			t.Errorf("ReadRAM(%#x, %d) = %v, want ok=%v", tt.gpa, tt.n, err, tt.ok)
		}
		// The device's view agrees with the harness's.
		if err := mem.ReadAt(p, tt.gpa); (err == nil) != tt.ok {
			t.Errorf("device ReadAt(%#x, %d) = %v, want ok=%v", tt.gpa, tt.n, err, tt.ok)
		}
	}
}

func TestNewVMRejectsSmallRAM(t *testing.T) {
	vmSide, devSide, err := mpqemutest.Pipe()
	if err != nil {
		t.Fatalf("Pipe: %v", err)
	}
	defer devSide.Close()
	if _, err := mpqemutest.NewVM(vmSide, 1<<20); err == nil {
		t.Error("NewVM(1 MiB) succeeded")
	}
}

func TestClosed(t *testing.T) {
	vm, _ := attach(t)
	vm.Close()
	if got := vm.Read32(abi.RegID); got != 0xffffffff {
		t.Errorf("Read32 after Close = %#x, want 0xffffffff", got)
	}
	if _, err := vm.ConfigRead(0, 4); !errors.Is(err, mpqemutest.ErrClosed) {
		t.Errorf("ConfigRead after Close = %v, want ErrClosed", err)
	}
	if _, err := vm.Alloc(1); !errors.Is(err, mpqemutest.ErrClosed) {
		t.Errorf("Alloc after Close = %v, want ErrClosed", err)
	}
}

func TestConcurrentRegisters(t *testing.T) {
	vm, _ := attach(t)
	var wg sync.WaitGroup
	bad := make(chan uint32, 4)
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if got := vm.Read32(abi.RegID); got != abi.IDMagic {
					bad <- got
					return
				}
				vm.Write32(abi.RegRingSlots, 8)
			}
		})
	}
	wg.Wait()
	close(bad)
	for got := range bad {
		t.Errorf("concurrent Read32(RegID) = %#x, want %#x", got, abi.IDMagic)
	}
	if err := vm.Err(); err != nil {
		t.Errorf("Err() = %v", err)
	}
}

func TestRAMAfterClose(t *testing.T) {
	vm, _ := attach(t)
	vm.Close()
	if err := vm.ReadRAM(0, make([]byte, 8)); !errors.Is(err, mpqemutest.ErrClosed) {
		t.Errorf("ReadRAM after Close = %v, want ErrClosed", err)
	}
}

package driver

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vgpud/vgpud/abi"
)

// fakeRegs records register writes; RegFeatures reads features.
type fakeRegs struct {
	mu       sync.Mutex
	features uint32
	writes   map[uint32][]uint32
}

func (r *fakeRegs) Read32(off uint32) uint32 {
	if off == abi.RegFeatures {
		return r.features
	}
	return 0
}

func (r *fakeRegs) Write32(off, v uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writes == nil {
		r.writes = map[uint32][]uint32{}
	}
	r.writes[off] = append(r.writes[off], v)
}

func (r *fakeRegs) written(off uint32) []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uint32(nil), r.writes[off]...)
}

// fakeUIO is /dev/uioN: reads come from a pipe the test writes interrupt
// counts into.
type fakeUIO struct {
	r, w *os.File
}

func newFakeUIO(t *testing.T) *fakeUIO {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return &fakeUIO{r: r, w: w}
}

func (f *fakeUIO) Read(p []byte) (int, error)        { return f.r.Read(p) }
func (f *fakeUIO) SetReadDeadline(t time.Time) error { return f.r.SetReadDeadline(t) }
func (f *fakeUIO) Close() error                      { return f.r.Close() }
func (f *fakeUIO) interrupt(t *testing.T, count uint32) {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], count)
	if _, err := f.w.Write(b[:]); err != nil {
		t.Error(err)
	}
}

// fakeConfig is the device's config space: uio_pci_generic's handler
// masks by setting the command register's INTx-disable bit (mask); the
// blocker's writes of the register are recorded.
type fakeConfig struct {
	mu     sync.Mutex
	space  [64]byte
	writes []uint16
}

func (c *fakeConfig) ReadAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return copy(p, c.space[off:]), nil
}

func (c *fakeConfig) WriteAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if off == pciCommand && len(p) == 2 {
		c.writes = append(c.writes, binary.LittleEndian.Uint16(p))
	}
	return copy(c.space[off:], p), nil
}

// mask is uio_pci_generic's handler: INTx disabled until userspace
// clears the bit.
func (c *fakeConfig) mask() {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := binary.LittleEndian.Uint16(c.space[pciCommand:])
	binary.LittleEndian.PutUint16(c.space[pciCommand:], v|pciCommandINTxDisable)
}

func (c *fakeConfig) commandWrites() []uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint16(nil), c.writes...)
}

func TestUIOBlockerNeedsINTx(t *testing.T) {
	for _, feat := range []uint32{0, 0xffffffff} {
		if _, err := NewUIOBlocker(&fakeRegs{features: feat}, newFakeUIO(t), &fakeConfig{}); !errors.Is(err, ErrNoINTx) {
			t.Errorf("NewUIOBlocker(features %#x) = %v, want ErrNoINTx", feat, err)
		}
	}
}

// TestUIOBlockerSleepsUntilInterrupt: the blocker clears the cause,
// unmasks, checks, sleeps on the uio read, and after the interrupt clears,
// unmasks and checks again. It unmasks the way uio_pci_generic needs
// (which has no irqcontrol: a write to /dev/uioN fails with ENOSYS): by
// clearing the command register's INTx-disable bit, which the driver's
// handler set, and only when it is set.
func TestUIOBlockerSleepsUntilInterrupt(t *testing.T) {
	regs := &fakeRegs{features: abi.FeatureINTx}
	uio := newFakeUIO(t)
	cfg := &fakeConfig{}
	binary.LittleEndian.PutUint16(cfg.space[pciCommand:], 0x0003)
	b, err := NewUIOBlocker(regs, uio, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := regs.written(abi.RegIntEnable); len(got) != 1 || got[0] != abi.IntCompletion {
		t.Fatalf("RegIntEnable writes after NewUIOBlocker = %v, want [%d]", got, abi.IntCompletion)
	}
	checks := 0
	done := func() bool {
		checks++
		if checks == 1 {
			// The device completes now, after the check: the interrupt
			// must wake the sleeper; the handler masks INTx.
			cfg.mask()
			uio.interrupt(t, 1)
			return false
		}
		return true
	}
	if err := b.BlockUntil(5, done, time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("BlockUntil() = %v", err)
	}
	if checks != 2 {
		t.Errorf("done() checked %d times, want 2", checks)
	}
	if got := cfg.commandWrites(); len(got) != 1 || got[0] != 0x0003 {
		t.Errorf("command register writes = %#x, want one [0x3]: the unmask after the interrupt, none while unmasked", got)
	}
	if in, re := b.Stats(); in != 1 || re != 0 {
		t.Errorf("Stats() = %d interrupts, %d rechecks; want 1, 0", in, re)
	}
	if got := regs.written(abi.RegIntStatus); len(got) != 3 {
		t.Errorf("RegIntStatus writes = %v, want 3 W1Cs (open, and before each check)", got)
	}

	if err := b.BlockUntil(6, func() bool { return false }, time.Now().Add(10*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Errorf("BlockUntil(never done) = %v, want ErrTimeout", err)
	}

	if err := b.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if got := regs.written(abi.RegIntEnable); len(got) != 2 || got[1] != 0 {
		t.Errorf("RegIntEnable writes after Close = %v, want the last 0", got)
	}
	if err := b.BlockUntil(7, func() bool { return true }, time.Now().Add(time.Second)); !errors.Is(err, ErrClosed) {
		t.Errorf("BlockUntil after Close = %v, want ErrClosed", err)
	}
}

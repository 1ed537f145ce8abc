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
// counts into; writes (unmasks) are recorded.
type fakeUIO struct {
	r, w    *os.File
	mu      sync.Mutex
	unmasks []uint32
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

func (f *fakeUIO) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(p) != 4 {
		return 0, errors.New("uio write must be 4 bytes")
	}
	f.unmasks = append(f.unmasks, binary.LittleEndian.Uint32(p))
	return 4, nil
}

func (f *fakeUIO) unmasked() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.unmasks...)
}

func TestUIOBlockerNeedsINTx(t *testing.T) {
	for _, feat := range []uint32{0, 0xffffffff} {
		if _, err := NewUIOBlocker(&fakeRegs{features: feat}, newFakeUIO(t)); !errors.Is(err, ErrNoINTx) {
			t.Errorf("NewUIOBlocker(features %#x) = %v, want ErrNoINTx", feat, err)
		}
	}
}

// TestUIOBlockerSleepsUntilInterrupt: the blocker clears the cause,
// unmasks, checks, sleeps on the uio read, and after the interrupt clears,
// unmasks and checks again.
func TestUIOBlockerSleepsUntilInterrupt(t *testing.T) {
	regs := &fakeRegs{features: abi.FeatureINTx}
	uio := newFakeUIO(t)
	b, err := NewUIOBlocker(regs, uio)
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
			// must wake the sleeper.
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
	if got := uio.unmasked(); len(got) != 2 || got[0] != 1 || got[1] != 1 {
		t.Errorf("uio writes = %v, want [1 1] (unmask before each check)", got)
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

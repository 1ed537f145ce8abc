package mpqemu_test

import (
	"sync"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mmio"
)

// fakeBackend is the smallest mmio.Backend: it records doorbells.
type fakeBackend struct {
	mu        sync.Mutex
	tail      uint32
	doorbells int
	resets    int
	err       abi.Status
	errs      uint32
}

func (f *fakeBackend) Limits() mmio.Limits {
	return mmio.Limits{MemBytes: 1 << 30, MaxAlloc: 1 << 28, ComputeUnits: 2, MaxWorkGroup: 256, ProfileName: "test", DeviceName: "fake"}
}
func (f *fakeBackend) EnableRing(mmio.RingConfig) error { return nil }
func (f *fakeBackend) DisableRing()                     {}
func (f *fakeBackend) RingEnabled() bool                { return false }
func (f *fakeBackend) Doorbell(tail uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tail = tail
	f.doorbells++
	return nil
}
func (f *fakeBackend) Kick(uint64) error        { return f.Doorbell(f.Head() + 1) }
func (f *fakeBackend) ContextKick(uint32) error { return nil }
func (f *fakeBackend) Head() uint32             { f.mu.Lock(); defer f.mu.Unlock(); return f.tail }
func (f *fakeBackend) Done() uint32             { f.mu.Lock(); defer f.mu.Unlock(); return f.tail }
func (f *fakeBackend) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tail, f.err, f.errs = 0, 0, 0
	f.resets++
}
func (f *fakeBackend) Error() (abi.Status, uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err, f.errs
}
func (f *fakeBackend) LatchError(s abi.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = s
	f.errs++
}
func (f *fakeBackend) AckError() { f.mu.Lock(); defer f.mu.Unlock(); f.err = 0 }

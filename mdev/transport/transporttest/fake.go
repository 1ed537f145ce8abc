package transporttest

import (
	"sync"

	"github.com/vgpud/vgpud/abi"
	"github.com/vgpud/vgpud/mmio"
)

// FakeBackend is the smallest mmio.Backend, for a transport's own unit
// tests (the conformance suite runs real devices): no ring, a tail that
// each doorbell sets and that head and done follow at once, errors
// latched and acknowledged. It counts doorbells and resets. A kick sends
// its tail shadow on Kicked when that is set, else rings the doorbell
// with the next tail.
type FakeBackend struct {
	Kicked chan uint64

	mu        sync.Mutex
	tail      uint32
	doorbells int
	resets    int
	err       abi.Status
	errs      uint32
}

var _ mmio.Backend = (*FakeBackend)(nil)

// Doorbells returns how many doorbells rang.
func (f *FakeBackend) Doorbells() int { f.mu.Lock(); defer f.mu.Unlock(); return f.doorbells }

// Resets returns how many resets there were.
func (f *FakeBackend) Resets() int { f.mu.Lock(); defer f.mu.Unlock(); return f.resets }

func (f *FakeBackend) Limits() mmio.Limits {
	return mmio.Limits{MemBytes: 1 << 30, MaxAlloc: 1 << 28, ComputeUnits: 2, MaxWorkGroup: 256, ProfileName: "test", DeviceName: "fake"}
}
func (f *FakeBackend) EnableRing(mmio.RingConfig) error { return nil }
func (f *FakeBackend) DisableRing()                     {}
func (f *FakeBackend) RingEnabled() bool                { return false }
func (f *FakeBackend) Doorbell(tail uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tail = tail
	f.doorbells++
	return nil
}
func (f *FakeBackend) Kick(shadow uint64) error {
	if f.Kicked != nil {
		f.Kicked <- shadow
		return nil
	}
	return f.Doorbell(f.Head() + 1)
}
func (f *FakeBackend) ContextKick(uint32) error { return nil }
func (f *FakeBackend) Head() uint32             { f.mu.Lock(); defer f.mu.Unlock(); return f.tail }
func (f *FakeBackend) Done() uint32             { f.mu.Lock(); defer f.mu.Unlock(); return f.tail }
func (f *FakeBackend) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tail, f.err, f.errs = 0, 0, 0
	f.resets++
}
func (f *FakeBackend) Error() (abi.Status, uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err, f.errs
}
func (f *FakeBackend) LatchError(s abi.Status) { f.mu.Lock(); defer f.mu.Unlock(); f.err = s; f.errs++ }
func (f *FakeBackend) AckError()               { f.mu.Lock(); defer f.mu.Unlock(); f.err = 0 }

package xen_test

import (
	"sync"

	"github.com/vgpud/vgpud/mmio"
	"github.com/vgpud/vgpud/mmio/mmiotest"
)

// fakeBackend is the least mmio.Backend: it records doorbells and resets
// and latches errors.
type fakeBackend struct {
	mu        sync.Mutex
	on        bool
	resets    int
	doorbells []uint32
	mmiotest.ErrorLatch
}

var _ mmio.Backend = (*fakeBackend)(nil)

func (f *fakeBackend) Limits() mmio.Limits {
	return mmio.Limits{MemBytes: 1 << 20, MaxAlloc: 1 << 20, ComputeUnits: 1, MaxWorkGroup: 64, ProfileName: "xen-test"}
}
func (f *fakeBackend) EnableRing(mmio.RingConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = true
	return nil
}
func (f *fakeBackend) DisableRing()      { f.mu.Lock(); defer f.mu.Unlock(); f.on = false }
func (f *fakeBackend) RingEnabled() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.on }
func (f *fakeBackend) Doorbell(tail uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.doorbells = append(f.doorbells, tail)
	return nil
}
func (f *fakeBackend) Kick(uint64) error        { return nil }
func (f *fakeBackend) ContextKick(uint32) error { return nil }
func (f *fakeBackend) Head() uint32             { return 0 }
func (f *fakeBackend) Done() uint32             { return 0 }
func (f *fakeBackend) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets++
	f.on = false
	f.Clear()
}

func (f *fakeBackend) Doorbells() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.doorbells...)
}

package mmio

import (
	"sync"

	"github.com/vgpud/vgpud/mmio/mmiotest"
)

// fakeBackend records what the register file asks of it.
type fakeBackend struct {
	mu         sync.Mutex
	limits     Limits
	enableErr  error
	doorbelErr error
	enabled    []RingConfig
	disables   int
	on         bool
	resets     int
	doorbells  []uint32
	kicks      []uint64 // tail shadow addresses kicked
	ctxKicks   []uint32 // contexts kicked
	ctxKickErr error
	head, done uint32
	mmiotest.ErrorLatch
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) Limits() Limits { f.mu.Lock(); defer f.mu.Unlock(); return f.limits }
func (f *fakeBackend) EnableRing(cfg RingConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.enableErr != nil {
		return f.enableErr
	}
	f.enabled = append(f.enabled, cfg)
	f.on = true
	return nil
}
func (f *fakeBackend) DisableRing()      { f.mu.Lock(); defer f.mu.Unlock(); f.disables++; f.on = false }
func (f *fakeBackend) RingEnabled() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.on }
func (f *fakeBackend) Doorbell(tail uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.doorbelErr != nil {
		return f.doorbelErr
	}
	f.doorbells = append(f.doorbells, tail)
	f.head, f.done = tail, tail
	return nil
}
func (f *fakeBackend) Kick(shadow uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kicks = append(f.kicks, shadow)
	return nil
}
func (f *fakeBackend) ContextKick(id uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctxKicks = append(f.ctxKicks, id)
	return f.ctxKickErr
}
func (f *fakeBackend) Head() uint32 { f.mu.Lock(); defer f.mu.Unlock(); return f.head }
func (f *fakeBackend) Done() uint32 { f.mu.Lock(); defer f.mu.Unlock(); return f.done }
func (f *fakeBackend) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets++
	f.on = false
	f.head, f.done = 0, 0
	f.Clear()
}
